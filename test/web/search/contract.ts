/**
 * What every search client must do, whatever its provider: retries and errors, aborts and time limits, and the
 * filters applied afterwards. Each provider's test file builds its client and calls {@link searchProviderContract}.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { AgentryError } from '../../../src/errors.js';
import {
  SearchProviderError,
  type SearchClientOptions,
  type SearchProvider,
} from '../../../src/web/search-provider.js';
import { closedPort, startFakeServer, type FakeServer, type Reply } from './fake-server.js';

/** The fixed clock of the tests. */
export const NOW = new Date('2025-03-15T12:00:00.000Z');

/** A result as the tests describe it, turned into each provider's wire shape by {@link ProviderUnderTest.success}. */
export interface WireItem {
  title: string;
  url: string;
  snippet: string;
  /** In the provider's own date format. */
  published?: string;
}

export interface ProviderUnderTest {
  name: string;
  create(baseUrl: string, options: SearchClientOptions): SearchProvider;
  /** A successful answer in the provider's documented shape. */
  success(items: WireItem[]): unknown;
  /** A provider-format date for an ISO date-time (the filters must read it). */
  wireDate(iso: string): string;
  /** The message a refused request must carry. */
  unauthorized: { status: number; body: unknown; message: string };
}

/** Records the delays the client asks for, without waiting. */
export function recordingSleep(): { delays: number[]; sleep: (ms: number) => Promise<void> } {
  const delays: number[] = [];
  return {
    delays,
    sleep: async (ms: number) => {
      delays.push(ms);
    },
  };
}

async function failure(promise: Promise<unknown>): Promise<SearchProviderError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(SearchProviderError.isInstance(err), `expected a SearchProviderError, got ${String(err)}`).toBe(true);
  return err as SearchProviderError;
}

