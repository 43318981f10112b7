/**
 * @module core/model-call
 * The model call of a turn: made in the models lane (whose concurrency the runtime caps), observed from the lane's
 * slot on, and, with several workers on one database, only while this worker still holds the agent. Its latency is
 * measured around the provider's call alone, on the runtime's clock: the wait for a lane slot, the lease check and the
 * credits held before are not part of it.
 */
import { monotonicMs } from '../base/clock.js';
import { modelCost, type ModelPrice } from './credits.js';
import type { RunControl, StepDeps } from './step-types.js';
import { modelInfoOf, observeChat } from './telemetry.js';
import type { ModelRequest, ModelResponse } from '../models/provider.js';
import type { AgentRow } from '../storage/adapter.js';

/** The model's answer, and how long the provider took to give it (request sent to answer complete), ms. */
export interface TimedResponse {
  response: ModelResponse;
  latencyMs: number;
}

/**
 * Asks the model for the agent's next turn. Rejects with an AbortError when the agent was paused or deleted (or this
 * worker lost it) before the call started, and with whatever the provider threw otherwise.
 */
export async function callModel(
  deps: StepDeps,
  agent: AgentRow,
  control: RunControl,
  request: ModelRequest,
  price: ModelPrice,
  /** The call's hold, micro-credits, as the trace reports it. */
  reservedMicros: number,
): Promise<TimedResponse> {
  if (control.model.signal.aborted) throw abortedError();
  // Observed from the lane's slot on: a wait for the slot is not the call's duration.
  return deps.inModelLane(async () => {
    // With several workers, the call starts only if this one still holds the agent and nobody paused it meanwhile.
    if (deps.mayProceed && !(await deps.mayProceed(agent.agent_id))) throw abortedError();
    let latencyMs = 0;
    const response = await observeChat(
      control.trace,
      request,
      { ...modelInfoOf(deps.model, request.model), reservedMicros },
      (answer) => modelCost(price, answer.usage),
      async () => {
        const sent = monotonicMs(deps.clock);
        const answer = await deps.model.generate(request, { signal: control.model.signal });
        latencyMs = Math.max(0, Math.round(monotonicMs(deps.clock) - sent));
        return answer;
      },
    );
    return { response, latencyMs };
  });
}

function abortedError(): Error {
  const err = new Error('aborted');
  err.name = 'AbortError';
  return err;
}
