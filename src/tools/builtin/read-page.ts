/**
 * @module tools/builtin/read-page
 * `read_page` (README.md#tools): a web page's title, main content as Markdown and links, read through the guarded
 * fetch. Every page read is recorded for the call, so that research tools can check citations against what was read.
 */
import { z } from 'zod';
import { defineTool, type Tool } from '../define-tool.js';

export const READ_PAGE_TOOL_NAME = 'read_page';

const ReadPageInput = z.object({
  url: z
    .url({ protocol: /^https?$/, error: 'must be an http(s) URL' })
    .max(4_000)
    .describe('The page to read (http or https)'),
  max_chars: z
    .number()
    .int()
    .min(500)
    .max(100_000)
    .optional()
    .describe('Characters of content to return at most (default 20,000); longer pages come back truncated'),
});

/**
 * The read_page tool.
 *
 * @example
 * const runtime = await AgentRuntime.open({ builtinTools: { only: ['read_page'] } });
 */
export function readPageTool(options: { price?: number } = {}): Tool<z.infer<typeof ReadPageInput>> {
  return defineTool({
    name: READ_PAGE_TOOL_NAME,
    description:
      'Read a web page: returns its title, its main content as Markdown (navigation and ads removed), its links and ' +
      'whether the content was truncated. Plain text, JSON, Markdown and PDF pages work too. Use it to read a search ' +
      'result before relying on it.',
    input: ReadPageInput,
    price: options.price ?? 0.05,
    idempotent: true,
    describe: ({ url }) => `Reading ${url}`,
    async run({ url, max_chars }, ctx) {
      const page = await ctx.readPage(url, max_chars === undefined ? {} : { maxChars: max_chars });
      return {
        url: page.url,
        final_url: page.final_url,
        title: page.title,
        content: page.content,
        links: page.links,
        truncated: page.truncated,
      };
    },
  });
}
