/**
 * @module models/anthropic
 * The default {@link ModelProvider}: Anthropic's Messages API through `@anthropic-ai/sdk`. agentry's public model ids
 * (`svc-1-lite`, `svc-1-ultra`) map to upstream Claude models through one table, overridable by options and by the
 * environment. `baseURL` (or `ANTHROPIC_BASE_URL`) points it at any server that speaks the Messages API. The SDK
 * retries 408/409/429/5xx/529 and connection failures itself, honouring `retry-after-ms` / `retry-after`; what is
 * left when its retries run out becomes a {@link ModelError}.
 */
import type Anthropic from '@anthropic-ai/sdk';
import type * as AnthropicSdk from '@anthropic-ai/sdk';
import type { ContentBlockParam, MessageParam, Tool } from '@anthropic-ai/sdk/resources/messages';
import { z } from 'zod';
import { AgentryError } from '../errors.js';
import { ModelIdCheck, unlistedModelMessage, type ListFailure, type ResolvedModelId } from './model-ids.js';
import {
  PrefixWriteGate,
  estimatePrefixTokens,
  minCacheableTokens,
  prefixKey,
  promptCacheEnabled,
  withCacheBreakpoints,
} from './prompt-cache.js';
import { ModelError } from './provider.js';
import {
  resolveThinking,
  ThinkingSettingSchema,
  thinkingAllowance,
  thinkingParams,
  thinkingToSend,
} from './thinking.js';
import type { ThinkingSetting } from './thinking.js';
import type {
  AssistantContentBlock,
  ContentBlock,
  GenerateOptions,
  ModelProvider,
  ModelRequest,
  ModelResponse,
  ModelUsage,
  StopReason,
} from './provider.js';

/**
 * Public model id -> upstream Anthropic model id. The one place the defaults live
 * (README.md#options-of-agentruntimeopen). `svc-1-lite` is a Claude Haiku model and `svc-1-ultra` a Claude Opus model;
 * the default credit prices (`core/credits.ts`) match these two.
 */
export const DEFAULT_ANTHROPIC_MODELS = {
  'svc-1-lite': 'claude-haiku-4-5',
  'svc-1-ultra': 'claude-opus-5-5',
} as const satisfies Record<string, string>;

/**
 * The environment variable that overrides the upstream id of each default public model
 * (README.md#options-of-agentruntimeopen).
 */
const MODEL_ENV: Record<keyof typeof DEFAULT_ANTHROPIC_MODELS, string> = {
  'svc-1-lite': 'AGENTRY_MODEL_LITE',
  'svc-1-ultra': 'AGENTRY_MODEL_ULTRA',
};

/** Context window assumed for a model that {@link AnthropicProviderOptions.contextWindows} does not name. */
export const DEFAULT_CONTEXT_WINDOW = 200_000;

/** Per-request time limit when none is given; passing one also keeps the SDK from refusing large `max_tokens`. */
const DEFAULT_TIMEOUT_MS = 10 * 60 * 1000;

/** Sent when only a base URL is configured: local Messages API servers rarely check the key. */
const PLACEHOLDER_API_KEY = 'agentry-no-key';

