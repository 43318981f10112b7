import { afterEach, describe, expect, it } from 'vitest';
import { braveFreshness, braveSearch } from '../../../src/web/search/brave.js';
import type { SearchProviderError } from '../../../src/web/search-provider.js';
import { NOW, recordingSleep, searchProviderContract, type WireItem } from './contract.js';
import { startFakeServer, type FakeServer, type Reply } from './fake-server.js';

/** Brave's documented web search answer. */
function braveBody(items: Array<WireItem & { age?: string }>) {
  return {
    type: 'search',
    query: { original: 'q' },
    web: {
      type: 'search',
      family_friendly: true,
      results: items.map((item) => ({
        type: 'search_result',
        title: item.title,
        url: item.url,
        description: item.snippet,
        is_source_local: false,
        is_source_both: false,
        language: 'en',
        family_friendly: true,
        ...(item.published === undefined ? {} : { page_age: item.published }),
        ...(item.age === undefined ? {} : { age: item.age }),
      })),
    },
  };
}

searchProviderContract({
  name: 'brave',
  create: (baseUrl, options) => braveSearch({ apiKey: 'BSA-test-key', baseUrl, ...options }),
  success: braveBody,
  wireDate: (iso) => iso.replace(/\.\d+Z$|Z$/, ''),
  unauthorized: {
    status: 401,
    body: { type: 'ErrorResponse', error: { code: 'UNAUTHORIZED', detail: 'Unauthorized', status: 401 } },
    message: 'the Brave API key was refused (check BRAVE_API_KEY)',
  },
});

