/**
 * @module testing/fake-anthropic
 * A local HTTP server that speaks Anthropic's Messages API wire format (`POST /v1/messages` and
 * `POST /v1/messages/count_tokens`), so tests can drive the real `@anthropic-ai/sdk` client — retries, error mapping,
 * aborts and all — without the network. A test scripts each reply (text, tool_use blocks, usage, an error status, a
 * delay) and each token count, and reads back every request body it received.
 *
 * @example
 * const fake = await startFakeAnthropic({
 *   handler: fakeReplies({ status: 429, retryAfterMs: 1 }, { text: 'hello', usage: { input_tokens: 12, output_tokens: 3 } }),
 * });
 * const model = anthropicProvider({ baseURL: fake.url, apiKey: 'test' });
 * // ... fake.requests.length === 2
 * await fake.close();
 */
import { createServer } from 'node:http';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { thinkingRefusal, thinkingSigner, withThinking } from './fake-anthropic-thinking.js';
import type { FakeThinkingReply, ThinkingSigner } from './fake-anthropic-thinking.js';
import type { FakePromptCache } from './fake-anthropic-cache.js';

/**
 * The model ids the fake lists at `GET /v1/models` by default: ids Anthropic documents (models overview and
 * `@anthropic-ai/sdk`'s `Model` type), agentry's defaults among them.
 */
export const FAKE_ANTHROPIC_MODEL_IDS: readonly string[] = [
  'claude-opus-5-5',
  'claude-sonnet-5-5',
  'claude-haiku-5-5',
  'claude-fable-5-1',
  'claude-opus-5',
  'claude-sonnet-5',
  'claude-opus-4-8',
  'claude-opus-4-7',
  'claude-opus-4-6',
  'claude-sonnet-4-6',
  'claude-opus-4-5',
  'claude-opus-4-5-20251101',
  'claude-haiku-4-5',
  'claude-haiku-4-5-20251001',
];

/** A request body as the Messages API receives it (only the fields the fake looks at are typed). */
export interface FakeMessagesRequest {
  model: string;
  max_tokens: number;
  system?: unknown;
  messages: Array<{
    role: 'user' | 'assistant';
    content: string | Array<Record<string, unknown>>;
  }>;
  tools?: Array<Record<string, unknown>>;
  stream?: boolean;
  [key: string]: unknown;
}

/** What a handler learns about the request besides its body. */
export interface FakeRequestInfo {
  /** 0-based position of this request in {@link FakeAnthropic.requests}. */
  index: number;
  headers: IncomingHttpHeaders;
  /** The key the client sent, as `x-api-key` or as `Authorization: Bearer` (what `@anthropic-ai/sdk` 1.x sends). */
  apiKey: string;
  /** Aborted when the client disconnects before the reply is sent. */
  signal: AbortSignal;
}

export interface FakeUsage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number | null;
  cache_read_input_tokens: number | null;
}

export type FakeContentBlock =
  | { type: 'text'; text: string }
  /** `id` defaults to a fresh `toolu_fake_…` id. */
  | { type: 'tool_use'; id?: string; name: string; input: unknown }
  /** Sent (signed by the fake) only when the request asks for thinking. */
  | { type: 'thinking'; thinking: string }
  | { type: 'redacted_thinking' };

/**
 * A successful reply: a Message. When the request asks for thinking, the fake puts a signed thinking block first
 * (its text from `thinking`); see testing/fake-anthropic-thinking.
 */
export interface FakeMessageReply extends FakeThinkingReply {
  /** Shorthand for `content: [{ type: 'text', text }]`. */
  text?: string;
  content?: FakeContentBlock[];
  /** @default 'tool_use' if the content has a tool_use block, else 'end_turn' */
  stopReason?: string | null;
  /** Missing fields default as in the default reply; cache fields default to 0. */
  usage?: Partial<FakeUsage>;
  /** @default the request's model */
  model?: string;
  /** Wait this long before answering; the wait ends early if the client disconnects. */
  delayMs?: number;
  headers?: Record<string, string>;
}

/** An error reply in Anthropic's error shape: `{type: 'error', error: {type, message}}`. */
export interface FakeErrorReply {
  /** HTTP status, e.g. 400, 401, 429, 500, 529. */
  status: number;
  /** The error type; defaults by status (`invalid_request_error`, `rate_limit_error`, `overloaded_error`, …). */
  type?: string;
  /** @default a message naming the status */
  message?: string;
  /** Sent as the `retry-after` header, in seconds. */
  retryAfter?: number;
  /** Sent as the `retry-after-ms` header (the SDK prefers it; keeps test retries fast). */
  retryAfterMs?: number;
  delayMs?: number;
  headers?: Record<string, string>;
}

