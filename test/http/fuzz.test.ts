/**
 * Fuzz: thousands of random, mostly malformed requests (methods, paths, ids, headers, content types, bodies, huge
 * and deeply nested JSON) against the node handler on a real socket. None may get a 5xx, hang, or crash the server,
 * and every error must have the API's error shape with its request id. A small part goes over a raw socket, for what
 * fetch refuses to send (TRACE, absolute-form and `*` targets, odd bytes in the path).
 */
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentRuntime, memoryStorage } from 'agentry-runtime';
import { createNodeHandler } from 'agentry-runtime/http';
import { scriptedModel } from 'agentry-runtime/testing';
import { ERROR_CODES_BY_STATUS } from './conformance.js';

const SEED = Number(process.env.FUZZ_SEED ?? 20_251_122);
const RUNS = Number(process.env.FUZZ_RUNS ?? 2_000);

let runtime: AgentRuntime;
let server: Server;
let base: string;
let key: string;
let otherKey: string;
const ids: string[] = [];
const unexpected: unknown[] = [];

beforeAll(async () => {
  runtime = await AgentRuntime.open({
    storage: memoryStorage(),
    model: scriptedModel({
      turns: (request) =>
        JSON.stringify(request.messages[0]).includes('hold') ? { text: 'late', delayMs: 60_000 } : { text: 'Done.' },
    }),
  });
  const a = await runtime.accounts.create({ name: 'fuzz', credits: 1_000_000 });
  const b = await runtime.accounts.create({ name: 'other', credits: 10 });
  key = a.apiKey!.key;
  otherKey = b.apiKey!.key;
  for (const goal of ['hold on', 'finish']) {
    ids.push((await runtime.create({ goal, accountId: a.account.account_id })).agent_id);
    ids.push((await runtime.create({ goal, accountId: b.account.account_id })).agent_id);
  }
  server = createServer(createNodeHandler(runtime, { rateLimit: false, onError: (error) => unexpected.push(error) }));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve));
  await runtime?.close();
});

/** A printable-ASCII string (what fetch can carry in a header). */
const headerText = (maxLength: number) =>
  fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength });

const nested = (depth: number, open: string, close: string, inner = '1') =>
  open.repeat(depth) + inner + close.repeat(depth);

const idArb = fc.oneof(
  fc.uuid({ version: 4 }),
  fc.constantFrom(
    ...['00000000-0000-0000-0000-000000000000', 'not-an-id', '%00', '..', '%2e%2e', '%E0%A4%A', '🙂', 'A'.repeat(3000)],
  ),
  fc.string({ maxLength: 60 }).map((s) => encodeURIComponent(s)),
  fc.constant('KNOWN'),
);

const pathArb = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom('/api/agents', '/api/agents/', '/api/openapi.json', '/api/agents?limit=2') },
  {
    weight: 8,
    arbitrary: fc
      .tuple(idArb, fc.constantFrom('', '/pause', '/resume', '/events', '/x', '/pause/', '/pause/x'))
      .map(([id, s]) => `/api/agents/${id}${s}`),
  },
  {
    weight: 3,
    arbitrary: fc
      .tuple(fc.constantFrom('status', 'limit', 'cursor', 'x'), fc.string({ maxLength: 40 }))
      .map(([k, v]) => `/api/agents?${k}=${encodeURIComponent(v)}`),
  },
  { weight: 2, arbitrary: fc.webPath().map((p) => (p.startsWith('/') ? p : `/${p}`)) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      '/api',
      '/api/',
      '/API/agents',
      '/api//agents',
      '/api/agents/../openapi.json',
      '/',
      '/api/agentsX',
    ),
  },
);

const contentTypeArb = fc.oneof(
  fc.constantFrom(
    'application/json',
    'application/json; charset=utf-8',
    'application/problem+json',
    'application/json; charset=utf-16',
    'text/plain',
    'application/x-www-form-urlencoded',
    'multipart/form-data; boundary=x',
    'application/jsonx',
    '',
  ),
  headerText(80),
  fc.constant(undefined),
);

const bodyArb: fc.Arbitrary<string | Uint8Array | undefined> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({ goal: fc.string({ maxLength: 50 }) }, { requiredKeys: [] }).map((o) => JSON.stringify(o)),
  },
  {
    weight: 3,
    arbitrary: fc
      .record(
        {
          goal: fc.oneof(fc.string(), fc.integer(), fc.constant(null), fc.array(fc.string())),
          model: fc.oneof(fc.constantFrom('svc-1-lite', 'svc-1-ultra', 'nope', ''), fc.string()),
          max_credits: fc.oneof(fc.double(), fc.integer(), fc.string()),
          extra: fc.anything(),
        },
        { requiredKeys: [] },
      )
      .map((o) => JSON.stringify(o)),
  },
  { weight: 3, arbitrary: fc.json() },
  { weight: 2, arbitrary: fc.string({ maxLength: 200 }) },
  { weight: 2, arbitrary: fc.uint8Array({ maxLength: 300 }) },
  { weight: 2, arbitrary: fc.integer({ min: 30, max: 200_000 }).map((d) => nested(d, '[', ']')) },
  {
    weight: 1,
    arbitrary: fc.integer({ min: 30, max: 5_000 }).map((d) => `{"goal":"x","a":${nested(d, '{"k":', '}')}}`),
  },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 5_000 }).map((d) => nested(d, '[', ']').slice(0, -1)) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      '{"__proto__":{"goal":"x"}}',
      '{"constructor":{"prototype":{}}}',
      '{"goal":"x","goal":"y"}',
      '\uFEFF{"goal":"bom"}',
    ),
  },
  {
    weight: 1,
    arbitrary: fc.integer({ min: 1024 * 1024 - 64, max: 2 * 1024 * 1024 }).map((n) => `{"goal":"${'g'.repeat(n)}"}`),
  },
  { weight: 2, arbitrary: fc.constant(undefined) },
);

