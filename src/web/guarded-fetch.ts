/**
 * @module web/guarded-fetch
 * The one way agentry's built-in tools reach the network (README.md#tools): a fetch-compatible function that refuses
 * anything but http(s), URLs with credentials, and every address that is not public (see `address-policy.ts`), unless
 * the allow list opens it. A host name is resolved once per hop, every address it resolves to is checked, and the
 * connection is pinned to those checked addresses through undici's `connect.lookup`, so a second DNS answer (DNS
 * rebinding) can never steer the socket elsewhere. Redirects are followed by hand and each hop is checked from
 * scratch. The whole request, body included, is bounded in time, and the decompressed body in size.
 */
import { promises as dns } from 'node:dns';
import { isIP, type LookupFunction } from 'node:net';
import {
  Agent,
  fetch as undiciFetch,
  type RequestInit as UndiciRequestInit,
  type Response as UndiciResponse,
} from 'undici';
import { z } from 'zod';
import { parseArgs } from '../base/validate.js';
import { AgentryError } from '../errors.js';
import { classifyAddress, describeRange, parseAllowList } from './address-policy.js';

/** Why a {@link FetchRefusedError} was thrown. */
export type FetchRefusalReason =
  'scheme' | 'credentials' | 'address' | 'redirects' | 'too_large' | 'timeout' | 'invalid_url';

/** A request the guard refused, or a response it cut off. The message says what happened and what would help. */
export class FetchRefusedError extends AgentryError {
  readonly reason: FetchRefusalReason;

  constructor(reason: FetchRefusalReason, message: string, options: { url?: string; cause?: unknown } = {}) {
    super('invalid_request', message, { details: { reason, url: options.url }, cause: options.cause });
    this.reason = reason;
  }
}

/** Resolves a host name to all its addresses, as `dns.promises.lookup(host, { all: true })` does. */
export type GuardedLookup = (hostname: string) => Promise<Array<{ address: string; family: 4 | 6 }>>;

/** Options of {@link createGuardedFetch}. */
export interface GuardedFetchOptions {
  /**
   * Hosts (`localhost`, `*.internal.example`), addresses and CIDRs (`127.0.0.1/32`) that may be reached although
   * they are not public. Merged with `AGENTRY_FETCH_ALLOW` (comma-separated) from `env`.
   * @default []
   */
  allow?: string[];
  /** Where `AGENTRY_FETCH_ALLOW` is read from. @default process.env */
  env?: NodeJS.ProcessEnv;
  /** Largest body accepted, counted after decompression. @default 5 * 1024 * 1024 */
  maxBytes?: number;
  /** Time cap for the whole request: lookups, redirects, headers and body. @default 30_000 */
  timeoutMs?: number;
  /** Redirects followed before refusing. @default 5 */
  maxRedirects?: number;
  /** Name resolution; tests inject one to make a name resolve to private addresses. @default dns.promises.lookup */
  lookup?: GuardedLookup;
  /** Sent unless the request sets its own `User-Agent`. @default 'agentry/0.1 (+https://github.com/agentry)' */
  userAgent?: string;
}

/** `RequestInit` plus per-call limits that override the guard's defaults. */
export interface GuardedRequestInit extends RequestInit {
  maxBytes?: number;
  timeoutMs?: number;
}

/** A fetch that enforces the guard; `close()` drops its connections and cancels requests still in flight. */
export type GuardedFetch = ((input: string | URL, init?: GuardedRequestInit) => Promise<Response>) & {
  close(): Promise<void>;
};

const DEFAULT_USER_AGENT = 'agentry/0.1 (+https://github.com/agentry)';
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
const NULL_BODY_STATUSES = new Set([101, 204, 205, 304]);
// Headers that describe a request body, dropped when a redirect turns the request into a GET (fetch spec).
const BODY_HEADERS = ['content-type', 'content-length', 'content-encoding', 'content-language', 'content-location'];
// Credentials meant for one origin must not follow a redirect to another.
const ORIGIN_CREDENTIAL_HEADERS = ['authorization', 'proxy-authorization', 'cookie'];
// Pins are kept per host name until evicted; bounded so that a long-lived process does not grow without limit.
const MAX_PINS = 1000;

