/**
 * @module models/provider
 * The model extension point. A provider turns a conversation into one assistant turn. Content blocks follow the
 * Anthropic Messages API shapes (text, tool_use, tool_result), which every other provider can be mapped onto.
 */
import type { ResolvedModelId } from './model-ids.js';

export interface TextBlock {
  type: 'text';
  text: string;
}

export interface ToolUseBlock {
  type: 'tool_use';
  id: string;
  name: string;
  input: unknown;
}

export interface ToolResultBlock {
  type: 'tool_result';
  tool_use_id: string;
  content: string;
  is_error?: boolean;
}

/**
 * A block of the model's extended thinking. `signature` proves to the provider that it wrote `thinking`: the block
 * goes back unchanged (models/thinking.ts decides when), and never into the public transcript.
 */
export interface ThinkingBlock {
  type: 'thinking';
  thinking: string;
  signature: string;
}

/** Thinking the provider encrypted (`data` is opaque); it goes back unchanged like a {@link ThinkingBlock}. */
export interface RedactedThinkingBlock {
  type: 'redacted_thinking';
  data: string;
}

/** The blocks of an assistant turn that hold the model's thinking. */
export type ThinkingContentBlock = ThinkingBlock | RedactedThinkingBlock;

/** What an assistant turn holds: its thinking, text and tool calls, in the order the model produced them. */
export type AssistantContentBlock = ThinkingContentBlock | TextBlock | ToolUseBlock;

export type ContentBlock = AssistantContentBlock | ToolResultBlock;

export interface ModelMessage {
  role: 'user' | 'assistant';
  content: ContentBlock[];
}

/** A tool as the model sees it. */
export interface ModelToolSpec {
  name: string;
  description: string;
  /** JSON Schema of the input object. */
  input_schema: Record<string, unknown>;
}

export interface ModelRequest {
  /** agentry's public model id, e.g. `svc-1-lite`. The provider maps it to an upstream model. */
  model: string;
  system: string;
  messages: ModelMessage[];
  tools: ModelToolSpec[];
  /** Cap on output tokens; the credit reservation counts on it. */
  maxTokens: number;
  /** The agent this turn is for (for logs and scripted test models). */
  agentId: string;
  /**
   * Index of the first message that differs from what the turn log holds (old tool results elided to fit the context
   * window); absent when the messages are the log as it is. Thinking after it was produced after a different
   * conversation: models that bind thinking to its prefix would refuse it, so the provider leaves it out.
   */
  editedFrom?: number;
  /**
   * `false`: send this call without prompt-cache breakpoints, so it is billed at the plain input price and nothing
   * else (the loop does this when the balance is too tight to hold the cache-write price). @default true
   */
  promptCache?: boolean;
}

export interface ModelUsage {
  inputTokens: number;
  outputTokens: number;
  /** Tokens read from the provider's prompt cache (billed at the cache-read price). */
  cacheReadInputTokens?: number;
  /** Tokens written to the provider's prompt cache (billed at the cache-write price). */
  cacheCreationInputTokens?: number;
}

export type StopReason = 'end_turn' | 'tool_use' | 'max_tokens' | 'stop_sequence' | 'refusal' | 'pause_turn';

export interface ModelResponse {
  /** Thinking blocks (when the model thinks) come first, as the provider sent them; the loop stores them whole. */
  content: AssistantContentBlock[];
  usage: ModelUsage;
  stopReason: StopReason;
  /** The upstream model that answered (e.g. `claude-haiku-4-5`), when the provider says; for traces. */
  model?: string;
}

export interface GenerateOptions {
  /** Aborted when the agent is paused or deleted; the provider must stop the request. */
  signal: AbortSignal;
}

/**
 * Generates assistant turns. Throw {@link ModelError} for failures the runtime should understand (a non-retryable
 * provider error fails the agent with its message; a rate limit lets the scheduler back off).
 *
 * @example
 * const echo: ModelProvider = {
 *   models: ['svc-1-lite'],
 *   async generate(req) {
 *     return { content: [{ type: 'text', text: 'done' }], usage: { inputTokens: 1, outputTokens: 1 }, stopReason: 'end_turn' };
 *   },
 * };
 */
export interface ModelProvider {
  /** Public model ids this provider serves; `create()` refuses others with `invalid_request`. */
  readonly models: readonly string[];
  /** `gen_ai.provider.name` in traces and metrics (e.g. `anthropic`). @default '_OTHER' */
  readonly providerName?: string;
  /**
   * The provider's own id of a public model (`svc-1-lite` -> `claude-haiku-4-5`), for traces' `gen_ai.request.model`;
   * undefined when it has none to say. Optional: without it traces name the public id.
   *
   * @example
   * upstreamModel: (model) => ({ 'svc-1-lite': 'claude-haiku-4-5' })[model]
   */
  upstreamModel?(model: string): string | undefined;
  generate(request: ModelRequest, options: GenerateOptions): Promise<ModelResponse>;
  /** Context window of a model, in tokens (for eliding old tool results). */
  contextWindow?(model: string): number;
  /**
   * The input tokens of `request` (system prompt, tools and messages; `maxTokens` plays no part), counted exactly as
   * the provider bills them: the Messages API's `POST /v1/messages/count_tokens`. Optional. The runtime asks only when
   * even its learned bound on a call's input does not fit what is left, before it stops the agent OUT_OF_CREDITS; a
   * provider without it keeps that bound.
   *
   * @example
   * const model: ModelProvider = {
   *   models: ['svc-1-lite'],
   *   generate: async (req) => myGenerate(req),
   *   countTokens: async (req, { signal }) => myTokenizer.count(req, signal),
   * };
   */
  countTokens?(request: ModelRequest, options: GenerateOptions): Promise<number>;
  /**
   * Output tokens a call of `model` may spend on extended thinking, on top of its answer: the loop raises `max_tokens`
   * by this much (the API counts thinking inside `max_tokens`), so the credit hold covers thinking and answer. Optional;
   * 0 or absent when the model does not think.
   *
   * @example
   * const model: ModelProvider = { models: ['svc-1-ultra'], generate, thinkingTokens: (m) => (m === 'svc-1-ultra' ? 8_000 : 0) };
   */
  thinkingTokens?(model: string): number;
  /**
   * `false` when the provider never writes the prompt cache (its calls are billed at the plain input price, so a hold
   * need not cover the cache-write price). Absent: it may.
   */
  readonly promptCache?: boolean;
  /**
   * The upstream model behind each public model, and whether the server lists it (`listed: undefined` when it could
   * not be checked). For `agentry serve`'s warning at start and `agentry tools`.
   */
  resolveModels?(options?: { signal?: AbortSignal }): Promise<ResolvedModelId[]>;
}

/** A failure of the model provider. `retryable` failures are retried by the runtime, others fail the agent. */
export class ModelError extends Error {
  readonly retryable: boolean;
  readonly status: number | undefined;
  /** Milliseconds the provider asked us to wait, if it said. */
  readonly retryAfterMs: number | undefined;

  constructor(
    message: string,
    options: { retryable: boolean; status?: number; retryAfterMs?: number; cause?: unknown },
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.retryable = options.retryable;
    this.status = options.status;
    this.retryAfterMs = options.retryAfterMs;
  }
}

/** Total tokens of a usage report (every input token, whatever its price: the prompt's size). */
export function totalTokens(usage: ModelUsage): { input: number; output: number } {
  return {
    input: usage.inputTokens + (usage.cacheReadInputTokens ?? 0) + (usage.cacheCreationInputTokens ?? 0),
    output: usage.outputTokens,
  };
}
