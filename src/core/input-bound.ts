/**
 * @module core/input-bound
 * An upper bound on the input tokens of a model call that learns from what the provider reported
 * (README.md#how-it-works, "Credits").
 *
 * One token per byte of everything sent is a bound no tokenizer exceeds, but it is three to four times what a real
 * tokenizer counts, and a reservation that large strands half a budget. Tokenisation is deterministic for a given
 * model, so a prefix the provider has already counted needs no bound of its own:
 * - an agent's next request is its previous request plus what was added since (the assistant's turn and the tool
 *   results): it is bounded by the previous request's reported input count plus one token per byte, plus framing, of
 *   only the added messages;
 * - an agent with no earlier request known here shares the count of its siblings: the least input count any request
 *   with the same model, system prompt and tool list reported bounds that common prefix, and its own messages are
 *   bounded by their bytes;
 * - whatever is not known (elided context, a changed system prompt, tool list or model, a provider that reports no
 *   usage) keeps the byte bound.
 * The bound is always the least of the bounds that apply, so it is never above the byte bound. Why the result is never
 * below the real count is written down in docs/decisions.md ("Credits: a bound that learns").
 */
import { createHash } from 'node:crypto';
import {
  totalTokens,
  type ModelProvider,
  type ModelRequest,
  type ModelToolSpec,
  type ModelUsage,
} from '../models/provider.js';
import { inputTokenBound } from './credits.js';

/** Tokens allowed for the framing of one message (role markers, block separators), as in the byte bound. */
export const MESSAGE_FRAMING_TOKENS = 8;

/** What the bound of one request is computed from. */
export interface InputBoundRequest {
  agentId: string;
  model: string;
  system: string;
  tools: ModelToolSpec[];
  /** The UTF-8 size of each message's content as JSON, in order, as it is sent. */
  messageBytes: readonly number[];
  /**
   * Whether what is sent differs from the agent's log (old tool results elided): then no earlier request of the
   * agent is a prefix of it.
   */
  elided: boolean;
}

/** The bound of one request, and what {@link InputBounds.learn} needs to learn from its usage. */
export interface InputBound {
  /** An upper bound on the input tokens of the request. */
  readonly tokens: number;
  /** What bounded it: the byte bound, the siblings' prefix count, or the agent's previous request. */
  readonly source: 'bytes' | 'prefix' | 'agent';
  readonly agentId: string;
  readonly key: string;
  readonly messageCount: number;
  readonly messageBytes: number;
  readonly elided: boolean;
}

/** What is known of an agent's last request: its first `messageCount` messages, `messageBytes` long, were counted. */
interface AgentPrefix {
  key: string;
  messageCount: number;
  messageBytes: number;
  tokens: number;
}

export interface InputBoundsLimits {
  /** Agents whose last request is remembered (least recently used forgotten first). @default 10_000 */
  agents?: number;
  /** Model + system prompt + tool list combinations remembered. @default 1_000 */
  prefixes?: number;
}

/**
 * The learned input bounds of one model provider (tokenisation belongs to the provider and its model). Bounded in
 * memory: a forgotten entry only costs the byte bound.
 *
 * @example
 * const bounds = new InputBounds();
 * const bound = bounds.bound({ agentId, model, system, tools, messageBytes: [120], elided: false });
 * // ... reserve bound.tokens + max_tokens, call the model ...
 * bounds.learn(bound, response.usage);
 */
export class InputBounds {
  private readonly agents = new Map<string, AgentPrefix>();
  /** The least reported input count per model + system + tools: an upper bound on that common prefix. */
  private readonly prefixes = new Map<string, number>();
  private readonly maxAgents: number;
  private readonly maxPrefixes: number;
  /**
   * Cleared for good when the provider reported more input than a learned bound allowed: its reports do not behave
   * like a deterministic tokenizer's, so only the byte bound is used from then on.
   */
  private trusted = true;
  private lastPrefix:
    { model: string; system: string; tools: ModelToolSpec[]; key: string; fixedBytes: number } | undefined;

  constructor(limits: InputBoundsLimits = {}) {
    this.maxAgents = limits.agents ?? 10_000;
    this.maxPrefixes = limits.prefixes ?? 1_000;
  }

