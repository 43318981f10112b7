/**
 * @module web/search/brave
 * {@link SearchProvider} on the Brave Search API (web search endpoint), as documented at
 * https://api-dashboard.search.brave.com/app/documentation/web-search (query parameters, request headers, response
 * objects, response headers) and as Brave's own MCP server (`brave/brave-search-mcp-server`) calls it:
 *
 * `GET {baseUrl}/res/v1/web/search?q=…&count=…[&freshness=…]` with `X-Subscription-Token: <key>`,
 * `Accept: application/json` and `Accept-Encoding: gzip`; results are `web.results[{title, url, description,
 * page_age?, age?}]` (`web` is absent when nothing was found).
 *
 * Mapping of the query:
 * - `maxResults` → `count` (Brave's maximum is 20).
 * - `recencyDays` → `freshness`: `pd`, `pw`, `pm`, `py` for exactly 1, 7, 31 and 365 days (Brave's own windows),
 *   otherwise the documented date range `YYYY-MM-DDtoYYYY-MM-DD` from the cut-off day to today (UTC).
 * - Domains: Brave has no domain parameter. One include domain becomes `site:<domain>` and each exclude domain
 *   `-site:<domain>` in `q` (Brave search operators). Several include domains are not put in `q` (Brave does not
 *   document `OR` between `site:` operators); then `count` is raised to 20 and the shared filter keeps the matching
 *   results. Operators are also left out when they would push `q` past Brave's limit of 400 characters or 50 words.
 *   Either way every result is checked against the domains afterwards.
 *
 * Errors follow Brave's documented shapes: an invalid key is a 422 with `error.code` `SUBSCRIPTION_TOKEN_INVALID`
 * (reported as `unauthorized`, like 401/403); a 429 with `QUOTA_LIMITED` (the plan's monthly quota) is not retried;
 * a 429 without `Retry-After` waits for the shortest window of `X-RateLimit-Reset`.
 *
 * Snippets come from `description`, with Brave's `<strong>` highlighting removed and entities decoded; `published_at`
 * from `page_age` (a date-time without zone, taken as UTC).
 *
 * @example
 * import { braveSearch } from './web/search/brave.js';
 * const brave = braveSearch({ apiKey: process.env.BRAVE_API_KEY! });
 * const results = await brave.search({ query: 'zod 4 release notes', maxResults: 5, recencyDays: 30 });
 */
import { z } from 'zod';
import { parseArgs } from '../../base/validate.js';
import {
  SearchProviderError,
  type SearchClientOptions,
  type SearchProvider,
  type SearchQuery,
  type SearchResult,
} from '../search-provider.js';
import {
  apiKeySchema,
  baseUrlSchema,
  endpointUrl,
  fetchJson,
  resolveHttp,
  searchClientOptionsShape,
  type FailureClass,
} from './http.js';
import {
  filterResults,
  parseItems,
  prepareQuery,
  recencyCutoff,
  searchResult,
  utcDay,
  type PreparedQuery,
} from './results.js';

/** Where the Brave Search API lives. */
export const BRAVE_BASE_URL = 'https://api.search.brave.com';

/** Brave's largest `count`. */
const BRAVE_MAX_COUNT = 20;
/** Brave's limits on `q`. */
const BRAVE_MAX_QUERY_CHARS = 400;
const BRAVE_MAX_QUERY_WORDS = 50;

/** Options of {@link braveSearch}. */
export interface BraveSearchOptions extends SearchClientOptions {
  /** The subscription token (`BRAVE_API_KEY`), sent as `X-Subscription-Token`. */
  apiKey: string;
  /**
   * Base URL of the API or of a proxy that speaks it; `/res/v1/web/search` is appended.
   * @default 'https://api.search.brave.com' (`AGENTRY_BRAVE_BASE_URL` through `searchProviderFromEnv`)
   */
  baseUrl?: string;
}

const OptionsSchema = z.strictObject({
  apiKey: apiKeySchema,
  baseUrl: baseUrlSchema.optional(),
  ...searchClientOptionsShape,
});

/** Brave's `freshness` for a recency window (see the module comment). */
export function braveFreshness(recencyDays: number, now: Date): string {
  const named: Record<number, string> = { 1: 'pd', 7: 'pw', 31: 'pm', 365: 'py' };
  return named[recencyDays] ?? `${utcDay(recencyCutoff(recencyDays, now))}to${utcDay(now)}`;
}

/**
 * `q` with the domain operators Brave can take, and whether they express all the domain filters (when they do not,
 * the client asks for more results so that the filter afterwards still has enough to keep).
 */
export function braveQuery(query: PreparedQuery): { q: string; domainsInQuery: boolean } {
  const operators = [
    ...(query.includeDomains.length === 1 ? [`site:${query.includeDomains[0]!}`] : []),
    ...query.excludeDomains.map((domain) => `-site:${domain}`),
  ];
  const wanted = query.includeDomains.length + query.excludeDomains.length;
  if (operators.length === 0) return { q: query.query, domainsInQuery: wanted === 0 };
  const q = `${query.query} ${operators.join(' ')}`;
  if (q.length > BRAVE_MAX_QUERY_CHARS || q.split(/\s+/).length > BRAVE_MAX_QUERY_WORDS) {
    return { q: query.query, domainsInQuery: false };
  }
  return { q, domainsInQuery: operators.length === wanted };
}

