/**
 * @module agentry-runtime/client
 * A typed client for agentry's HTTP service (README.md#http-service), on `fetch`. It has no dependency on the runtime:
 * it can run in a browser, a worker or another Node process. Failures are {@link AgentryClientError}s carrying the
 * server's error `code`, the HTTP `status` and the `request_id` to quote in a bug report.
 *
 * @example
 * import { AgentryClient } from 'agentry-runtime/client';
 *
 * const client = new AgentryClient({ baseUrl: 'http://127.0.0.1:8787', apiKey: process.env.AGENTRY_API_KEY! });
 * const { agent_id } = await client.create({ goal: 'Find three facts about Lyon' });
 * const { agent, messages } = await client.waitUntilDone(agent_id);
 * console.log(agent.status, messages.at(-1)?.text);
 */
import type { Agent, AgentCreated, AgentList, AgentStatus, AgentWithMessages, Message } from '../core/schemas.js';

export type {
  Agent,
  AgentCreated,
  AgentList,
  AgentStatus,
  AgentSummary,
  AgentWithMessages,
  ArtifactInfo,
  Message,
} from '../core/schemas.js';

/** Options of {@link AgentryClient}. */
export interface AgentryClientOptions {
  /** Where the service is, with the server's base path if it has one, e.g. `https://agents.example.com/v1`. */
  baseUrl: string;
  /** An API key (`agk_…`), sent as `x-api-key`. */
  apiKey: string;
  /** The `fetch` to use. @default globalThis.fetch */
  fetch?: typeof fetch;
  /** Extra headers sent with every request. */
  headers?: Record<string, string>;
}

/** Body of {@link AgentryClient.create}. */
export interface CreateAgentInput {
  goal: string;
  /** A public model id such as `svc-1-lite` or `svc-1-ultra`. @default the server's default model */
  model?: string;
  /** Cap, in credits, on what this agent and its sub-agents may spend. */
  max_credits?: number;
}

export interface RequestOptions {
  signal?: AbortSignal;
}

export interface CreateOptions extends RequestOptions {
  /** Retrying with the same key and body returns the first result instead of creating a second agent. */
  idempotencyKey?: string;
}

export interface ListOptions extends RequestOptions {
  status?: AgentStatus;
  /** 1..1000. @default 50 */
  limit?: number;
  /** `next_cursor` of the previous page. */
  cursor?: string;
  /** Only this agent's children. */
  parentId?: string;
  /** Only root agents (no parent). */
  roots?: boolean;
  /** Only agents whose goal contains this text (ASCII letters in either case; 1..200 characters). */
  q?: string;
}

/** Options of {@link AgentryClient.waitUntilDone}. */
export interface WaitOptions extends RequestOptions {
  /** First wait between polls, in milliseconds. @default 2000 */
  intervalMs?: number;
  /** Longest wait between polls; each wait is 1.5 times the last, up to this. @default 30_000 */
  maxIntervalMs?: number;
  /** Statuses that end the wait. @default ['COMPLETED', 'FAILED', 'PAUSED', 'OUT_OF_CREDITS'] */
  until?: readonly AgentStatus[];
}

/** An artifact's bytes, as {@link AgentryClient.getArtifact} downloads them. */
export interface ArtifactDownload {
  /** The name the tool gave it, from `Content-Disposition`; null when the answer named none. */
  name: string | null;
  /** Its media type (`Content-Type`); `application/octet-stream` when the tool's was not a well-formed one. */
  mime_type: string;
  data: Uint8Array;
}

/** One Server-Sent Event of GET /api/agents/{id}/events. */
export type AgentEvent =
  | { type: 'status' | 'progress'; agent: Agent }
  | { type: 'message'; id: string; message: Message }
  | { type: 'deleted'; agent_id: string };

/** Statuses an agent does not leave on its own. */
export const SETTLED_STATUSES: readonly AgentStatus[] = ['COMPLETED', 'FAILED', 'PAUSED', 'OUT_OF_CREDITS'];

/**
 * An error answer of the service, or a failure to reach it.
 * `code` is the server's error code (`not_found`, `invalid_state`, …), `network_error` when no answer came, or
 * `http_error` for an answer without agentry's error body (a proxy's 502 page).
 */
