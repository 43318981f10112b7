import { describe, expect, it } from 'vitest';
import { AgentryError } from '../../../src/errors.js';
import { SearchProviderError } from '../../../src/web/search-provider.js';
import { endpointUrl, parseRetryAfter } from '../../../src/web/search/http.js';
import {
  decodeEntities,
  hostnameMatches,
  isoDate,
  normaliseDomain,
  plainText,
  recencyCutoff,
} from '../../../src/web/search/results.js';

describe('search-provider helpers', () => {
  it('plainText strips tags, decodes entities, collapses whitespace and cuts long text at a word', () => {
    expect(plainText('  <strong>Fast</strong>&nbsp;&amp; <em>safe</em>\n\t&#x27;fetch&#39; &hellip; &unknown; ')).toBe(
      "Fast & safe 'fetch' … &unknown;",
    );
    expect(plainText('&lt;script&gt;alert(1)&lt;/script&gt;')).toBe('<script>alert(1)</script>');
    expect(plainText(undefined)).toBe('');
    const long = plainText('word '.repeat(400));
    expect(long.length).toBeLessThanOrEqual(1000);
    expect(long.endsWith('word…')).toBe(true);
    expect(decodeEntities('&#128512; &#0; &#xFFFFFFF;')).toBe('😀 &#0; &#xFFFFFFF;');
  });

  it('isoDate reads ISO dates (zone-less as UTC) and RFC 1123, and does not guess anything else', () => {
    expect(isoDate('2024-01-15')).toBe('2024-01-15T00:00:00.000Z');
    expect(isoDate('2024-01-15T10:00:00')).toBe('2024-01-15T10:00:00.000Z');
    expect(isoDate('2024-01-15 10:00')).toBe('2024-01-15T10:00:00.000Z');
    expect(isoDate('2024-01-15T10:00:00+02:00')).toBe('2024-01-15T08:00:00.000Z');
    expect(isoDate('2023-11-16T01:36:32.547Z')).toBe('2023-11-16T01:36:32.547Z');
    expect(isoDate('Wed, 15 Jan 2025 10:00:00 GMT')).toBe('2025-01-15T10:00:00.000Z');
    for (const vague of ['2 days ago', 'June 8, 2023', '2024-13-45', '', null, 1700000000]) {
      expect(isoDate(vague)).toBeUndefined();
    }
  });

  it('recencyCutoff is midnight UTC, recencyDays before today', () => {
    expect(recencyCutoff(1, new Date('2025-03-15T00:30:00Z')).toISOString()).toBe('2025-03-14T00:00:00.000Z');
    expect(recencyCutoff(7, new Date('2025-03-15T23:59:59Z')).toISOString()).toBe('2025-03-08T00:00:00.000Z');
  });

  it('normaliseDomain and hostnameMatches compare hostnames, subdomains included, lookalikes not', () => {
    expect(normaliseDomain('https://WWW.Example.com:8443/path?q#h')).toBe('example.com');
    expect(normaliseDomain('*.example.org.')).toBe('example.org');
    expect(normaliseDomain('  ')).toBeUndefined();
    expect(hostnameMatches('docs.example.com', 'example.com')).toBe(true);
    expect(hostnameMatches('EXAMPLE.com.', 'example.com')).toBe(true);
    expect(hostnameMatches('notexample.com', 'example.com')).toBe(false);
    expect(hostnameMatches('example.com.evil.net', 'example.com')).toBe(false);
  });

  it('endpointUrl appends the path once and keeps a prefix', () => {
    expect(endpointUrl('https://api.tavily.com', '/search').href).toBe('https://api.tavily.com/search');
    expect(endpointUrl('https://proxy.local/tavily/', '/search').href).toBe('https://proxy.local/tavily/search');
    expect(endpointUrl('https://searx.local/search', '/search').href).toBe('https://searx.local/search');
  });

  it('parseRetryAfter reads seconds and HTTP dates', () => {
    const now = new Date('2025-03-15T12:00:00Z');
    expect(parseRetryAfter('2', now)).toBe(2000);
    expect(parseRetryAfter('0.5', now)).toBe(500);
    expect(parseRetryAfter('Sat, 15 Mar 2025 12:00:10 GMT', now)).toBe(10_000);
    expect(parseRetryAfter('Sat, 15 Mar 2025 11:00:00 GMT', now)).toBe(0);
    expect(parseRetryAfter('soon', now)).toBeUndefined();
    expect(parseRetryAfter(null, now)).toBeUndefined();
  });

  it('SearchProviderError is an AgentryError with invalid_request, the provider and the upstream status', () => {
    const err = new SearchProviderError('brave', 'rate_limited', 'slow down', { upstreamStatus: 429 });
    expect(err).toBeInstanceOf(AgentryError);
    expect(err.name).toBe('SearchProviderError');
    expect(err.code).toBe('invalid_request');
    expect(err.status).toBe(400);
    expect(err.upstreamStatus).toBe(429);
    expect(err.details).toEqual({ provider: 'brave', reason: 'rate_limited', upstream_status: 429 });
    expect(SearchProviderError.isInstance(err)).toBe(true);
    expect(SearchProviderError.isInstance(new AgentryError('invalid_request', 'x'))).toBe(false);
    expect(AgentryError.isInstance(err)).toBe(true);
  });
});