/** Options of {@link anthropicProvider}. Options passed in code win over the environment. */
export interface AnthropicProviderOptions {
  /**
   * Anthropic API key.
   * @default process.env.ANTHROPIC_API_KEY
   */
  apiKey?: string;
  /**
   * Base URL of a server that speaks the Messages API (a proxy, a local model server, a test double).
   * @default process.env.ANTHROPIC_BASE_URL, else https://api.anthropic.com
   * @example anthropicProvider({ baseURL: 'http://127.0.0.1:8080' })
   */
  baseURL?: string;
  /**
   * Public model id -> upstream model id. Overrides {@link DEFAULT_ANTHROPIC_MODELS} and the `AGENTRY_MODEL_LITE` /
   * `AGENTRY_MODEL_ULTRA` variables; a key that is not in the default table adds a public model.
   * @example anthropicProvider({ models: { 'svc-1-ultra': 'claude-sonnet-4-6' } })
   */
  models?: Partial<Record<string, string>>;
  /**
   * How many times the SDK retries a rate limit, overload, 5xx or connection failure (with backoff) before
   * `generate` throws a retryable {@link ModelError}.
   * @default 4
   */
  maxRetries?: number;
  /**
   * Time limit of one HTTP attempt, in milliseconds.
   * @default 600_000
   */
  timeoutMs?: number;
  /** A `fetch` implementation for the SDK to use. @default globalThis.fetch */
  fetch?: typeof fetch;
  /**
   * Context window per public model id, in tokens.
   * @default 200_000 for every model
   */
  contextWindows?: Partial<Record<string, number>>;
  /**
   * Extended thinking per public model id: `false`, or `{budgetTokens, effort?}` — the thinking tokens a call may spend
   * besides its answer (≥ 1,024; `max_tokens` and the credit hold grow by it) and, for models that think adaptively
   * (Claude Opus/Sonnet 4.6 and later, the Claude 5 families), the `output_config.effort`. Overrides
   * `AGENTRY_THINKING_LITE` / `AGENTRY_THINKING_ULTRA` (`off` or a budget).
   * @default { 'svc-1-lite': false, 'svc-1-ultra': { budgetTokens: 8000 } }
   * @example anthropicProvider({ thinking: { 'svc-1-ultra': { budgetTokens: 16_000, effort: 'high' } } })
   */
  thinking?: Partial<Record<string, ThinkingSetting>>;
  /**
   * Prompt caching: breakpoints on the tools+system prefix and on the conversation's last block, and one sibling's
   * first call let through before the others of the same prefix (see `models/prompt-cache`).
   * @default true, unless AGENTRY_PROMPT_CACHE is `off`
   * @example anthropicProvider({ promptCache: false })
   */
  promptCache?: boolean;
  /**
   * Check the upstream ids once against the server's `GET /v1/models` before the first call (an unlisted id fails the
   * agent with a message naming AGENTRY_MODEL_LITE / AGENTRY_MODEL_ULTRA; a server without the route is not checked).
   * @default true
   */
  checkModelIds?: boolean;
  /** Where the one warning of a skipped id check goes. @default console.warn */
  warn?: (message: string) => void;
}

const OptionsSchema = z.strictObject({
  apiKey: z.string().min(1).optional(),
  baseURL: z.url({ protocol: /^https?$/ }).optional(),
  models: z.record(z.string().min(1), z.string().min(1).optional()).optional(),
  maxRetries: z.int().min(0).optional(),
  timeoutMs: z.int().positive().optional(),
  fetch: z.custom<typeof fetch>((value) => typeof value === 'function', 'Expected a fetch function').optional(),
  contextWindows: z.record(z.string().min(1), z.int().positive().optional()).optional(),
  thinking: z.record(z.string().min(1), ThinkingSettingSchema.optional()).optional(),
  promptCache: z.boolean().optional(),
  checkModelIds: z.boolean().optional(),
  warn: z.custom<(message: string) => void>((value) => typeof value === 'function', 'Expected a function').optional(),
});

/** What {@link resolveAnthropicConfig} settles on. */
export interface AnthropicConfig {
  /** The key to send; `undefined` when neither options nor environment give one. */
  apiKey: string | undefined;
  baseURL: string | undefined;
  /** Public model id -> upstream model id, after options and environment overrides. */
  models: Record<string, string>;
}

type Env = Readonly<Record<string, string | undefined>>;

/** An environment variable, with an empty string counting as unset. */
function readVar(env: Env, name: string): string | undefined {
  const value = env[name]?.trim();
  return value === undefined || value === '' ? undefined : value;
}

/**
 * Resolves key, base URL and model table from options and environment (options win, then environment, then
 * {@link DEFAULT_ANTHROPIC_MODELS}). Does not validate options; {@link anthropicProvider} does.
 *
 * @example
 * resolveAnthropicConfig({ AGENTRY_MODEL_LITE: 'claude-haiku-4-5-20251001' }).models['svc-1-lite']
 * // -> 'claude-haiku-4-5-20251001'
 */