export type FakeReply = FakeMessageReply | FakeErrorReply;

export type FakeAnthropicHandler = (body: FakeMessagesRequest, info: FakeRequestInfo) => FakeReply | Promise<FakeReply>;

/** A `count_tokens` body: a Messages request without `max_tokens`. */
export interface FakeCountTokensRequest {
  model: string;
  system?: unknown;
  messages: FakeMessagesRequest['messages'];
  tools?: Array<Record<string, unknown>>;
  [key: string]: unknown;
}

/** Answers `POST /v1/messages/count_tokens`: the input token count, or an error reply. */
export type FakeCountTokensHandler = (
  body: FakeCountTokensRequest,
  info: FakeRequestInfo,
) => number | FakeErrorReply | Promise<number | FakeErrorReply>;

export interface FakeAnthropicOptions {
  /** @default {@link defaultFakeReply} */
  handler?: FakeAnthropicHandler;
  /**
   * Answers `count_tokens`. It should agree with the `usage.input_tokens` the replies report for the same request, as
   * the real API does.
   * @default {@link defaultFakeTokenCount}
   */
  countTokens?: FakeCountTokensHandler;
  /** The secret thinking blocks are signed with. @default a random one: blocks of another server are refused */
  thinkingSecret?: string;
  /**
   * The ids `GET /v1/models` lists (paged as the API pages: `limit`, `after_id`, `has_more`, `last_id`); `null`: the
   * route does not exist (404), as on a server that only speaks `/v1/messages`.
   * @default {@link FAKE_ANTHROPIC_MODEL_IDS}
   */
  models?: readonly string[] | null;
  /** The most ids one `GET /v1/models` page holds, whatever `limit` asks (tests of paging). @default 1000 */
  maxModelPageSize?: number;
  /**
   * Simulated prompt caching (see `testing/fake-anthropic-cache`): when given, every reply's `usage` input fields are
   * what the cache bills, whatever the handler said.
   */
  promptCache?: FakePromptCache;
}

export interface FakeAnthropic {
  /** Base URL to pass as `baseURL` (no trailing slash; the SDK appends `/v1/messages`). */
  readonly url: string;
  /** Every `POST /v1/messages` body received, in order, including ones answered with an error. */
  readonly requests: FakeMessagesRequest[];
  /** Every `POST /v1/messages/count_tokens` body received, in order. */
  readonly countRequests: FakeCountTokensRequest[];
  /** How many requests the client abandoned (disconnected) before their reply was sent. */
  readonly disconnects: number;
  /** Signs and checks this server's thinking blocks (for tests that forge or alter one). */
  readonly thinking: ThinkingSigner;
  /** How many `GET /v1/models` requests it answered (each page counts). */
  readonly modelListRequests: number;
  setHandler(handler: FakeAnthropicHandler): void;
  setCountTokens(handler: FakeCountTokensHandler): void;
  close(): Promise<void>;
}

const ERROR_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  500: 'api_error',
  529: 'overloaded_error',
};

/**
 * The reply when no handler is set: `end_turn` with the text "ok", input tokens roughly counted from the request
 * (4 characters a token), 1 output token.
 */
export function defaultFakeReply(body: FakeMessagesRequest): FakeMessageReply {
  return {
    text: 'ok',
    usage: {
      input_tokens: defaultFakeTokenCount(body),
      output_tokens: 1,
    },
  };
}

/** The input tokens the fake counts for a request when not told otherwise: 4 characters a token, at least 1. */
export function defaultFakeTokenCount(body: FakeCountTokensRequest): number {
  // Prompt-cache markers and a system prompt sent as blocks do not change what is counted, as with the real API.
  const system = Array.isArray(body.system)
    ? (body.system as Array<{ text?: unknown }>)
        .map((block) => (typeof block.text === 'string' ? block.text : ''))
        .join('')
    : (body.system ?? '');
  const chars = JSON.stringify([system, body.messages, body.tools ?? []], (key, value: unknown) =>
    key === 'cache_control' ? undefined : value,
  ).length;
  return Math.max(1, Math.ceil(chars / 4));
}

