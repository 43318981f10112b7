/**
 * @module core/step-limits
 * The limits every agent runs under: a number of model turns (its toolbox's `maxSteps`) and a time ACTIVE. A step
 * checks them before it does anything, and tool results check them before they go on into the next model turn in the
 * same step.
 */
import { activeMs } from './status-change.js';
import type { StepDeps } from './step-types.js';
import type { Toolbox } from './toolbox.js';
import type { AgentRow } from '../storage/adapter.js';

/** Why the agent may not take another model turn, as the status message it fails with; undefined while it may. */
export function limitReached(deps: StepDeps, agent: AgentRow, box: Toolbox, nowMs: number): string | undefined {
  if (agent.step_count >= box.maxSteps) return `Failed: step limit reached (${box.maxSteps} model turns)`;
  if (activeMs(agent, nowMs) > deps.limits.maxWallClockMs) {
    return `Failed: wall-clock limit reached (${Math.round(deps.limits.maxWallClockMs / 1000)} s active)`;
  }
  return undefined;
}

/** Whether the agent may take another model turn (the same limits a step checks as it begins). */
export function withinLimits(deps: StepDeps, agent: AgentRow, box: Toolbox): boolean {
  return agent.step_count < box.maxSteps && activeMs(agent, deps.clock.now()) <= deps.limits.maxWallClockMs;
}