const randomRequestArb = fc.record({
  method: fc.constantFrom('GET', 'POST', 'POST', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'HEAD', 'PROPFIND'),
  path: pathArb,
  knownId: fc.nat(ids.length + 3),
  key: fc.oneof(
    fc.constant('VALID'),
    fc.constant('OTHER'),
    fc.constant(undefined),
    headerText(600),
    fc.constant('agk_'),
  ),
  contentType: contentTypeArb,
  body: bodyArb,
  idempotencyKey: fc.option(headerText(300), { nil: undefined }),
  requestId: fc.option(headerText(200), { nil: undefined }),
  lastEventId: fc.option(headerText(20), { nil: undefined }),
  chunked: fc.boolean(),
});

/** Close to a valid create, so that the fuzz also gets past validation into the runtime. */
const nearlyValidArb = fc.record({
  method: fc.constantFrom('POST', 'POST', 'POST', 'GET'),
  path: fc.constantFrom('/api/agents', '/api/agents', '/api/agents/'),
  knownId: fc.nat(3),
  key: fc.constantFrom<string | undefined>('VALID', 'VALID', 'VALID', 'OTHER', undefined),
  contentType: fc.constantFrom<string | undefined>(
    'application/json',
    'application/json',
    'application/json; charset=utf-8',
    'text/plain',
  ),
  body: fc.oneof(
    fc
      .record(
        { goal: fc.string({ minLength: 1, maxLength: 80 }), model: fc.constantFrom('svc-1-lite', 'svc-1-ultra', 'x') },
        { requiredKeys: ['goal'] },
      )
      .map((o) => JSON.stringify(o)),
    bodyArb,
  ),
  idempotencyKey: fc.option(fc.constantFrom('k1', 'k2', 'k3'), { nil: undefined }),
  requestId: fc.option(headerText(40), { nil: undefined }),
  lastEventId: fc.constant(undefined),
  chunked: fc.boolean(),
});

const requestArb = fc.oneof({ weight: 4, arbitrary: randomRequestArb }, { weight: 1, arbitrary: nearlyValidArb });

/**
 * The API's error shape (README.md#http-service), checked without expect (thousands of calls). Returns a description of
 * what is wrong.
 */
function shapeProblem(status: number, headers: Headers, text: string): string | null {
  const requestId = headers.get('x-request-id');
  if (!requestId) return 'no x-request-id header';
  if (status < 400) return null;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return `error body is not JSON: ${text.slice(0, 200)}`;
  }
  const body = json as { error?: Record<string, unknown> };
  if (!body || typeof body !== 'object' || Object.keys(body).join() !== 'error' || typeof body.error !== 'object')
    return `bad shape: ${text.slice(0, 200)}`;
  const e = body.error;
  const keys = Object.keys(e).sort().join();
  if (keys !== 'code,message,request_id' && keys !== 'code,details,message,request_id')
    return `bad error keys: ${keys}`;
  if (!ERROR_CODES_BY_STATUS[status]?.includes(e.code as string)) return `code ${String(e.code)} with status ${status}`;
  if (typeof e.message !== 'string' || e.message === '') return 'empty message';
  if (e.request_id !== requestId) return 'request_id differs from x-request-id';
  if (status === 405 && !headers.get('allow')) return '405 without Allow';
  if (status === 429 && !headers.get('retry-after')) return '429 without Retry-After';
  if (/\n\s+at |node:internal/.test(text)) return 'stack trace in body';
  return null;
}