  /** An upper bound on the input tokens of a request about to be sent. */
  bound(request: InputBoundRequest): InputBound {
    const { key, fixedBytes } = this.prefixOf(request);
    const { messageBytes } = request;
    let total = 0;
    for (const b of messageBytes) total += b;
    const count = messageBytes.length;
    const messagesBound = total + MESSAGE_FRAMING_TOKENS * count;
    let tokens = fixedBytes + messagesBound;
    let source: InputBound['source'] = 'bytes';
    if (this.trusted) {
      const shared = this.prefixes.get(key);
      if (shared !== undefined && shared + messagesBound < tokens) {
        tokens = shared + messagesBound;
        source = 'prefix';
      }
      const known = request.elided ? undefined : this.agents.get(request.agentId);
      if (known && known.key === key && known.messageCount <= count) {
        let prefixBytes = 0;
        for (let i = 0; i < known.messageCount; i++) prefixBytes += messageBytes[i]!;
        // The log is append-only; the size check catches anything else (a log read back differently).
        if (prefixBytes === known.messageBytes) {
          const added = total - prefixBytes + MESSAGE_FRAMING_TOKENS * (count - known.messageCount);
          if (known.tokens + added < tokens) {
            tokens = known.tokens + added;
            source = 'agent';
          }
        }
      }
    }
    return {
      tokens,
      source,
      agentId: request.agentId,
      key,
      messageCount: count,
      messageBytes: total,
      elided: request.elided,
    };
  }

  /** Learns from the usage the provider reported for a request bounded by `bound`. */
  learn(bound: InputBound, usage: ModelUsage): void {
    const reported = reportedInputTokens(usage);
    if (reported === undefined) return; // a provider that reports no usage keeps the byte bound
    if (bound.source !== 'bytes' && reported > bound.tokens) {
      this.trusted = false;
      this.agents.clear();
      this.prefixes.clear();
      return;
    }
    if (!this.trusted) return;
    if (bound.elided) {
      this.agents.delete(bound.agentId);
    } else {
      remember(
        this.agents,
        bound.agentId,
        { key: bound.key, messageCount: bound.messageCount, messageBytes: bound.messageBytes, tokens: reported },
        this.maxAgents,
      );
    }
    const shared = this.prefixes.get(bound.key);
    if (shared === undefined || reported < shared) remember(this.prefixes, bound.key, reported, this.maxPrefixes);
  }

  /**
   * The key of a request's model + system prompt + tool list, and the byte bound of that fixed part (with the request's
   * framing). Siblings send the same three values one after another: the last one is kept at hand.
   */
  private prefixOf(request: InputBoundRequest): { key: string; fixedBytes: number } {
    const last = this.lastPrefix;
    if (last && last.model === request.model && last.system === request.system && last.tools === request.tools) {
      return last;
    }
    const prefix = {
      model: request.model,
      system: request.system,
      tools: request.tools,
      key: prefixKey(request.model, request.system, request.tools),
      fixedBytes: inputTokenBound({ system: request.system, tools: request.tools, messages: [] }, 0),
    };
    this.lastPrefix = prefix;
    return prefix;
  }

  /** Drops what is known of an agent (it finished). */
  forget(agentId: string): void {
    this.agents.delete(agentId);
  }
}

/**
 * The input tokens a usage report counts, or undefined when it reports none. Cache reads and cache writes are part of
 * the input: the Messages API's `input_tokens` counts only the tokens after the last cache breakpoint.
 */
export function reportedInputTokens(usage: ModelUsage | undefined): number | undefined {
  if (!usage || !Number.isFinite(usage.inputTokens)) return undefined;
  const input = totalTokens(usage).input;
  return Number.isFinite(input) && input > 0 ? input : undefined;
}

const boundsByProvider = new WeakMap<ModelProvider, InputBounds>();

/** The learned bounds of a provider, made on first use. */
export function inputBoundsOf(provider: ModelProvider): InputBounds {
  let bounds = boundsByProvider.get(provider);
  if (!bounds) boundsByProvider.set(provider, (bounds = new InputBounds()));
  return bounds;
}

/** Sets `key` as the most recently used entry, forgetting the least recently used one past `max`. */
function remember<V>(map: Map<string, V>, key: string, value: V, max: number): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > max) map.delete(map.keys().next().value!);
}

const toolListHashes = new WeakMap<object, string>();
/** System prompts are few and long-lived: their hashes are kept for the most recent ones. */
const systemHashes = new Map<string, string>();

function prefixKey(model: string, system: string, tools: ModelToolSpec[]): string {
  let toolsHash = toolListHashes.get(tools);
  if (toolsHash === undefined) {
    toolsHash = hash(JSON.stringify(tools));
    toolListHashes.set(tools, toolsHash);
  }
  let systemHash = systemHashes.get(system);
  if (systemHash === undefined) {
    systemHash = hash(system);
    remember(systemHashes, system, systemHash, 256);
  }
  return `${model}\n${systemHash}\n${toolsHash}`;
}

function hash(text: string): string {
  return createHash('sha256').update(text).digest('base64url');
}

/**
 * The provider's exact count of a request's input tokens, or undefined when it cannot count (no `countTokens`, or the
 * count failed: the caller keeps its bound). Never throws; an aborted signal shows in `signal.aborted`.
 */
export async function exactInputTokens(
  provider: ModelProvider,
  request: ModelRequest,
  signal: AbortSignal,
): Promise<number | undefined> {
  if (!provider.countTokens || signal.aborted) return undefined;
  try {
    const n = await provider.countTokens(request, { signal });
    return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
  } catch {
    return undefined;
  }
}