export function resolveAnthropicConfig(
  env: Env = process.env,
  options: Pick<AnthropicProviderOptions, 'apiKey' | 'baseURL' | 'models'> = {},
): AnthropicConfig {
  const models: Record<string, string> = {};
  for (const [publicId, upstream] of Object.entries(DEFAULT_ANTHROPIC_MODELS)) {
    models[publicId] = readVar(env, MODEL_ENV[publicId as keyof typeof MODEL_ENV]) ?? upstream;
  }
  for (const [publicId, upstream] of Object.entries(options.models ?? {})) {
    if (upstream !== undefined) models[publicId] = upstream;
  }
  return {
    apiKey: options.apiKey ?? readVar(env, 'ANTHROPIC_API_KEY'),
    baseURL: options.baseURL ?? readVar(env, 'ANTHROPIC_BASE_URL'),
    models,
  };
}

/**
 * True if the environment configures the Anthropic provider at all: an API key, or a base URL (a local server may
 * need no key). The CLI uses it to fail fast before starting a run.
 */
export function hasAnthropicCredentials(env: Env = process.env): boolean {
  return readVar(env, 'ANTHROPIC_API_KEY') !== undefined || readVar(env, 'ANTHROPIC_BASE_URL') !== undefined;
}

/**
 * The default model provider, backed by `@anthropic-ai/sdk`. The environment is read once, here.
 *
 * Without an API key or a base URL the provider still constructs (so a runtime can open and serve reads), but every
 * `generate` throws a non-retryable {@link ModelError} that says to set `ANTHROPIC_API_KEY`. With a base URL and no
 * key, a placeholder key is sent.
 *
 * Errors of `generate`:
 * - rate limit (429), overload (529), 5xx, 408/409, timeouts and connection failures, once the SDK's retries are
 *   spent: `ModelError` with `retryable: true`, and `retryAfterMs` when the server sent `retry-after(-ms)`;
 * - any other HTTP error (400, 401, 403, 404, 413, …): `ModelError` with `retryable: false`, `status`, and a message
 *   `Anthropic API error <status>: <the server's message>`;
 * - abort: when `options.signal` aborts, `generate` rejects with an error whose `name` is `'AbortError'` — the
 *   signal's `reason` itself if that is such an error (as after a bare `controller.abort()`), otherwise a
 *   `DOMException('…', 'AbortError')` with the reason as its `cause`. It is never a `ModelError`, so nothing retries it.
 *
 * @example
 * const model = anthropicProvider({ models: { 'svc-1-ultra': 'claude-opus-4-8' }, maxRetries: 2 });
 * const turn = await model.generate(request, { signal: controller.signal });
 */
type Sdk = typeof AnthropicSdk;
let sdk: Promise<Sdk> | undefined;
/**
 * The SDK is loaded on the first model call, not when agentry is imported: it adds ~20 MB to a process's memory,
 * which a runtime that never calls Anthropic (another provider, the admin CLI, tests) need not pay.
 */
const loadSdk = (): Promise<Sdk> => (sdk ??= import('@anthropic-ai/sdk'));

