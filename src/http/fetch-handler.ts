/**
 * @module http/fetch-handler
 * The one router of the HTTP service (README.md#http-service): a function from a WHATWG `Request` to a `Response`. Every Node
 * server adapter (`createNodeHandler`, Hono, anything that speaks fetch) only converts to and from it.
 *
 * Order of checks, so that cheap refusals come first and nothing is read for a caller who may not call:
 * route (404 / unmatched) -> method (405) -> CORS preflight -> API key (401) -> rate limit (429) -> agent id (404)
 * -> body: declared size (413), media type (415), streamed size (413), JSON and schema (400) -> the runtime.
 */
import { z } from 'zod';
import type { AccountInfo } from '../core/accounts.js';
import type { AgentRuntime } from '../core/agent-runtime.js';
import { isoTime } from '../base/clock.js';
import { AgentStatusSchema, CreateAgentBodySchema } from '../core/schemas.js';
import { parseArgs } from '../base/validate.js';
import { AgentryError } from '../errors.js';
import { MAX_NEEDLE_CHARS } from '../storage/search.js';
import { artifactIdOf, artifactResponse } from './artifacts.js';
import { stderrAudit, type AuditSink } from './audit.js';
import { DEFAULT_FAILED_AUTH_LIMIT, FailedAuthGuard } from './auth-guard.js';
import { clientAddressOf } from './client-address.js';
import { declaresBody, isJsonContentType, parseJsonBody, readBody } from './body.js';
import {
  DEFAULT_EVENT_STREAM_LIMITS,
  EventStreamRegistry,
  type EventStreamLimits,
  type StreamInfo,
} from './event-streams.js';
import { agentEventStream } from './events.js';
import { assertIdempotencyKey, IdempotentCreates, requestHash } from './idempotency.js';
import { createConsole, type ConsoleOptions } from './console/index.js';
import { buildOpenApiDocument } from './openapi.js';
import { mountMetrics, operationsResponse, type OperationsRoute } from './operations.js';
import { accountBucket, agentIdOf, authenticate, createPollResponder, requestIdOf } from './poll.js';
import { TokenBuckets, type RateLimitOptions } from './rate-limit.js';
import {
  errorResponse,
  jsonResponse,
  jsonTextResponse,
  responseForError,
  toResponse,
  type PlainResponse,
} from './responses.js';

/** Default token bucket per API key: bursts of 120 requests, then 20 a second (1,200 a minute). */
export const DEFAULT_RATE_LIMIT: RateLimitOptions = Object.freeze({ capacity: 120, refillPerSecond: 20 });

/** Default body limit: 1 MiB. */
export const DEFAULT_BODY_LIMIT_BYTES = 1024 * 1024;

const CORS_ALLOWED_HEADERS = 'content-type, x-api-key, idempotency-key, x-request-id, last-event-id';
const CORS_EXPOSED_HEADERS = 'x-request-id, retry-after, allow, idempotent-replayed, content-disposition, etag';

