/**
 * @module web/search/tavily
 * {@link SearchProvider} on the Tavily Search API, as documented at
 * https://docs.tavily.com/documentation/api-reference/endpoint/search (OpenAPI `POST /search`) and as the official
 * client `@tavily/core` (`tavily-ai/tavily-js`, `src/utils.ts`) calls it:
 *
 * `POST {baseUrl}/search` with `Authorization: Bearer <key>` (the key is no longer sent as `api_key` in the body) and
 * a JSON body `{query, max_results, search_depth, topic, include_domains?, exclude_domains?, start_date?}`; the answer
 * is `{results[{title, url, content, score, published_date?}], …}`. Errors carry `{detail: {error}}`.
 *
 * Mapping of the query:
 * - `maxResults` → `max_results` (Tavily allows 0-20).
 * - `includeDomains` / `excludeDomains` → `include_domains` / `exclude_domains` (sent only when non-empty).
 * - `recencyDays` → `start_date` (`YYYY-MM-DD`, "all results after the specified start date based on publish date
 *   or last updated date"), the cut-off day in UTC. Not `days`, which the docs reserve for `topic: news`, nor
 *   `time_range`, which only knows day, week, month and year.
 * - `topic` is `general`; `search_depth` is `basic` (1 credit) unless {@link TavilySearchOptions.searchDepth} says
 *   `advanced` (2 credits).
 *
 * Tavily's plan limits (HTTP 432, key or plan limit; 433, pay-as-you-go limit) are reported as `rate_limited` and not
 * retried: waiting seconds does not lift them.
 *
 * @example
 * import { tavilySearch } from './web/search/tavily.js';
 * const tavily = tavilySearch({ apiKey: process.env.TAVILY_API_KEY! });
 * const results = await tavily.search({ query: 'EU AI act timeline', maxResults: 5, includeDomains: ['europa.eu'] });
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
import { filterResults, parseItems, prepareQuery, recencyCutoff, searchResult, utcDay } from './results.js';

/** Where the Tavily API lives. */
export const TAVILY_BASE_URL = 'https://api.tavily.com';

/** Tavily's largest `max_results`. */
const TAVILY_MAX_RESULTS = 20;

/** Options of {@link tavilySearch}. */
export interface TavilySearchOptions extends SearchClientOptions {
  /** The API key (`TAVILY_API_KEY`, `tvly-…`), sent as `Authorization: Bearer <key>`. */
  apiKey: string;
  /**
   * Base URL of the API or of a proxy that speaks it; `/search` is appended.
   * @default 'https://api.tavily.com' (`AGENTRY_TAVILY_BASE_URL` through `searchProviderFromEnv`)
   */
  baseUrl?: string;
  /**
   * Tavily's `search_depth`: `advanced` finds more relevant snippets and costs 2 credits instead of 1.
   * @default 'basic'
   */
  searchDepth?: 'basic' | 'advanced';
}

const OptionsSchema = z.strictObject({
  apiKey: apiKeySchema,
  baseUrl: baseUrlSchema.optional(),
  searchDepth: z.enum(['basic', 'advanced']).optional(),
  ...searchClientOptionsShape,
});

const TavilyResponse = z.object({ results: z.array(z.unknown()) });

const TavilyResult = z.object({
  title: z.string().nullish(),
  url: z.string(),
  content: z.string().nullish(),
  published_date: z.string().nullish(),
});

/** `{detail: {error}}` (documented), or FastAPI's `{detail: "…"}` / `{detail: [{loc, msg}]}`. */
function tavilyErrorMessage(body: unknown): string | undefined {
  const parsed = z
    .object({
      detail: z.union([
        z.object({ error: z.string() }),
        z.string(),
        z.array(z.object({ loc: z.array(z.unknown()).optional(), msg: z.string() })),
      ]),
    })
    .safeParse(body);
  if (!parsed.success) return undefined;
  const { detail } = parsed.data;
  if (typeof detail === 'string') return detail;
  if (Array.isArray(detail)) return detail.map((d) => `${(d.loc ?? []).map(String).join('.')}: ${d.msg}`).join('; ');
  return detail.error;
}

function classifyTavily(status: number, body: unknown): FailureClass | undefined {
  if (status !== 432 && status !== 433) return undefined;
  const own = tavilyErrorMessage(body);
  const limit = status === 432 ? 'key or plan limit' : 'pay-as-you-go limit';
  return {
    reason: 'rate_limited',
    retry: false,
    message: `the Tavily ${limit} of this key is reached (HTTP ${status})${own === undefined ? '' : `: ${own}`}`,
  };
}

/**
 * A Tavily Search client. Options are checked at once (`invalid_request` naming the bad field).
 *
 * @example
 * const tavily = tavilySearch({ apiKey: 'tvly-…', searchDepth: 'advanced' });
 */
export function tavilySearch(options: TavilySearchOptions): SearchProvider & { readonly name: 'tavily' } {
  const o = parseArgs(OptionsSchema, options, 'tavilySearch options');
  const http = resolveHttp(o, {
    provider: 'tavily',
    label: 'Tavily',
    credentialHint: 'TAVILY_API_KEY',
    errorMessage: tavilyErrorMessage,
    classify: classifyTavily,
  });
  const endpoint = o.baseUrl ?? TAVILY_BASE_URL;
  const searchDepth = o.searchDepth ?? 'basic';

  return {
    name: 'tavily',
    async search(input: SearchQuery): Promise<SearchResult[]> {
      const query = prepareQuery('tavily', input);
      const now = http.now();
      const request = {
        query: query.query,
        max_results: Math.min(query.maxResults, TAVILY_MAX_RESULTS),
        search_depth: searchDepth,
        topic: 'general',
        ...(query.includeDomains.length > 0 ? { include_domains: query.includeDomains } : {}),
        ...(query.excludeDomains.length > 0 ? { exclude_domains: query.excludeDomains } : {}),
        ...(query.recencyDays === undefined ? {} : { start_date: utcDay(recencyCutoff(query.recencyDays, now)) }),
      };
      const body = await fetchJson(http, endpointUrl(endpoint, '/search'), {
        method: 'POST',
        headers: {
          Authorization: `Bearer ${o.apiKey}`,
          'Content-Type': 'application/json',
          Accept: 'application/json',
        },
        body: JSON.stringify(request),
        signal: query.signal,
      });
      const parsed = TavilyResponse.safeParse(body);
      if (!parsed.success) {
        throw new SearchProviderError(
          'tavily',
          'invalid_response',
          'Tavily answered without the documented `results` list',
          {
            cause: parsed.error,
          },
        );
      }
      const results = parseItems(TavilyResult, parsed.data.results).map((r) =>
        searchResult({ title: r.title, url: r.url, snippet: r.content, published: r.published_date }),
      );
      return filterResults(results, query, now);
    },
  };
}
