/**
 * @module web/search/http
 * How the four search clients talk to their provider: the options they share checked at the door and resolved to
 * defaults, the endpoint URL, and {@link fetchJson}, the HTTP loop with its retry policy (429 with exponential backoff
 * honouring `Retry-After`, 5xx and connection failures retried once or twice) that maps every failure to a
 * {@link SearchProviderError} with a reason and a message the model or the operator can act on.
 */
import { z } from 'zod';
import { AgentryError } from '../../errors.js';
import {
  SearchProviderError,
  type FetchLike,
  type SearchClientOptions,
  type SearchFailureReason,
  type SearchRetryOptions,
} from '../search-provider.js';
import { plainText } from './results.js';

// ---------------------------------------------------------------------------------------------------------------
// Options shared by the clients, checked at the door
// ---------------------------------------------------------------------------------------------------------------

const isFunction = (value: unknown): boolean => typeof value === 'function';

/** zod shape of {@link SearchClientOptions}; each client extends it with its own fields. */
export const searchClientOptionsShape = {
  fetch: z.custom<FetchLike>(isFunction, 'Expected a fetch function').optional(),
  retry: z
    .strictObject({
      maxRetries: z.int().min(0).max(10).optional(),
      baseDelayMs: z.number().min(0).optional(),
      maxDelayMs: z.number().min(0).optional(),
      sleep: z
        .custom<(ms: number, signal?: AbortSignal) => Promise<void>>(isFunction, 'Expected a function')
        .optional(),
    })
    .optional(),
  timeoutMs: z.int().positive().optional(),
  now: z.custom<() => Date>(isFunction, 'Expected a function returning a Date').optional(),
};

/** An http(s) base URL option. */
export const baseUrlSchema = z.url({ protocol: /^https?$/, error: 'Expected an http(s) URL' });

/** An API key option: a non-empty string without surrounding whitespace. */
export const apiKeySchema = z.string().trim().min(1, 'Expected a non-empty API key');

/** Joins a base URL and an endpoint path, keeping any path prefix of the base (a proxy mount). */
export function endpointUrl(baseUrl: string, path: string): URL {
  const base = new URL(baseUrl);
  const prefix = base.pathname.replace(/\/+$/, '');
  const url = new URL(base.origin);
  url.pathname = prefix.endsWith(path) ? prefix : `${prefix}${path}`;
  return url;
}

// ---------------------------------------------------------------------------------------------------------------
// HTTP with retries
// ---------------------------------------------------------------------------------------------------------------

/** How one failed answer is treated; a provider's `classify` hook may return one to override the default. */
export interface FailureClass {
  reason: SearchFailureReason;
  /** Whether waiting and trying again can help. */
  retry: boolean;
  /** Replaces the default message. */
  message?: string;
}

/** What {@link fetchJson} needs to know about a provider. */
export interface ProviderHttp {
  /** `brave`, `tavily`, … (the error's `provider`). */
  provider: string;
  /** The provider's name in messages: `Brave`, `Tavily`, … */
  label: string;
  /** What the operator should check when the provider refuses access, e.g. `BRAVE_API_KEY`. */
  credentialHint: string;
  fetch: FetchLike;
  retry: Required<SearchRetryOptions>;
  timeoutMs: number;
  now: () => Date;
  /** The provider's own error message in an error body (JSON already parsed when possible). */
  errorMessage(body: unknown): string | undefined;
  /** Provider-specific classification (e.g. Brave's 422 for a bad key); `undefined` keeps the default. */
  classify?(status: number, body: unknown): FailureClass | undefined;
  /** For a 429 without `Retry-After`: the provider's own wait hint (e.g. Brave's `X-RateLimit-Reset`), in ms. */
  retryAfterMs?(headers: Headers): number | undefined;
}