const FetchHandlerOptionsSchema = z
  .object({
    basePath: z
      .string()
      .regex(
        /^(?:\/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)*$/,
        'must be empty or start with "/" and not end with "/", e.g. "/v1"',
      )
      .default(''),
    bodyLimitBytes: z
      .number()
      .int()
      .positive()
      .max(1024 * 1024 * 1024)
      .default(DEFAULT_BODY_LIMIT_BYTES),
    rateLimit: z
      .union([
        z.literal(false),
        z.object({ capacity: z.number().int().positive(), refillPerSecond: z.number().positive().finite() }).strict(),
      ])
      .default(DEFAULT_RATE_LIMIT),
    failedAuthLimit: z
      .union([
        z.literal(false),
        z.object({ capacity: z.number().int().positive(), refillPerSecond: z.number().positive().finite() }).strict(),
      ])
      .default(DEFAULT_FAILED_AUTH_LIMIT),
    cors: z
      .union([
        z.literal(false),
        z
          .object({
            origins: z.union([
              z.literal('*'),
              z
                .array(z.string().regex(/^https?:\/\/[^/\s]+$/, 'must be an origin like "https://app.example.com"'))
                .min(1),
            ]),
            maxAgeSeconds: z.number().int().min(0).default(600),
          })
          .strict(),
      ])
      .default(false),
    eventStreams: z
      .object({
        maxPerKey: z.number().int().positive().default(DEFAULT_EVENT_STREAM_LIMITS.maxPerKey),
        maxLifetimeMs: z.number().int().positive().default(DEFAULT_EVENT_STREAM_LIMITS.maxLifetimeMs),
        recheckMs: z.number().int().min(10).max(5000).default(DEFAULT_EVENT_STREAM_LIMITS.recheckMs),
        slowReaderBytes: z.number().int().min(1024).default(DEFAULT_EVENT_STREAM_LIMITS.slowReaderBytes),
      })
      .strict()
      .default(DEFAULT_EVENT_STREAM_LIMITS),
    onError: z
      .custom<(error: unknown, context: { request_id: string }) => void>(
        (v) => typeof v === 'function',
        'must be a function',
      )
      .optional(),
    audit: z.custom<AuditSink>((v) => typeof v === 'function', 'must be a function').default(() => stderrAudit),
    now: z.custom<() => number>((v) => typeof v === 'function', 'must be a function').optional(),
    mcp: z.boolean().default(false),
    console: z
      .custom<boolean | ConsoleOptions>(
        (v) => typeof v === 'boolean' || (typeof v === 'object' && v !== null),
        'must be true, false or the console options',
      )
      .default(false),
    metrics: z.boolean().default(false),
    onResponse: z.custom<(info: ResponseInfo) => void>((v) => typeof v === 'function', 'must be a function').optional(),
    onStream: z.custom<(info: StreamInfo) => void>((v) => typeof v === 'function', 'must be a function').optional(),
  })
  .strict();

/** What {@link FetchHandlerOptions.onResponse} hears of each answered request (for access logs). */
export interface ResponseInfo {
  request_id: string;
  method: string;
  /**
   * The route's name (`create`, `get`, `list`, …, `healthz`, `metrics`, `console`), or `unmatched`; `busy` for a request
   * the server's thread refused because too many request bodies were being received.
   */
  route: string;
  status: number;
  duration_ms: number;
  /** `poll`: answered on the HTTP server's own thread (server.ts), from its read-only connection. */
  thread?: 'poll';
}

