/**
 * @module agentry-runtime/web
 * The web layer of the built-in tools, for use on its own: the guarded fetch (SSRF-safe fetch with pinned
 * connections, redirect checks and size and time caps), page reading (HTML to Markdown, charsets, PDF) and the search
 * clients (Brave, Tavily, Exa, SearXNG). A subpath of its own, so that importing `agentry` does not load a DOM, an
 * HTTP client and a Markdown converter before a tool needs them.
 *
 * @example
 * import { createGuardedFetch, readPage } from 'agentry-runtime/web';
 * const fetch = createGuardedFetch();
 * const page = await readPage(fetch, 'https://example.com/');
 */
export { createGuardedFetch, FetchRefusedError } from './guarded-fetch.js';
export type { GuardedFetch, GuardedFetchOptions, GuardedRequestInit, FetchRefusalReason } from './guarded-fetch.js';
export { readPage, extractPage, PageReadError, DEFAULT_MAX_BYTES, DEFAULT_MAX_CHARS } from './page-reader.js';
export type { ExtractPageInput, ReadPageOptions } from './page-reader.js';
export { SearchProviderError } from './search-provider.js';
export type { SearchProvider, SearchQuery, SearchResult, SearchClientOptions } from './search-provider.js';
export { braveSearch } from './search/brave.js';
export { tavilySearch } from './search/tavily.js';
export { exaSearch } from './search/exa.js';
export { searxngSearch } from './search/searxng.js';
export { searchProviderFromEnv } from './search/from-env.js';
