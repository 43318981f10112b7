/**
 * `ctx.pagesRead({ urls })` matches the pages a call read to the URLs it cites by the citation check's rule of when
 * two URLs are one page (scheme, case, trailing slash and fragment aside). Core does not import that rule: the tool
 * platform of the package entry lends it (`ToolPlatform.pageUrlKey`). This checks that the runtime opened from the
 * package entry still matches a cited URL written differently from the one read.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineTool } from 'agentry-runtime';
import { z } from 'zod';
import { openTestRuntime, type TestRuntime } from '../support/runtime.js';
import { startLoopbackServer, type LoopbackServer } from './web-fixtures.js';

const PAGE =
  '<!doctype html><html><head><title>A page</title></head><body><article><h1>A page</h1>' +
  '<p>The sentence a child would cite, long enough for the reader to keep it as the main content.</p>' +
  '</article></body></html>';

let site: LoopbackServer;
let t: TestRuntime;
/** What the tool's `pagesRead` answered, by the URL it was asked for. */
const found = new Map<string, string[]>();

beforeAll(async () => {
  site = await startLoopbackServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(PAGE);
  });
  const readAndCite = defineTool({
    name: 'read_and_cite',
    description: 'Reads a page, then asks which pages read match each cited URL.',
    input: z.object({ read: z.string(), cite: z.array(z.string()) }),
    price: 0,
    idempotent: true,
    async run({ read, cite }, ctx) {
      await ctx.readPage(read);
      for (const url of cite)
        found.set(
          url,
          (await ctx.pagesRead({ urls: [url] })).map((p) => p.url),
        );
      return 'done';
    },
  });
  t = await openTestRuntime(
    [
      {
        toolCalls: [
          {
            name: 'read_and_cite',
            input: {
              read: `${site.base}/a`,
              cite: [`${site.base}/a`, `${site.base.replace('http://', 'HTTPS://')}/a/#top`, `${site.base}/b`],
            },
          },
        ],
      },
      { text: 'done' },
    ],
    { tools: [readAndCite], builtinTools: { env: {}, fetch: { allow: ['127.0.0.1/32'] } } },
  );
});

afterAll(async () => {
  await t?.runtime.close();
  await site?.close();
});

describe('pagesRead({ urls }) through the package entry', () => {
  it('matches a cited URL by the citation rule, which the tool platform lends to core', async () => {
    const { agent_id } = await t.runtime.create({ goal: 'read and cite' });
    const agent = await t.runtime.waitFor(agent_id);
    expect(agent.status).toBe('COMPLETED');
    const read = `${site.base}/a`;
    expect(found.get(read)).toEqual([read]);
    // Another scheme, upper case, a trailing slash and a fragment: the same page to the citation check.
    expect(found.get(`${site.base.replace('http://', 'HTTPS://')}/a/#top`)).toEqual([read]);
    expect(found.get(`${site.base}/b`)).toEqual([]);
  });
});
