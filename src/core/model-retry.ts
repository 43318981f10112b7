/**
 * @module core/model-retry
 * What a failed model call comes to. A provider that is rate limited or overloaded holds back the whole model lane
 * and the agent tries again behind it, for about an hour, without spending its own retries; another retryable error
 * is tried again with backoff a few times; anything else fails the agent, logged as the provider's failure (a
 * warning) or as an internal error.
 */
import { changeStatus } from './status-change.js';
import { STOP, type RunControl, type StepDeps, type StepOutcome } from './step-types.js';
import { ModelError } from '../models/provider.js';
import type { AgentRow } from '../storage/adapter.js';

/** Rate-limit answers an agent sits out before it fails: with backoff up to a minute, about an hour. */
const MAX_RATE_LIMIT_RETRIES = 60;

function isRateLimit(err: ModelError): boolean {
  return err.status === 429 || err.status === 529;
}

/**
 * The outcome of a model call that threw (not aborted): a retry after a while, or the agent FAILED. Counts the
 * failures in a row on `control`, which a successful call resets.
 */
export async function afterModelFailure(
  deps: StepDeps,
  agent: AgentRow,
  control: RunControl,
  err: unknown,
): Promise<StepOutcome> {
  if (err instanceof ModelError && err.retryable && isRateLimit(err) && control.rateLimited < MAX_RATE_LIMIT_RETRIES) {
    // The provider is saturated, not this agent broken: the whole model lane waits, and the agent tries again
    // behind it without spending its own retries.
    control.rateLimited++;
    deps.backOffModels(err.retryAfterMs ?? Math.min(60_000, 1_000 * 2 ** Math.min(6, control.rateLimited - 1)));
    return { kind: 'retry', afterMs: 0 };
  }
  if (err instanceof ModelError && err.retryable && control.modelFailures < deps.limits.maxModelRetries) {
    control.modelFailures++;
    const backoff = err.retryAfterMs ?? Math.min(30_000, 500 * 2 ** (control.modelFailures - 1));
    return { kind: 'retry', afterMs: backoff };
  }
  const reason = err instanceof Error ? err.message : String(err);
  if (err instanceof ModelError) {
    deps.logger?.warn(
      {
        agent_id: agent.agent_id,
        model: agent.model,
        provider: deps.model.providerName ?? '_OTHER',
        status: err.status ?? null,
        retryable: err.retryable,
        err,
      },
      'model provider failed',
    );
  } else {
    deps.logger?.error({ agent_id: agent.agent_id, model: agent.model, err }, 'model call failed');
  }
  await changeStatus(deps, agent, 'fail', { status_message: `Failed: ${reason}` });
  return STOP;
}

/** A model call that succeeded ends the failures in a row. */
export function modelCallSucceeded(control: RunControl): void {
  control.modelFailures = 0;
  control.rateLimited = 0;
}
