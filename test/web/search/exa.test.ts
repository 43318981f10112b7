import { afterEach, describe, expect, it } from 'vitest';
import { exaSearch } from '../../../src/web/search/exa.js';
import type { SearchProviderError } from '../../../src/web/search-provider.js';
import { NOW, recordingSleep, searchProviderContract, type WireItem } from './contract.js';
import { startFakeServer, type FakeServer, type Reply } from './fake-server.js';

/** Exa's documented search answer, with highlights as the request asks. */
function exaBody(items: WireItem[]) {
  return {
    requestId: 'b5947044c4b78efa9552a7c89b306d95',
    results: items.map((item) => ({
      id: item.url,
      title: item.title,
      url: item.url,
      author: null,
      ...(item.published === undefined ? {} : { publishedDate: item.published }),
      highlights: [item.snippet],
      highlightScores: [0.46],
    })),
    searchType: 'neural',
    costDollars: { total: 0.007 },
  };
}

searchProviderContract({
  name: 'exa',
  create: (baseUrl, options) => exaSearch({ apiKey: 'exa-test-key', baseUrl, ...options }),
  success: exaBody,
  wireDate: (iso) => new Date(iso).toISOString(),
  unauthorized: {
    status: 401,
    body: { error: 'Invalid API key' },
    message: 'the Exa API key was refused (check EXA_API_KEY): Invalid API key',
  },
});

describe('exaSearch: the request and the answer', () => {
  let server: FakeServer | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  async function exa(script: Reply[], options: { type?: 'auto' | 'neural' | 'fast' | 'instant' } = {}) {
    server = await startFakeServer(script);
    const sleeper = recordingSleep();
    const provider = exaSearch({
      apiKey: 'exa-test-key',
      baseUrl: server.url,
      now: () => NOW,
      retry: { sleep: sleeper.sleep },
      ...options,
    });
    return { server, provider };
  }

  it('sends POST /search with x-api-key and the documented camelCase body asking for highlights', async () => {
    const { server, provider } = await exa([
      {
        json: {
          requestId: 'r1',
          results: [
            {
              id: 'https://arxiv.org/abs/2307.06435',
              title: 'A Comprehensive Overview of Large Language Models',
              url: 'https://arxiv.org/pdf/2307.06435.pdf',
              publishedDate: '2023-11-16T01:36:32.547Z',
              author: 'Humza Naveed',
              highlights: ['Such requirements have limited  their adoption…', 'LLMs &amp; tools.'],
              highlightScores: [0.46, 0.3],
            },
            { id: 'x', title: null, url: 'https://example.com/untitled', summary: 'A summary only.' },
            { id: 'y', title: 'Text only', url: 'https://example.com/text', text: 'Full <b>text</b> here.' },
          ],
        },
      },
    ]);
    const results = await provider.search({ query: 'Latest research in LLMs', maxResults: 7 });

    const req = server.requests[0]!;
    expect(req.method).toBe('POST');
    expect(req.pathname).toBe('/search');
    expect(req.headers['x-api-key']).toBe('exa-test-key');
    expect(req.headers.authorization).toBeUndefined();
    expect(req.headers['content-type']).toBe('application/json');
    expect(JSON.parse(req.body)).toEqual({
      query: 'Latest research in LLMs',
      type: 'auto',
      numResults: 7,
      contents: { highlights: { maxCharacters: 1000 } },
    });

    expect(results).toEqual([
      {
        title: 'A Comprehensive Overview of Large Language Models',
        url: 'https://arxiv.org/pdf/2307.06435.pdf',
        snippet: 'Such requirements have limited their adoption… … LLMs & tools.',
        published_at: '2023-11-16T01:36:32.547Z',
      },
      { title: 'https://example.com/untitled', url: 'https://example.com/untitled', snippet: 'A summary only.' },
      { title: 'Text only', url: 'https://example.com/text', snippet: 'Full text here.' },
    ]);
  });

  it('maps domains to includeDomains / excludeDomains and recency to startPublishedDate (ISO 8601)', async () => {
    const { server, provider } = await exa([{ json: exaBody([]) }], { type: 'fast' });
    await provider.search({
      query: 'speculative decoding',
      maxResults: 10,
      includeDomains: ['arxiv.org', 'paperswithcode.com'],
      excludeDomains: ['medium.com'],
      recencyDays: 365,
    });
    expect(JSON.parse(server.requests[0]!.body)).toEqual({
      query: 'speculative decoding',
      type: 'fast',
      numResults: 10,
      includeDomains: ['arxiv.org', 'paperswithcode.com'],
      excludeDomains: ['medium.com'],
      startPublishedDate: '2024-03-15T00:00:00.000Z',
      contents: { highlights: { maxCharacters: 1000 } },
    });
  });

  it('a 400 is `bad_request` with Exa’s error and message', async () => {
    const { provider } = await exa([
      {
        status: 400,
        json: {
          error: 'Invalid request',
          message: 'The company category does not support excludeDomains',
          statusCode: 400,
        },
      },
    ]);
    const err = (await provider.search({ query: 'q', maxResults: 3 }).catch((e: unknown) => e)) as SearchProviderError;
    expect(err.reason).toBe('bad_request');
    expect(err.message).toBe(
      'Exa rejected the search request (HTTP 400): Invalid request. The company category does not support excludeDomains',
    );
  });

  it('checks its options at the door', () => {
    expect(() => exaSearch({ apiKey: 'k', type: 'deep' as never })).toThrow(/type/);
    expect(() => exaSearch({ apiKey: 'k', timeoutMs: 0 })).toThrow(/timeoutMs/);
  });
});