const limit = z.number().int().positive();
const OptionsSchema = z.strictObject({
  allow: z.array(z.string()).default([]),
  env: z.custom<NodeJS.ProcessEnv>((v) => typeof v === 'object' && v !== null, 'Expected an object').optional(),
  maxBytes: limit.default(5 * 1024 * 1024),
  timeoutMs: limit.default(30_000),
  maxRedirects: z.number().int().nonnegative().default(5),
  lookup: z.custom<GuardedLookup>((v) => typeof v === 'function', 'Expected a function').optional(),
  userAgent: z.string().min(1).default(DEFAULT_USER_AGENT),
});
const CallLimitsSchema = z.object({ maxBytes: limit.optional(), timeoutMs: limit.optional() });

type Address = { address: string; family: 4 | 6 };

/**
 * Creates a guarded, fetch-compatible function. The returned `Response` is a standard one whose `url` is the final
 * URL and whose body stream errors with a {@link FetchRefusedError} (`too_large`, `timeout`) when a limit is passed.
 *
 * @example
 * const guardedFetch = createGuardedFetch({ maxBytes: 1_000_000 });
 * const res = await guardedFetch('https://example.com/');
 * const html = await res.text(); // throws FetchRefusedError (reason 'too_large') past 1 MB
 * await guardedFetch('http://169.254.169.254/latest/meta-data/'); // throws FetchRefusedError (reason 'address')
 * await guardedFetch.close();
 */
