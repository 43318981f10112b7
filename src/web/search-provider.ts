/**
 * @module web/search-provider
 * The web search extension point: {@link SearchProvider} turns one {@link SearchQuery} into normalised
 * {@link SearchResult}s. agentry ships four clients beside it (`web/search/brave.ts`, `tavily.ts`, `exa.ts`,
 * `searxng.ts`) and `web/search/from-env.ts`, which picks the first one the environment configures. This file also
 * holds what the four share, so that each client only converts: the HTTP loop with its retry policy (429 with
 * exponential backoff honouring `Retry-After`, 5xx retried once or twice), the mapping of failures to
 * {@link SearchProviderError}, text clean-up, date parsing and the filters applied after the provider answered.
 *
 * Every client applies the same filters afterwards, whatever the provider did with them: a result is kept only if its
 * URL is http(s), its hostname is one of `includeDomains` (subdomains included) and none of `excludeDomains`, and,
 * when its publication date is known, that date is inside `recencyDays`. Duplicated URLs are dropped and the list is
 * capped to `maxResults`. A provider that lacks a parameter therefore still honours the query.
 *
 * @example
 * // A provider of your own: anything with a name and a search method.
 * const fixed: SearchProvider = {
 *   name: 'fixed',
 *   async search({ maxResults }) {
 *     return [{ title: 'Example', url: 'https://example.com/', snippet: 'An example page.' }].slice(0, maxResults);
 *   },
 * };
 */
import { z } from 'zod';
import { AgentryError } from '../errors.js';
import { parseArgs } from '../core/validate.js';

/** One search, as the `web_search` tool asks for it (DESIGN §7). */
export interface SearchQuery {
  /** What to search for. */
  query: string;
  /** At most this many results come back (web_search allows 1-20). */
  maxResults: number;
  /** Keep only results on these domains; subdomains count (`example.com` keeps `docs.example.com`). */
  includeDomains?: string[];
  /** Drop results on these domains and their subdomains. */
  excludeDomains?: string[];
  /** Keep only results published in the last this many days (results without a known date are kept). */
  recencyDays?: number;
  /** Aborts the request; the provider rethrows the signal's reason. */
  signal?: AbortSignal;
}

/** One result, in the shape `web_search` hands to the model. */
export interface SearchResult {
  title: string;
  url: string;
  /** Plain text: HTML tags stripped, entities decoded, whitespace collapsed. */
  snippet: string;
  /** ISO 8601 UTC, when the provider reports a publication date. */
  published_at?: string;
}

/**
 * A web search backend. Implementations throw {@link SearchProviderError} for failures the caller should explain
 * (refused key, rate limit, bad request, provider down, unreadable answer) and rethrow the signal's reason on abort.
 *
 * @example
 * const provider = braveSearch({ apiKey: process.env.BRAVE_API_KEY! });
 * const results = await provider.search({ query: 'node 20 release date', maxResults: 5 });
 */
export interface SearchProvider {
  readonly name: 'brave' | 'tavily' | 'exa' | 'searxng' | (string & {});
  search(query: SearchQuery): Promise<SearchResult[]>;
}

/** The part of `fetch` the clients use. The runtime passes its guarded fetch here. */
export type FetchLike = (url: string, init?: RequestInit) => Promise<Response>;

/** Why a search failed, for callers that react differently (e.g. back off on `rate_limited`). */
export type SearchFailureReason = 'unauthorized' | 'rate_limited' | 'bad_request' | 'upstream' | 'invalid_response';

const SEARCH_ERROR_MARKER = Symbol.for('agentry.search_provider_error');

/** Options of {@link SearchProviderError}. */
export interface SearchProviderErrorOptions {
  /** The provider's HTTP status, when it answered. */
  upstreamStatus?: number;
  cause?: unknown;
}