/** A handler that plays `replies` in order, one per request, then falls back to {@link defaultFakeReply}. */
export function fakeReplies(...replies: FakeReply[]): FakeAnthropicHandler {
  const queue = [...replies];
  return (body) => queue.shift() ?? defaultFakeReply(body);
}

/** Starts the fake on 127.0.0.1 on a free port. */
export async function startFakeAnthropic(options: FakeAnthropicOptions = {}): Promise<FakeAnthropic> {
  let handler: FakeAnthropicHandler = options.handler ?? defaultFakeReply;
  let countTokens: FakeCountTokensHandler = options.countTokens ?? defaultFakeTokenCount;
  const requests: FakeMessagesRequest[] = [];
  const countRequests: FakeCountTokensRequest[] = [];
  const signer = thinkingSigner(options.thinkingSecret);
  let disconnects = 0;
  let modelListRequests = 0;
  let nextId = 1;
  const modelIds = options.models === undefined ? FAKE_ANTHROPIC_MODEL_IDS : options.models;

  const server = createServer((req, res) => {
    void serve(req, res).catch((error: unknown) => {
      // A broken handler is a test bug: answer once, and tell the SDK not to retry it.
      if (!res.headersSent) {
        sendError(
          res,
          {
            status: 500,
            type: 'api_error',
            message: `fake handler failed: ${String(error)}`,
          },
          {
            'x-should-retry': 'false',
          },
        );
      } else {
        res.destroy();
      }
    });
  });

  async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const disconnected = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) {
        disconnects += 1;
        disconnected.abort();
      }
    });
    const raw = await readBody(req);
    const path = (req.url ?? '/').split('?')[0];
    const counting = path === '/v1/messages/count_tokens';
    if (req.method === 'GET' && path === '/v1/models' && modelIds !== null) {
      modelListRequests += 1;
      const params = new URL(req.url ?? '/', 'http://fake').searchParams;
      sendJson(res, 200, modelPage(modelIds, params, options.maxModelPageSize ?? 1000));
      return;
    }
    if (req.method !== 'POST' || (path !== '/v1/messages' && !counting)) {
      sendError(res, {
        status: 404,
        message: `${req.method ?? 'GET'} ${path ?? '/'} is not served by the fake`,
      });
      return;
    }
    const apiKey = apiKeyOf(req.headers);
    if (apiKey === undefined) {
      sendError(res, { status: 401, message: 'an x-api-key or Authorization: Bearer header is required' });
      return;
    }
    if (!req.headers['anthropic-version']) {
      sendError(res, {
        status: 400,
        message: 'anthropic-version header is required',
      });
      return;
    }
    let body: FakeMessagesRequest;
    try {
      body = JSON.parse(raw) as FakeMessagesRequest;
    } catch {
      sendError(res, {
        status: 400,
        message: 'request body is not valid JSON',
      });
      return;
    }
    if (counting) {
      const index = countRequests.push(body) - 1;
      if (typeof body.model !== 'string' || !Array.isArray(body.messages)) {
        sendError(res, { status: 400, message: 'model and messages are required' });
        return;
      }
      const refusal = thinkingRefusal(body, signer);
      if (refusal !== undefined) {
        sendError(res, { status: 400, message: refusal });
        return;
      }
      const counted = await countTokens(body, { index, headers: req.headers, apiKey, signal: disconnected.signal });
      if (disconnected.signal.aborted) return;
      if (typeof counted === 'number') sendJson(res, 200, { input_tokens: counted });
      else sendError(res, counted, counted.headers);
      return;
    }
    const index = requests.push(body) - 1;
    if (typeof body.model !== 'string' || !Array.isArray(body.messages) || typeof body.max_tokens !== 'number') {
      sendError(res, {
        status: 400,
        message: 'model, messages and max_tokens are required',
      });
      return;
    }
    if (body.stream === true) {
      sendError(res, {
        status: 400,
        message: 'the fake does not support streaming',
      });
      return;
    }
    const refusal = thinkingRefusal(body, signer);
    if (refusal !== undefined) {
      sendError(res, { status: 400, message: refusal });
      return;
    }

    let cacheLookup: ReturnType<FakePromptCache['lookup']> | undefined;
    if (options.promptCache !== undefined) {
      try {
        // Looked up as the request arrives: an entry whose writer has not started answering is not there yet.
        cacheLookup = options.promptCache.lookup(body);
      } catch (error) {
        sendError(res, { status: 400, message: error instanceof Error ? error.message : String(error) });
        return;
      }
    }
    const reply = await handler(body, {
      index,
      headers: req.headers,
      apiKey,
      signal: disconnected.signal,
    });
    if (reply.delayMs !== undefined && reply.delayMs > 0) await delay(reply.delayMs, disconnected.signal);
    if (disconnected.signal.aborted) return;

    if ('status' in reply) {
      const headers: Record<string, string> = { ...reply.headers };
      if (reply.retryAfter !== undefined) headers['retry-after'] = String(reply.retryAfter);
      if (reply.retryAfterMs !== undefined) headers['retry-after-ms'] = String(reply.retryAfterMs);
      sendError(res, reply, headers);
      return;
    }
    const scripted = (reply.content ?? (reply.text === undefined ? [] : [{ type: 'text', text: reply.text }])).map(
      (block) => (block.type === 'tool_use' ? { ...block, id: block.id ?? `toolu_fake_${nextId++}` } : block),
    );
    const content = withThinking(scripted, body, reply, signer, index);
    const fallbackUsage = defaultFakeReply(body).usage;
    const usage: FakeUsage = {
      input_tokens: reply.usage?.input_tokens ?? fallbackUsage?.input_tokens ?? 1,
      output_tokens: reply.usage?.output_tokens ?? 1,
      cache_creation_input_tokens:
        reply.usage?.cache_creation_input_tokens === undefined ? 0 : reply.usage.cache_creation_input_tokens,
      cache_read_input_tokens:
        reply.usage?.cache_read_input_tokens === undefined ? 0 : reply.usage.cache_read_input_tokens,
      ...cacheLookup?.usage,
    };
    // The response starts now: from here on other requests can read what this one wrote.
    cacheLookup?.commit();
    const stopReason =
      reply.stopReason !== undefined
        ? reply.stopReason
        : content.some((block) => block.type === 'tool_use')
          ? 'tool_use'
          : 'end_turn';
    sendJson(
      res,
      200,
      {
        id: `msg_fake_${nextId++}`,
        type: 'message',
        role: 'assistant',
        model: reply.model ?? body.model,
        content,
        stop_reason: stopReason,
        stop_sequence: null,
        usage,
      },
      reply.headers,
    );
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    countRequests,
    get disconnects() {
      return disconnects;
    },
    thinking: signer,
    get modelListRequests() {
      return modelListRequests;
    },
    setHandler(next) {
      handler = next;
    },
    setCountTokens(next) {
      countTokens = next;
    },
    close() {
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        // Keep-alive sockets of the SDK's fetch would hold close() open.
        server.closeAllConnections();
      });
    },
  };
}

