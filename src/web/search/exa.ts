/**
 * @module web/search/exa
 * {@link SearchProvider} on the Exa search API, as documented at https://exa.ai/docs/reference/search and as the
 * official client `exa-js` (`exa-labs/exa-js`, `src/index.ts`) calls it:
 *
 * `POST {baseUrl}/search` with `x-api-key: <key>` and a JSON body `{query, type, numResults, includeDomains?,
 * excludeDomains?, startPublishedDate?, contents: {highlights: {maxCharacters}}}`; the answer is
 * `{requestId, results[{title, url, publishedDate?, author?, text?, highlights?, summary?}], …}`. Errors carry
 * `{error, message?}`.
 *
 * Mapping of the query:
 * - `maxResults` → `numResults`.
 * - `includeDomains` / `excludeDomains` → `includeDomains` / `excludeDomains` (sent only when non-empty).
 * - `recencyDays` → `startPublishedDate`, an ISO 8601 date-time: midnight UTC of the cut-off day.
 * - `type` is `auto` (Exa's default and recommendation) unless {@link ExaSearchOptions.type} says otherwise.
 * - Contents: highlights only (the passages most relevant to the query), which make the snippet; Exa's `summary` or
 *   `text` are used when a proxy returns those instead.
 *
 * @example
 * import { exaSearch } from './web/search/exa.js';
 * const exa = exaSearch({ apiKey: process.env.EXA_API_KEY! });
 * const results = await exa.search({ query: 'papers on speculative decoding', maxResults: 10, recencyDays: 365 });
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
import { apiKeySchema, baseUrlSchema, endpointUrl, fetchJson, resolveHttp, searchClientOptionsShape } from './http.js';
import { filterResults, MAX_SNIPPET_CHARS, parseItems, prepareQuery, recencyCutoff, searchResult } from './results.js';

/** Where the Exa API lives. */
export const EXA_BASE_URL = 'https://api.exa.ai';

/** Options of {@link exaSearch}. */
export interface ExaSearchOptions extends SearchClientOptions {
  /** The API key (`EXA_API_KEY`), sent as `x-api-key`. */
  apiKey: string;
  /**
   * Base URL of the API or of a proxy that speaks it; `/search` is appended.
   * @default 'https://api.exa.ai' (`AGENTRY_EXA_BASE_URL` through `searchProviderFromEnv`)
   */
  baseUrl?: string;
  /**
   * Exa's search `type`. The deep variants, which synthesise answers, are not offered: web_search wants links.
   * @default 'auto'
   */
  type?: 'auto' | 'neural' | 'fast' | 'instant';
}

const OptionsSchema = z.strictObject({
  apiKey: apiKeySchema,
  baseUrl: baseUrlSchema.optional(),
  type: z.enum(['auto', 'neural', 'fast', 'instant']).optional(),
  ...searchClientOptionsShape,
});

const ExaResponse = z.object({ results: z.array(z.unknown()) });

const ExaResult = z.object({
  title: z.string().nullish(),
  url: z.string(),
  publishedDate: z.string().nullish(),
  text: z.string().nullish(),
  highlights: z.array(z.string()).nullish(),
  summary: z.string().nullish(),
});

function exaErrorMessage(body: unknown): string | undefined {
  const parsed = z.object({ error: z.string().optional(), message: z.string().optional() }).safeParse(body);
  if (!parsed.success) return undefined;
  const parts = [parsed.data.error, parsed.data.message].filter((p): p is string => p !== undefined && p !== '');
  return parts.length === 0 ? undefined : parts.join('. ');
}

function exaSnippet(result: z.output<typeof ExaResult>): string | undefined {
  const highlights = (result.highlights ?? []).map((h) => h.trim()).filter((h) => h !== '');
  if (highlights.length > 0) return highlights.join(' … ');
  return result.summary ?? result.text ?? undefined;
}

/**
 * An Exa search client. Options are checked at once (`invalid_request` naming the bad field).
 *
 * @example
 * const exa = exaSearch({ apiKey: '…', type: 'fast' });
 */
export function exaSearch(options: ExaSearchOptions): SearchProvider & { readonly name: 'exa' } {
  const o = parseArgs(OptionsSchema, options, 'exaSearch options');
  const http = resolveHttp(o, {
    provider: 'exa',
    label: 'Exa',
    credentialHint: 'EXA_API_KEY',
    errorMessage: exaErrorMessage,
  });
  const endpoint = o.baseUrl ?? EXA_BASE_URL;
  const type = o.type ?? 'auto';

  return {
    name: 'exa',
    async search(input: SearchQuery): Promise<SearchResult[]> {
      const query = prepareQuery('exa', input);
      const now = http.now();
      const request = {
        query: query.query,
        type,
        numResults: query.maxResults,
        ...(query.includeDomains.length > 0 ? { includeDomains: query.includeDomains } : {}),
        ...(query.excludeDomains.length > 0 ? { excludeDomains: query.excludeDomains } : {}),
        ...(query.recencyDays === undefined
          ? {}
          : { startPublishedDate: recencyCutoff(query.recencyDays, now).toISOString() }),
        contents: { highlights: { maxCharacters: MAX_SNIPPET_CHARS } },
      };
      const body = await fetchJson(http, endpointUrl(endpoint, '/search'), {
        method: 'POST',
        headers: { 'x-api-key': o.apiKey, 'Content-Type': 'application/json', Accept: 'application/json' },
        body: JSON.stringify(request),
        signal: query.signal,
      });
      const parsed = ExaResponse.safeParse(body);
      if (!parsed.success) {
        throw new SearchProviderError('exa', 'invalid_response', 'Exa answered without the documented `results` list', {
          cause: parsed.error,
        });
      }
      const results = parseItems(ExaResult, parsed.data.results).map((r) =>
        searchResult({ title: r.title, url: r.url, snippet: exaSnippet(r), published: r.publishedDate }),
      );
      return filterResults(results, query, now);
    },
  };
}