describe('braveSearch: the request and the answer', () => {
  let server: FakeServer | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  async function brave(script: Reply[]) {
    server = await startFakeServer(script);
    const sleeper = recordingSleep();
    const provider = braveSearch({
      apiKey: 'BSA-test-key',
      baseUrl: server.url,
      now: () => NOW,
      retry: { sleep: sleeper.sleep },
    });
    return { server, provider, delays: sleeper.delays };
  }

  it('sends GET /res/v1/web/search?q&count with X-Subscription-Token, Accept and gzip; reads a gzipped answer', async () => {
    const { server, provider } = await brave([
      {
        gzip: true,
        json: braveBody([
          {
            title: 'Node.js <strong>20</strong> &amp; you',
            url: 'https://nodejs.org/en/blog/release/v20.0.0',
            snippet: 'Node.js <strong>20</strong> is now available &#8212; it&#39;s   &quot;Iron&quot;\n ',
            published: '2023-04-18T12:00:00',
            age: 'April 18, 2023',
          },
          { title: 'No date', url: 'https://example.com/', snippet: 'Plain.', age: '2 days ago' },
        ]),
      },
    ]);
    const results = await provider.search({ query: 'node 20 release', maxResults: 5 });

    expect(server.requests).toHaveLength(1);
    const req = server.requests[0]!;
    expect(req.method).toBe('GET');
    expect(req.pathname).toBe('/res/v1/web/search');
    expect([...req.query]).toEqual([
      ['q', 'node 20 release'],
      ['count', '5'],
    ]);
    expect(req.headers['x-subscription-token']).toBe('BSA-test-key');
    expect(req.headers.accept).toBe('application/json');
    expect(req.headers['accept-encoding']).toBe('gzip');
    expect(req.body).toBe('');

    expect(results).toEqual([
      {
        title: 'Node.js 20 & you',
        url: 'https://nodejs.org/en/blog/release/v20.0.0',
        snippet: 'Node.js 20 is now available — it\'s "Iron"',
        published_at: '2023-04-18T12:00:00.000Z',
      },
      { title: 'No date', url: 'https://example.com/', snippet: 'Plain.' },
    ]);
  });

  it('maps recency_days to freshness: Brave windows for 1/7/31/365 days, a date range otherwise', async () => {
    expect(braveFreshness(1, NOW)).toBe('pd');
    expect(braveFreshness(7, NOW)).toBe('pw');
    expect(braveFreshness(31, NOW)).toBe('pm');
    expect(braveFreshness(365, NOW)).toBe('py');
    expect(braveFreshness(10, NOW)).toBe('2025-03-05to2025-03-15');

    const { server, provider } = await brave([{ json: braveBody([]) }]);
    await provider.search({ query: 'q', maxResults: 3, recencyDays: 7 });
    await provider.search({ query: 'q', maxResults: 3, recencyDays: 3 });
    expect(server.requests.map((r) => r.query.get('freshness'))).toEqual(['pw', '2025-03-12to2025-03-15']);
  });

  it('one include domain and the exclude domains go into q as site: operators; count stays maxResults', async () => {
    const { server, provider } = await brave([
      {
        json: braveBody([
          { title: 'A', url: 'https://developer.mozilla.org/a', snippet: 's' },
          { title: 'B', url: 'https://blog.mozilla.org/b', snippet: 's' },
          { title: 'C', url: 'https://example.net/c', snippet: 's' },
        ]),
      },
    ]);
    const results = await provider.search({
      query: 'fetch api',
      maxResults: 4,
      includeDomains: ['https://www.Mozilla.org/'],
      excludeDomains: ['blog.mozilla.org', 'w3schools.com'],
    });
    const req = server.requests[0]!;
    expect(req.query.get('q')).toBe('fetch api site:mozilla.org -site:blog.mozilla.org -site:w3schools.com');
    expect(req.query.get('count')).toBe('4');
    expect(results.map((r) => r.title)).toEqual(['A']);
  });

  it('several include domains cannot be put in q: it asks for 20 results and filters them on the hostname', async () => {
    const { server, provider } = await brave([
      {
        json: braveBody([
          { title: 'Off', url: 'https://elsewhere.com/', snippet: 's' },
          { title: 'Docs', url: 'https://docs.python.org/3/', snippet: 's' },
          { title: 'PEP', url: 'https://peps.python.org/pep-0008/', snippet: 's' },
          { title: 'RTD', url: 'https://readthedocs.io/x', snippet: 's' },
          { title: 'Apex', url: 'https://python.org/', snippet: 's' },
        ]),
      },
    ]);
    const results = await provider.search({
      query: 'asyncio',
      maxResults: 2,
      includeDomains: ['python.org', 'readthedocs.io'],
    });
    const req = server.requests[0]!;
    expect(req.query.get('q')).toBe('asyncio');
    expect(req.query.get('count')).toBe('20');
    expect(results.map((r) => r.title)).toEqual(['Docs', 'PEP']);
  });

  it('leaves operators out when they would pass Brave’s 400-character limit, and filters afterwards', async () => {
    const { server, provider } = await brave([{ json: braveBody([]) }]);
    const long = 'word '.repeat(78).trim();
    await provider.search({ query: long, maxResults: 3, excludeDomains: ['pinterest.com', 'quora.com'] });
    expect(server.requests[0]!.query.get('q')).toBe(long);
    expect(server.requests[0]!.query.get('count')).toBe('20');
  });

  it('a response without `web` (nothing found) is an empty list', async () => {
    const { provider } = await brave([{ json: { type: 'search', query: { original: 'zzqx' } } }]);
    await expect(provider.search({ query: 'zzqx', maxResults: 3 })).resolves.toEqual([]);
  });

  it('Brave’s 422 SUBSCRIPTION_TOKEN_INVALID is a refused key', async () => {
    const { server, provider } = await brave([
      {
        status: 422,
        json: {
          type: 'ErrorResponse',
          error: {
            id: '5d832250-9396-4f6e-b84a-2a1fe524cd7d',
            status: 422,
            code: 'SUBSCRIPTION_TOKEN_INVALID',
            detail: 'The provided subscription token is invalid.',
            meta: { component: 'authentication' },
          },
          time: 1663072993,
        },
      },
    ]);
    const err = (await provider.search({ query: 'q', maxResults: 3 }).catch((e: unknown) => e)) as SearchProviderError;
    expect(err.reason).toBe('unauthorized');
    expect(err.message).toBe(
      'the Brave API key was refused (check BRAVE_API_KEY): The provided subscription token is invalid (SUBSCRIPTION_TOKEN_INVALID)',
    );
    expect(server.requests).toHaveLength(1);
  });

  it('a 422 VALIDATION error is `bad_request` with Brave’s message and the field', async () => {
    const { provider } = await brave([
      {
        status: 422,
        json: {
          type: 'ErrorResponse',
          error: {
            status: 422,
            code: 'VALIDATION',
            detail: 'Unable to validate request parameter(s)',
            meta: {
              errors: [
                { type: 'less_than_equal', loc: ['query', 'count'], msg: 'Input should be less than or equal to 20' },
              ],
            },
          },
        },
      },
    ]);
    const err = (await provider.search({ query: 'q', maxResults: 3 }).catch((e: unknown) => e)) as SearchProviderError;
    expect(err.reason).toBe('bad_request');
    expect(err.upstreamStatus).toBe(422);
    expect(err.message).toBe(
      'Brave rejected the search request (HTTP 422): Unable to validate request parameter(s); query.count: Input should be less than or equal to 20 (VALIDATION)',
    );
  });

  it('a 429 without Retry-After waits for the shortest X-RateLimit-Reset window', async () => {
    const { provider, delays } = await brave([
      {
        status: 429,
        headers: { 'x-ratelimit-limit': '1, 15000', 'x-ratelimit-reset': '1, 1419704' },
        json: {
          type: 'ErrorResponse',
          error: { code: 'RATE_LIMITED', detail: 'Request rate limit exceeded for plan.', status: 429 },
        },
      },
      { json: braveBody([{ title: 'T', url: 'https://t.example/', snippet: 's' }]) },
    ]);
    await expect(provider.search({ query: 'q', maxResults: 3 })).resolves.toHaveLength(1);
    expect(delays).toEqual([1000]);
  });

  it('QUOTA_LIMITED (the monthly quota) is `rate_limited` at once: waiting seconds would not help', async () => {
    const { server, provider, delays } = await brave([
      {
        status: 429,
        headers: { 'x-ratelimit-reset': '1, 1419704' },
        json: {
          type: 'ErrorResponse',
          error: { code: 'QUOTA_LIMITED', detail: 'Request quota limit exceeded for plan.', status: 429 },
        },
      },
    ]);
    const err = (await provider.search({ query: 'q', maxResults: 3 }).catch((e: unknown) => e)) as SearchProviderError;
    expect(err.reason).toBe('rate_limited');
    expect(err.message).toContain('quota of this key is used up (QUOTA_LIMITED)');
    expect(delays).toEqual([]);
    expect(server.requests).toHaveLength(1);
  });

  it('keeps a path prefix of the base URL (a proxy mount) and checks its options at the door', async () => {
    const { server } = await brave([{ json: braveBody([]) }]);
    await braveSearch({ apiKey: 'k', baseUrl: `${server.url}/brave/` }).search({ query: 'q', maxResults: 1 });
    expect(server.requests[0]!.pathname).toBe('/brave/res/v1/web/search');

    expect(() => braveSearch({ apiKey: '' })).toThrow(/Invalid braveSearch options/);
    expect(() => braveSearch({ apiKey: 'k', baseUrl: 'ftp://example.com' })).toThrow(/baseUrl/);
    expect(() => braveSearch({ apiKey: 'k', retry: { maxRetries: -1 } })).toThrow(/retry\.maxRetries/);
    expect(() => braveSearch({ apiKey: 'k', unknown: 1 } as never)).toThrow(/Invalid braveSearch options/);
  });
});
