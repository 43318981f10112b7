/**
 * @module core/step-budget
 * The budget phase of a model turn: holding the most the call can cost before it is made. The worst case is the
 * input bound plus `max_tokens` of output; when the balance cannot cover it, `max_tokens` is lowered to what it can,
 * down to a floor, so that an agent with little left still gets a short answer. Before the agent gives up, the call
 * goes without prompt caching (whose writes cost more than plain input) and the provider counts the input exactly;
 * only below the floor does the agent stop as OUT_OF_CREDITS.
 */
import type { CreditHold } from './credit-hold.js';
import { affordableOutputTokens, modelHold, type ModelPrice } from './credits.js';
import { exactInputTokens } from './input-bound.js';
import type { PreparedRequest } from './model-request.js';
import { limitName, reserveCredits, stopForCredits } from './step-credits.js';
import type { RunControl, StepDeps } from './step-types.js';
import { MIN_THINKING_BUDGET } from '../models/thinking.js';
import type { AgentRow } from '../storage/adapter.js';

/** The previous tool calls' results that would commit with this turn, and their hold. */
export interface CarriedResults {
  /** Whether they hold credits that settle only with this turn. */
  holdsCredits(): boolean;
  /** Saves them on their own (their hold settles): the turn will not carry them. */
  save(): Promise<void>;
}

/** The turn's hold, and the micro-credits it holds (the worst case of the request as it will be sent). */
export interface ModelTurnBudget {
  hold: CreditHold;
  reservedMicros: number;
}

/**
 * Holds credits for the model call of `prepared`, lowering its `max_tokens` (and turning its prompt caching off) as
 * the balance requires. Answers null when the turn does not happen: the agent was paused or deleted while it waited,
 * or it stopped as OUT_OF_CREDITS; the carried results are saved on their own then.
 */
export async function holdModelTurnCredits(
  deps: StepDeps,
  agent: AgentRow,
  control: RunControl,
  price: ModelPrice,
  prepared: PreparedRequest,
  carried: CarriedResults,
): Promise<ModelTurnBudget | null> {
  const { request, thinkingTokens } = prepared;
  let inputBound = prepared.bound.tokens;
  /** Whether the provider was asked for an exact count (once a turn), and whether `inputBound` is that count. */
  let counted = false;
  let exact = false;
  // A call that may write the prompt cache can be billed its whole input at the cache-write price.
  const cacheable = () => deps.model.promptCache !== false && request.promptCache !== false;
  const worstCase = () => modelHold(price, inputBound, request.maxTokens, cacheable());
  for (;;) {
    // An agent that waits holds nothing: the previous calls' hold, which would settle with this turn, settles now.
    const reservation = await reserveCredits(deps, agent, worstCase(), 'model call', control, () => carried.save());
    if (reservation === 'aborted') {
      await carried.save();
      return null; // paused or deleted while waiting for credits
    }
    if (reservation.granted) return { hold: reservation.hold, reservedMicros: worstCase() };
    if (carried.holdsCredits()) {
      // The previous calls' own hold is still open (it settles with this turn): settle it first, then ask again.
      await carried.save();
      continue;
    }
    // A thinking call lowered to the floor keeps room for the least thinking budget the API takes.
    const floor = Math.min(
      deps.limits.minOutputTokens + Math.min(thinkingTokens, MIN_THINKING_BUDGET),
      deps.limits.maxOutputTokens + thinkingTokens,
    );
    let affordable = affordableOutputTokens(price, inputBound, reservation.payable, cacheable());
    if (affordable < floor && cacheable()) {
      // Too tight to hold even a short answer at the cache-write price: this one call goes without cache_control, so
      // its exact price is the plain input price, and the agent stops only when even that cannot be paid.
      request.promptCache = false;
      continue;
    }
    if (affordable < floor && !counted && deps.model.countTokens) {
      // Even the bound does not fit: the provider counts the request exactly before the agent gives up.
      counted = true;
      const count = await exactInputTokens(deps.model, request, control.model.signal);
      if (control.model.signal.aborted) {
        await carried.save();
        return null;
      }
      if (count !== undefined) {
        inputBound = count;
        exact = true;
        affordable = affordableOutputTokens(price, inputBound, reservation.payable, cacheable());
        if (affordable >= floor) {
          request.maxTokens = Math.min(request.maxTokens, affordable);
          continue;
        }
      }
    }
    if (affordable < floor || affordable >= request.maxTokens) {
      await carried.save();
      request.maxTokens = Math.min(request.maxTokens, floor);
      await stopForCredits(deps, agent, {
        needed: worstCase(),
        left: reservation.payable,
        limit: limitName(reservation.refusal),
        what: `${exact ? 'exactly' : 'at most'} ${inputBound.toLocaleString('en-US')} input tokens and ${request.maxTokens.toLocaleString('en-US')} output tokens`,
        exact,
      });
      return null;
    }
    request.maxTokens = affordable;
  }
}