/** Resolves the shared options into what {@link fetchJson} uses. */
export function resolveHttp(
  options: SearchClientOptions,
  provider: Pick<ProviderHttp, 'provider' | 'label' | 'credentialHint' | 'errorMessage' | 'classify' | 'retryAfterMs'>,
): ProviderHttp {
  return {
    ...provider,
    fetch: options.fetch ?? ((url, init) => globalThis.fetch(url, init)),
    retry: {
      maxRetries: options.retry?.maxRetries ?? 3,
      baseDelayMs: options.retry?.baseDelayMs ?? 500,
      maxDelayMs: options.retry?.maxDelayMs ?? 30_000,
      sleep: options.retry?.sleep ?? abortableSleep,
    },
    timeoutMs: options.timeoutMs ?? 30_000,
    now: options.now ?? (() => new Date()),
  };
}

/** 5xx and connection failures are retried at most this many times (fewer when `maxRetries` is lower). */
const MAX_UPSTREAM_RETRIES = 2;

function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** `Retry-After` (delay-seconds or HTTP-date) in milliseconds, or `undefined`. */
export function parseRetryAfter(value: string | null, now: Date): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (/^\d+(\.\d+)?$/.test(text)) return Math.round(Number(text) * 1000);
  const at = Date.parse(text);
  return Number.isFinite(at) ? Math.max(0, at - now.getTime()) : undefined;
}

function defaultClass(status: number): FailureClass {
  if (status === 401 || status === 403) return { reason: 'unauthorized', retry: false };
  if (status === 429) return { reason: 'rate_limited', retry: true };
  if (status >= 500) return { reason: 'upstream', retry: true };
  return { reason: 'bad_request', retry: false };
}

function defaultMessage(http: ProviderHttp, reason: SearchFailureReason, status: number, detail: string): string {
  switch (reason) {
    case 'unauthorized':
      return `the ${http.label} API key was refused (check ${http.credentialHint})${detail}`;
    case 'rate_limited':
      return `the ${http.label} API rate limit was reached (HTTP ${status})${detail}`;
    case 'bad_request':
      return `${http.label} rejected the search request (HTTP ${status})${detail}`;
    case 'upstream':
      return `${http.label} failed to answer (HTTP ${status})${detail}`;
    case 'invalid_response':
      return `${http.label} answered with something that is not its documented JSON${detail}`;
  }
}