const BraveResponse = z.object({
  web: z.object({ results: z.array(z.unknown()) }).optional(),
});

const BraveResult = z.object({
  title: z.string().nullish(),
  url: z.string(),
  description: z.string().nullish(),
  page_age: z.string().nullish(),
  age: z.string().nullish(),
});

const BraveErrorEntry = z.object({
  code: z.string().optional(),
  detail: z.string().optional(),
  meta: z
    .object({ errors: z.array(z.object({ loc: z.array(z.unknown()).optional(), msg: z.string() })).optional() })
    .nullish(),
});

/** Brave answers `{type: "ErrorResponse", error: {...}}`; some reference pages show `errors: [...]`. Both are read. */
function braveError(body: unknown): z.output<typeof BraveErrorEntry> | undefined {
  const parsed = z
    .object({ error: BraveErrorEntry.optional(), errors: z.array(BraveErrorEntry).optional() })
    .safeParse(body);
  if (!parsed.success) return undefined;
  return parsed.data.error ?? parsed.data.errors?.[0];
}

function braveErrorMessage(body: unknown): string | undefined {
  const error = braveError(body);
  if (error === undefined) return undefined;
  const fields = (error.meta?.errors ?? []).map((e) => `${(e.loc ?? []).map(String).join('.')}: ${e.msg}`);
  const text = [error.detail, ...fields]
    .map((part) => part?.trim().replace(/\.+$/, ''))
    .filter((part) => part !== undefined && part !== '')
    .join('; ');
  const code = error.code === undefined ? '' : ` (${error.code})`;
  return text === '' && code === '' ? undefined : `${text}${code}`.trim();
}

function classifyBrave(status: number, body: unknown): FailureClass | undefined {
  const code = braveError(body)?.code;
  if (code === 'SUBSCRIPTION_TOKEN_INVALID') return { reason: 'unauthorized', retry: false };
  if (status === 429 && code === 'QUOTA_LIMITED') {
    return {
      reason: 'rate_limited',
      retry: false,
      message:
        'the Brave API quota of this key is used up (QUOTA_LIMITED); raise the plan or wait for the quota to reset',
    };
  }
  return undefined;
}

/** `X-RateLimit-Reset: 1, 1419704` → the shortest window, in milliseconds. */
function braveRateLimitReset(headers: Headers): number | undefined {
  const values = (headers.get('x-ratelimit-reset') ?? '')
    .split(',')
    .map((part) => part.trim())
    .filter((part) => /^\d+(\.\d+)?$/.test(part))
    .map(Number);
  return values.length === 0 ? undefined : Math.min(...values) * 1000;
}

/**
 * A Brave Search client. Options are checked at once (`invalid_request` naming the bad field).
 *
 * @example
 * const brave = braveSearch({ apiKey: 'BSA…', retry: { maxRetries: 2 } });
 */
export function braveSearch(options: BraveSearchOptions): SearchProvider & { readonly name: 'brave' } {
  const o = parseArgs(OptionsSchema, options, 'braveSearch options');
  const http = resolveHttp(o, {
    provider: 'brave',
    label: 'Brave',
    credentialHint: 'BRAVE_API_KEY',
    errorMessage: braveErrorMessage,
    classify: classifyBrave,
    retryAfterMs: braveRateLimitReset,
  });
  const endpoint = o.baseUrl ?? BRAVE_BASE_URL;

  return {
    name: 'brave',
    async search(input: SearchQuery): Promise<SearchResult[]> {
      const query = prepareQuery('brave', input);
      const now = http.now();
      const { q, domainsInQuery } = braveQuery(query);
      const url = endpointUrl(endpoint, '/res/v1/web/search');
      url.searchParams.set('q', q);
      url.searchParams.set(
        'count',
        String(domainsInQuery ? Math.min(query.maxResults, BRAVE_MAX_COUNT) : BRAVE_MAX_COUNT),
      );
      if (query.recencyDays !== undefined) url.searchParams.set('freshness', braveFreshness(query.recencyDays, now));

      const body = await fetchJson(http, url, {
        method: 'GET',
        headers: { Accept: 'application/json', 'Accept-Encoding': 'gzip', 'X-Subscription-Token': o.apiKey },
        signal: query.signal,
      });
      const parsed = BraveResponse.safeParse(body);
      if (!parsed.success) {
        throw new SearchProviderError(
          'brave',
          'invalid_response',
          'Brave answered without the documented `web.results` list',
          {
            cause: parsed.error,
          },
        );
      }
      const results = parseItems(BraveResult, parsed.data.web?.results ?? []).map((r) =>
        searchResult({ title: r.title, url: r.url, snippet: r.description, published: r.page_age ?? r.age }),
      );
      return filterResults(results, query, now);
    },
  };
}
