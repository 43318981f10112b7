import { afterEach, describe, expect, it } from 'vitest';
import { searxngSearch, searxngTimeRange } from '../../../src/web/search/searxng.js';
import type { SearchProviderError } from '../../../src/web/search-provider.js';
import { NOW, recordingSleep, searchProviderContract, type WireItem } from './contract.js';
import { startFakeServer, type FakeServer, type Reply } from './fake-server.js';

/** SearXNG's `format=json` answer (datetimes serialised by `isoformat()`, without a zone). */
function searxngBody(items: WireItem[]) {
  return {
    query: 'q',
    number_of_results: 0,
    results: items.map((item, i) => ({
      url: item.url,
      title: item.title,
      content: item.snippet,
      engine: 'duckduckgo',
      engines: ['duckduckgo'],
      positions: [i + 1],
      score: 1,
      category: 'general',
      publishedDate: item.published ?? null,
    })),
    answers: [],
    corrections: [],
    infoboxes: [],
    suggestions: [],
    unresponsive_engines: [],
  };
}

searchProviderContract({
  name: 'searxng',
  create: (baseUrl, options) => searxngSearch({ baseUrl, ...options }),
  success: searxngBody,
  wireDate: (iso) => new Date(iso).toISOString().replace(/\.\d+Z$/, ''),
  unauthorized: {
    status: 403,
    body: undefined,
    message: 'SearXNG does so when `json` is missing from `search.formats` in its settings.yml (check SEARXNG_URL',
  },
});

describe('searxngSearch: the request and the answer', () => {
  let server: FakeServer | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  async function searxng(script: Reply[], path = '') {
    server = await startFakeServer(script);
    const sleeper = recordingSleep();
    const provider = searxngSearch({
      baseUrl: `${server.url}${path}`,
      now: () => NOW,
      retry: { sleep: sleeper.sleep },
    });
    return { server, provider };
  }

  it('sends GET /search?q&format=json&pageno=1 without any key, and cuts the page to maxResults', async () => {
    const { server, provider } = await searxng([
      {
        json: searxngBody([
          {
            title: 'SearXNG &mdash; docs',
            url: 'https://docs.searxng.org/',
            snippet: 'A privacy-respecting <em>metasearch</em> engine',
            published: '2024-06-01T10:20:30',
          },
          { title: 'Two', url: 'https://two.example/', snippet: 'second' },
          { title: 'Three', url: 'https://three.example/', snippet: 'third' },
        ]),
      },
    ]);
    const results = await provider.search({ query: 'searxng json api', maxResults: 2 });

    const req = server.requests[0]!;
    expect(req.method).toBe('GET');
    expect(req.pathname).toBe('/search');
    expect([...req.query]).toEqual([
      ['q', 'searxng json api'],
      ['format', 'json'],
      ['pageno', '1'],
    ]);
    expect(req.headers.accept).toBe('application/json');
    expect(req.headers.authorization).toBeUndefined();

    expect(results).toEqual([
      {
        title: 'SearXNG — docs',
        url: 'https://docs.searxng.org/',
        snippet: 'A privacy-respecting metasearch engine',
        published_at: '2024-06-01T10:20:30.000Z',
      },
      { title: 'Two', url: 'https://two.example/', snippet: 'second' },
    ]);
  });

  it('maps recency_days to the smallest covering time_range', async () => {
    expect([1, 2, 7, 8, 31, 32, 365, 366].map(searxngTimeRange)).toEqual([
      'day',
      'week',
      'week',
      'month',
      'month',
      'year',
      'year',
      undefined,
    ]);
    const { server, provider } = await searxng([{ json: searxngBody([]) }]);
    await provider.search({ query: 'q', maxResults: 3, recencyDays: 5 });
    await provider.search({ query: 'q', maxResults: 3, recencyDays: 400 });
    expect(server.requests.map((r) => r.query.get('time_range'))).toEqual(['week', null]);
  });

  it('puts one include domain into q as site:, never the excludes, and filters on the hostname afterwards', async () => {
    const { server, provider } = await searxng([
      {
        json: searxngBody([
          { title: 'Wiki', url: 'https://en.wikipedia.org/wiki/Rust', snippet: 's' },
          { title: 'Other', url: 'https://rust-lang.org/', snippet: 's' },
        ]),
      },
    ]);
    const one = await provider.search({
      query: 'rust language',
      maxResults: 5,
      includeDomains: ['wikipedia.org'],
      excludeDomains: ['de.wikipedia.org'],
    });
    await provider.search({
      query: 'rust language',
      maxResults: 5,
      includeDomains: ['wikipedia.org', 'rust-lang.org'],
    });
    await provider.search({ query: 'rust language', maxResults: 5, excludeDomains: ['wikipedia.org'] });
    expect(server.requests.map((r) => r.query.get('q'))).toEqual([
      'rust language site:wikipedia.org',
      'rust language',
      'rust language',
    ]);
    expect(one.map((r) => r.title)).toEqual(['Wiki']);
  });

  it('takes SEARXNG_URL with or without /search, and with a path prefix', async () => {
    const { server } = await searxng([{ json: searxngBody([]) }]);
    for (const base of [`${server.url}/search`, `${server.url}/searx/`, `${server.url}/searx/search/`]) {
      await searxngSearch({ baseUrl: base }).search({ query: 'q', maxResults: 1 });
    }
    expect(server.requests.map((r) => r.pathname)).toEqual(['/search', '/searx/search', '/searx/search']);
  });

  it('a 400 with SearXNG’s JSON error is `bad_request`; a 401 says agentry sends no credentials', async () => {
    const { provider } = await searxng([
      { status: 400, json: { error: 'search error' } },
      { status: 401, text: 'Unauthorized' },
    ]);
    const bad = (await provider.search({ query: 'q', maxResults: 3 }).catch((e: unknown) => e)) as SearchProviderError;
    expect(bad.reason).toBe('bad_request');
    expect(bad.message).toBe('SearXNG rejected the search request (HTTP 400): search error');
    const refused = (await provider
      .search({ query: 'q', maxResults: 3 })
      .catch((e: unknown) => e)) as SearchProviderError;
    expect(refused.reason).toBe('unauthorized');
    expect(refused.message).toMatch(
      /asks for credentials \(HTTP 401\), which agentry does not send \(check SEARXNG_URL\)/,
    );
  });

  it('checks its options at the door', () => {
    expect(() => searxngSearch({ baseUrl: 'searx.local' })).toThrow(/Invalid searxngSearch options/);
    expect(() => searxngSearch({} as never)).toThrow(/baseUrl/);
  });
});