export class AgentryClientError extends Error {
  readonly code: string;
  /** HTTP status; 0 when no answer came. */
  readonly status: number;
  /** The server's request id (`x-request-id`), when there was an answer. */
  readonly request_id: string | null;
  /** Validation details, when the server sent them. */
  readonly details: unknown;

  constructor(
    code: string,
    message: string,
    options: { status: number; request_id?: string | null; details?: unknown; cause?: unknown },
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.status = options.status;
    this.request_id = options.request_id ?? null;
    this.details = options.details;
  }
}

/**
 * The HTTP client. Methods mirror the routes; pause and resume return the agent itself rather than `{agent}`.
 *
 * @example
 * const client = new AgentryClient({ baseUrl: 'http://127.0.0.1:8787', apiKey });
 * const created = await client.create({ goal: 'Summarise today\'s Hacker News front page' }, { idempotencyKey: 'job-42' });
 * await client.pause(created.agent_id);
 * await client.resume(created.agent_id);
 * for await (const event of client.events(created.agent_id)) console.log(event.type);
 */
export class AgentryClient {
  private readonly baseUrl: string;
  private readonly apiKey: string;
  private readonly fetchImpl: typeof fetch;
  private readonly headers: Record<string, string>;

  constructor(options: AgentryClientOptions) {
    if (typeof options?.baseUrl !== 'string' || !/^https?:\/\//.test(options.baseUrl)) {
      throw new TypeError(`Expected \`baseUrl\` to be an http(s) URL, got ${JSON.stringify(options?.baseUrl)}`);
    }
    if (typeof options.apiKey !== 'string' || options.apiKey === '') {
      throw new TypeError('Expected `apiKey` to be a non-empty string');
    }
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.apiKey = options.apiKey;
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.headers = { ...options.headers };
  }

  /** Creates an agent; it starts at once. */
  create(input: CreateAgentInput, options: CreateOptions = {}): Promise<AgentCreated> {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (options.idempotencyKey !== undefined) headers['idempotency-key'] = options.idempotencyKey;
    return this.request<AgentCreated>('POST', '/api/agents', {
      body: JSON.stringify(input),
      headers,
      signal: options.signal,
    });
  }

  /** The agent (status form) and its transcript. */
  get(agentId: string, options: RequestOptions = {}): Promise<AgentWithMessages> {
    return this.request<AgentWithMessages>('GET', agentPath(agentId), { signal: options.signal });
  }

  /**
   * One page of agents, newest first, in reduced form with the start of the goal and the parent.
   *
   * @example
   * const roots = await client.list({ roots: true });
   * const kids = await client.list({ parentId: roots.data[0]!.agent_id });
   */
  list(options: ListOptions = {}): Promise<AgentList> {
    const query = new URLSearchParams();
    if (options.status !== undefined) query.set('status', options.status);
    if (options.limit !== undefined) query.set('limit', String(options.limit));
    if (options.cursor !== undefined) query.set('cursor', options.cursor);
    if (options.parentId !== undefined) query.set('parent_id', options.parentId);
    if (options.roots === true) query.set('roots', 'true');
    if (options.q !== undefined) query.set('q', options.q);
    const qs = query.size > 0 ? `?${query}` : '';
    return this.request<AgentList>('GET', `/api/agents${qs}`, { signal: options.signal });
  }

  /** Pauses the agent (a no-op if it is already paused). */
  async pause(agentId: string, options: RequestOptions = {}): Promise<Agent> {
    return (await this.request<{ agent: Agent }>('POST', `${agentPath(agentId)}/pause`, { signal: options.signal }))
      .agent;
  }

  /** Resumes a paused or out-of-credits agent (a no-op if it is running). */
  async resume(agentId: string, options: RequestOptions = {}): Promise<Agent> {
    return (await this.request<{ agent: Agent }>('POST', `${agentPath(agentId)}/resume`, { signal: options.signal }))
      .agent;
  }

  /** Deletes the agent with its sub-agents and transcript. */
  delete(agentId: string, options: RequestOptions = {}): Promise<{ agent_id: string; deleted: true }> {
    return this.request('DELETE', agentPath(agentId), { signal: options.signal });
  }

