/**
 * @module core/loop
 * One agent step, as the list of its phases: budget (hold credits) -> model turn -> commit; then the tool calls that
 * turn asked for -> commit. Each phase is a module of its own (core/model-turn.ts and core/tool-calls.ts, which use
 * core/step-budget.ts, core/model-call.ts and core/step-commit.ts); this module only decides which comes next.
 *
 * The next thing to do is always derived from the durable turn log, never from memory, which is what makes pause,
 * resume and crash recovery the same code path:
 * - the last turn is the user's (goal or tool results): take a model turn;
 * - the last turn is the assistant's with tool calls: run them (or recover them) and commit their results;
 * - the last turn is the assistant's without tool calls: the agent is done.
 *
 * Only the scheduler, which drives agents step by step, imports this module.
 */
import { runModelTurn } from './model-turn.js';
import { changeStatus, startAgent } from './status-change.js';
import { releaseLeftHolds } from './step-credits.js';
import { limitReached } from './step-limits.js';
import { STOP, type RunControl, type StepDeps, type StepOutcome } from './step-types.js';
import { SUBSCRIPTION_PAUSED } from './subscription-check.js';
import { modelInfoOf } from './telemetry.js';
import { runToolCalls } from './tool-calls.js';
import { toolUsesOf } from './turn-log.js';

/** Runs the next piece of work of one agent. Never throws for the agent's own failures; storage errors propagate. */
export async function runStep(deps: StepDeps, agentId: string, control: RunControl): Promise<StepOutcome> {
  try {
    return await nextPieceOfWork(deps, agentId, control);
  } finally {
    // Every hold ends with its step: the ordinary paths settle or release theirs; one that threw releases here.
    if (control.holds.size > 0) await releaseLeftHolds(control, 'its step ended without settling it');
  }
}

async function nextPieceOfWork(deps: StepDeps, agentId: string, control: RunControl): Promise<StepOutcome> {
  // Read every step, or taken from the commit that just ended the last one: another process (the CLI next to
  // `agentry serve`) may have paused it.
  const committed = control.takeCommittedRow();
  // A driver's first step needs the agent's log too: read both at once (one round trip on a remote database). Its
  // failure is awaited below, or dropped with the step.
  const turnsRead = committed ? undefined : deps.storage.listTurns(agentId);
  turnsRead?.catch(() => undefined);
  let agent = committed ?? (await deps.storage.getAgent(agentId));
  if (!agent) return STOP;
  if (agent.status !== 'ACTIVE' && agent.status !== 'STARTING_UP') return STOP;
  if (deps.subscriptions && !(await deps.subscriptions.isActive(agent.account_id))) {
    await changeStatus(deps, agent, 'pause', { status_message: SUBSCRIPTION_PAUSED }, { mark: true });
    return STOP;
  }
  if (!control.trace && deps.telemetry) {
    control.trace = deps.telemetry.agentRun(agent, {
      ...modelInfoOf(deps.model, agent.model),
      recovered: deps.telemetry.wasRecovered?.(agentId) ?? false,
    });
  }
  // Children with a spec of their own work with the tools of their spec only: they start no MCP server.
  if (agent.spec === null && deps.prepareTools) {
    const preparing = deps.prepareTools();
    if (preparing) await preparing;
  }
  const limit = limitReached(deps, agent, deps.toolboxes.of(agent), deps.clock.now());
  if (limit) {
    await changeStatus(deps, agent, 'fail', { status_message: limit });
    return STOP;
  }

  // Right after this driver saved a model turn with tool calls, those calls are the next thing to do: they were
  // just committed, so the log need not be read back for them.
  const saved = control.savedToolCalls;
  if (saved && agent.status === 'ACTIVE') {
    return runToolCalls(deps, agent, saved.turnIdx, saved.uses, control);
  }
  const turns = await (turnsRead ?? deps.storage.listTurns(agentId));
  const last = turns.at(-1);
  if (last?.role !== 'assistant') return runModelTurn(deps, agent, turns, control);

  if (agent.status === 'STARTING_UP') {
    agent = await startAgent(deps, agent);
    if (!agent) return STOP;
  }
  const toolUses = toolUsesOf(last);
  if (toolUses.length === 0) {
    // The final answer was saved while a pause was in flight; finishing needs no model call.
    await changeStatus(deps, agent, 'complete', { progress: 1, status_message: 'Completed' });
    return STOP;
  }
  return runToolCalls(deps, agent, last.idx, toolUses, control);
}
