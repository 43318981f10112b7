import { afterEach, describe, expect, it } from 'vitest';
import { tavilySearch } from '../../../src/web/search/tavily.js';
import type { SearchProviderError } from '../../../src/web/search-provider.js';
import { NOW, recordingSleep, searchProviderContract, type WireItem } from './contract.js';
import { startFakeServer, type FakeServer, type Reply } from './fake-server.js';

/** Tavily's documented search answer. */
function tavilyBody(items: WireItem[]) {
  return {
    query: 'q',
    answer: null,
    images: [],
    results: items.map((item, i) => ({
      title: item.title,
      url: item.url,
      content: item.snippet,
      score: 0.9 - i / 100,
      raw_content: null,
      ...(item.published === undefined ? {} : { published_date: item.published }),
    })),
    response_time: '1.67',
    request_id: '123e4567-e89b-12d3-a456-426614174111',
  };
}

searchProviderContract({
  name: 'tavily',
  create: (baseUrl, options) => tavilySearch({ apiKey: 'tvly-test-key', baseUrl, ...options }),
  success: tavilyBody,
  // Tavily news results carry RFC 1123 dates.
  wireDate: (iso) => new Date(iso).toUTCString(),
  unauthorized: {
    status: 401,
    body: { detail: { error: 'Unauthorized: missing or invalid API key.' } },
    message: 'the Tavily API key was refused (check TAVILY_API_KEY): Unauthorized: missing or invalid API key',
  },
});

describe('tavilySearch: the request and the answer', () => {
  let server: FakeServer | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  async function tavily(script: Reply[], options: { searchDepth?: 'basic' | 'advanced' } = {}) {
    server = await startFakeServer(script);
    const sleeper = recordingSleep();
    const provider = tavilySearch({
      apiKey: 'tvly-test-key',
      baseUrl: server.url,
      now: () => NOW,
      retry: { sleep: sleeper.sleep },
      ...options,
    });
    return { server, provider, delays: sleeper.delays };
  }

  it('sends POST /search with Authorization: Bearer and the documented JSON body', async () => {
    const { server, provider } = await tavily([
      {
        json: tavilyBody([
          {
            title: 'Lionel Messi Facts | Britannica',
            url: 'https://www.britannica.com/facts/Lionel-Messi',
            snippet: 'Lionel Messi, an Argentine footballer […] is widely regarded',
            published: 'Mon, 10 Mar 2025 09:30:00 GMT',
          },
        ]),
      },
    ]);
    const results = await provider.search({ query: 'who is Leo Messi?', maxResults: 5 });

    const req = server.requests[0]!;
    expect(req.method).toBe('POST');
    expect(req.pathname).toBe('/search');
    expect([...req.query]).toEqual([]);
    expect(req.headers.authorization).toBe('Bearer tvly-test-key');
    expect(req.headers['content-type']).toBe('application/json');
    expect(JSON.parse(req.body)).toEqual({
      query: 'who is Leo Messi?',
      max_results: 5,
      search_depth: 'basic',
      topic: 'general',
    });
    expect(req.body).not.toContain('api_key');

    expect(results).toEqual([
      {
        title: 'Lionel Messi Facts | Britannica',
        url: 'https://www.britannica.com/facts/Lionel-Messi',
        snippet: 'Lionel Messi, an Argentine footballer […] is widely regarded',
        published_at: '2025-03-10T09:30:00.000Z',
      },
    ]);
  });

  it('maps domains to include_domains / exclude_domains and recency to start_date', async () => {
    const { server, provider } = await tavily([{ json: tavilyBody([]) }], { searchDepth: 'advanced' });
    await provider.search({
      query: 'EU AI act timeline',
      maxResults: 20,
      includeDomains: ['https://www.europa.eu/path', 'eur-lex.europa.eu', 'europa.eu'],
      excludeDomains: ['Reddit.com'],
      recencyDays: 30,
    });
    expect(JSON.parse(server.requests[0]!.body)).toEqual({
      query: 'EU AI act timeline',
      max_results: 20,
      search_depth: 'advanced',
      topic: 'general',
      include_domains: ['europa.eu', 'eur-lex.europa.eu'],
      exclude_domains: ['reddit.com'],
      start_date: '2025-02-13',
    });
  });

  it('a 400 is `bad_request` with Tavily’s detail.error', async () => {
    const { provider } = await tavily([
      { status: 400, json: { detail: { error: "Invalid topic. Must be 'general' or 'news'." } } },
    ]);
    const err = (await provider.search({ query: 'q', maxResults: 3 }).catch((e: unknown) => e)) as SearchProviderError;
    expect(err.reason).toBe('bad_request');
    expect(err.message).toBe(
      "Tavily rejected the search request (HTTP 400): Invalid topic. Must be 'general' or 'news'",
    );
  });

  it('a 422 from request validation is `bad_request` naming the field', async () => {
    const { provider } = await tavily([
      {
        status: 422,
        json: {
          detail: [{ loc: ['body', 'max_results'], msg: 'Input should be less than or equal to 20', type: 'x' }],
        },
      },
    ]);
    const err = (await provider.search({ query: 'q', maxResults: 3 }).catch((e: unknown) => e)) as SearchProviderError;
    expect(err.reason).toBe('bad_request');
    expect(err.message).toContain('body.max_results: Input should be less than or equal to 20');
  });

  it('plan limits (432, 433) are `rate_limited` and not retried', async () => {
    const { server, provider, delays } = await tavily([
      {
        status: 432,
        json: { detail: { error: "This request exceeds your plan's set usage limit. Please upgrade your plan." } },
      },
      { status: 433, json: { detail: { error: 'This request exceeds the pay-as-you-go limit.' } } },
    ]);
    const first = (await provider
      .search({ query: 'q', maxResults: 3 })
      .catch((e: unknown) => e)) as SearchProviderError;
    expect(first.reason).toBe('rate_limited');
    expect(first.message).toContain('the Tavily key or plan limit of this key is reached (HTTP 432)');
    const second = (await provider
      .search({ query: 'q', maxResults: 3 })
      .catch((e: unknown) => e)) as SearchProviderError;
    expect(second.message).toContain('pay-as-you-go limit of this key is reached (HTTP 433)');
    expect(server.requests).toHaveLength(2);
    expect(delays).toEqual([]);
  });

  it('a documented 429 body is retried and its message kept when retries run out', async () => {
    const { provider } = await tavily([
      {
        status: 429,
        json: {
          detail: { error: 'Your request has been blocked due to excessive requests. Please reduce rate of requests.' },
        },
      },
    ]);
    const err = (await provider.search({ query: 'q', maxResults: 3 }).catch((e: unknown) => e)) as SearchProviderError;
    expect(err.message).toBe(
      'the Tavily API rate limit was reached (HTTP 429): Your request has been blocked due to excessive requests. Please reduce rate of requests; 3 retries did not help',
    );
  });

  it('checks its options at the door', () => {
    expect(() => tavilySearch({ apiKey: ' ' })).toThrow(/Invalid tavilySearch options/);
    expect(() => tavilySearch({ apiKey: 'k', searchDepth: 'deep' as never })).toThrow(/searchDepth/);
  });
});
