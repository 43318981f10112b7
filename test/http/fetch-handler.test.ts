/**
 * The fetch handler's options, in-process: validation at the door, basePath, CORS, the token bucket (on a fake
 * time source), the unmatched marker, and `allowedMethods`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentRuntime, AgentryError, memoryStorage } from 'agentry-runtime';
import { createFetchHandler, isUnmatchedResponse, buildOpenApiDocument } from 'agentry-runtime/http';
import { scriptedModel } from 'agentry-runtime/testing';

let runtime: AgentRuntime;
let key: string;

beforeAll(async () => {
  runtime = await AgentRuntime.open({ storage: memoryStorage(), model: scriptedModel({ turns: [{ text: 'Done.' }] }) });
  key = (await runtime.accounts.create({ name: 't', credits: 10 })).apiKey!.key;
});
afterAll(() => runtime.close());

const get = (path: string, headers: Record<string, string> = {}, method = 'GET') =>
  new Request(`http://x${path}`, { method, headers });

describe('createFetchHandler', () => {
  it('checks its options at the door', () => {
    for (const options of [
      { basePath: 'v1' },
      { basePath: '/v1/' },
      { bodyLimitBytes: 0 },
      { rateLimit: { capacity: 0, refillPerSecond: 1 } },
      { cors: { origins: ['not an origin'] } },
      { nope: true },
    ]) {
      expect(() => createFetchHandler(runtime, options as never)).toThrow(AgentryError);
    }
    expect(() => createFetchHandler({} as AgentRuntime)).toThrow(/AgentRuntime/);
  });

  it('serves under basePath and marks other paths as unmatched', async () => {
    const handle = createFetchHandler(runtime, { basePath: '/v1' });
    expect((await handle(get('/v1/api/agents', { 'x-api-key': key }))).status).toBe(200);
    const outside = await handle(get('/api/agents', { 'x-api-key': key }));
    expect(outside.status).toBe(404);
    expect(isUnmatchedResponse(outside)).toBe(true);
    expect(outside.headers.get('x-request-id')).toBeTruthy();
    const inside = await handle(get('/v1/api/agents/x/y/z', { 'x-api-key': key }));
    expect(inside.status).toBe(404);
    expect(isUnmatchedResponse(inside)).toBe(false);
    expect(handle.allowedMethods('/v1/api/agents')).toEqual(['GET', 'POST']);
    expect(handle.allowedMethods('/v1/api/agents/abc')).toEqual(['GET', 'DELETE']);
    expect(handle.allowedMethods('/v1/api/agents/abc/resume')).toEqual(['POST']);
    expect(handle.allowedMethods('/elsewhere')).toBeNull();
    const doc = (await (await handle(get('/v1/api/openapi.json'))).json()) as { paths: Record<string, unknown> };
    expect(Object.keys(doc.paths)).toContain('/v1/api/agents/{id}/pause');
    expect(buildOpenApiDocument({ basePath: '/v1' })).toEqual(doc);
  });

  it('CORS is off by default and answers allowed origins when on', async () => {
    const off = createFetchHandler(runtime);
    const plain = await off(get('/api/agents', { origin: 'https://app.example', 'x-api-key': key }));
    expect(plain.headers.get('access-control-allow-origin')).toBeNull();
    expect((await off(get('/api/agents', { origin: 'https://app.example' }, 'OPTIONS'))).status).toBe(405);

    const on = createFetchHandler(runtime, { cors: { origins: ['https://app.example'], maxAgeSeconds: 60 } });
    const preflight = await on(
      get('/api/agents/abc', { origin: 'https://app.example', 'access-control-request-method': 'DELETE' }, 'OPTIONS'),
    );
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-origin')).toBe('https://app.example');
    expect(preflight.headers.get('access-control-allow-methods')).toBe('GET, DELETE');
    expect(preflight.headers.get('access-control-allow-headers')).toContain('x-api-key');
    expect(preflight.headers.get('access-control-max-age')).toBe('60');
    const actual = await on(get('/api/agents', { origin: 'https://app.example', 'x-api-key': key }));
    expect(actual.headers.get('access-control-allow-origin')).toBe('https://app.example');
    expect(actual.headers.get('access-control-expose-headers')).toContain('x-request-id');
    expect(actual.headers.get('vary')).toBe('Origin');
    const stranger = await on(get('/api/agents', { origin: 'https://evil.example', 'x-api-key': key }));
    expect(stranger.status).toBe(200);
    expect(stranger.headers.get('access-control-allow-origin')).toBeNull();
    const any = createFetchHandler(runtime, { cors: { origins: '*' } });
    expect(
      (await any(get('/api/openapi.json', { origin: 'https://x.example' }))).headers.get('access-control-allow-origin'),
    ).toBe('*');
  });

  it('rate limits per account with a token bucket, and refills', async () => {
    let now = 1_000_000;
    const handle = createFetchHandler(runtime, { rateLimit: { capacity: 3, refillPerSecond: 0.5 }, now: () => now });
    const sameAccount = (await runtime.accounts.createApiKey((await runtime.accounts.authenticate(key)).account_id))
      .key;
    const other = (await runtime.accounts.create({ name: 'another', credits: 1 })).apiKey!.key;
    const statuses = [];
    for (let i = 0; i < 4; i++) statuses.push((await handle(get('/api/agents', { 'x-api-key': key }))).status);
    expect(statuses).toEqual([200, 200, 200, 429]);
    const limited = await handle(get('/api/agents', { 'x-api-key': key }));
    expect(limited.headers.get('retry-after')).toBe('2');
    // Another key of the same account draws on the same bucket; another account has its own.
    expect((await handle(get('/api/agents', { 'x-api-key': sameAccount }))).status).toBe(429);
    expect((await handle(get('/api/agents', { 'x-api-key': other }))).status).toBe(200);
    now += 2_000;
    expect((await handle(get('/api/agents', { 'x-api-key': key }))).status).toBe(200);
    expect((await handle(get('/api/agents', { 'x-api-key': key }))).status).toBe(429);
    // Unknown keys never reach the bucket: they are 401, not 429.
    expect((await handle(get('/api/agents', { 'x-api-key': 'agk_unknown' }))).status).toBe(401);
    const unlimited = createFetchHandler(runtime, { rateLimit: false });
    for (let i = 0; i < 50; i++) expect((await unlimited(get('/api/agents', { 'x-api-key': key }))).status).toBe(200);
  });

  it('a smaller body limit applies to declared and streamed sizes', async () => {
    const handle = createFetchHandler(runtime, { bodyLimitBytes: 64 });
    const body = JSON.stringify({ goal: 'x'.repeat(100) });
    const declared = await handle(
      new Request('http://x/api/agents', {
        method: 'POST',
        body,
        headers: { 'x-api-key': key, 'content-type': 'application/json' },
      }),
    );
    expect(declared.status).toBe(413);
    const streamed = await handle(
      new Request('http://x/api/agents', {
        method: 'POST',
        body: new Blob([body]).stream(),
        headers: { 'x-api-key': key, 'content-type': 'application/json' },
        duplex: 'half',
      } as RequestInit),
    );
    expect(streamed.status).toBe(413);
    const small = await handle(
      new Request('http://x/api/agents', {
        method: 'POST',
        body: '\uFEFF{"goal":"hi"}',
        headers: { 'x-api-key': key, 'content-type': 'application/json' },
      }),
    );
    expect(small.status).toBe(201);
  });

  it('reports unexpected errors through onError and answers 500 without details', async () => {
    const seen: unknown[] = [];
    const broken = Object.create(runtime) as AgentRuntime;
    broken.list = async () => {
      throw new TypeError('secret detail');
    };
    const handle = createFetchHandler(broken, { onError: (error, { request_id }) => seen.push([error, request_id]) });
    const r = await handle(get('/api/agents', { 'x-api-key': key, 'x-request-id': 'trace-1' }));
    expect(r.status).toBe(500);
    expect(await r.json()).toEqual({
      error: { code: 'internal_error', message: 'Internal server error', request_id: 'trace-1' },
    });
    expect(seen).toHaveLength(1);
    expect((seen[0] as [Error, string])[1]).toBe('trace-1');
  });
});