/**
 * A search provider failed in a way worth explaining to the model or the operator. The code is `invalid_request`
 * (the tool call cannot be served as asked); {@link SearchProviderError.reason} says why.
 *
 * The provider's HTTP status is {@link SearchProviderError.upstreamStatus}: `status` is taken by
 * {@link AgentryError}, where it means the HTTP status agentry itself would answer with.
 *
 * @example
 * try { await provider.search(q) } catch (err) {
 *   if (SearchProviderError.isInstance(err) && err.reason === 'rate_limited') { ... }
 * }
 */
export class SearchProviderError extends AgentryError {
  readonly provider: string;
  readonly reason: SearchFailureReason;
  readonly upstreamStatus: number | undefined;
  readonly [SEARCH_ERROR_MARKER] = true;

  constructor(
    provider: string,
    reason: SearchFailureReason,
    message: string,
    options: SearchProviderErrorOptions = {},
  ) {
    super('invalid_request', message, {
      details: {
        provider,
        reason,
        ...(options.upstreamStatus === undefined ? {} : { upstream_status: options.upstreamStatus }),
      },
      cause: options.cause,
    });
    this.provider = provider;
    this.reason = reason;
    this.upstreamStatus = options.upstreamStatus;
  }

  /** True for any SearchProviderError, even one thrown by another copy of the package. */
  static override isInstance(value: unknown): value is SearchProviderError {
    return (
      typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[SEARCH_ERROR_MARKER] === true
    );
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Options shared by the clients
// ---------------------------------------------------------------------------------------------------------------

/** How a client retries rate limits and provider failures. */
export interface SearchRetryOptions {
  /**
   * Retries of a 429 before giving up with `rate_limited`. 5xx answers and connection failures are retried at most
   * `min(2, maxRetries)` times before giving up with `upstream`.
   * @default 3
   */
  maxRetries?: number;
  /**
   * First backoff delay when the provider gives no `Retry-After`; it doubles on each retry (500, 1000, 2000 ms).
   * @default 500
   */
  baseDelayMs?: number;
  /**
   * The longest wait the client accepts. A provider asking for longer is not waited for: the search fails at once
   * with `rate_limited` (or `upstream`) and the message says when to try again.
   * @default 30_000
   */
  maxDelayMs?: number;
  /**
   * Waits between attempts. Tests pass one that records the delay and returns at once.
   * @default a timer that the query's signal cancels
   * @example braveSearch({ apiKey, retry: { sleep: async (ms) => void delays.push(ms) } })
   */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

/** Options every client takes. */
export interface SearchClientOptions {
  /**
   * The `fetch` requests go through. The runtime passes its guarded fetch.
   * @default globalThis.fetch
   */
  fetch?: FetchLike;
  /** Retry policy; see {@link SearchRetryOptions}. */
  retry?: SearchRetryOptions;
  /**
   * Time limit of one attempt, in milliseconds; an attempt that runs out counts as a provider failure.
   * @default 30_000
   */
  timeoutMs?: number;
  /**
   * The clock, for recency filters and `Retry-After` dates.
   * @default () => new Date()
   */
  now?: () => Date;
}

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

const SearchQuerySchema = z.object({
  query: z.string().trim().min(1, 'Expected a non-empty query'),
  maxResults: z.int().min(1),
  includeDomains: z.array(z.string()).optional(),
  excludeDomains: z.array(z.string()).optional(),
  recencyDays: z.int().min(1).optional(),
  signal: z.custom<AbortSignal>((value) => value instanceof AbortSignal, 'Expected an AbortSignal').optional(),
});

/** A query after {@link prepareQuery}: trimmed, domains normalised, signal kept. */
export interface PreparedQuery {
  query: string;
  maxResults: number;
  includeDomains: string[];
  excludeDomains: string[];
  recencyDays: number | undefined;
  signal: AbortSignal | undefined;
}

/** Checks a query at the door (throws `invalid_request`) and normalises its domains. */
export function prepareQuery(provider: string, query: SearchQuery): PreparedQuery {
  const q = parseArgs(SearchQuerySchema, query, `${provider} search query`);
  return {
    query: q.query,
    maxResults: q.maxResults,
    includeDomains: normaliseDomains(q.includeDomains),
    excludeDomains: normaliseDomains(q.excludeDomains),
    recencyDays: q.recencyDays,
    signal: q.signal,
  };
}

/** Joins a base URL and an endpoint path, keeping any path prefix of the base (a proxy mount). */
export function endpointUrl(baseUrl: string, path: string): URL {
  const base = new URL(baseUrl);
  const prefix = base.pathname.replace(/\/+$/, '');
  const url = new URL(base.origin);
  url.pathname = prefix.endsWith(path) ? prefix : `${prefix}${path}`;
  return url;
}

// ---------------------------------------------------------------------------------------------------------------
// Text, dates and domains
// ---------------------------------------------------------------------------------------------------------------

const NAMED_ENTITIES: Record<string, string> = {
  amp: '&',
  lt: '<',
  gt: '>',
  quot: '"',
  apos: "'",
  nbsp: ' ',
  hellip: '…',
  mdash: '—',
  ndash: '–',
  lsquo: '‘',
  rsquo: '’',
  ldquo: '“',
  rdquo: '”',
  laquo: '«',
  raquo: '»',
  middot: '·',
  bull: '•',
  copy: '©',
  reg: '®',
  trade: '™',
  deg: '°',
  euro: '€',
  pound: '£',
  times: '×',
};

/** Decodes HTML character references: the common named ones and every numeric one. Unknown names stay as they are. */
export function decodeEntities(text: string): string {
  return text.replace(/&(#x[0-9a-f]+|#[0-9]+|[a-z][a-z0-9]*);/gi, (whole, ref: string) => {
    if (ref.startsWith('#')) {
      const code =
        ref[1] === 'x' || ref[1] === 'X' ? Number.parseInt(ref.slice(2), 16) : Number.parseInt(ref.slice(1), 10);
      return Number.isInteger(code) && code > 0 && code <= 0x10ffff ? String.fromCodePoint(code) : whole;
    }
    return NAMED_ENTITIES[ref.toLowerCase()] ?? whole;
  });
}

/** Longest snippet handed to the model; longer provider text is cut at a word boundary. */
export const MAX_SNIPPET_CHARS = 1000;

/**
 * Provider text to plain text: tags such as Brave's `<strong>` removed, entities decoded, whitespace collapsed,
 * trimmed, and cut to `maxChars` with an ellipsis.
 */
export function plainText(value: unknown, maxChars = MAX_SNIPPET_CHARS): string {
  if (typeof value !== 'string') return '';
  const text = decodeEntities(value.replace(/<[^>]*>/g, ''))
    .replace(/\s+/g, ' ')
    .trim();
  if (text.length <= maxChars) return text;
  const cut = text.slice(0, maxChars - 1);
  const space = cut.lastIndexOf(' ');
  return `${(space > maxChars * 0.6 ? cut.slice(0, space) : cut).trimEnd()}…`;
}

const ISO_WITHOUT_ZONE = /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?$/;
const ISO_DATE_ONLY = /^\d{4}-\d{2}-\d{2}$/;
const ISO_WITH_ZONE = /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})$/i;
const RFC_1123 = /^[a-z]{3}, \d{1,2} [a-z]{3} \d{4} \d{2}:\d{2}(:\d{2})? (GMT|UTC|[+-]\d{4})$/i;

/**
 * A provider's date string as ISO 8601 UTC, or `undefined` when it is missing or not a date this function is sure
 * about. Accepted: ISO dates and date-times (a time without a zone is taken as UTC, as Brave's `page_age` and
 * SearXNG's `publishedDate` are) and RFC 1123 dates (Tavily news). Human strings such as "3 days ago" are not guessed.
 */
export function isoDate(value: unknown): string | undefined {
  if (typeof value !== 'string') return undefined;
  const text = value.trim();
  let ms: number;
  if (ISO_DATE_ONLY.test(text)) ms = Date.parse(`${text}T00:00:00Z`);
  else if (ISO_WITHOUT_ZONE.test(text)) ms = Date.parse(`${text.replace(' ', 'T')}Z`);
  else if (ISO_WITH_ZONE.test(text)) ms = Date.parse(text.replace(' ', 'T'));
  else if (RFC_1123.test(text)) ms = Date.parse(text);
  else return undefined;
  return Number.isFinite(ms) ? new Date(ms).toISOString() : undefined;
}

/** `YYYY-MM-DD` of a date, in UTC. */
export function utcDay(date: Date): string {
  return date.toISOString().slice(0, 10);
}

/**
 * The oldest publication time `recencyDays` allows: midnight UTC, `recencyDays` days before today. Day-aligned so
 * that a date-only publication date on the first allowed day is kept, and so that the date sent to providers that
 * take a day (`start_date`, Brave's date range) is the same cut-off.
 */
export function recencyCutoff(recencyDays: number, now: Date): Date {
  const today = Date.parse(`${utcDay(now)}T00:00:00Z`);
  return new Date(today - recencyDays * 86_400_000);
}

/**
 * A domain as the filters compare it: lower case, without scheme, path, port, trailing dot, a leading `*.` or a
 * leading `www.` (so `www.example.com` also keeps `example.com`). `undefined` when nothing is left.
 */
export function normaliseDomain(input: string): string | undefined {
  const domain = input
    .trim()
    .toLowerCase()
    .replace(/^[a-z][a-z0-9+.-]*:\/\//, '')
    .split(/[/?#]/)[0]!
    .replace(/^\*\./, '')
    .replace(/:\d+$/, '')
    .replace(/\.+$/, '')
    .replace(/^www\./, '');
  return domain === '' ? undefined : domain;
}

function normaliseDomains(list: readonly string[] | undefined): string[] {
  const out: string[] = [];
  for (const item of list ?? []) {
    const domain = normaliseDomain(item);
    if (domain !== undefined && !out.includes(domain)) out.push(domain);
  }
  return out;
}

/** True when `hostname` is `domain` or one of its subdomains. */
export function hostnameMatches(hostname: string, domain: string): boolean {
  const host = hostname.toLowerCase().replace(/\.+$/, '');
  return host === domain || host.endsWith(`.${domain}`);
}

/**
 * The filters every client applies to what the provider returned (see the module comment), then the cap. Results
 * come in the provider's order and stay in it.
 */
export function filterResults(results: readonly SearchResult[], query: PreparedQuery, now: Date): SearchResult[] {
  const cutoff = query.recencyDays === undefined ? undefined : recencyCutoff(query.recencyDays, now).getTime();
  const seen = new Set<string>();
  const kept: SearchResult[] = [];
  for (const result of results) {
    let url: URL;
    try {
      url = new URL(result.url);
    } catch {
      continue;
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') continue;
    const host = url.hostname;
    if (query.includeDomains.length > 0 && !query.includeDomains.some((d) => hostnameMatches(host, d))) continue;
    if (query.excludeDomains.some((d) => hostnameMatches(host, d))) continue;
    if (cutoff !== undefined && result.published_at !== undefined && Date.parse(result.published_at) < cutoff) continue;
    const key = url.href;
    if (seen.has(key)) continue;
    seen.add(key);
    kept.push(result);
    if (kept.length >= query.maxResults) break;
  }
  return kept;
}

/** Builds a {@link SearchResult}, leaving `published_at` out when unknown and falling back to the URL for a title. */
export function searchResult(fields: {
  title: unknown;
  url: string;
  snippet: unknown;
  published: unknown;
}): SearchResult {
  const url = fields.url.trim();
  const title = plainText(fields.title, 300) || url;
  const published = isoDate(fields.published);
  return {
    title,
    url,
    snippet: plainText(fields.snippet),
    ...(published === undefined ? {} : { published_at: published }),
  };
}

/** Parses each item with `schema`, dropping the ones that do not fit (one malformed result does not sink a search). */
export function parseItems<S extends z.ZodType>(schema: S, items: readonly unknown[]): z.output<S>[] {
  const out: z.output<S>[] = [];
  for (const item of items) {
    const parsed = schema.safeParse(item);
    if (parsed.success) out.push(parsed.data);
  }
  return out;
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
