/**
 * @module testing/scripted-model
 * A deterministic {@link ModelProvider} that plays scripted turns. Each agent plays the script from the start: the
 * turn it gets is chosen by how many assistant turns its conversation already has, so concurrency never changes
 * which agent gets which turn.
 */
import { z } from 'zod';
import { AgentryError } from '../errors.js';
import type {
  GenerateOptions,
  ModelProvider,
  ModelRequest,
  ModelResponse,
  ModelUsage,
  TextBlock,
  ToolUseBlock,
} from '../models/provider.js';
import { ModelError } from '../models/provider.js';

/** One scripted assistant turn. */
export interface ScriptedTurn {
  /** Assistant text. A turn without tool calls ends the agent (COMPLETED). */
  text?: string;
  /** Tool calls; `id` defaults to a deterministic `toolu_<agent>_<turn>_<n>`. */
  toolCalls?: Array<{ name: string; input: unknown; id?: string }>;
  /** Usage reported for this turn. @default { inputTokens: 100, outputTokens: 20 } */
  usage?: Partial<ModelUsage>;
  /** Waits this long (real time) before answering; aborts end the wait early. */
  delayMs?: number;
  /** Throws instead of answering. */
  error?: { message: string; retryable?: boolean; status?: number; retryAfterMs?: number };
}

export interface ScriptContext {
  /** How many assistant turns the conversation already has. */
  turnIndex: number;
  /** How many calls this model has answered so far, across all agents. */
  callIndex: number;
}

export type Script =
  ScriptedTurn[] | ((request: ModelRequest, context: ScriptContext) => ScriptedTurn | Promise<ScriptedTurn>);

export interface ScriptedModelOptions {
  /** The turns every agent plays, or a function that decides each turn from the request. */
  turns: Script;
  /** Public model ids this model serves. @default ['svc-1-lite', 'svc-1-ultra'] */
  models?: string[];
  /** Keep every request in `calls` (turn off for very large runs). @default true */
  record?: boolean;
  /**
   * Counts a request's input tokens deterministically (see {@link scriptedTokenizer}). When set, every turn reports
   * this count as its input usage (unless the turn's own `usage.inputTokens` says otherwise), and the model answers
   * `countTokens` with it, as the Messages API's `count_tokens` would. Without it the model has no `countTokens`.
   */
  tokenizer?: ScriptedTokenizer;
}

/** Counts the input tokens of a request (system prompt, tools, messages). */
export type ScriptedTokenizer = (request: Pick<ModelRequest, 'system' | 'tools' | 'messages'>) => number;

/**
 * A deterministic stand-in for a real tokenizer: each piece of a request (the system prompt, each tool definition as
 * JSON, each message's content as JSON) counts one token per `bytesPerToken` bytes of UTF-8, rounded up, plus 3 tokens
 * of framing per message and 5 per request. `bytesPerToken: 1` is the worst case any tokenizer can reach (a token per
 * byte); about 4 is what Claude counts on English text.
 *
 * @example
 * const model = scriptedModel({ turns, tokenizer: scriptedTokenizer(4) });
 */
export function scriptedTokenizer(bytesPerToken: number): ScriptedTokenizer {
  const parsed = z.number().min(1).finite().safeParse(bytesPerToken);
  if (!parsed.success) {
    throw new AgentryError('invalid_request', `scriptedTokenizer: bytesPerToken must be a number >= 1`);
  }
  const ratio = parsed.data;
  const count = (text: string) => Math.ceil(Buffer.byteLength(text) / ratio);
  return (request) => {
    let tokens = 5 + count(request.system);
    for (const tool of request.tools) tokens += count(JSON.stringify(tool));
    for (const message of request.messages) tokens += 3 + count(JSON.stringify(message.content));
    return tokens;
  };
}

export const DEFAULT_SCRIPTED_USAGE: ModelUsage = { inputTokens: 100, outputTokens: 20 };