export function createGuardedFetch(options: GuardedFetchOptions = {}): GuardedFetch {
  const config = parseArgs(OptionsSchema, options, 'guarded fetch options');
  const fromEnv = (config.env ?? process.env)['AGENTRY_FETCH_ALLOW']?.split(',') ?? [];
  const allow = parseAllowList([...config.allow, ...fromEnv]);
  const lookup = config.lookup ?? systemLookup;

  // Checked addresses by host name. The agent's connect-time lookup reads only this map: it never asks DNS.
  const pins = new Map<string, Address[]>();
  const pinnedLookup: LookupFunction = (hostname, lookupOptions, callback) => {
    const family = lookupOptions.family === 4 || lookupOptions.family === 6 ? lookupOptions.family : 0;
    const answers = (pins.get(hostname) ?? []).filter((a) => family === 0 || a.family === family);
    const first = answers[0];
    if (!first) {
      const err: NodeJS.ErrnoException = new Error(`${hostname} was not checked by the guarded fetch`);
      err.code = 'ENOTFOUND';
      callback(err, '');
    } else if (lookupOptions.all) callback(null, answers);
    else callback(null, first.address, first.family);
  };
  const agent = new Agent({ connect: { lookup: pinnedLookup } });

  /** Refuses `url`, or pins its host name to the addresses just checked (an IP literal is checked directly). */
  async function checkTarget(url: URL, signal: AbortSignal, via: string | undefined): Promise<void> {
    const where = via === undefined ? url.href : `${url.href} (redirected from ${via})`;
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new FetchRefusedError('scheme', `Refused ${where}: only http: and https: URLs can be fetched.`, {
        url: url.href,
      });
    }
    if (url.username !== '' || url.password !== '') {
      const bare = new URL(url.href);
      bare.username = '';
      bare.password = '';
      throw new FetchRefusedError(
        'credentials',
        `Refused ${bare.href}: URLs with embedded credentials (user:password@) are not fetched; send them in a header.`,
        { url: bare.href },
      );
    }
    const host = url.hostname;
    // The URL parser has already normalised every IPv4 notation (127.1, 0x7f000001, …) to dotted decimal, and IPv6
    // literals come bracketed; anything else is a name.
    const literal = host.startsWith('[') ? host.slice(1, -1) : isIP(host) === 4 ? host : undefined;
    if (literal !== undefined) {
      refuseIfBlocked(url, where, literal, `${host} is`);
      return;
    }
    const answers = await abortable(lookup(host), signal).catch((cause: unknown) => {
      if (signal.aborted) throw cause;
      throw new TypeError(`fetch failed: could not resolve ${host}`, { cause });
    });
    if (answers.length === 0) throw new TypeError(`fetch failed: ${host} resolved to no address`);
    const checked = answers.map(({ address }) => ({ address, family: isIP(address) === 6 ? 6 : 4 }) as const);
    if (!allow.allowsHost(host)) {
      for (const { address } of checked) refuseIfBlocked(url, where, address, `${host} resolves to ${address},`);
    }
    pins.delete(host);
    pins.set(host, checked);
    if (pins.size > MAX_PINS) pins.delete(pins.keys().next().value as string);
  }

  /** Throws unless `address` is public or allowed; `subject` ("x.test resolves to 10.0.0.5,") starts the reason. */
  function refuseIfBlocked(url: URL, where: string, address: string, subject: string): void {
    if (allow.allowsAddress(address)) return;
    const range = classifyAddress(address);
    if (range === null) return;
    throw new FetchRefusedError(
      'address',
      `Refused ${where}: ${subject} ${describeRange(range)}. ` +
        'Allow it with AGENTRY_FETCH_ALLOW or the fetch allow option.',
      { url: url.href },
    );
  }

  async function guardedFetch(input: string | URL, init: GuardedRequestInit = {}): Promise<Response> {
    const { maxBytes: callMaxBytes, timeoutMs: callTimeoutMs, signal: callerSignal, redirect, ...request } = init;
    const limits = parseArgs(CallLimitsSchema, { maxBytes: callMaxBytes, timeoutMs: callTimeoutMs }, 'fetch init');
    const maxBytes = limits.maxBytes ?? config.maxBytes;
    const timeoutMs = limits.timeoutMs ?? config.timeoutMs;

    let url = parseUrl(String(input), undefined);
    const deadline = startDeadline(timeoutMs, () => url.href);
    const signal = callerSignal ? AbortSignal.any([callerSignal, deadline.signal]) : deadline.signal;

    let method = (request.method ?? 'GET').toUpperCase();
    let body = request.body;
    const headers = new Headers(request.headers);
    if (!headers.has('user-agent')) headers.set('user-agent', config.userAgent);

    try {
      if (body instanceof FormData) {
        // undici's fetch does not recognise the global FormData (that of Node's bundled undici) and would send
        // "[object FormData]"; encode it as multipart the standard way, with its boundary.
        const encoded = new Response(body);
        if (!headers.has('content-type')) headers.set('content-type', encoded.headers.get('content-type') ?? '');
        body = await encoded.arrayBuffer();
      }
      let via: string | undefined;
      for (let hop = 0; ; hop++) {
        await checkTarget(url, signal, via);
        const res = await undiciFetch(url.href, {
          ...(request as UndiciRequestInit),
          method,
          headers: headerPairs(headers),
          body: body as UndiciRequestInit['body'],
          redirect: 'manual',
          signal,
          dispatcher: agent,
        });
        const location = REDIRECT_STATUSES.has(res.status) ? res.headers.get('location') : null;
        if (location === null || redirect === 'manual') {
          return toResponse(res, limitBody(res, maxBytes, url.href, deadline), url, hop > 0);
        }
        await res.body?.cancel();
        if (redirect === 'error') throw new TypeError('fetch failed: unexpected redirect');
        const next = parseUrl(location, url);
        if (hop >= config.maxRedirects) {
          throw new FetchRefusedError(
            'redirects',
            `Refused ${url.href}: more than ${config.maxRedirects} redirects (the next one was to ${next.href}).`,
            { url: next.href },
          );
        }
        // As browsers do (fetch spec, HTTP-redirect fetch): 301/302 turn a POST into a GET, 303 turns anything but
        // GET and HEAD into a GET; the body and the headers describing it are dropped.
        const status = res.status;
        const seeOther = status === 303 && method !== 'GET' && method !== 'HEAD';
        if (((status === 301 || status === 302) && method === 'POST') || seeOther) {
          method = 'GET';
          body = null;
          for (const name of BODY_HEADERS) headers.delete(name);
        }
        if (next.origin !== url.origin) for (const name of ORIGIN_CREDENTIAL_HEADERS) headers.delete(name);
        via = url.href;
        url = next;
      }
    } catch (err) {
      deadline.stop();
      throw deadline.expired ?? err;
    }
  }

  return Object.assign(guardedFetch, {
    async close() {
      await agent.destroy();
    },
  });
}

async function systemLookup(hostname: string): Promise<Address[]> {
  const answers = await dns.lookup(hostname, { all: true });
  return answers.map(({ address, family }) => ({ address, family: family === 6 ? 6 : 4 }));
}