export function anthropicProvider(options: AnthropicProviderOptions = {}): ModelProvider {
  const parsed = OptionsSchema.safeParse(options);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((issue) => ({
      path: issue.path.join('.'),
      message: issue.message,
    }));
    const summary = issues.map((issue) => (issue.path === '' ? issue.message : `\`${issue.path}\`: ${issue.message}`));
    throw new AgentryError('invalid_request', `Invalid anthropicProvider options: ${summary.join('; ')}`, {
      details: issues,
      cause: parsed.error,
    });
  }
  const opts = parsed.data;
  const config = resolveAnthropicConfig(process.env, {
    ...(opts.apiKey === undefined ? {} : { apiKey: opts.apiKey }),
    ...(opts.baseURL === undefined ? {} : { baseURL: opts.baseURL }),
    ...(opts.models === undefined ? {} : { models: opts.models }),
  });
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const contextWindows = opts.contextWindows ?? {};
  let thinking: Record<string, ThinkingSetting>;
  try {
    thinking = resolveThinking(process.env, opts.thinking ?? {});
  } catch (error) {
    throw new AgentryError('invalid_request', error instanceof Error ? error.message : String(error), { cause: error });
  }
  const thinkingOf = (model: string) => (Object.hasOwn(thinking, model) ? thinking[model] : undefined);
  const caching = promptCacheEnabled(opts.promptCache, process.env);
  const writeGate = new PrefixWriteGate();

  // Only built when configured: without a key the SDK would go looking for credentials in profile files on disk.
  const configured = config.apiKey !== undefined || config.baseURL !== undefined;
  let client: Promise<{ sdk: Sdk; client: Anthropic }> | undefined;
  const clientOf = () =>
    (client ??= loadSdk().then((loaded) => ({
      sdk: loaded,
      client: new loaded.default({
        apiKey: config.apiKey ?? PLACEHOLDER_API_KEY,
        baseURL: config.baseURL ?? null,
        maxRetries: opts.maxRetries ?? 4,
        timeout: timeoutMs,
        // agentry's own `chat` span is the one span of each model call (with usage); the SDK's own
        // `anthropic.messages.create` span would count every call's tokens a second time.
        openTelemetry: false,
        ...(opts.fetch === undefined ? {} : { fetch: opts.fetch }),
      }),
    })));

  /** The upstream model of a request; throws when the provider is not configured or does not serve the model. */
  const upstreamOf = (request: ModelRequest): string => {
    if (!configured) {
      throw new ModelError(
        'The Anthropic model provider is not configured: set ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL for a server ' +
          'that speaks the Messages API), or pass apiKey/baseURL to anthropicProvider().',
        { retryable: false },
      );
    }
    const upstream = Object.hasOwn(config.models, request.model) ? config.models[request.model] : undefined;
    if (upstream === undefined) {
      throw new ModelError(
        `Unknown model ${JSON.stringify(request.model)}; this provider serves ${Object.keys(config.models).join(', ')}`,
        { retryable: false },
      );
    }
    return upstream;
  };

  // The server's model list, fetched once (all pages) on the first call; see models/model-ids.
  const idCheck =
    opts.checkModelIds === false
      ? undefined
      : new ModelIdCheck({
          list: async (listSignal) => {
            const { client: anthropic } = await clientOf();
            const ids: string[] = [];
            for await (const model of anthropic.models.list(
              { limit: 1000 },
              { signal: listSignal, timeout: timeoutMs },
            )) {
              ids.push(model.id);
            }
            return ids;
          },
          classify: (error): ListFailure => {
            const status = (error as { status?: unknown } | null)?.status;
            if (status === 404) return { kind: 'no-route' };
            return { kind: 'failed', message: error instanceof Error ? error.message : String(error) };
          },
          ...(opts.warn === undefined ? {} : { warn: opts.warn }),
        });
  const checkListed = async (model: string, upstream: string, signal: AbortSignal): Promise<void> => {
    if (idCheck === undefined) return;
    const listed = await idCheck.isListed(upstream, signal).catch(() => undefined);
    if (signal.aborted) throw abortError(signal);
    if (listed === false)
      throw new ModelError(unlistedModelMessage(model, upstream), { retryable: false, status: 404 });
  };

  return {
    models: Object.freeze(Object.keys(config.models)),
    providerName: 'anthropic',
    upstreamModel: (model) => (Object.hasOwn(config.models, model) ? config.models[model] : undefined),
    promptCache: caching,

    async generate(request: ModelRequest, { signal }: GenerateOptions): Promise<ModelResponse> {
      const upstream = upstreamOf(request);
      if (signal.aborted) throw abortError(signal);

      const { sdk: loaded, client: anthropic } = await clientOf();
      if (signal.aborted) throw abortError(signal);
      await checkListed(request.model, upstream, signal);
      const cached = caching && request.promptCache !== false;
      const tools = request.tools.map(toToolParam);
      // Thinking goes back as the API requires it (models/thinking); the cache breakpoints go on what is sent.
      const outgoing = thinkingToSend(upstream, request.messages, request.editedFrom);
      const parts = cached
        ? withCacheBreakpoints({
            system: request.system,
            tools,
            messages: outgoing.map((m) => ({ role: m.role, content: m.content.map(toContentBlockParam) })),
          })
        : undefined;
      // Siblings of one prefix wait for its first writer, so they read its entry instead of writing their own.
      const gated = cached && estimatePrefixTokens(request.system, tools) >= minCacheableTokens(upstream);
      let release: ((ok: boolean) => void) | undefined;
      if (gated) {
        try {
          release = await writeGate.enter(prefixKey(upstream, request.system, tools), signal);
        } catch {
          throw abortError(signal);
        }
      }
      let message: Anthropic.Message;
      try {
        message = await anthropic.messages.create(
          {
            model: upstream,
            max_tokens: request.maxTokens,
            ...(parts === undefined
              ? {
                  messages: outgoing.map(toMessageParam),
                  ...(request.system === '' ? {} : { system: request.system }),
                  ...(tools.length === 0 ? {} : { tools }),
                }
              : {
                  messages: parts.messages,
                  ...(parts.system === undefined ? {} : { system: parts.system }),
                  ...(parts.tools.length === 0 ? {} : { tools: parts.tools }),
                }),
            ...thinkingParams(upstream, thinkingOf(request.model), request.maxTokens),
          },
          { signal, timeout: timeoutMs },
        );
      } catch (error) {
        release?.(false);
        if (signal.aborted) throw abortError(signal);
        throw toModelError(error, loaded);
      }
      release?.(true);
      return fromMessage(message);
    },

    async resolveModels(options: { signal?: AbortSignal } = {}): Promise<ResolvedModelId[]> {
      const report = configured && idCheck !== undefined ? await idCheck.run(options.signal) : undefined;
      return Object.entries(config.models).map(([model, upstream]) => ({
        model,
        upstream,
        listed: report?.kind === 'checked' ? report.listed.has(upstream) : undefined,
      }));
    },

    /** `POST /v1/messages/count_tokens`: the input tokens of the request as the API counts them. Errors as `generate`'s. */
    async countTokens(request: ModelRequest, { signal }: GenerateOptions): Promise<number> {
      const upstream = upstreamOf(request);
      if (signal.aborted) throw abortError(signal);
      const { sdk: loaded, client: anthropic } = await clientOf();
      if (signal.aborted) throw abortError(signal);
      try {
        const counted = await anthropic.messages.countTokens(
          {
            model: upstream,
            messages: thinkingToSend(upstream, request.messages, request.editedFrom).map(toMessageParam),
            ...(request.system === '' ? {} : { system: request.system }),
            ...(request.tools.length === 0 ? {} : { tools: request.tools.map(toToolParam) }),
            // Counted as the call will be sent: the thinking config is part of the prompt the API counts.
            ...thinkingParams(upstream, thinkingOf(request.model), request.maxTokens),
          },
          { signal, timeout: timeoutMs },
        );
        return counted.input_tokens;
      } catch (error) {
        if (signal.aborted) throw abortError(signal);
        throw toModelError(error, loaded);
      }
    },

    thinkingTokens(model: string): number {
      return thinkingAllowance(thinkingOf(model));
    },

    contextWindow(model: string): number {
      return (Object.hasOwn(contextWindows, model) ? contextWindows[model] : undefined) ?? DEFAULT_CONTEXT_WINDOW;
    },
  };
}

