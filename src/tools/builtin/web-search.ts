/**
 * @module tools/builtin/web-search
 * `web_search` (README.md#tools) through a {@link SearchProvider}: Brave, Tavily, Exa or SearXNG. Without a provider
 * the tool is still offered, and each call fails with what to set.
 */
import { z } from 'zod';
import { AgentryError } from '../../errors.js';
import type { SearchProvider } from '../../web/search-provider.js';
import { defineTool, type Tool } from '../define-tool.js';

export const WEB_SEARCH_TOOL_NAME = 'web_search';

const Domain = z
  .string()
  .trim()
  .min(1)
  .max(253)
  .regex(/^[a-z0-9.-]+$/i, 'a domain such as example.com');

const WebSearchInput = z.object({
  query: z.string().trim().min(1).max(400).describe('What to search for'),
  max_results: z.number().int().min(1).max(20).default(5).describe('How many results (1-20, default 5)'),
  include_domains: z.array(Domain).max(20).optional().describe('Only results from these domains (and subdomains)'),
  exclude_domains: z.array(Domain).max(20).optional().describe('No results from these domains (and subdomains)'),
  recency_days: z
    .number()
    .int()
    .min(1)
    .max(3_650)
    .optional()
    .describe('Only results published in the last this many days'),
});

export interface WebSearchToolOptions {
  /** The backend, or null when none is configured (calls then fail with `missing`). */
  provider: SearchProvider | null;
  /** What to set when there is no provider. */
  missing: string;
  /** Credits per call. @default 0.5 */
  price?: number;
}

/**
 * The web_search tool.
 *
 * @example
 * const tool = webSearchTool({ provider: braveSearch({ apiKey }), missing: '' });
 */
export function webSearchTool(options: WebSearchToolOptions): Tool<z.input<typeof WebSearchInput>> {
  const { provider } = options;
  return defineTool({
    name: WEB_SEARCH_TOOL_NAME,
    description:
      'Search the web. Returns results with title, url, snippet and publication date when known. Snippets are ' +
      'previews: read a page with read_page before relying on it.',
    input: WebSearchInput,
    price: options.price ?? 0.5,
    idempotent: true,
    describe: ({ query }) => `Searching: ${query}`,
    async run(input, ctx) {
      if (!provider) throw new AgentryError('not_configured', options.missing);
      const q = WebSearchInput.parse(input);
      const results = await provider.search({
        query: q.query,
        maxResults: q.max_results,
        ...(q.include_domains ? { includeDomains: q.include_domains } : {}),
        ...(q.exclude_domains ? { excludeDomains: q.exclude_domains } : {}),
        ...(q.recency_days !== undefined ? { recencyDays: q.recency_days } : {}),
        signal: ctx.signal,
      });
      return { provider: provider.name, results };
    },
  });
}
