/**
 * @module web/search/searxng
 * {@link SearchProvider} on a SearXNG instance's Search API, as documented at
 * https://docs.searxng.org/dev/search_api.html and implemented in `searxng/searxng` (`searx/webadapter.py`):
 *
 * `GET {SEARXNG_URL}/search?q=…&format=json&pageno=1[&time_range=…]` with `Accept: application/json` and no key;
 * the answer is `{query, number_of_results, results[{url, title, content, publishedDate?, engine, …}], …}`.
 *
 * The instance must have `json` in `search.formats` of its `settings.yml`; otherwise it answers 403, which this
 * client explains as such.
 *
 * Mapping of the query:
 * - `maxResults`: SearXNG has no count parameter; one page is read and cut.
 * - `recencyDays` → `time_range`, the smallest window that covers it: `day` (1), `week` (≤ 7), `month` (≤ 31),
 *   `year` (≤ 365); nothing beyond a year. The docs list `day`, `month`, `year`; the server's parameter check
 *   (`parse_time_range`) also accepts `week`, which is sent. The window applies only to engines that support it, so
 *   the shared filter drops dated results older than the cut-off afterwards.
 * - Domains: SearXNG has no domain parameter and passes operators to its engines as they are. One include domain is
 *   added to `q` as `site:<domain>` (engines that know it narrow their results, the others' results are filtered
 *   out anyway); exclude domains are not put in `q`. Every result is checked against the domains afterwards.
 *
 * @example
 * import { searxngSearch } from './web/search/searxng.js';
 * const searxng = searxngSearch({ baseUrl: process.env.SEARXNG_URL! });
 * const results = await searxng.search({ query: 'postgres advisory locks', maxResults: 5 });
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
  baseUrlSchema,
  endpointUrl,
  fetchJson,
  resolveHttp,
  searchClientOptionsShape,
  type FailureClass,
} from './http.js';
import { filterResults, parseItems, prepareQuery, searchResult } from './results.js';

/** Options of {@link searxngSearch}. */
export interface SearxngSearchOptions extends SearchClientOptions {
  /**
   * The instance's base URL (`SEARXNG_URL`), e.g. `https://searx.example.org`; `/search` is appended unless the URL
   * already ends with it.
   */
  baseUrl: string;
}

const OptionsSchema = z.strictObject({
  baseUrl: baseUrlSchema,
  ...searchClientOptionsShape,
});

/** SearXNG's `time_range` for a recency window, or `undefined` beyond a year. */
export function searxngTimeRange(recencyDays: number): 'day' | 'week' | 'month' | 'year' | undefined {
  if (recencyDays <= 1) return 'day';
  if (recencyDays <= 7) return 'week';
  if (recencyDays <= 31) return 'month';
  if (recencyDays <= 365) return 'year';
  return undefined;
}

const SearxngResponse = z.object({ results: z.array(z.unknown()) });

const SearxngResult = z.object({
  title: z.string().nullish(),
  url: z.string(),
  content: z.string().nullish(),
  publishedDate: z.string().nullish(),
});

function searxngErrorMessage(body: unknown): string | undefined {
  const parsed = z.object({ error: z.string() }).safeParse(body);
  return parsed.success ? parsed.data.error : undefined;
}

/**
 * A SearXNG client. Options are checked at once (`invalid_request` naming the bad field).
 *
 * @example
 * const searxng = searxngSearch({ baseUrl: 'http://127.0.0.1:8888', timeoutMs: 10_000 });
 */
export function searxngSearch(options: SearxngSearchOptions): SearchProvider & { readonly name: 'searxng' } {
  const o = parseArgs(OptionsSchema, options, 'searxngSearch options');
  const endpoint = endpointUrl(o.baseUrl, '/search');

  const classify = (status: number): FailureClass | undefined => {
    if (status === 403) {
      return {
        reason: 'unauthorized',
        retry: false,
        message:
          `the SearXNG instance at ${endpoint.origin} refused the request (HTTP 403); SearXNG does so when ` +
          '`json` is missing from `search.formats` in its settings.yml (check SEARXNG_URL and that setting)',
      };
    }
    if (status === 401) {
      return {
        reason: 'unauthorized',
        retry: false,
        message: `the SearXNG instance at ${endpoint.origin} asks for credentials (HTTP 401), which agentry does not send (check SEARXNG_URL)`,
      };
    }
    return undefined;
  };
  const http = resolveHttp(o, {
    provider: 'searxng',
    label: 'SearXNG',
    credentialHint: 'SEARXNG_URL',
    errorMessage: searxngErrorMessage,
    classify,
  });

  return {
    name: 'searxng',
    async search(input: SearchQuery): Promise<SearchResult[]> {
      const query = prepareQuery('searxng', input);
      const now = http.now();
      const url = new URL(endpoint);
      const site = query.includeDomains.length === 1 ? ` site:${query.includeDomains[0]!}` : '';
      url.searchParams.set('q', `${query.query}${site}`);
      url.searchParams.set('format', 'json');
      url.searchParams.set('pageno', '1');
      const timeRange = query.recencyDays === undefined ? undefined : searxngTimeRange(query.recencyDays);
      if (timeRange !== undefined) url.searchParams.set('time_range', timeRange);

      const body = await fetchJson(http, url, {
        method: 'GET',
        headers: { Accept: 'application/json' },
        signal: query.signal,
      });
      const parsed = SearxngResponse.safeParse(body);
      if (!parsed.success) {
        throw new SearchProviderError(
          'searxng',
          'invalid_response',
          'SearXNG answered without the documented `results` list',
          {
            cause: parsed.error,
          },
        );
      }
      const results = parseItems(SearxngResult, parsed.data.results).map((r) =>
        searchResult({ title: r.title, url: r.url, snippet: r.content, published: r.publishedDate }),
      );
      return filterResults(results, query, now);
    },
  };
}
