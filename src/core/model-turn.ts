/**
 * @module core/model-turn
 * A model turn, as the list of its phases: the request from the saved turns (core/model-request.ts), the credits it
 * may cost held (core/step-budget.ts), the model called (core/model-call.ts, core/model-retry.ts when it fails), and
 * the answer committed with the tool calls it asks for (core/step-commit.ts). The results of the previous tool calls
 * may ride along: they commit with this turn, or on their own when the turn does not happen.
 */
import { isAbortError } from '../base/clock.js';
import { inputBoundsOf } from './input-bound.js';
import { callModel } from './model-call.js';
import { prepareModelRequest } from './model-request.js';
import { afterModelFailure, modelCallSucceeded } from './model-retry.js';
import { changeStatus, startAgent } from './status-change.js';
import { holdModelTurnCredits } from './step-budget.js';
import { commitModelTurn, commitToolResults, type PendingResults } from './step-commit.js';
import { STOP, type RunControl, type StepDeps, type StepOutcome } from './step-types.js';
import { SUBSCRIPTION_PAUSED } from './subscription-check.js';
import type { ModelResponse } from '../models/provider.js';
import type { AgentRow, TurnRow } from '../storage/adapter.js';

/** Takes the agent's next model turn after `turns` and commits it. */
export async function runModelTurn(
  deps: StepDeps,
  startingRow: AgentRow,
  turns: TurnRow[],
  control: RunControl,
  /** Results of the previous turn's tool calls, not yet saved: they commit with this turn, or alone if it fails. */
  pending?: PendingResults,
): Promise<StepOutcome> {
  let agent = startingRow;
  // Saved on their own when this turn will not carry them, which is mostly because the agent stops (paused, failed,
  // out of credits) or waits: then they leave the status message alone, as a pause may have set it meanwhile.
  const savePending = async (statusMessage?: string): Promise<void> => {
    if (!pending) return;
    const saving = pending;
    pending = undefined;
    await commitToolResults(deps, agent, saving, statusMessage);
  };
  // Checked here too, not only as the step begins: tool results that may run again go on into this turn in one step.
  if (deps.subscriptions && !(await deps.subscriptions.isActive(agent.account_id))) {
    await savePending();
    await changeStatus(deps, agent, 'pause', { status_message: SUBSCRIPTION_PAUSED }, { mark: true });
    return STOP;
  }
  const price = deps.prices.models[agent.model];
  if (!price) {
    await savePending();
    await changeStatus(deps, agent, 'fail', {
      status_message: `Failed: no price is configured for model ${agent.model}`,
    });
    return STOP;
  }
  const box = deps.toolboxes.of(agent);
  const prepared = prepareModelRequest(deps, agent, box, turns);
  const budget = await holdModelTurnCredits(deps, agent, control, price, prepared, {
    holdsCredits: () => (pending?.settlements.length ?? 0) > 0,
    save: () => savePending(),
  });
  if (!budget) return STOP;
  const { hold } = budget;
  if (agent.status === 'STARTING_UP') {
    // Only now, with its first credits held, does a spawned agent become ACTIVE: one that cannot pay stops as
    // OUT_OF_CREDITS straight from STARTING_UP.
    const started = await startAgent(deps, agent);
    if (!started) {
      await hold.release('the agent did not start');
      return STOP;
    }
    agent = started;
  }

  let response: ModelResponse;
  let latencyMs: number;
  try {
    ({ response, latencyMs } = await callModel(deps, agent, control, prepared.request, price, budget.reservedMicros));
  } catch (err) {
    await hold.release('the model call did not answer');
    const stopped = control.model.signal.aborted || isAbortError(err);
    await savePending(stopped ? undefined : 'Thinking');
    if (stopped) return STOP; // paused, deleted or shutting down: redo later
    return afterModelFailure(deps, agent, control, err);
  }
  modelCallSucceeded(control);
  inputBoundsOf(deps.model).learn(prepared.bound, response.usage);
  return commitModelTurn(deps, agent, box, control, turns, { response, latencyMs }, price, hold, pending);
}