  /**
   * Downloads an artifact one of the agent's tools kept (they are listed in `agent.artifacts` of {@link get}).
   * An unknown artifact, or an agent that is not the key's, is `not_found`.
   *
   * @example
   * import { writeFile } from 'node:fs/promises';
   *
   * const { agent } = await client.get(agentId);
   * for (const { artifact_id } of agent.artifacts ?? []) {
   *   const { name, mime_type, data } = await client.getArtifact(agentId, artifact_id);
   *   console.log(`${name} (${mime_type}, ${data.byteLength} bytes)`);
   *   await writeFile(`./${artifact_id}`, data); // `name` comes from a tool: sanitise it before using it as a path
   * }
   */
  async getArtifact(agentId: string, artifactId: string, options: RequestOptions = {}): Promise<ArtifactDownload> {
    const response = await this.send('GET', `${agentPath(agentId)}/artifacts/${encodeURIComponent(artifactId)}`, {
      signal: options.signal,
    });
    if (!response.ok) throw await errorOf(response);
    let data: Uint8Array;
    try {
      data = new Uint8Array(await response.arrayBuffer());
    } catch (error) {
      if (options.signal?.aborted) throw error;
      throw new AgentryClientError('network_error', `The answer from ${this.baseUrl} was cut short`, {
        status: response.status,
        request_id: response.headers.get('x-request-id'),
        cause: error,
      });
    }
    return {
      name: fileNameOf(response.headers.get('content-disposition')),
      mime_type: response.headers.get('content-type') ?? 'application/octet-stream',
      data,
    };
  }

  /**
   * Polls until the agent's status is one of `until` (by default any status it will not leave on its own), waiting
   * `intervalMs` first and 1.5 times longer after each poll, up to `maxIntervalMs`. Rate-limited polls wait for
   * `Retry-After` and go on; other errors (a deleted agent is `not_found`) and aborts end the wait.
   *
   * @example
   * const { agent } = await client.waitUntilDone(id, { intervalMs: 500, signal: AbortSignal.timeout(60_000) });
   */
  async waitUntilDone(agentId: string, options: WaitOptions = {}): Promise<AgentWithMessages> {
    const until = options.until ?? SETTLED_STATUSES;
    let interval = Math.max(0, options.intervalMs ?? 2000);
    const maxInterval = Math.max(interval, options.maxIntervalMs ?? 30_000);
    for (;;) {
      let result: AgentWithMessages | undefined;
      try {
        result = await this.get(agentId, { ...(options.signal ? { signal: options.signal } : {}) });
      } catch (error) {
        if (!(error instanceof AgentryClientError) || error.code !== 'rate_limited') throw error;
        const retryAfter = Number((error.details as { retry_after?: number } | undefined)?.retry_after ?? 1);
        await sleep(Math.max(interval, retryAfter * 1000), options.signal);
        continue;
      }
      if (until.includes(result.agent.status)) return result;
      await sleep(interval, options.signal);
      interval = Math.min(maxInterval, Math.max(1, interval) * 1.5);
    }
  }

  /**
   * The agent's Server-Sent Events: its transcript so far, its status, then live updates, until it completes, fails
   * or is deleted (or `signal` aborts). Pass the `id` of the last message seen as `lastEventId` to skip what you have.
   * A stream that reaches the server's lifetime cap is reopened from the last message seen, so the events go on
   * without a gap or a repeat; one whose access ended (key deleted, subscription inactive) just ends.
   */
  async *events(agentId: string, options: RequestOptions & { lastEventId?: string } = {}): AsyncGenerator<AgentEvent> {
    let lastEventId = options.lastEventId;
    for (;;) {
      const headers: Record<string, string> = { accept: 'text/event-stream' };
      if (lastEventId !== undefined) headers['last-event-id'] = lastEventId;
      const response = await this.send('GET', `${agentPath(agentId)}/events`, { headers, signal: options.signal });
      if (!response.ok || response.body === null) throw await errorOf(response);
      const decoder = new TextDecoder();
      let buffer = '';
      let reopen = false;
      const reader = response.body.getReader();
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
          for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            if (closedForLifetime(block)) reopen = true;
            const event = parseEvent(block);
            if (!event) continue;
            if (event.type === 'message' && event.id !== '') lastEventId = event.id;
            yield event;
          }
        }
      } finally {
        await reader.cancel().catch(() => {});
      }
      if (!reopen) return;
    }
  }

  private async request<T>(
    method: string,
    path: string,
    init: { body?: string; headers?: Record<string, string>; signal?: AbortSignal | undefined },
  ): Promise<T> {
    const response = await this.send(method, path, init);
    if (!response.ok) throw await errorOf(response);
    try {
      return (await response.json()) as T;
    } catch (error) {
      throw new AgentryClientError('http_error', `The server sent a ${response.status} answer that is not JSON`, {
        status: response.status,
        request_id: response.headers.get('x-request-id'),
        cause: error,
      });
    }
  }

  private async send(
    method: string,
    path: string,
    init: { body?: string; headers?: Record<string, string>; signal?: AbortSignal | undefined },
  ): Promise<Response> {
    try {
      return await this.fetchImpl(this.baseUrl + path, {
        method,
        headers: { ...this.headers, ...init.headers, 'x-api-key': this.apiKey },
        ...(init.body === undefined ? {} : { body: init.body }),
        ...(init.signal === undefined ? {} : { signal: init.signal }),
      });
    } catch (error) {
      if (init.signal?.aborted) throw error;
      throw new AgentryClientError('network_error', `Could not reach ${this.baseUrl}: ${(error as Error).message}`, {
        status: 0,
        cause: error,
      });
    }
  }
}

