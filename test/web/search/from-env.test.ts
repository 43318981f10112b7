import { afterEach, describe, expect, it } from 'vitest';
import { AgentryError } from '../../../src/errors.js';
import {
  SEARCH_PROVIDER_ENV,
  searchProviderFromEnv,
  searchProviderSetupHint,
} from '../../../src/web/search/from-env.js';
import type { FetchLike } from '../../../src/web/search-provider.js';
import { startFakeServer, type FakeServer } from './fake-server.js';

const ALL = {
  BRAVE_API_KEY: 'BSA-key',
  TAVILY_API_KEY: 'tvly-key',
  EXA_API_KEY: 'exa-key',
  SEARXNG_URL: 'http://127.0.0.1:8888',
};

describe('searchProviderFromEnv', () => {
  let server: FakeServer | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  it('takes the first configured provider in the order BRAVE, TAVILY, EXA, SEARXNG', () => {
    expect(SEARCH_PROVIDER_ENV).toEqual(['BRAVE_API_KEY', 'TAVILY_API_KEY', 'EXA_API_KEY', 'SEARXNG_URL']);
    expect(searchProviderFromEnv(ALL)?.name).toBe('brave');
    expect(searchProviderFromEnv({ ...ALL, BRAVE_API_KEY: undefined })?.name).toBe('tavily');
    expect(searchProviderFromEnv({ EXA_API_KEY: 'e', SEARXNG_URL: ALL.SEARXNG_URL })?.name).toBe('exa');
    expect(searchProviderFromEnv({ SEARXNG_URL: ALL.SEARXNG_URL })?.name).toBe('searxng');
  });

  it('counts an empty or blank variable as unset, and returns null when nothing is set', () => {
    expect(searchProviderFromEnv({ BRAVE_API_KEY: '', TAVILY_API_KEY: '   ', EXA_API_KEY: 'e' })?.name).toBe('exa');
    expect(searchProviderFromEnv({})).toBeNull();
    expect(searchProviderFromEnv({ AGENTRY_BRAVE_BASE_URL: 'http://127.0.0.1:1' })).toBeNull();
  });

  it('says in words what to set', () => {
    expect(searchProviderSetupHint()).toBe(
      'web_search needs one of BRAVE_API_KEY, TAVILY_API_KEY, EXA_API_KEY or SEARXNG_URL',
    );
  });

  it.each([
    ['brave', 'BRAVE_API_KEY', 'AGENTRY_BRAVE_BASE_URL', '/res/v1/web/search', 'x-subscription-token', 'the-key'],
    ['tavily', 'TAVILY_API_KEY', 'AGENTRY_TAVILY_BASE_URL', '/search', 'authorization', 'Bearer the-key'],
    ['exa', 'EXA_API_KEY', 'AGENTRY_EXA_BASE_URL', '/search', 'x-api-key', 'the-key'],
  ])(
    '%s: sends to AGENTRY_…_BASE_URL with the key, through the fetch it is given',
    async (_name, keyVar, urlVar, path, header, value) => {
      server = await startFakeServer([{ json: { web: { results: [] }, results: [] } }]);
      const seen: string[] = [];
      const fetch: FetchLike = (url, init) => {
        seen.push(url);
        return globalThis.fetch(url, init);
      };
      const provider = searchProviderFromEnv({ [keyVar]: ' the-key ', [urlVar]: server.url }, fetch);
      await provider!.search({ query: 'q', maxResults: 1 });
      expect(server.requests[0]!.pathname).toBe(path);
      expect(server.requests[0]!.headers[header]).toBe(value);
      expect(seen).toHaveLength(1);
    },
  );

  it('searxng: sends to SEARXNG_URL', async () => {
    server = await startFakeServer([{ json: { results: [] } }]);
    await searchProviderFromEnv({ SEARXNG_URL: server.url })!.search({ query: 'q', maxResults: 1 });
    expect(server.requests[0]!.pathname).toBe('/search');
    expect(server.requests[0]!.query.get('format')).toBe('json');
  });

  it('passes the retry policy on', async () => {
    server = await startFakeServer([{ status: 429, json: {} }, { json: { results: [] } }]);
    const delays: number[] = [];
    const provider = searchProviderFromEnv({ SEARXNG_URL: server.url }, undefined, {
      retry: { sleep: async (ms) => void delays.push(ms) },
    });
    await provider!.search({ query: 'q', maxResults: 1 });
    expect(delays).toEqual([500]);
  });

  it('names the variable when the chosen provider’s configuration is malformed', () => {
    const err = (() => {
      try {
        searchProviderFromEnv({ SEARXNG_URL: 'searx.local:8888' });
      } catch (e) {
        return e;
      }
    })();
    expect(AgentryError.isInstance(err)).toBe(true);
    expect((err as AgentryError).code).toBe('invalid_request');
    expect((err as AgentryError).message).toMatch(/^SEARXNG_URL is not usable: Invalid searxngSearch options/);
    expect(() => searchProviderFromEnv({ EXA_API_KEY: 'k', AGENTRY_EXA_BASE_URL: 'not a url' })).toThrow(
      /EXA_API_KEY \/ AGENTRY_EXA_BASE_URL is not usable/,
    );
  });
});