describe('HTTP fuzz', () => {
  it(`${RUNS} random malformed requests: no 5xx, no hang, the API's error shape`, async () => {
    let sent = 0;
    const statuses = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(requestArb, async (r) => {
        let path = r.path;
        if (path.includes('KNOWN')) path = path.replace('KNOWN', ids[r.knownId % ids.length]!);
        const headers: Record<string, string> = {};
        const apiKey = r.key === 'VALID' ? key : r.key === 'OTHER' ? otherKey : r.key;
        if (apiKey !== undefined) headers['x-api-key'] = apiKey;
        if (r.contentType !== undefined) headers['content-type'] = r.contentType;
        if (r.idempotencyKey !== undefined) headers['idempotency-key'] = r.idempotencyKey;
        if (r.requestId !== undefined) headers['x-request-id'] = r.requestId;
        if (r.lastEventId !== undefined) headers['last-event-id'] = r.lastEventId;
        const init: RequestInit & { duplex?: 'half' } = {
          method: r.method,
          headers,
          signal: AbortSignal.timeout(10_000),
        };
        if (r.body !== undefined && r.method !== 'GET' && r.method !== 'HEAD') {
          const bytes = typeof r.body === 'string' ? new TextEncoder().encode(r.body) : r.body;
          if (r.chunked) {
            init.body = new ReadableStream({
              start(controller) {
                for (let i = 0; i < bytes.byteLength; i += 64 * 1024) controller.enqueue(bytes.slice(i, i + 64 * 1024));
                controller.close();
              },
            });
            init.duplex = 'half';
          } else init.body = new Blob([bytes as Uint8Array<ArrayBuffer>]);
        }
        const response = await fetch(base + path, init);
        // Events of a live agent stream forever: the headers are the answer; stop reading.
        const text = response.headers.get('content-type')?.startsWith('text/event-stream')
          ? (await response.body?.cancel(), '')
          : await response.text();
        sent += 1;
        statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
        if (response.status >= 500) throw new Error(`${r.method} ${path} -> ${response.status} ${text.slice(0, 300)}`);
        if (r.method !== 'HEAD') {
          const problem = shapeProblem(response.status, response.headers, text);
          if (problem) throw new Error(`${r.method} ${path} -> ${response.status}: ${problem}`);
        }
      }),
      { numRuns: RUNS, seed: SEED, endOnFailure: true },
    );
    expect(sent).toBeGreaterThanOrEqual(RUNS);
    expect(unexpected).toEqual([]);
    // The fuzz reached well beyond the front door.
    for (const status of [200, 201, 400, 401, 404, 405, 413, 415])
      expect(statuses.get(status) ?? 0, `status ${status}`).toBeGreaterThan(0);
    const health = await fetch(`${base}/api/openapi.json`);
    expect(health.status).toBe(200);
  });

  it('raw requests fetch cannot send: odd methods and request targets', async () => {
    const raw = (text: string) =>
      new Promise<string>((resolve, reject) => {
        const socket = connect((server.address() as AddressInfo).port, '127.0.0.1');
        let out = '';
        socket.setTimeout(10_000, () => reject(new Error(`no answer to ${JSON.stringify(text.slice(0, 80))}`)));
        socket.on('data', (c) => {
          out += c.toString('latin1');
          if (/\r\n\r\n/.test(out) && /content-length: (\d+)/i.test(out)) {
            const length = Number(/content-length: (\d+)/i.exec(out)![1]);
            if (out.length - out.indexOf('\r\n\r\n') - 4 >= length) socket.end();
          }
        });
        socket.on('end', () => resolve(out));
        socket.on('close', () => resolve(out));
        socket.on('error', reject);
        socket.write(text);
      });
    const cases = [
      'TRACE /api/agents HTTP/1.1\r\nHost: x\r\n\r\n',
      'TRACE /elsewhere HTTP/1.1\r\nHost: x\r\n\r\n',
      'OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n',
      `GET http://example.com/api/agents HTTP/1.1\r\nHost: x\r\nx-api-key: ${key}\r\n\r\n`,
      'GET //api/agents HTTP/1.1\r\nHost: x\r\n\r\n',
      `GET /api/agents/%ff%fe HTTP/1.1\r\nHost: x\r\nx-api-key: ${key}\r\n\r\n`,
      `GET /api/agents HTTP/1.1\r\nHost: ../../etc\r\nx-api-key: ${key}\r\n\r\n`,
      `GET /api/agents HTTP/1.1\r\nHost: x\r\nx-api-key: ${key}\r\nx-request-id: \xe9t\xe9\r\n\r\n`,
      `POST /api/agents HTTP/1.1\r\nHost: x\r\nx-api-key: ${key}\r\ncontent-type: application/json\r\ncontent-length: 99999999999\r\n\r\n{}`,
      `POST /api/agents HTTP/1.1\r\nHost: x\r\nx-api-key: ${key}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{"goa\r\n0\r\n\r\n`,
      `PROPFIND /api/agents HTTP/1.1\r\nHost: x\r\n\r\n`,
    ];
    for (const text of cases) {
      const answer = await raw(text);
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1]);
      expect(status, `${JSON.stringify(text.slice(0, 60))} -> ${answer.slice(0, 200)}`).toBeGreaterThanOrEqual(200);
      expect(status, `${JSON.stringify(text.slice(0, 60))} -> ${answer.slice(0, 200)}`).toBeLessThan(500);
      // Only the first response: after it, Node itself may answer the rest of a broken request.
      const split = answer.indexOf('\r\n\r\n');
      const head = answer.slice(0, split);
      const length = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0);
      const body = answer.slice(split + 4, split + 4 + length);
      const headers = new Headers();
      for (const line of head.split('\r\n').slice(1)) {
        const i = line.indexOf(':');
        headers.append(line.slice(0, i), line.slice(i + 1).trim());
      }
      expect(shapeProblem(status, headers, body), JSON.stringify(answer)).toBeNull();
    }
    expect(unexpected).toEqual([]);
  });
});