function toMessageParam(message: ModelRequest['messages'][number]): MessageParam {
  return {
    role: message.role,
    content: message.content.map(toContentBlockParam),
  };
}

function toContentBlockParam(block: ContentBlock): ContentBlockParam {
  switch (block.type) {
    // Exactly as the API sent them: the signature covers the text, and a changed block is refused.
    case 'thinking':
      return { type: 'thinking', thinking: block.thinking, signature: block.signature };
    case 'redacted_thinking':
      return { type: 'redacted_thinking', data: block.data };
    case 'text':
      return { type: 'text', text: block.text };
    case 'tool_use':
      return {
        type: 'tool_use',
        id: block.id,
        name: block.name,
        input: block.input,
      };
    case 'tool_result':
      return {
        type: 'tool_result',
        tool_use_id: block.tool_use_id,
        content: block.content,
        ...(block.is_error === undefined ? {} : { is_error: block.is_error }),
      };
  }
}

function toToolParam(tool: ModelRequest['tools'][number]): Tool {
  // Tool inputs are always objects (z.toJSONSchema of a z.object); the API insists on saying so.
  return {
    name: tool.name,
    description: tool.description,
    input_schema: { ...tool.input_schema, type: 'object' },
  };
}

function fromMessage(message: Anthropic.Message): ModelResponse {
  const content: AssistantContentBlock[] = [];
  for (const block of message.content) {
    if (block.type === 'thinking') {
      content.push({ type: 'thinking', thinking: block.thinking, signature: block.signature });
    } else if (block.type === 'redacted_thinking') content.push({ type: 'redacted_thinking', data: block.data });
    else if (block.type === 'text') content.push({ type: 'text', text: block.text });
    else if (block.type === 'tool_use')
      content.push({
        type: 'tool_use',
        id: block.id,
        name: block.name,
        input: block.input,
      });
    // Server-tool blocks are not part of agentry's turn log.
  }
  const usage: ModelUsage = {
    inputTokens: message.usage.input_tokens,
    outputTokens: message.usage.output_tokens,
  };
  if (message.usage.cache_read_input_tokens != null) usage.cacheReadInputTokens = message.usage.cache_read_input_tokens;
  if (message.usage.cache_creation_input_tokens != null) {
    usage.cacheCreationInputTokens = message.usage.cache_creation_input_tokens;
  }
  return { content, usage, stopReason: toStopReason(message.stop_reason), model: message.model };
}