/** One page of `GET /v1/models`, as the API pages it (newest first; `after_id` continues after an id). */
function modelPage(ids: readonly string[], params: URLSearchParams, maxPageSize: number): unknown {
  const limit = Math.min(maxPageSize, Math.max(1, Number.parseInt(params.get('limit') ?? '20', 10) || 20));
  const after = params.get('after_id');
  const start = after === null ? 0 : ids.indexOf(after) + 1;
  const page = ids.slice(start, start + limit);
  return {
    data: page.map((id) => ({
      type: 'model',
      id,
      display_name: id,
      created_at: '2026-01-01T00:00:00Z',
    })),
    has_more: start + limit < ids.length,
    first_id: page[0] ?? null,
    last_id: page[page.length - 1] ?? null,
  };
}

function apiKeyOf(headers: IncomingHttpHeaders): string | undefined {
  const header = headers['x-api-key'];
  const key = typeof header === 'string' ? header : /^Bearer\s+(.+)$/i.exec(headers.authorization ?? '')?.[1];
  return key === undefined || key.trim() === '' ? undefined : key.trim();
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function delay(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve();
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

function sendError(res: ServerResponse, reply: FakeErrorReply, headers: Record<string, string> = {}): void {
  const type = reply.type ?? ERROR_TYPES[reply.status] ?? (reply.status >= 500 ? 'api_error' : 'invalid_request_error');
  const message = reply.message ?? `fake ${type} (${reply.status})`;
  sendJson(res, reply.status, { type: 'error', error: { type, message } }, { ...reply.headers, ...headers });
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    'request-id': `req_fake_${Math.random().toString(36).slice(2, 10)}`,
    ...headers,
  });
  res.end(text);
}