/** Options of {@link createFetchHandler} (and {@link createNodeHandler}). */
export interface FetchHandlerOptions {
  /**
   * Prefix of every route, e.g. `'/v1'` serves `/v1/api/agents`. When a framework strips a mount path itself
   * (Express `app.use('/x', handler)`), leave this empty.
   * @default ''
   */
  basePath?: string;
  /**
   * Largest request body accepted, in bytes; both the declared `Content-Length` and the bytes actually streamed are
   * checked. Larger bodies get 413 `payload_too_large`.
   * @default 1_048_576 (1 MiB)
   */
  bodyLimitBytes?: number;
  /**
   * Token bucket per API key (in memory, per process); an empty bucket answers 429 `rate_limited` with
   * `Retry-After`. `false` turns it off.
   * @default { capacity: 120, refillPerSecond: 20 }
   * @example createFetchHandler(runtime, { rateLimit: { capacity: 10, refillPerSecond: 1 } })
   */
  rateLimit?: RateLimitOptions | false;
  /**
   * Token bucket of failed authentications (missing, unknown or lapsed key) per client address. An empty bucket
   * answers 429 `rate_limited` before the key is looked up, except for keys that authenticated recently, so clients
   * sharing an address (a proxy) with a failing one keep working. `false` turns it off. The address is the
   * connection's peer, as the Node adapters see it; other adapters tell it with {@link withClientAddress}.
   * @default { capacity: 30, refillPerSecond: 0.5 }
   */
  failedAuthLimit?: RateLimitOptions | false;
  /**
   * CORS for browsers. Off by default: no CORS headers, and OPTIONS is 405.
   * @default false
   * @example createFetchHandler(runtime, { cors: { origins: ['https://app.example.com'] } })
   */
  cors?: false | { origins: '*' | string[]; maxAgeSeconds?: number };
  /**
   * Limits of `GET /api/agents/{id}/events`: streams per key, a lifetime (then the client reconnects with
   * `Last-Event-ID`), how often the key and subscription are checked again (a stream ends within that long of its
   * key's deletion or its subscription's end), and how far a reader may fall behind before it is dropped.
   * @default { maxPerKey: 16, maxLifetimeMs: 1_800_000, recheckMs: 1000, slowReaderBytes: 65_536 }
   * @example createFetchHandler(runtime, { eventStreams: { maxPerKey: 4 } })
   */
  eventStreams?: Partial<EventStreamLimits>;
  /**
   * Called with every unexpected error (a bug or an outage), which the client sees only as 500 `internal_error`.
   * @default logs to `console.error`
   */
  onError?: (error: unknown, context: { request_id: string }) => void;
  /**
   * Receives an audit entry for each API key minted or deleted in the console (who, which key, from where; never the
   * key's text).
   * @default one JSON line on stderr per entry
   * @example createFetchHandler(runtime, { console: true, audit: (e) => logger.info(e, 'audit') })
   */
  audit?: AuditSink;
  /** Milliseconds since the epoch, for the rate limiter. For tests. @default Date.now */
  now?: () => number;
  /**
   * Serves agentry's MCP tools (`create_agent`, `get_agent`, … as `agentry mcp` does) at `{basePath}/mcp` over
   * Streamable HTTP (stateless: POST with JSON answers). Like every route it needs an `x-api-key`, is rate limited,
   * and sees only the key's account's agents.
   * @default false
   * @example createFetchHandler(runtime, { mcp: true }) // MCP clients connect to http://host:8787/mcp
   */
  mcp?: boolean;
  /**
   * Serves the console (a settings area and a live dashboard in the browser) at `{basePath}/console`: sign in with an
   * API key, or pass `authenticate` to sign in through your own app. See {@link ConsoleOptions}. With it, `GET
   * {basePath}/` redirects there (a person opening the server's address expects a page, not a JSON 404).
   * @default false
   * @example createFetchHandler(runtime, { console: true }) // open http://host:8787/console
   */
  console?: boolean | ConsoleOptions;
  /**
   * Serves the runtime's Prometheus metrics at `{basePath}/metrics`, without an API key (mount the handler where
   * only your scraper reaches it, or use `agentry serve --metrics-port`). `/healthz` and `/readyz` are always served.
   * @default false
   */
  metrics?: boolean;
  /**
   * Called after each request the router answered: request id, method, route, status, duration (access logs). Every
   * request: the polling fast path (`plainGet`) and the console's calls too.
   */
  onResponse?: (info: ResponseInfo) => void;
  /** Called when an event stream opens and when it ends, with how long it lasted and why it ended (access logs). */
  onStream?: (info: StreamInfo) => void;
}

/** The router as a function: `Request -> Response`. */
export interface FetchHandler {
  (request: Request): Promise<Response>;
  /**
   * Methods served at `pathname` (e.g. `['GET', 'DELETE']`), or `null` when the path is not one of agentry's.
   * Adapters use it to answer requests they cannot turn into a `Request`.
   */
  allowedMethods(pathname: string): readonly string[] | null;
  /**
   * The fast path of `GET {basePath}/api/agents/{id}`, the route clients poll: the same checks and answer as the
   * router, from a path and a header lookup instead of a `Request`, as plain data. Resolves to null for anything
   * else (and when CORS is on), which then goes through the router. For server adapters.
   */
  plainGet(
    pathname: string,
    header: (name: string) => string | null,
    /** The client's address, for the limit on failed authentication. */
    address?: string,
  ): Promise<PlainResponse | null>;
}