function agentPath(agentId: string): string {
  return `/api/agents/${encodeURIComponent(agentId)}`;
}

/**
 * The file name of a `Content-Disposition` header: `filename*` (RFC 8187, UTF-8) when present and decodable, else
 * `filename` (quoted or a token), else null.
 */
function fileNameOf(header: string | null): string | null {
  if (header === null) return null;
  let plain: string | null = null;
  // Parameters: name=token or name="quoted \"string\"", separated by semicolons.
  const param = /;\s*([!#$%&'*+.^_`|~0-9A-Za-z-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;\s]*))/g;
  for (const [, rawName, quoted, token] of header.matchAll(param)) {
    const name = rawName!.toLowerCase();
    if (name === 'filename*') {
      const extended = /^utf-8'[^']*'(.*)$/i.exec(token ?? quoted ?? '');
      if (extended) {
        try {
          return decodeURIComponent(extended[1]!);
        } catch {
          // not decodable: fall back to `filename`
        }
      }
    } else if (name === 'filename' && plain === null) {
      plain = quoted === undefined ? (token ?? '') : quoted.replace(/\\(.)/g, '$1');
    }
  }
  return plain;
}

async function errorOf(response: Response): Promise<AgentryClientError> {
  const requestId = response.headers.get('x-request-id');
  let body: unknown;
  try {
    body = await response.json();
  } catch {
    body = undefined;
  }
  const error = (
    body as { error?: { code?: unknown; message?: unknown; request_id?: unknown; details?: unknown } } | undefined
  )?.error;
  if (error && typeof error.code === 'string' && typeof error.message === 'string') {
    const retryAfter = Number(response.headers.get('retry-after'));
    const details =
      error.code === 'rate_limited' && Number.isFinite(retryAfter) && error.details === undefined
        ? { retry_after: retryAfter }
        : error.details;
    return new AgentryClientError(error.code, error.message, {
      status: response.status,
      request_id: typeof error.request_id === 'string' ? error.request_id : requestId,
      details,
    });
  }
  return new AgentryClientError('http_error', `The server answered ${response.status} ${response.statusText}`.trim(), {
    status: response.status,
    request_id: requestId,
  });
}

/** True for the `closed` event a stream ends with at the server's lifetime cap (reconnect and resume). */
function closedForLifetime(block: string): boolean {
  return /^event: ?closed$/m.test(block) && /^data: ?\{"reason":"lifetime"\}$/m.test(block);
}

function parseEvent(block: string): AgentEvent | null {
  let type = 'message';
  let id: string | undefined;
  const data: string[] = [];
  for (const line of block.split('\n')) {
    if (line === '' || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'event') type = value;
    else if (field === 'data') data.push(value);
    else if (field === 'id') id = value;
  }
  if (data.length === 0) return null;
  const payload = JSON.parse(data.join('\n')) as Record<string, unknown>;
  switch (type) {
    case 'status':
    case 'progress':
      return { type, agent: payload as unknown as Agent };
    case 'message':
      return { type: 'message', id: id ?? '', message: payload as unknown as Message };
    case 'deleted':
      return { type: 'deleted', agent_id: String(payload.agent_id) };
    default:
      return null;
  }
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
