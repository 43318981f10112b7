/**
 * @module http/console
 * The console (README.md#the-console): a settings area and a live dashboard in the browser, served by the HTTP adapter at
 * `{basePath}/console` when `createFetchHandler(runtime, { console: true })`. Static files of the package, a strict
 * Content-Security-Policy (no inline script or style, nothing from another origin), and a small JSON API under
 * `console/api/` for the account of a server-side session (or of the embedding app's `authenticate`).
 *
 * Security, in one place:
 * - Sign-in trades an API key for a random session id in an `HttpOnly; SameSite=Strict` cookie scoped to the console's
 *   path; the key is never stored by the page or the server (sessions.ts).
 * - Unsafe methods must come from the console's own origin (`Origin` checked: CSRF).
 * - Every page but sign-in, every call and every stream needs a session; another account's agent is 404, as in the API.
 */
import { z } from 'zod';
import type { AgentRuntime } from '../../core/agent-runtime.js';
import { parseArgs } from '../../base/validate.js';
import { AgentryError } from '../../errors.js';
import type { AuditSink } from '../audit.js';
import { declaresBody, isJsonContentType, parseJsonBody, readBody } from '../body.js';
import { clientAddressOf } from '../client-address.js';
import type { EventStreamRegistry } from '../event-streams.js';
import { errorResponse, jsonResponse, responseForError } from '../responses.js';
import { answerConsoleCall, apiMethods, noSuchCall, type ConsoleCall } from './api.js';
import type { StreamInfo } from '../event-streams.js';
import { consoleAsset } from './assets.js';
import { hashApiKey } from '../../core/accounts.js';
import { isAuthFailure, type FailedAuthGuard } from '../auth-guard.js';
import { TokenBuckets, type RateLimitOptions } from '../rate-limit.js';
import {
  cookieValue,
  cookieValues,
  SECURE_SESSION_COOKIE,
  SESSION_COOKIE,
  sessionIdHash,
  sessionStoreOf,
  type ConsoleIdentity,
  type ConsoleSession,
} from './sessions.js';

/** Options of the console (`createFetchHandler(runtime, { console: { … } })`). */
export interface ConsoleOptions {
  /**
   * Replaces the console's own sign-in: called with every console request, answers the account it acts for, or null
   * (refused with 401). The app then signs its users in and out itself; the console shows no sign-in or sign-out.
   * @example createFetchHandler(runtime, { console: { authenticate: async (req) => (await mySession(req))?.accountId ?? null } })
   */
  authenticate?: (request: Request) => string | null | Promise<string | null>;
  /**
   * How long a sign-in lasts, in seconds.
   * @default 43200 (12 hours)
   */
  sessionTtlSeconds?: number;
  /**
   * Origins besides the request's own that may send unsafe requests (sign-in, create, delete): the public origin when
   * a proxy terminates TLS in front of agentry, e.g. `['https://agents.example.com']`.
   * @default []
   */
  origins?: string[];
  /**
   * Believe `X-Forwarded-Proto: https` from a TLS-terminating proxy in front: the session cookie is then `Secure` and
   * `__Host-` prefixed. Only behind a proxy that sets (or strips) the header: otherwise any client could say it.
   * @default false
   */
  trustProxy?: boolean;
  /**
   * Successful sign-ins per account: a burst, then a refill per second. Failed ones share the API's per-address
   * failed-authentication limit (`failedAuthLimit`).
   * @default { capacity: 10, refillPerSecond: 0.2 } (10, then one every 5 s)
   */
  signInLimit?: RateLimitOptions;
}

/** Successful sign-ins per account: bursts of 10, then one every 5 seconds. */
export const DEFAULT_SIGN_IN_LIMIT: RateLimitOptions = Object.freeze({ capacity: 10, refillPerSecond: 0.2 });

