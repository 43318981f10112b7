/**
 * @module web/search-provider
 * The web search extension point: {@link SearchProvider} turns one {@link SearchQuery} into normalised
 * {@link SearchResult}s. agentry ships four clients beside it (`web/search/brave.ts`, `tavily.ts`, `exa.ts`,
 * `searxng.ts`) and `web/search/from-env.ts`, which picks the first one the environment configures. This file holds
 * only the contract and the options every client takes; what the four share so that each one only converts lives in
 * `web/search/results.ts` (the query checked, the results filtered and cleaned) and `web/search/http.ts` (the
 * request, its retry policy and the mapping of failures to {@link SearchProviderError}).
 *
 * Every shipped client filters what its provider returned by the query's domains and recency, whatever the provider
 * did with them, so a provider that lacks a parameter still honours the query.
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
import { AgentryError } from '../errors.js';

/** One search, as the `web_search` tool asks for it (its input, README.md#tools). */
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