function toStopReason(reason: Anthropic.Message['stop_reason']): StopReason {
  switch (reason) {
    case 'end_turn':
    case 'tool_use':
    case 'max_tokens':
    case 'stop_sequence':
    case 'refusal':
    case 'pause_turn':
      return reason;
    // The turn was cut off by the context window: for the loop that is the same as running out of output tokens.
    case 'model_context_window_exceeded':
      return 'max_tokens';
    default:
      return 'end_turn';
  }
}

/** What `generate` rejects with on abort; see {@link anthropicProvider}. */
function abortError(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  if (reason instanceof Error && reason.name === 'AbortError') return reason;
  const error = new DOMException('The model request was aborted', 'AbortError');
  // DOMException's constructor takes no `cause` in every runtime's typings; set it the way Error would.
  Object.defineProperty(error, 'cause', {
    value: reason,
    writable: true,
    configurable: true,
  });
  return error;
}

function toModelError(error: unknown, { APIConnectionError, APIConnectionTimeoutError, APIError }: Sdk): ModelError {
  if (error instanceof APIConnectionTimeoutError) {
    return new ModelError('Anthropic API request timed out', {
      retryable: true,
      cause: error,
    });
  }
  if (error instanceof APIConnectionError) {
    const cause = error.cause instanceof Error ? `: ${error.cause.message}` : '';
    return new ModelError(`Anthropic API connection error${cause}`, {
      retryable: true,
      cause: error,
    });
  }
  if (error instanceof APIError && typeof error.status === 'number') {
    const status = error.status;
    const retryable = status === 408 || status === 409 || status === 429 || status >= 500;
    const serverMessage = error.apiMessage ?? error.message;
    const hint = status === 401 ? ' (check ANTHROPIC_API_KEY)' : '';
    const retryAfterMs = retryAfterOf(error.headers);
    return new ModelError(`Anthropic API error ${status}: ${serverMessage}${hint}`, {
      retryable,
      status,
      ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
      cause: error,
    });
  }
  const message = error instanceof Error ? error.message : String(error);
  return new ModelError(`Anthropic API request failed: ${message}`, {
    retryable: false,
    cause: error,
  });
}

/** `retry-after-ms`, else `retry-after` (seconds or an HTTP date), in milliseconds. */
function retryAfterOf(headers: Headers | undefined): number | undefined {
  const ms = Number.parseFloat(headers?.get('retry-after-ms') ?? '');
  if (Number.isFinite(ms) && ms >= 0) return Math.round(ms);
  const value = headers?.get('retry-after');
  if (value == null || value.trim() === '') return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds) && seconds >= 0) return Math.round(seconds * 1000);
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}