async function readBody(response: Response): Promise<unknown> {
  const text = await response.text();
  if (text.trim() === '') return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

function cutMessage(text: string): string {
  const flat = text.replace(/\s+/g, ' ').trim().replace(/\.+$/, '');
  return flat.length > 300 ? `${flat.slice(0, 299)}…` : flat;
}

/** undici says only "fetch failed"; the reason (ECONNREFUSED, ENOTFOUND, a guard's refusal) is in `cause`. */
function networkErrorText(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause as { code?: unknown; message?: unknown } | undefined;
  const why = typeof cause?.code === 'string' ? cause.code : typeof cause?.message === 'string' ? cause.message : '';
  return why === '' || err.message.includes(why) ? err.message : `${err.message}: ${why}`;
}

interface Failure {
  cls: FailureClass;
  message: string;
  status: number | undefined;
  headers: Headers | undefined;
  cause: unknown;
}

/** The caller's signal and the attempt's time limit as one signal. */
function attemptSignal(
  caller: AbortSignal | undefined,
  timeoutMs: number,
): { signal: AbortSignal; timeout: AbortSignal } {
  const timeout = AbortSignal.timeout(timeoutMs);
  return { signal: caller === undefined ? timeout : AbortSignal.any([caller, timeout]), timeout };
}

/**
 * Sends one request, retrying as {@link SearchRetryOptions} says, and returns the parsed JSON body of the first
 * successful answer. Throws {@link SearchProviderError}, or the signal's reason when the caller aborts.
 */
export async function fetchJson(
  http: ProviderHttp,
  url: URL,
  init: { method: 'GET' | 'POST'; headers: Record<string, string>; body?: string; signal: AbortSignal | undefined },
): Promise<unknown> {
  const caller = init.signal;
  let rateRetries = 0;
  let upstreamRetries = 0;
  for (;;) {
    caller?.throwIfAborted();
    const { signal, timeout } = attemptSignal(caller, http.timeoutMs);
    let failure: Failure;
    try {
      const response = await http.fetch(url.href, {
        method: init.method,
        headers: init.headers,
        ...(init.body === undefined ? {} : { body: init.body }),
        signal,
      });
      if (response.ok) {
        const text = await response.text();
        try {
          return JSON.parse(text) as unknown;
        } catch (err) {
          throw new SearchProviderError(
            http.provider,
            'invalid_response',
            defaultMessage(http, 'invalid_response', response.status, `: ${plainText(text, 300) || 'an empty body'}`),
            { upstreamStatus: response.status, cause: err },
          );
        }
      }
      const body = await readBody(response);
      // A text body is often an HTML error page from a gateway: keep its words only.
      const own = http.errorMessage(body) ?? (typeof body === 'string' ? plainText(body, 300) : undefined);
      const cls = http.classify?.(response.status, body) ?? defaultClass(response.status);
      const detail = own === undefined || own.trim() === '' ? '' : `: ${cutMessage(own)}`;
      failure = {
        cls,
        message: cls.message ?? defaultMessage(http, cls.reason, response.status, detail),
        status: response.status,
        headers: response.headers,
        cause: undefined,
      };
    } catch (err) {
      if (SearchProviderError.isInstance(err)) throw err;
      if (caller?.aborted) throw caller.reason;
      // The guarded fetch refuses on purpose (a private address, a size or time limit): trying again cannot help.
      if (AgentryError.isInstance(err)) {
        throw new SearchProviderError(
          http.provider,
          'upstream',
          `the request to ${http.label} failed: ${err.message}`,
          {
            cause: err,
          },
        );
      }
      const what = timeout.aborted
        ? `did not answer within ${http.timeoutMs} ms`
        : `could not be reached (${networkErrorText(err)})`;
      failure = {
        cls: { reason: 'upstream', retry: true },
        message: `${http.label} ${what}`,
        status: undefined,
        headers: undefined,
        cause: err,
      };
    }

    const { cls, message, status, headers, cause } = failure;
    const used = cls.reason === 'rate_limited' ? rateRetries : upstreamRetries;
    const allowed =
      cls.reason === 'rate_limited' ? http.retry.maxRetries : Math.min(MAX_UPSTREAM_RETRIES, http.retry.maxRetries);
    const errorOptions = { ...(status === undefined ? {} : { upstreamStatus: status }), cause };
    if (!cls.retry) throw new SearchProviderError(http.provider, cls.reason, message, errorOptions);

    const asked =
      headers === undefined
        ? undefined
        : (parseRetryAfter(headers.get('retry-after'), http.now()) ??
          (cls.reason === 'rate_limited' ? http.retryAfterMs?.(headers) : undefined));
    if (used >= allowed) {
      const tries = used === 0 ? '' : `; ${used} ${used === 1 ? 'retry' : 'retries'} did not help`;
      const later = asked === undefined ? '' : `; retry after ${Math.ceil(asked / 1000)} s`;
      throw new SearchProviderError(http.provider, cls.reason, `${message}${tries}${later}`, errorOptions);
    }
    const delay = asked ?? http.retry.baseDelayMs * 2 ** used;
    if (delay > http.retry.maxDelayMs) {
      throw new SearchProviderError(
        http.provider,
        cls.reason,
        `${message}; the provider asks to retry after ${Math.ceil(delay / 1000)} s, longer than this client waits`,
        errorOptions,
      );
    }
    if (cls.reason === 'rate_limited') rateRetries += 1;
    else upstreamRetries += 1;
    await http.retry.sleep(delay, caller);
  }
}