function parseUrl(href: string, base: URL | undefined): URL {
  try {
    return new URL(href, base);
  } catch (cause) {
    throw new FetchRefusedError('invalid_url', `Refused ${JSON.stringify(href)}: not a valid absolute URL.`, { cause });
  }
}

/** The time cap of one call, from the first lookup to the last body byte. */
interface Deadline {
  /** Aborts the request when the cap passes, or when the body is cut for another reason. */
  readonly signal: AbortSignal;
  /** The `timeout` error, once the cap has passed. */
  readonly expired: FetchRefusedError | undefined;
  /** Runs `hook` when the cap passes: a pending body read must end even if the server never sends a byte. */
  onExpire(hook: (err: FetchRefusedError) => void): void;
  /** Aborts the request now with `reason`. */
  abort(reason: unknown): void;
  /** The call is over: the cap no longer applies. */
  stop(): void;
}

function startDeadline(timeoutMs: number, currentUrl: () => string): Deadline {
  const controller = new AbortController();
  let expired: FetchRefusedError | undefined;
  let hook: ((err: FetchRefusedError) => void) | undefined;
  const timer = setTimeout(() => {
    const url = currentUrl();
    expired = new FetchRefusedError(
      'timeout',
      `Refused ${url}: no complete response within ${timeoutMs} ms; the request was cancelled.`,
      { url },
    );
    controller.abort(expired);
    hook?.(expired);
  }, timeoutMs);
  // A body nobody reads must not keep the process alive for the timer's sake; its socket does while it is open.
  timer.unref();
  return {
    signal: controller.signal,
    get expired() {
      return expired;
    },
    onExpire: (fn) => (hook = fn),
    abort: (reason) => controller.abort(reason),
    stop: () => clearTimeout(timer),
  };
}

/** Rejects with the signal's reason as soon as it aborts, so that a slow `lookup` counts against the time cap. */
function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

function headerPairs(headers: { forEach(fn: (value: string, name: string) => void): void }): [string, string][] {
  const pairs: [string, string][] = [];
  headers.forEach((value, name) => pairs.push([name, value]));
  return pairs;
}

/**
 * The response body re-streamed through a byte counter. Pulled one chunk at a time (high water mark 0), so no more
 * than one decompressed chunk past the cap is ever read before the stream errors with `too_large`.
 */
function limitBody(
  res: UndiciResponse,
  maxBytes: number,
  url: string,
  deadline: Deadline,
): ReadableStream<Uint8Array> | null {
  if (res.body === null || NULL_BODY_STATUSES.has(res.status)) {
    deadline.stop();
    res.body?.cancel().catch(() => {});
    return null;
  }
  const reader = res.body.getReader();
  let received = 0;
  let settled = false;
  const fail = (controller: ReadableStreamDefaultController<Uint8Array>, err: unknown) => {
    if (settled) return;
    settled = true;
    deadline.stop();
    controller.error(err);
    deadline.abort(err);
    reader.cancel(err).catch(() => {});
  };
  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
        deadline.onExpire((err) => fail(controller, err));
      },
      async pull(controller) {
        try {
          const { done, value } = await reader.read();
          if (settled) return;
          if (done) {
            settled = true;
            deadline.stop();
            controller.close();
            return;
          }
          received += value.byteLength;
          if (received > maxBytes) {
            const message =
              `Refused ${url}: the body is larger than ${maxBytes} bytes (counted after decompression); ` +
              'fetch a smaller resource or raise maxBytes.';
            fail(controller, new FetchRefusedError('too_large', message, { url }));
            return;
          }
          controller.enqueue(value);
        } catch (err) {
          fail(controller, err);
        }
      },
      cancel(reason) {
        settled = true;
        deadline.stop();
        return reader.cancel(reason);
      },
    },
    { highWaterMark: 0 },
  );
}

/** A standard `Response` around the guarded body, with the final URL and the redirect flag fetch would report. */
function toResponse(
  res: UndiciResponse,
  body: ReadableStream<Uint8Array> | null,
  url: URL,
  redirected: boolean,
): Response {
  const response = new Response(body, {
    status: res.status,
    statusText: res.statusText,
    headers: headerPairs(res.headers),
  });
  const final = new URL(url.href);
  final.hash = '';
  Object.defineProperty(response, 'url', { value: final.href });
  Object.defineProperty(response, 'redirected', { value: redirected });
  return response;
}
