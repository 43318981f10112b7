/**
 * @module core/status-change
 * Applying a change of an agent's status: the move itself comes from the one status table (core/status.ts); this
 * module adds what every move carries (the ACTIVE-time bookkeeping), writes it as a compare-and-set on the status the
 * agent had, and tells listeners. The step, pause, resume, sub-agents and background work all change status through
 * it, which is why it depends on nothing of the step.
 */
import { isoTime, type Clock } from '../base/clock.js';
import type { RuntimeEvents } from './events.js';
import { toStatusForm } from './records.js';
import { nextStatus, type AgentStatus, type StatusTrigger } from '../base/status.js';
import type { AgentRow, StatusChange, StorageAdapter } from '../storage/adapter.js';

/** What a status change needs: where it is written, the time, and who hears of it. */
export interface StatusDeps {
  storage: StorageAdapter;
  clock: Clock;
  events: RuntimeEvents;
}

/** Milliseconds the agent has spent ACTIVE up to `nowMs`, the current stretch included. */
export function activeMs(agent: AgentRow, nowMs: number): number {
  const since = agent.active_since ? Date.parse(agent.active_since) : nowMs;
  return agent.active_ms + Math.max(0, nowMs - since);
}

/**
 * The status change a trigger makes from the agent's current status, with ACTIVE-time bookkeeping; undefined when the
 * trigger moves nothing from there. Used as is inside a step's commit, where the change lands in the same transaction.
 */
export function statusChange(
  agent: AgentRow,
  trigger: StatusTrigger,
  nowMs: number,
  patch: StatusChange['patch'] = {},
): StatusChange | undefined {
  const to = nextStatus(agent.status, trigger);
  if (to === null || to === agent.status) return undefined;
  const extra: NonNullable<StatusChange['patch']> = { ...patch };
  if (agent.status === 'ACTIVE' && to !== 'ACTIVE') {
    extra.active_ms = activeMs(agent, nowMs);
    extra.active_since = null;
  }
  if (to === 'ACTIVE' && agent.status !== 'ACTIVE') extra.active_since = isoTime(nowMs);
  return { from: [agent.status], to, patch: extra };
}

/**
 * Applies a status change and emits it. Returns the updated row, or null if the agent moved meanwhile. With `mark`,
 * storage also keeps the change as a status mark of the agent, in the same write: for the changes an operator or the
 * credits cause (pause, resume, out of credits), never for the routine moves every agent makes (start, complete,
 * fail), which a fan-out of 10,000 children would pay a row each for.
 */
export async function changeStatus(
  deps: StatusDeps,
  agent: AgentRow,
  trigger: StatusTrigger,
  patch: StatusChange['patch'] = {},
  options: { mark?: boolean } = {},
): Promise<AgentRow | null> {
  const nowMs = deps.clock.now();
  const change = statusChange(agent, trigger, nowMs, patch);
  if (!change) return null;
  if (options.mark) change.mark = true;
  const updated = await deps.storage.changeStatus(agent.agent_id, change, isoTime(nowMs));
  if (updated) emitStatus(deps.events, updated, agent.status);
  return updated;
}

/** Tells the status hooks and `agent.status` listeners that an agent moved from `previous`. */
export function emitStatus(events: RuntimeEvents, row: AgentRow, previous: AgentStatus): void {
  for (const hook of events.statusHooks) hook(row, previous);
  if (events.listenerCount('agent.status') > 0) events.emit('agent.status', { agent: toStatusForm(row), previous });
}

/** STARTING_UP -> ACTIVE: the agent has a run slot (and, before a model turn, its first credits held). */
export async function startAgent(deps: StatusDeps, agent: AgentRow): Promise<AgentRow | null> {
  return changeStatus(deps, agent, 'start', {
    started: true,
    active_since: isoTime(deps.clock.now()),
    status_message: 'Starting',
  });
}