export const ConsoleOptionsSchema = z
  .object({
    authenticate: z
      .custom<ConsoleOptions['authenticate']>((v) => typeof v === 'function', 'must be a function')
      .optional(),
    sessionTtlSeconds: z
      .number()
      .int()
      .positive()
      .max(30 * 24 * 3600)
      .default(12 * 3600),
    origins: z
      .array(z.string().regex(/^https?:\/\/[^/\s]+$/, 'must be an origin like "https://app.example.com"'))
      .default([]),
    trustProxy: z.boolean().default(false),
    signInLimit: z
      .object({ capacity: z.number().int().min(1).max(1_000_000), refillPerSecond: z.number().positive().max(1e6) })
      .strict()
      .default(DEFAULT_SIGN_IN_LIMIT),
  })
  .strict();

/**
 * Content-Security-Policy of every console response: scripts, styles, images and connections from the console's own
 * origin only, no inline script or style, no plugins, no framing, no `<base>`, forms post only here.
 */
export const CONSOLE_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; font-src 'self'; " +
  "base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy': CONSOLE_CSP,
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
};

const PAGE = /^(?:|\/|\/sign-in|\/agents|\/settings|\/agents\/[0-9a-fA-F-]{36})$/;
const UNSAFE = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);
/** Sign-in: the key in `x-api-key`, as the API takes it (so the server reads no body before it knows the key works);
 * `{api_key}` in the body is accepted too where no server thread stands in front (createFetchHandler alone). */
const SignInBodySchema = z.object({ api_key: z.string().min(1).max(512).optional() }).strict();

/** The console as the router mounts it. */
export interface ConsoleRoutes {
  /** True for paths under `{basePath}/console`. */
  owns(pathname: string): boolean;
  /** Methods served at a console path, or null for none. */
  allowedMethods(pathname: string): readonly string[] | null;
  /** Answers a request for a path it owns; never throws. */
  handle(request: Request, url: URL, requestId: string): Promise<Response>;
}