export function searchProviderContract(p: ProviderUnderTest): void {
  describe(`${p.name}: behaviour every search client shares`, () => {
    let server: FakeServer | undefined;
    afterEach(async () => {
      await server?.close();
      server = undefined;
    });

    const ok: Reply = {
      json: p.success([{ title: 'One', url: 'https://one.example/', snippet: 'first' }]),
    };

    async function setup(script: Reply[], options: SearchClientOptions = {}) {
      server = await startFakeServer(script);
      const sleeper = recordingSleep();
      const provider = p.create(server.url, { now: () => NOW, retry: { sleep: sleeper.sleep }, ...options });
      return { server, provider, delays: sleeper.delays };
    }

    it('a refused key is `unauthorized`, names what to check, and is not retried', async () => {
      const { server, provider, delays } = await setup([
        { status: p.unauthorized.status, json: p.unauthorized.body },
        ok,
      ]);
      const err = await failure(provider.search({ query: 'q', maxResults: 3 }));
      expect(err.reason).toBe('unauthorized');
      expect(err.code).toBe('invalid_request');
      expect(err.provider).toBe(p.name);
      expect(err.upstreamStatus).toBe(p.unauthorized.status);
      expect(err.message).toContain(p.unauthorized.message);
      expect(server.requests).toHaveLength(1);
      expect(delays).toEqual([]);
    });

    it('429 then 200: waits as Retry-After says (seconds), then succeeds', async () => {
      const { server, provider, delays } = await setup([
        { status: 429, headers: { 'retry-after': '3' }, json: {} },
        ok,
      ]);
      const results = await provider.search({ query: 'q', maxResults: 3 });
      expect(results.map((r) => r.url)).toEqual(['https://one.example/']);
      expect(delays).toEqual([3000]);
      expect(server.requests).toHaveLength(2);
    });

    it('429 with an HTTP-date Retry-After waits until that date', async () => {
      const { provider, delays } = await setup([
        { status: 429, headers: { 'retry-after': 'Sat, 15 Mar 2025 12:00:05 GMT' }, json: {} },
        ok,
      ]);
      await provider.search({ query: 'q', maxResults: 3 });
      expect(delays).toEqual([5000]);
    });

    it('429 without Retry-After backs off exponentially (500, 1000 ms)', async () => {
      const { server, provider, delays } = await setup([{ status: 429, json: {} }, { status: 429, json: {} }, ok]);
      await provider.search({ query: 'q', maxResults: 3 });
      expect(delays).toEqual([500, 1000]);
      expect(server.requests).toHaveLength(3);
    });

    it('429 forever: three retries, then a clear `rate_limited` error', async () => {
      const { server, provider, delays } = await setup([{ status: 429, json: {} }]);
      const err = await failure(provider.search({ query: 'q', maxResults: 3 }));
      expect(err.reason).toBe('rate_limited');
      expect(err.upstreamStatus).toBe(429);
      expect(err.message).toMatch(/rate limit was reached \(HTTP 429\).*3 retries did not help/);
      expect(delays).toEqual([500, 1000, 2000]);
      expect(server.requests).toHaveLength(4);
    });

    it('a Retry-After longer than the client waits fails at once and says when to retry', async () => {
      const { server, provider, delays } = await setup([{ status: 429, headers: { 'retry-after': '120' }, json: {} }]);
      const err = await failure(provider.search({ query: 'q', maxResults: 3 }));
      expect(err.reason).toBe('rate_limited');
      expect(err.message).toContain('retry after 120 s');
      expect(delays).toEqual([]);
      expect(server.requests).toHaveLength(1);
    });

    it('maxRetries: 0 gives up on the first 429', async () => {
      const { server, provider } = await setup([{ status: 429, json: {} }], { retry: { maxRetries: 0 } });
      const err = await failure(provider.search({ query: 'q', maxResults: 3 }));
      expect(err.reason).toBe('rate_limited');
      expect(server.requests).toHaveLength(1);
    });

    it('500 forever: retried twice, then `upstream`', async () => {
      const { server, provider, delays } = await setup([{ status: 500, text: 'Internal Server Error' }]);
      const err = await failure(provider.search({ query: 'q', maxResults: 3 }));
      expect(err.reason).toBe('upstream');
      expect(err.upstreamStatus).toBe(500);
      expect(err.message).toMatch(/failed to answer \(HTTP 500\).*2 retries did not help/);
      expect(delays).toEqual([500, 1000]);
      expect(server.requests).toHaveLength(3);
    });

    it('503 then 200 succeeds', async () => {
      const { server, provider } = await setup([{ status: 503, json: {} }, ok]);
      await expect(provider.search({ query: 'q', maxResults: 3 })).resolves.toHaveLength(1);
      expect(server.requests).toHaveLength(2);
    });

    it('a 200 that is not JSON is `invalid_response`, not retried', async () => {
      const { server, provider } = await setup([{ text: '<html><body>Just a moment…</body></html>' }]);
      const err = await failure(provider.search({ query: 'q', maxResults: 3 }));
      expect(err.reason).toBe('invalid_response');
      expect(err.message).toContain('Just a moment');
      expect(server.requests).toHaveLength(1);
    });

    it('JSON in the wrong shape is `invalid_response`', async () => {
      const { provider } = await setup([{ json: 'not an object' }]);
      const err = await failure(provider.search({ query: 'q', maxResults: 3 }));
      expect(err.reason).toBe('invalid_response');
    });

    it('an unreachable provider is `upstream` after the retries', async () => {
      const port = await closedPort();
      const sleeper = recordingSleep();
      const provider = p.create(`http://127.0.0.1:${port}`, { now: () => NOW, retry: { sleep: sleeper.sleep } });
      const err = await failure(provider.search({ query: 'q', maxResults: 3 }));
      expect(err.reason).toBe('upstream');
      expect(err.message).toMatch(/could not be reached \(.*ECONNREFUSED\)/);
      expect(sleeper.delays).toEqual([500, 1000]);
    });

    it('a refusal by the fetch it is given (the guard) is reported as it is, not retried', async () => {
      let calls = 0;
      const provider = p.create('http://127.0.0.1:9', {
        now: () => NOW,
        fetch: async () => {
          calls += 1;
          throw new AgentryError(
            'invalid_request',
            'Refused http://127.0.0.1:9/: loopback address (AGENTRY_FETCH_ALLOW)',
          );
        },
      });
      const err = await failure(provider.search({ query: 'q', maxResults: 3 }));
      expect(err.reason).toBe('upstream');
      expect(err.message).toContain('failed: Refused http://127.0.0.1:9/: loopback address (AGENTRY_FETCH_ALLOW)');
      expect(calls).toBe(1);
    });

    it('an attempt past timeoutMs counts as a provider failure', async () => {
      const { provider } = await setup([{ hang: true }], { timeoutMs: 50, retry: { maxRetries: 0 } });
      const err = await failure(provider.search({ query: 'q', maxResults: 3 }));
      expect(err.reason).toBe('upstream');
      expect(err.message).toContain('did not answer within 50 ms');
    });

    it('an abort rejects with the signal’s reason, during a request or before one', async () => {
      const { server, provider } = await setup([{ hang: true }]);
      const controller = new AbortController();
      const paused = new Error('paused');
      const pending = provider.search({ query: 'q', maxResults: 3, signal: controller.signal });
      while (server.requests.length === 0) await new Promise((r) => setTimeout(r, 5));
      controller.abort(paused);
      await expect(pending).rejects.toBe(paused);
      await expect(provider.search({ query: 'q', maxResults: 3, signal: controller.signal })).rejects.toBe(paused);
      expect(server.requests).toHaveLength(1);
    });

    it('the backoff wait gets the signal: an abort while waiting stops the retries', async () => {
      server = await startFakeServer([{ status: 429, json: {} }]);
      const controller = new AbortController();
      const paused = new Error('paused');
      const provider = p.create(server.url, {
        now: () => NOW,
        retry: {
          sleep: async (_ms, signal) => {
            controller.abort(paused);
            signal?.throwIfAborted();
          },
        },
      });
      await expect(provider.search({ query: 'q', maxResults: 3, signal: controller.signal })).rejects.toBe(paused);
      expect(server.requests).toHaveLength(1);
    });

    it('the shared filters hold whatever the provider returns: domains, recency, duplicates, scheme, cap', async () => {
      const { provider } = await setup([
        {
          json: p.success([
            {
              title: 'Old',
              url: 'https://docs.example.com/old',
              snippet: 's',
              published: p.wireDate('2024-01-01T00:00:00Z'),
            },
            {
              title: 'Kept',
              url: 'https://docs.example.com/new',
              snippet: 's',
              published: p.wireDate('2025-03-10T08:00:00Z'),
            },
            { title: 'Undated', url: 'https://example.com/undated', snippet: 's' },
            { title: 'Duplicate', url: 'https://example.com/undated', snippet: 's' },
            { title: 'Excluded', url: 'https://spam.example.com/x', snippet: 's' },
            { title: 'Elsewhere', url: 'https://other.org/x', snippet: 's' },
            { title: 'Lookalike', url: 'https://notexample.com/x', snippet: 's' },
            { title: 'Not http', url: 'ftp://example.com/file', snippet: 's' },
            {
              title: 'Boundary day',
              url: 'https://example.com/edge',
              snippet: 's',
              published: p.wireDate('2025-03-08T00:00:00Z'),
            },
            { title: 'Over the cap', url: 'https://example.com/more', snippet: 's' },
          ]),
        },
      ]);
      const results = await provider.search({
        query: 'q',
        maxResults: 3,
        includeDomains: ['example.com', 'example.org'],
        excludeDomains: ['spam.example.com'],
        recencyDays: 7,
      });
      expect(results.map((r) => r.title)).toEqual(['Kept', 'Undated', 'Boundary day']);
    });

    it('rejects a malformed query before any request', async () => {
      const { server, provider } = await setup([ok]);
      await expect(provider.search({ query: '  ', maxResults: 3 })).rejects.toMatchObject({ code: 'invalid_request' });
      await expect(provider.search({ query: 'q', maxResults: 0 })).rejects.toMatchObject({ code: 'invalid_request' });
      await expect(provider.search({ query: 'q', maxResults: 3, recencyDays: -1 })).rejects.toMatchObject({
        code: 'invalid_request',
      });
      expect(server.requests).toHaveLength(0);
    });
  });
}