type RouteName =
  | 'create'
  | 'list'
  | 'get'
  | 'delete'
  | 'pause'
  | 'resume'
  | 'events'
  | 'artifact'
  | 'openapi'
  | 'mcp'
  | 'root'
  | OperationsRoute;

interface RouteMatch {
  methods: Readonly<Record<string, RouteName>>;
  /** The raw id path segment, for routes under /api/agents/{id}. */
  idSegment?: string;
  /** The raw artifact id path segment, for /api/agents/{id}/artifacts/{artifact_id}. */
  artifactSegment?: string;
  /** A path in agentry's namespace that names no route. */
  unknown?: true;
}

/** Responses for paths outside agentry's routes: adapters pass these on (`next()` in Express) instead of sending. */
const unmatchedResponses = new WeakSet<Response>();

/**
 * True for the 404 a fetch handler returns for a path that is not one of its routes. Frameworks with a "next
 * handler" of their own can fall through on it; otherwise it is an ordinary 404 `not_found` response.
 *
 * @example
 * app.use('*', async (c, next) => {
 *   const response = await agentry(c.req.raw);
 *   return isUnmatchedResponse(response) ? next() : response;
 * });
 */
export function isUnmatchedResponse(response: Response): boolean {
  return unmatchedResponses.has(response);
}

const ListQuerySchema = z
  .object({
    status: AgentStatusSchema.optional(),
    limit: z
      .string()
      .regex(/^\d{1,4}$/, 'must be an integer from 1 to 1000')
      .transform(Number)
      .pipe(z.number().int().min(1, 'must be an integer from 1 to 1000').max(1000, 'must be an integer from 1 to 1000'))
      .optional(),
    cursor: z.string().min(1).max(200).optional(),
    parent_id: z.uuid('must be an agent id').optional(),
    roots: z.enum(['true', 'false'], 'must be true or false').optional(),
    q: z.string().min(1).max(MAX_NEEDLE_CHARS, `must be at most ${MAX_NEEDLE_CHARS} characters`).optional(),
  })
  .strip()
  .refine((q) => !(q.roots === 'true' && q.parent_id !== undefined), 'roots=true and parent_id exclude each other');

/** The answer to a JSON-RPC batch at `/mcp`: 400 with a JSON-RPC error (Invalid Request). */
function batchRefused(): Response {
  return jsonResponse(400, {
    jsonrpc: '2.0',
    id: null,
    error: {
      code: -32600,
      message: 'JSON-RPC batches are not supported: send one message per request (MCP 2025-06-18 removed batching)',
    },
  });
}

/** Pause and resume take no parameters: an empty body, or `{}`. */
const EmptyBodySchema = z.object({}).strict();

/**
 * Creates the router of the HTTP service. Routes (under `basePath`):
 *
 * | Route | Success |
 * |---|---|
 * | POST /api/agents | 201, the agent in creation form (`Idempotency-Key` supported) |
 * | GET /api/agents | 200, `{data, has_more, next_cursor}` in reduced form; `?status=&limit=&cursor=` |
 * | GET /api/agents/{id} | 200, `{agent, messages}` |
 * | POST /api/agents/{id}/pause, /resume | 200, `{agent}` |
 * | DELETE /api/agents/{id} | 200, `{agent_id, deleted: true}` |
 * | GET /api/agents/{id}/events | 200, Server-Sent Events |
 * | GET, HEAD /api/agents/{id}/artifacts/{artifact_id} | 200, the artifact's bytes as a download |
 * | GET /api/openapi.json | 200, OpenAPI 3.1 (no API key needed) |
 *
 * Every other route needs an `x-api-key` of an account with an active subscription, and sees only that account's
 * agents. Throws `invalid_request` at once for bad options.
 *
 * @example
 * import { AgentRuntime } from 'agentry-runtime';
 * import { createFetchHandler } from 'agentry-runtime/http';
 *
 * const runtime = await AgentRuntime.open();
 * const handle = createFetchHandler(runtime, { basePath: '/v1', cors: { origins: ['https://app.example.com'] } });
 * const response = await handle(new Request('http://localhost/v1/api/agents', { headers: { 'x-api-key': key } }));
 */