/** Builds the console's routes; `options` as validated by {@link ConsoleOptionsSchema}. */
export function createConsole(
  runtime: AgentRuntime,
  options: z.input<typeof ConsoleOptionsSchema> | true,
  context: {
    basePath: string;
    bodyLimitBytes: number;
    now: () => number;
    onError: (error: unknown, c: { request_id: string }) => void;
    /** The router's rate limit: 0 if a request of this account may go, else seconds until it may. */
    takeToken: (accountId: string) => number;
    /** The API's event stream registry: console streams count and are checked there too. */
    streams: EventStreamRegistry;
    /** Where audit lines go. */
    audit: AuditSink;
    /** The API's failed-authentication limit per client address (null when turned off). */
    guard: FailedAuthGuard | null;
    /** The router's access log of event streams (`onStream`): the console's streams open and end there too. */
    onStream?: ((info: StreamInfo) => void) | undefined;
  },
): ConsoleRoutes {
  const o = parseArgs(ConsoleOptionsSchema, options === true ? {} : options, 'console options');
  const root = `${context.basePath}/console`;
  const sessions = sessionStoreOf(runtime, context.now);
  const signIns = new TokenBuckets(o.signInLimit, context.now);
  const guard = context.guard;

  const rest = (pathname: string) => pathname.slice(root.length);
  const owns = (pathname: string) => pathname === root || pathname.startsWith(`${root}/`);

  function allowedMethods(pathname: string): readonly string[] | null {
    if (!owns(pathname)) return null;
    const r = rest(pathname);
    if (PAGE.test(r)) return ['GET', 'HEAD'];
    if (r.startsWith('/assets/')) return consoleAsset(r.slice('/assets/'.length)) ? ['GET', 'HEAD'] : null;
    if (r.startsWith('/api/')) return apiMethods(r.slice('/api/'.length).split('/'));
    return null;
  }

  /**
   * Adds the security headers to a console answer. One that brings a policy of its own keeps it: an artifact's
   * (`default-src 'none'; sandbox`) is stricter, and the console's `script-src 'self'` would let an HTML artifact
   * opened in a tab load another artifact of this origin as a script.
   */
  function withHeaders(response: Response): Response {
    for (const [name, value] of Object.entries(SECURITY_HEADERS)) {
      if (!response.headers.has(name)) response.headers.set(name, value);
    }
    return response;
  }

  /**
   * Whether the request came over TLS: its own URL, or (with `trustProxy`) the first `X-Forwarded-Proto` a proxy
   * in front of it set.
   */
  function overTls(request: Request, url: URL): boolean {
    if (url.protocol === 'https:') return true;
    if (!o.trustProxy) return false;
    return request.headers.get('x-forwarded-proto')?.split(',')[0]?.trim().toLowerCase() === 'https';
  }

  /**
   * The session cookie: over TLS `__Host-agentry_console` (`Secure`, `Path=/`, as the prefix demands), over plain HTTP
   * (a local console) `agentry_console` scoped to the console's path.
   */
  function sessionCookie(value: string, maxAge: number, secure: boolean): string {
    const [name, path] = secure ? [SECURE_SESSION_COOKIE, '/'] : [SESSION_COOKIE, root];
    return `${name}=${value}; Path=${path}; Max-Age=${maxAge}; HttpOnly; SameSite=Strict` + (secure ? '; Secure' : '');
  }

  /** The session id the request carries (null for none); two session cookies are refused. */
  function sessionIdOf(request: Request): string | null {
    const url = new URL(request.url);
    return cookieValue(request.headers.get('cookie'), overTls(request, url) ? SECURE_SESSION_COOKIE : SESSION_COOKIE);
  }

  /** 429 when the client's address has failed authentication too often, unless `secret` worked recently. */
  function checkFailures(request: Request, secret: string | null): void {
    const wait = guard?.refusal(clientAddressOf(request), secret) ?? 0;
    if (wait > 0) {
      throw new AgentryError('rate_limited', `Too many failed sign-ins from this address; retry after ${wait} s`, {
        details: { retry_after: wait },
      });
    }
  }

  /** Who the request acts for; throws `unauthorized` or `subscription_inactive`. */
  async function identify(request: Request): Promise<ConsoleIdentity> {
    if (o.authenticate) {
      const accountId = await o.authenticate(request);
      if (accountId === null || accountId === undefined) throw new AgentryError('unauthorized', 'Not signed in');
      const account = await runtime.accounts.get(accountId).catch(() => null);
      if (!account) throw new AgentryError('unauthorized', 'Not signed in');
      if (!account.subscription_active) {
        throw new AgentryError('subscription_inactive', 'The subscription of this account is not active');
      }
      return { accountId, session: null, signal: new AbortController().signal };
    }
    // A guessed or dead cookie is a failed authentication, counted per address as the API counts wrong keys.
    const sessionId = sessionIdOf(request);
    checkFailures(request, sessionId);
    let session: ConsoleSession;
    try {
      session = await sessions.check(sessionId);
    } catch (error) {
      if (sessionId !== null && isAuthFailure(error)) guard?.failed(clientAddressOf(request));
      throw error;
    }
    guard?.succeeded(sessionIdHash(sessionId!));
    return { accountId: session.row.account_id, session, signal: session.ended.signal };
  }

  /** CSRF: an unsafe request must say it comes from this origin (or one configured). */
  function checkOrigin(request: Request, url: URL): void {
    if (!UNSAFE.has(request.method)) return;
    const origin = request.headers.get('origin');
    if (origin === null || (origin !== url.origin && !o.origins.includes(origin))) {
      throw new AgentryError('forbidden', 'This request must come from the console itself');
    }
  }

  async function body(request: Request, required: boolean): Promise<unknown> {
    if (!required && !declaresBody(request)) return undefined;
    if (!isJsonContentType(request.headers.get('content-type'))) {
      throw new AgentryError('unsupported_media_type', 'Send the body as JSON with Content-Type: application/json');
    }
    const bytes = await readBody(request, context.bodyLimitBytes);
    if (!required && bytes.byteLength === 0) return undefined;
    return parseJsonBody(bytes);
  }

  async function page(request: Request, r: string): Promise<Response> {
    if (r !== '/sign-in') {
      try {
        await identify(request);
      } catch (error) {
        if (o.authenticate) throw error;
        // No session: the sign-in page instead, which says why when the session ended.
        const reason =
          AgentryError.isInstance(error) && error.code === 'subscription_inactive' ? '?reason=subscription' : '';
        return new Response(null, {
          status: 303,
          headers: { location: `${root}/sign-in${reason}`, 'cache-control': 'no-store' },
        });
      }
    }
    const html = new TextDecoder()
      .decode(consoleAsset('index.html')!.body)
      .replaceAll('%BASE%', escapeHtml(context.basePath));
    return new Response(request.method === 'HEAD' ? null : html, {
      status: 200,
      headers: { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' },
    });
  }

  async function session(request: Request, url: URL): Promise<Response> {
    const secure = overTls(request, url);
    if (request.method === 'POST') {
      if (o.authenticate)
        throw new AgentryError('invalid_request', 'This console signs in through its host application');
      const header = request.headers.get('x-api-key');
      const api_key = header ?? parseArgs(SignInBodySchema, await body(request, true), 'request body').api_key;
      if (api_key === undefined) throw new AgentryError('invalid_request', 'Send the API key in the x-api-key header');
      checkFailures(request, api_key);
      await sessions.signOut(sessionIdOf(request));
      let signedIn: Awaited<ReturnType<typeof sessions.signIn>>;
      try {
        signedIn = await sessions.signIn(api_key, o.sessionTtlSeconds * 1000, (accountId) => {
          // A working key may sign in only so often: each sign-in is a stored row.
          const wait = signIns.take(accountId);
          if (wait > 0) {
            throw new AgentryError('rate_limited', `Too many sign-ins for this account; retry after ${wait} s`, {
              details: { retry_after: wait },
            });
          }
        });
      } catch (error) {
        if (isAuthFailure(error)) guard?.failed(clientAddressOf(request));
        throw error;
      }
      guard?.succeeded(hashApiKey(api_key));
      const { id, session: s } = signedIn;
      const account = await runtime.accounts.get(s.row.account_id);
      return jsonResponse(
        200,
        { account, sign_out: true },
        { 'set-cookie': sessionCookie(id, o.sessionTtlSeconds, secure) },
      );
    }
    if (request.method === 'DELETE') {
      await sessions.signOut(sessionIdOf(request));
      return jsonResponse(200, { signed_out: true }, { 'set-cookie': sessionCookie('', 0, secure) });
    }
    const identity = await identify(request);
    const account = await runtime.accounts.get(identity.accountId);
    return jsonResponse(200, { account, sign_out: o.authenticate === undefined });
  }

  /** Tells the access log of a stream of this request opening; returns what to tell when it ends. */
  function streamLog(requestId: string): ConsoleCall['streamOpened'] {
    const onStream = context.onStream;
    if (!onStream) return undefined;
    return (agentId) => {
      const openedAt = performance.now();
      onStream({ event: 'open', request_id: requestId, agent_id: agentId });
      return (reason) =>
        onStream({
          event: 'close',
          request_id: requestId,
          agent_id: agentId,
          reason,
          duration_ms: Math.round(performance.now() - openedAt),
        });
    };
  }

  async function api(request: Request, url: URL, path: string, requestId: string): Promise<Response> {
    const parts = path.split('/');
    const methods = apiMethods(parts);
    if (methods === null) throw noSuchCall(path);
    if (!methods.includes(request.method)) {
      const allow = methods.join(', ');
      throw new AgentryError('method_not_allowed', `${request.method} is not allowed here; use ${allow}`, {
        details: { allow },
      });
    }
    if (parts[0] === 'session') return session(request, url);
    const identity = await identify(request);
    // The same token bucket as the account's API calls: the console is no way around the API's rate limit.
    const retryAfter = context.takeToken(identity.accountId);
    if (retryAfter > 0) {
      throw new AgentryError('rate_limited', `Too many requests; retry after ${retryAfter} s`, {
        details: { retry_after: retryAfter },
      });
    }
    const response = await answerConsoleCall({
      runtime,
      identity,
      request,
      url,
      parts,
      body: (required) => body(request, required),
      onKeyDeleted: (keyId) => sessions.endSessionsOfKey(identity.accountId, keyId),
      streamOpened: streamLog(requestId),
      openStream: () =>
        identity.session
          ? context.streams.open(identity.session.row.key_hash, identity.accountId)
          : context.streams.open(`account:${identity.accountId}`, identity.accountId, () =>
              identify(request).then(
                (again) => again.accountId === identity.accountId,
                () => false,
              ),
            ),
      audit: (event, keyId) =>
        context.audit({
          event,
          account_id: identity.accountId,
          key_id: keyId,
          by_key_id: identity.session?.row.key_id ?? null,
          address: clientAddressOf(request),
          request_id: requestId,
          at: new Date(context.now()).toISOString(),
        }),
    });
    // Deleting the key this session signed in with ends it: the browser forgets the cookie too.
    if (identity.session?.ended.signal.aborted) {
      response.headers.append('set-cookie', sessionCookie('', 0, overTls(request, url)));
    }
    return response;
  }

  async function handle(request: Request, url: URL, requestId: string): Promise<Response> {
    let response: Response;
    try {
      const r = rest(url.pathname);
      checkOrigin(request, url);
      if (r.startsWith('/api/')) response = await api(request, url, r.slice('/api/'.length), requestId);
      else if (r.startsWith('/assets/')) response = asset(request, r.slice('/assets/'.length), requestId);
      else if (PAGE.test(r)) {
        response =
          request.method === 'GET' || request.method === 'HEAD'
            ? await page(request, r)
            : errorResponse('method_not_allowed', `${request.method} is not allowed here; use GET`, requestId, {
                headers: { allow: 'GET, HEAD' },
              });
      } else response = errorResponse('not_found', 'No such console page', requestId);
    } catch (error) {
      response = responseForError(error, requestId, context.onError);
      if (AgentryError.isInstance(error) && error.code === 'method_not_allowed') {
        response.headers.set('allow', (error.details as { allow: string }).allow);
      }
      if (AgentryError.isInstance(error) && error.code === 'rate_limited') {
        response.headers.set('retry-after', String((error.details as { retry_after: number }).retry_after));
      }
    }
    // A refused session cookie is dead for good (ended, expired or made up): the browser may forget it.
    const secure = overTls(request, url);
    const cookieName = secure ? SECURE_SESSION_COOKIE : SESSION_COOKIE;
    if (response.status === 401 && !o.authenticate && cookieValues(request.headers.get('cookie'), cookieName).length) {
      response.headers.append('set-cookie', sessionCookie('', 0, secure));
    }
    return withHeaders(response);
  }

  return { owns, allowedMethods, handle };
}

function asset(request: Request, path: string, requestId: string): Response {
  const found = consoleAsset(path);
  if (!found || path === 'index.html') return errorResponse('not_found', 'No such console file', requestId);
  if (request.method !== 'GET' && request.method !== 'HEAD') {
    return errorResponse('method_not_allowed', `${request.method} is not allowed here; use GET`, requestId, {
      headers: { allow: 'GET, HEAD' },
    });
  }
  return new Response(request.method === 'HEAD' ? null : (found.body as Uint8Array<ArrayBuffer>), {
    status: 200,
    headers: { 'content-type': found.type, 'cache-control': 'no-cache' },
  });
}

const HTML_ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]!);