export interface ScriptedModel extends ModelProvider {
  /** Every request received, in order (when `record` is on). */
  readonly calls: ModelRequest[];
  /** How many calls were answered or failed. */
  readonly callCount: number;
}

const OptionsSchema = z
  .object({
    turns: z.union([z.array(z.any()).min(1), z.function()]),
    models: z.array(z.string().min(1)).min(1).optional(),
    record: z.boolean().optional(),
    tokenizer: z.function().optional(),
  })
  .strict();

/**
 * A stand-in for Claude in tests and demos.
 *
 * @example
 * const model = scriptedModel({
 *   turns: [
 *     { toolCalls: [{ name: 'get_weather', input: { city: 'Paris' } }] },
 *     { text: 'It is 21 °C in Paris.' },
 *   ],
 * });
 */
export function scriptedModel(options: ScriptedModelOptions): ScriptedModel {
  const parsed = OptionsSchema.safeParse(options);
  if (!parsed.success)
    throw new AgentryError('invalid_request', `Invalid scriptedModel options: ${z.prettifyError(parsed.error)}`);
  const record = options.record ?? true;
  const calls: ModelRequest[] = [];
  let callCount = 0;

  const pick = async (request: ModelRequest, context: ScriptContext): Promise<ScriptedTurn> => {
    if (typeof options.turns === 'function') return options.turns(request, context);
    const turn = options.turns[context.turnIndex];
    if (!turn) {
      throw new ModelError(
        `scriptedModel: the script has no turn ${context.turnIndex} (it has ${options.turns.length})`,
        {
          retryable: false,
        },
      );
    }
    return turn;
  };

  const tokenizer = options.tokenizer;
  return {
    models: options.models ?? ['svc-1-lite', 'svc-1-ultra'],
    ...(tokenizer
      ? {
          countTokens: async (request: ModelRequest, { signal }: GenerateOptions): Promise<number> => {
            if (signal.aborted) throw abortError();
            return tokenizer(request);
          },
        }
      : {}),
    providerName: 'agentry.scripted',
    calls,
    get callCount() {
      return callCount;
    },
    async generate(request: ModelRequest, { signal }: GenerateOptions): Promise<ModelResponse> {
      if (record) calls.push(request);
      const turnIndex = request.messages.filter((m) => m.role === 'assistant').length;
      const context = { turnIndex, callIndex: callCount++ };
      const turn = await pick(request, context);
      if (turn.delayMs) await abortableDelay(turn.delayMs, signal);
      if (signal.aborted) throw abortError();
      if (turn.error) {
        throw new ModelError(turn.error.message, {
          retryable: turn.error.retryable ?? false,
          ...(turn.error.status !== undefined ? { status: turn.error.status } : {}),
          ...(turn.error.retryAfterMs !== undefined ? { retryAfterMs: turn.error.retryAfterMs } : {}),
        });
      }
      const content: Array<TextBlock | ToolUseBlock> = [];
      if (turn.text) content.push({ type: 'text', text: turn.text });
      (turn.toolCalls ?? []).forEach((call, n) => {
        content.push({
          type: 'tool_use',
          id: call.id ?? `toolu_${request.agentId.replaceAll('-', '')}_${turnIndex}_${n}`,
          name: call.name,
          input: call.input,
        });
      });
      if (content.length === 0) content.push({ type: 'text', text: '' });
      return {
        content,
        usage: {
          ...DEFAULT_SCRIPTED_USAGE,
          ...(tokenizer ? { inputTokens: tokenizer(request) } : {}),
          ...turn.usage,
        },
        stopReason: turn.toolCalls?.length ? 'tool_use' : 'end_turn',
        model: request.model,
      };
    },
  };
}

function abortError(): Error {
  const err = new Error('The model request was aborted');
  err.name = 'AbortError';
  return err;
}

function abortableDelay(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(abortError());
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortError());
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