export function createFetchHandler(runtime: AgentRuntime, options: FetchHandlerOptions = {}): FetchHandler {
  if (
    typeof runtime !== 'object' ||
    runtime === null ||
    typeof (runtime as Partial<AgentRuntime>).create !== 'function'
  ) {
    throw new AgentryError('invalid_request', 'createFetchHandler: expected `runtime` to be an AgentRuntime');
  }
  const o = parseArgs(FetchHandlerOptionsSchema, options, 'createFetchHandler options');
  const onError =
    o.onError ??
    ((error: unknown, { request_id }: { request_id: string }) =>
      console.error(`agentry http: request ${request_id} failed:`, error));
  const now = o.now ?? Date.now;
  const buckets = o.rateLimit === false ? null : new TokenBuckets(o.rateLimit, now);
  const guard = o.failedAuthLimit === false ? null : new FailedAuthGuard(o.failedAuthLimit, now);
  const streams = new EventStreamRegistry(runtime.accounts, o.eventStreams);
  const idempotent = new IdempotentCreates(runtime, () => isoTime(now()));
  const prefix = `${o.basePath}/api/`;
  let openApiText: string | undefined;
  const consoleRoutes =
    o.console === false
      ? null
      : createConsole(runtime, o.console, {
          basePath: o.basePath,
          bodyLimitBytes: o.bodyLimitBytes,
          now,
          onError,
          // The console's calls draw on the same bucket as the account's API calls.
          takeToken: (accountId) => buckets?.take(accountBucket(accountId)) ?? 0,
          // and its event streams count in the API's registry, with its caps and checks.
          streams,
          audit: o.audit,
          guard,
          onStream: o.onStream,
        });
  if (o.metrics) mountMetrics(runtime);

  function match(pathname: string): RouteMatch | null {
    // Stateless Streamable HTTP: POST only (no server-initiated stream to GET, no session to DELETE).
    if (o.mcp && pathname === `${o.basePath}/mcp`) return { methods: { POST: 'mcp' } };
    if (pathname === `${o.basePath}/healthz`) return { methods: { GET: 'healthz', HEAD: 'healthz' } };
    if (pathname === `${o.basePath}/readyz`) return { methods: { GET: 'readyz', HEAD: 'readyz' } };
    if (o.metrics && pathname === `${o.basePath}/metrics`) return { methods: { GET: 'metrics' } };
    if (consoleRoutes && (pathname === `${o.basePath}/` || pathname === o.basePath)) {
      return { methods: { GET: 'root', HEAD: 'root' } };
    }
    if (!pathname.startsWith(prefix)) return null;
    const rest = pathname.slice(prefix.length);
    if (rest === 'openapi.json') return { methods: { GET: 'openapi' } };
    if (rest !== 'agents' && !rest.startsWith('agents/')) return null;
    const parts = rest.split('/').slice(1);
    if (parts.length > 0 && parts[parts.length - 1] === '') parts.pop(); // one trailing slash is forgiven
    const [id, action, ...extra] = parts;
    if (id === undefined) return { methods: { GET: 'list', POST: 'create' } };
    if (action === 'artifacts' && extra.length === 1 && id !== '' && extra[0] !== '') {
      return { methods: { GET: 'artifact', HEAD: 'artifact' }, idSegment: id, artifactSegment: extra[0]! };
    }
    if (extra.length > 0 || id === '') return { methods: {}, unknown: true };
    if (action === undefined) return { methods: { GET: 'get', DELETE: 'delete' }, idSegment: id };
    if (action === 'pause') return { methods: { POST: 'pause' }, idSegment: id };
    if (action === 'resume') return { methods: { POST: 'resume' }, idSegment: id };
    if (action === 'events') return { methods: { GET: 'events' }, idSegment: id };
    return { methods: {}, unknown: true };
  }

  function corsHeaders(request: Request, route: RouteMatch | null): Record<string, string> {
    if (o.cors === false) return {};
    const origin = request.headers.get('origin');
    const allowed = o.cors.origins === '*' ? '*' : origin !== null && o.cors.origins.includes(origin) ? origin : null;
    const headers: Record<string, string> = { vary: 'Origin' };
    if (allowed === null) return headers;
    headers['access-control-allow-origin'] = allowed;
    headers['access-control-expose-headers'] = CORS_EXPOSED_HEADERS;
    if (request.method === 'OPTIONS' && route) {
      headers['access-control-allow-methods'] = Object.keys(route.methods).join(', ');
      headers['access-control-allow-headers'] = CORS_ALLOWED_HEADERS;
      headers['access-control-max-age'] = String(o.cors.maxAgeSeconds);
    }
    return headers;
  }

  const source = {
    authenticate: (key: string | null) => runtime.accounts.authenticateKey(key),
    getJson: async (id: string, scope: { accountId: string }) => JSON.stringify(await runtime.get(id, scope)),
  };
  const answerPoll = createPollResponder(source, { basePath: o.basePath, buckets, guard, onError });
  const plainGet = async (pathname: string, header: (name: string) => string | null, address?: string) => {
    if (o.cors !== false) return null;
    const startedAt = performance.now();
    const plain = await answerPoll(pathname, header, address);
    if (plain !== null) {
      o.onResponse?.({
        request_id: plain.headers['x-request-id'] ?? '',
        method: 'GET',
        route: 'get',
        status: plain.status,
        duration_ms: Math.round((performance.now() - startedAt) * 100) / 100,
      });
    }
    return plain;
  };

  /** Reads and parses a JSON body; `required: false` accepts an absent or empty body as `undefined`. */
  async function jsonBody(request: Request, required: boolean): Promise<unknown> {
    const declared = request.headers.get('content-length');
    if (declared !== null && /^\s*\d+\s*$/.test(declared) && Number(declared) > o.bodyLimitBytes) {
      throw new AgentryError('payload_too_large', `The request body is larger than ${o.bodyLimitBytes} bytes`);
    }
    if (!required && !declaresBody(request)) return undefined;
    if (!isJsonContentType(request.headers.get('content-type'))) {
      throw new AgentryError('unsupported_media_type', 'Send the body as JSON with Content-Type: application/json');
    }
    const bytes = await readBody(request, o.bodyLimitBytes);
    if (!required && bytes.byteLength === 0) return undefined;
    return parseJsonBody(bytes);
  }

  async function route(request: Request, requestId: string, url: URL, found: RouteMatch): Promise<Response> {
    const name = found.methods[request.method];
    if (name === undefined) {
      const allow = Object.keys(found.methods).join(', ');
      return errorResponse('method_not_allowed', `${request.method} is not allowed here; use ${allow}`, requestId, {
        headers: { allow },
      });
    }
    if (name === 'openapi') {
      openApiText ??= JSON.stringify(buildOpenApiDocument({ basePath: o.basePath, models: runtime.models }));
      return jsonTextResponse(200, openApiText, { 'cache-control': 'public, max-age=300' });
    }
    if (name === 'healthz' || name === 'readyz' || name === 'metrics') {
      return operationsResponse(name, runtime, request.method);
    }
    if (name === 'root') return new Response(null, { status: 302, headers: { location: `${o.basePath}/console` } });

    const auth = await authenticate(
      source,
      buckets,
      request.headers.get('x-api-key'),
      requestId,
      guard,
      clientAddressOf(request),
    );
    if ('status' in auth) return toResponse(auth);
    const scope = { accountId: auth.account.account_id };

    switch (name) {
      case 'list': {
        const query = Object.fromEntries([...url.searchParams.keys()].map((k) => [k, url.searchParams.get(k)]));
        const q = parseArgs(ListQuerySchema, query, 'query');
        const page = await runtime.list({
          ...scope,
          ...(q.status === undefined ? {} : { status: q.status }),
          ...(q.limit === undefined ? {} : { limit: q.limit }),
          ...(q.cursor === undefined ? {} : { cursor: q.cursor }),
          ...(q.roots === 'true' ? { parentId: null } : {}),
          ...(q.parent_id === undefined ? {} : { parentId: q.parent_id }),
          ...(q.q === undefined ? {} : { q: q.q }),
        });
        return jsonResponse(200, page);
      }
      case 'create':
        return create(request, auth.account);
      case 'get':
        return jsonResponse(200, await runtime.get(agentIdOf(found.idSegment!), scope));
      case 'delete':
        return jsonResponse(200, await runtime.delete(agentIdOf(found.idSegment!), scope));
      case 'pause':
      case 'resume': {
        const id = agentIdOf(found.idSegment!);
        const body = await jsonBody(request, false);
        if (body !== undefined) parseArgs(EmptyBodySchema, body, `${name} body`);
        const agent = name === 'pause' ? await runtime.pause(id, scope) : await runtime.resume(id, scope);
        return jsonResponse(200, { agent });
      }
      case 'artifact': {
        const { artifact, data } = await runtime.getArtifact(
          agentIdOf(found.idSegment!),
          artifactIdOf(found.artifactSegment!),
          scope,
        );
        return artifactResponse(artifact, data, {
          method: request.method,
          ifNoneMatch: request.headers.get('if-none-match'),
        });
      }
      case 'mcp': {
        const body = await jsonBody(request, true);
        // One JSON-RPC message per request, so that the rate limit counts every operation: a batch of 100
        // create_agent calls would otherwise cost one token. MCP 2025-06-18 removed batching from the protocol.
        if (Array.isArray(body)) return batchRefused();
        // The SDK's server side loads on the first MCP request, not with the router.
        const { handleAgentryMcpRequest } = await import('../mcp/agentry-server.js');
        // A create_agent without `_meta.traceparent` joins the trace of the HTTP request's own header, if any.
        const traceparent = request.headers.get('traceparent')?.trim().slice(0, 256) || undefined;
        return handleAgentryMcpRequest(
          runtime,
          { ...scope, ...(traceparent === undefined ? {} : { traceparent }) },
          request,
          body,
        );
      }
      case 'events': {
        const id = agentIdOf(found.idSegment!);
        const ticket = streams.open(auth.keyHash, auth.account.account_id);
        if (ticket === null) {
          return errorResponse(
            'rate_limited',
            `This API key has ${o.eventStreams.maxPerKey} event streams open, the most it may; close one first`,
            requestId,
            { headers: { 'retry-after': '5' } },
          );
        }
        const openedAt = performance.now();
        const response = await agentEventStream(
          runtime,
          id,
          auth.account.account_id,
          request.headers.get('last-event-id'),
          request.signal,
          ticket,
          o.eventStreams.slowReaderBytes,
          (reason) =>
            o.onStream?.({
              event: 'close',
              request_id: requestId,
              agent_id: id,
              reason,
              duration_ms: Math.round(performance.now() - openedAt),
            }),
        );
        o.onStream?.({ event: 'open', request_id: requestId, agent_id: id });
        return response;
      }
    }
  }

  async function create(request: Request, account: AccountInfo): Promise<Response> {
    const key = request.headers.get('idempotency-key');
    if (key !== null) assertIdempotencyKey(key);
    const raw = await jsonBody(request, true);
    const body = parseArgs(CreateAgentBodySchema, raw, 'request body');
    // The caller's W3C trace context: the agent's spans join the caller's trace (a malformed one is ignored).
    const traceparent = request.headers.get('traceparent')?.trim().slice(0, 256) || undefined;
    const run = async () => {
      const created = await runtime.create({
        goal: body.goal,
        accountId: account.account_id,
        ...(traceparent === undefined ? {} : { traceparent }),
        ...(body.model === undefined ? {} : { model: body.model }),
        ...(body.max_credits === undefined ? {} : { maxCredits: body.max_credits }),
      });
      return { status: 201, body: JSON.stringify(created) };
    };
    if (key === null) {
      const result = await run();
      return jsonTextResponse(result.status, result.body);
    }
    const result = await idempotent.run(account.account_id, key, requestHash(raw), run, async (text) => {
      const { agent_id } = JSON.parse(text) as { agent_id: string };
      await runtime.delete(agent_id, { accountId: account.account_id }).catch(() => {});
    });
    if (result.replayed) await assertStillExists(result.body, account.account_id);
    return jsonTextResponse(result.status, result.body, result.replayed ? { 'idempotent-replayed': 'true' } : {});
  }

  /**
   * A replay answers the agent the key created, so that agent must still exist: after it was deleted the key answers
   * 404 rather than 201 with a dead agent, and it does not create another (the key promised one creation at most).
   */
  async function assertStillExists(createdBody: string, accountId: string): Promise<void> {
    const { agent_id } = JSON.parse(createdBody) as { agent_id: string };
    const exists = await runtime.get(agent_id, { accountId }).then(
      () => true,
      (error: unknown) => {
        if (error instanceof AgentryError && error.code === 'not_found') return false;
        throw error;
      },
    );
    if (!exists) {
      throw new AgentryError(
        'not_found',
        `The agent ${agent_id} this Idempotency-Key created was deleted; send a new key to create another`,
      );
    }
  }

  const handler = async (request: Request): Promise<Response> => {
    const startedAt = performance.now();
    const requestId = requestIdOf(request.headers.get('x-request-id'));
    let found: RouteMatch | null = null;
    let response: Response;
    try {
      const url = new URL(request.url);
      if (consoleRoutes?.owns(url.pathname)) {
        response = await consoleRoutes.handle(request, url, requestId);
        response.headers.set('x-request-id', requestId);
        o.onResponse?.({
          request_id: requestId,
          method: request.method,
          route: 'console',
          status: response.status,
          duration_ms: Math.round((performance.now() - startedAt) * 100) / 100,
        });
        return response;
      }
      found = match(url.pathname);
      if (found === null) {
        response = errorResponse(
          'not_found',
          `No route for ${request.method} ${url.pathname.slice(0, 200)}`,
          requestId,
        );
        unmatchedResponses.add(response);
      } else if (found.unknown) {
        response = errorResponse(
          'not_found',
          `No route for ${request.method} ${url.pathname.slice(0, 200)}`,
          requestId,
        );
      } else if (request.method === 'OPTIONS' && o.cors !== false) {
        response = new Response(null, { status: 204 });
      } else {
        response = await route(request, requestId, url, found);
      }
    } catch (error) {
      response = responseForError(error, requestId, onError);
    }
    response.headers.set('x-request-id', requestId);
    for (const [name, value] of Object.entries(corsHeaders(request, found))) response.headers.set(name, value);
    o.onResponse?.({
      request_id: requestId,
      method: request.method,
      route: found?.methods[request.method] ?? 'unmatched',
      status: response.status,
      duration_ms: Math.round((performance.now() - startedAt) * 100) / 100,
    });
    return response;
  };

  return Object.assign(handler, {
    allowedMethods(pathname: string): readonly string[] | null {
      if (consoleRoutes?.owns(pathname)) return consoleRoutes.allowedMethods(pathname);
      const found = match(pathname);
      return found === null ? null : Object.keys(found.methods);
    },
    plainGet,
  });
}
