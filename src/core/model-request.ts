/**
 * @module core/model-request
 * The first phase of a model turn: the request sent to the model, built from the saved turn log and the agent's
 * toolbox. Turns that no longer fit the context window are elided (core/context.ts), and the request's input tokens
 * are bounded from above (core/input-bound.ts), which is what the turn's credit hold is worked out from.
 */
import { estimateTokens, fitContext } from './context.js';
import { inputBoundsOf, type InputBound } from './input-bound.js';
import type { StepDeps } from './step-types.js';
import type { Toolbox } from './toolbox.js';
import { toModelMessage } from './turn-log.js';
import type { ModelRequest } from '../models/provider.js';
import { firstEditedMessage } from '../models/thinking.js';
import type { AgentRow, TurnRow } from '../storage/adapter.js';

/** The context window of a model whose provider does not say. */
const DEFAULT_CONTEXT_WINDOW = 200_000;

/** A model turn's request, with what its credit hold is worked out from. */
export interface PreparedRequest {
  /** `maxTokens` and `promptCache` may still be lowered or turned off to fit the budget. */
  request: ModelRequest;
  /** The bound of its input tokens, learned from the provider's reports (InputBounds.learn takes it back). */
  bound: InputBound;
  /** Thinking tokens of the model, inside `maxTokens` and billed as output. */
  thinkingTokens: number;
}

/** Builds the request of the agent's next model turn from its saved turns. */
export function prepareModelRequest(deps: StepDeps, agent: AgentRow, box: Toolbox, turns: TurnRow[]): PreparedRequest {
  const tools = box.specs;
  // Turns are stored as the JSON of their content: their sizes come free, without serialising again.
  let chars = 0;
  const turnBytes: number[] = [];
  for (const t of turns) {
    chars += t.content.length;
    turnBytes.push(Buffer.byteLength(t.content));
  }
  const all = turns.map(toModelMessage);
  const sent = fitContext(
    all,
    deps.model.contextWindow?.(agent.model) ?? DEFAULT_CONTEXT_WINDOW,
    fixedPromptTokens(box.system, tools),
    chars,
  );
  // Thinking counts inside max_tokens and is billed as output: the call's output (and so its hold) grows by it.
  const thinkingTokens = deps.model.thinkingTokens?.(agent.model) ?? 0;
  const request: ModelRequest = {
    model: agent.model,
    system: box.system,
    messages: sent,
    tools,
    maxTokens: deps.limits.maxOutputTokens + thinkingTokens,
    agentId: agent.agent_id,
    ...(sent === all ? {} : { editedFrom: firstEditedMessage(all, sent) }),
  };
  // The input is bounded by what the provider already counted of it (core/input-bound.ts).
  const bound = inputBoundsOf(deps.model).bound({
    agentId: agent.agent_id,
    model: agent.model,
    system: box.system,
    tools,
    messageBytes: sent === all ? turnBytes : sent.map((m) => Buffer.byteLength(JSON.stringify(m.content))),
    elided: sent !== all,
  });
  return { request, bound, thinkingTokens };
}

/** Tokens of the system prompt and tool definitions: the same for every step, so counted once. */
const fixedTokensCache = new WeakMap<object, number>();
function fixedPromptTokens(system: string, tools: ModelRequest['tools']): number {
  let n = fixedTokensCache.get(tools);
  if (n === undefined) {
    n = estimateTokens(JSON.stringify(tools));
    fixedTokensCache.set(tools, n);
  }
  return n + estimateTokens(system);
}
