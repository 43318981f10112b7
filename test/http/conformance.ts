/**
 * The HTTP conformance suite (README.md#http-service): every route, every error code, the exact field sets of the
 * record forms and the timestamp format, with plain `fetch`. It runs against any mount: `agentry serve` as a child
 * process and the node:http, Express, Fastify and Hono examples in-process. Each mount builds a {@link
 * ConformanceTarget} and calls {@link describeConformance}.
 *
 * The target's model must be the goal-driven fake of `helpers.ts`: `[hold]` agents stay ACTIVE until paused or
 * deleted, `[drain]` agents spend the whole balance, any other agent completes at once.
 */
import { describe, expect, it } from 'vitest';
import { DRAIN, HOLD, eventually } from './helpers.js';

export interface ConformanceTarget {
  /** Service root: routes are `${baseUrl}/api/...`. */
  baseUrl: string;
  /** A key of the target's account (active subscription, some credits). */
  apiKey: string;
  /** The rate limit the target was started with (the suite needs a burst larger than it). */
  rateLimit: { capacity: number };
  admin: {
    addCredits(credits: number): Promise<void>;
    setSubscription(active: boolean): Promise<void>;
    createKey(): Promise<{ key: string; keyId: string }>;
    deleteKey(keyId: string): Promise<void>;
    /** Makes the next agent creation fail unexpectedly; resolves with a function that undoes it. */
    breakCreate(): Promise<() => Promise<void>>;
  };
}

export const CREATED_FIELDS = ['agent_id', 'created_at', 'goal', 'model', 'progress', 'status'];
export const STATUS_FIELDS = [...CREATED_FIELDS, 'message_count', 'status_message', 'token_count', 'updated_at'].sort();
/** Beyond the interface; optional for clients, always sent by agentry. */
export const STATUS_EXTRA_FIELDS = ['credits_spent', 'parent_id', 'spawn_index', 'sub_agent_count'];
export const REDUCED_FIELDS = ['agent_id', 'message_count', 'progress', 'status', 'token_count'];
/** What a list item adds to the reduced form (beyond the interface): the goal's start and the parent. */
export const LIST_ITEM_FIELDS = [...REDUCED_FIELDS, 'goal', 'parent_id'].sort();
export const MESSAGE_FIELDS = ['message_id', 'role', 'text', 'timestamp'];
export const ERROR_CODES_BY_STATUS: Record<number, string[]> = {
  400: ['invalid_request'],
  401: ['unauthorized', 'subscription_inactive'],
  402: ['insufficient_credits'],
  404: ['not_found'],
  405: ['method_not_allowed'],
  409: ['invalid_state', 'idempotency_conflict'],
  413: ['payload_too_large'],
  415: ['unsupported_media_type'],
  429: ['rate_limited'],
  500: ['internal_error'],
};

const ISO_MS_Z = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const MISSING_ID = '00000000-0000-4000-8000-000000000000';

export interface Reply {
  status: number;
  headers: Headers;
  text: string;
  json: any;
}

export interface CallOptions {
  key?: string | null;
  body?: BodyInit;
  json?: unknown;
  headers?: Record<string, string>;
}

/** One request with plain fetch; the body is read whole, parsed as JSON when it is. */
export async function call(
  baseUrl: string,
  defaultKey: string,
  method: string,
  path: string,
  o: CallOptions = {},
): Promise<Reply> {
  const headers: Record<string, string> = { ...o.headers };
  const key = o.key === undefined ? defaultKey : o.key;
  if (key !== null) headers['x-api-key'] = key;
  let body = o.body;
  if (o.json !== undefined) {
    body = JSON.stringify(o.json);
    headers['content-type'] ??= 'application/json';
  }
  const init: RequestInit & { duplex?: 'half' } = { method, headers };
  if (body !== undefined) init.body = body;
  if (body instanceof ReadableStream) init.duplex = 'half';
  const response = await fetch(baseUrl + path, init);
  const text = await response.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: response.status, headers: response.headers, text, json };
}

/** Asserts the API's error shape, the status/code pair and the request id header. */
export function expectError(reply: Reply, status: number, code?: string): void {
  expect(reply.status, reply.text).toBe(status);
  expect(reply.headers.get('content-type')).toMatch(/^application\/json/);
  expect(Object.keys(reply.json ?? {})).toEqual(['error']);
  const error = reply.json.error as Record<string, unknown>;
  const keys = Object.keys(error).sort();
  expect(['code,message,request_id', 'code,details,message,request_id']).toContain(keys.join(','));
  expect(ERROR_CODES_BY_STATUS[status]).toContain(error.code);
  if (code !== undefined) expect(error.code).toBe(code);
  expect(typeof error.message).toBe('string');
  expect((error.message as string).length).toBeGreaterThan(0);
  expect(error.request_id).toBe(reply.headers.get('x-request-id'));
  expect(reply.text).not.toMatch(/\n\s+at |node:internal|\.ts:\d+/);
}

export function expectIso(value: unknown): void {
  expect(value).toMatch(ISO_MS_Z);
  expect(new Date(value as string).toISOString()).toBe(value);
}

export function expectStatusForm(agent: Record<string, unknown>): void {
  expect(Object.keys(agent).sort()).toEqual([...STATUS_FIELDS, ...STATUS_EXTRA_FIELDS].sort());
  expect(agent.agent_id).toMatch(UUID_V7);
  expectIso(agent.created_at);
  expectIso(agent.updated_at);
  expect(typeof agent.status_message).toBe('string');
  expect(Number.isInteger(agent.token_count)).toBe(true);
  expect(Number.isInteger(agent.message_count)).toBe(true);
}

export function describeConformance(name: string, getTarget: () => ConformanceTarget): void {
  describe(`HTTP conformance: ${name}`, () => {
    const t = () => getTarget();
    const req = (method: string, path: string, o?: CallOptions) => call(t().baseUrl, t().apiKey, method, path, o);
    const waitForStatus = (id: string, statuses: string[]) =>
      eventually(
        async () => {
          const r = await req('GET', `/api/agents/${id}`);
          return statuses.includes(r.json?.agent?.status)
            ? (r.json as { agent: Record<string, unknown>; messages: Array<Record<string, unknown>> })
            : undefined;
        },
        `agent ${id} to be ${statuses.join(' or ')}`,
      );
    const created: string[] = [];

    it('serves the OpenAPI 3.1 document without a key', async () => {
      const r = await req('GET', '/api/openapi.json', { key: null });
      expect(r.status).toBe(200);
      expect(r.headers.get('x-request-id')).toBeTruthy();
      expect(r.json.openapi).toBe('3.1.0');
      const paths = Object.keys(r.json.paths as object).map((p) => p.replace(/^.*\/api\//, '/api/'));
      expect(paths).toEqual(
        expect.arrayContaining([
          '/api/agents',
          '/api/agents/{id}',
          '/api/agents/{id}/pause',
          '/api/agents/{id}/resume',
          '/api/openapi.json',
        ]),
      );
      expect(Object.keys(r.json.components.schemas as object)).toEqual(
        expect.arrayContaining(['Agent', 'AgentCreated', 'Message', 'CreateAgentBody', 'Error']),
      );
      expect(r.json.components.securitySchemes.apiKey).toEqual({ type: 'apiKey', in: 'header', name: 'x-api-key' });
    });

    it('POST /api/agents: 201 with exactly the creation form', async () => {
      const r = await req('POST', '/api/agents', { json: { goal: 'Say done' } });
      expect(r.status, r.text).toBe(201);
      expect(r.headers.get('x-request-id')).toBeTruthy();
      expect(r.headers.get('content-type')).toMatch(/^application\/json/);
      expect(Object.keys(r.json).sort()).toEqual(CREATED_FIELDS);
      expect(r.json.agent_id).toMatch(UUID_V7);
      expect(r.json).toMatchObject({ goal: 'Say done', model: 'svc-1-lite', status: 'ACTIVE', progress: 0 });
      expectIso(r.json.created_at);
      created.push(r.json.agent_id as string);
    });

    it('GET /api/agents/{id}: the status form and the transcript, until COMPLETED', async () => {
      const id = created[0]!;
      const { agent, messages } = await waitForStatus(id, ['COMPLETED']);
      expectStatusForm(agent);
      expect(agent).toMatchObject({
        agent_id: id,
        goal: 'Say done',
        status: 'COMPLETED',
        progress: 1,
        parent_id: null,
        sub_agent_count: 0,
      });
      expect(agent.message_count).toBe(messages.length);
      expect((agent.token_count as number) > 0).toBe(true);
      expect(messages.length).toBeGreaterThanOrEqual(2);
      for (const m of messages) {
        expect(Object.keys(m).sort()).toEqual(MESSAGE_FIELDS);
        expect(m.message_id).toMatch(UUID_V4);
        expectIso(m.timestamp);
      }
      expect(messages[0]).toMatchObject({ role: 'USER', text: 'Say done' });
      expect(messages.at(-1)).toMatchObject({ role: 'ASSISTANT', text: 'Done.' });
      const stamps = messages.map((m) => m.timestamp as string);
      expect([...stamps].sort()).toEqual(stamps);
      // A model can be chosen; ids are case-insensitive.
      const ultra = await req('POST', '/api/agents', {
        json: { goal: 'Say done', model: 'svc-1-ultra', max_credits: 50 },
      });
      expect(ultra.status, ultra.text).toBe(201);
      expect(ultra.json.model).toBe('svc-1-ultra');
      created.push(ultra.json.agent_id as string);
      expect((await req('GET', `/api/agents/${(ultra.json.agent_id as string).toUpperCase()}`)).status).toBe(200);
      await waitForStatus(ultra.json.agent_id as string, ['COMPLETED']);
    });

    it('GET /api/agents: reduced forms, status filter, cursor pagination', async () => {
      const all = await req('GET', '/api/agents?limit=1000');
      expect(all.status).toBe(200);
      expect(Object.keys(all.json).sort()).toEqual(['data', 'has_more', 'next_cursor']);
      expect(all.json.has_more).toBe(false);
      expect(all.json.next_cursor).toBeNull();
      const ids = (all.json.data as Array<Record<string, unknown>>).map((a) => a.agent_id);
      expect(ids).toEqual(expect.arrayContaining(created));
      for (const a of all.json.data as Array<Record<string, unknown>>)
        expect(Object.keys(a).sort()).toEqual(LIST_ITEM_FIELDS);

      const paged: unknown[] = [];
      let cursor: string | null = null;
      for (let page = 0; page < 100; page++) {
        const r: Reply = await req(
          'GET',
          `/api/agents?limit=1${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
        );
        expect(r.status).toBe(200);
        expect(r.json.data).toHaveLength(1);
        paged.push(r.json.data[0].agent_id);
        if (!r.json.has_more) {
          expect(r.json.next_cursor).toBeNull();
          break;
        }
        expect(typeof r.json.next_cursor).toBe('string');
        cursor = r.json.next_cursor as string;
      }
      expect(paged).toEqual(ids);

      const completed = await req('GET', '/api/agents?status=COMPLETED');
      expect(completed.status).toBe(200);
      expect((completed.json.data as Array<{ status: string }>).every((a) => a.status === 'COMPLETED')).toBe(true);
      expect((await req('GET', '/api/agents?status=PAUSED')).json.data).toEqual([]);

      expectError(await req('GET', '/api/agents?status=BOGUS'), 400, 'invalid_request');
      expectError(await req('GET', '/api/agents?limit=0'), 400, 'invalid_request');
      expectError(await req('GET', '/api/agents?limit=1001'), 400, 'invalid_request');
      expectError(await req('GET', '/api/agents?limit=abc'), 400, 'invalid_request');
      expectError(await req('GET', '/api/agents?cursor=bm90LWEtY3Vyc29y'), 400, 'invalid_request');
    });

    it('pause, pause again, resume, resume again, delete; then 404', async () => {
      const c = await req('POST', '/api/agents', { json: { goal: `Wait ${HOLD}` } });
      expect(c.status).toBe(201);
      const id = c.json.agent_id as string;
      const paused = await req('POST', `/api/agents/${id}/pause`);
      expect(paused.status, paused.text).toBe(200);
      expect(Object.keys(paused.json)).toEqual(['agent']);
      expectStatusForm(paused.json.agent);
      expect(paused.json.agent.status).toBe('PAUSED');
      const again = await req('POST', `/api/agents/${id}/pause`, { json: {} });
      expect(again.status).toBe(200);
      expect(again.json.agent.status).toBe('PAUSED');
      expect((await req('GET', `/api/agents/${id}`)).json.agent.status).toBe('PAUSED');

      const resumed = await req('POST', `/api/agents/${id}/resume`);
      expect(resumed.status, resumed.text).toBe(200);
      expectStatusForm(resumed.json.agent);
      expect(['ACTIVE', 'STARTING_UP']).toContain(resumed.json.agent.status);
      const resumedAgain = await req('POST', `/api/agents/${id}/resume`);
      expect(resumedAgain.status).toBe(200);
      expect(['ACTIVE', 'STARTING_UP']).toContain(resumedAgain.json.agent.status);
      expectError(await req('POST', `/api/agents/${id}/pause`, { json: { force: true } }), 400, 'invalid_request');

      const deleted = await req('DELETE', `/api/agents/${id}`);
      expect(deleted.status).toBe(200);
      expect(deleted.json).toEqual({ agent_id: id, deleted: true });
      expectError(await req('GET', `/api/agents/${id}`), 404, 'not_found');
      expectError(await req('DELETE', `/api/agents/${id}`), 404, 'not_found');
      expectError(await req('POST', `/api/agents/${id}/pause`), 404, 'not_found');
      expectError(await req('POST', `/api/agents/${id}/resume`), 404, 'not_found');
      const list = await req('GET', '/api/agents?limit=1000');
      expect((list.json.data as Array<{ agent_id: string }>).map((a) => a.agent_id)).not.toContain(id);
    });

    it('409 invalid_state: pause or resume a COMPLETED agent', async () => {
      const id = created[0]!;
      expectError(await req('POST', `/api/agents/${id}/pause`), 409, 'invalid_state');
      expectError(await req('POST', `/api/agents/${id}/resume`), 409, 'invalid_state');
    });

    it('401 unauthorized on every route without a key or with an unknown one', async () => {
      const id = created[0]!;
      const routes: Array<[string, string, CallOptions?]> = [
        ['POST', '/api/agents', { json: { goal: 'x' } }],
        ['GET', '/api/agents'],
        ['GET', `/api/agents/${id}`],
        ['POST', `/api/agents/${id}/pause`],
        ['POST', `/api/agents/${id}/resume`],
        ['DELETE', `/api/agents/${id}`],
        ['GET', `/api/agents/${id}/events`],
      ];
      for (const [method, path, o] of routes) {
        expectError(await req(method, path, { ...o, key: null }), 401, 'unauthorized');
        expectError(await req(method, path, { ...o, key: 'agk_not-a-real-key' }), 401, 'unauthorized');
        expectError(await req(method, path, { ...o, key: '' }), 401, 'unauthorized');
      }
      expect((await req('GET', `/api/agents/${id}`)).status).toBe(200);
    });

    it('404 not_found: unknown ids, malformed ids, unknown paths', async () => {
      for (const path of [
        `/api/agents/${MISSING_ID}`,
        '/api/agents/not-a-uuid',
        '/api/agents/%E0%A4%A',
        `/api/agents/${'9'.repeat(5000)}`,
        `/api/agents/${MISSING_ID}/pause`,
        `/api/agents/${MISSING_ID}/resume`,
        `/api/agents/${MISSING_ID}/events`,
        `/api/agents/${MISSING_ID}/unknown`,
        `/api/agents/${created[0]}/pause/extra`,
      ]) {
        const method = /pause|resume/.test(path) && !path.endsWith('extra') ? 'POST' : 'GET';
        expectError(await req(method, path), 404, 'not_found');
      }
      expectError(await req('DELETE', `/api/agents/${MISSING_ID}`), 404, 'not_found');
    });

    it('405 method_not_allowed with Allow', async () => {
      const id = created[0]!;
      const cases: Array<[string, string, string]> = [
        ['PUT', '/api/agents', 'GET, POST'],
        ['DELETE', '/api/agents', 'GET, POST'],
        ['PATCH', `/api/agents/${id}`, 'GET, DELETE'],
        ['POST', `/api/agents/${id}`, 'GET, DELETE'],
        ['GET', `/api/agents/${id}/pause`, 'POST'],
        ['DELETE', `/api/agents/${id}/resume`, 'POST'],
        ['POST', '/api/openapi.json', 'GET'],
        ['OPTIONS', '/api/agents', 'GET, POST'],
      ];
      for (const [method, path, allow] of cases) {
        const r = await req(method, path);
        expectError(r, 405, 'method_not_allowed');
        expect(r.headers.get('allow')).toBe(allow);
      }
    });

    it('413 payload_too_large, by Content-Length and by streamed size', async () => {
      const big = JSON.stringify({ goal: 'x'.repeat(1024 * 1024) });
      expectError(
        await req('POST', '/api/agents', { body: big, headers: { 'content-type': 'application/json' } }),
        413,
        'payload_too_large',
      );
      const chunk = new TextEncoder().encode('x'.repeat(64 * 1024));
      let sent = 0;
      const stream = new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(new TextEncoder().encode('{"goal":"'));
        },
        pull(controller) {
          if (sent >= 24) return controller.close();
          sent += 1;
          controller.enqueue(chunk);
        },
      });
      expectError(
        await req('POST', '/api/agents', { body: stream, headers: { 'content-type': 'application/json' } }),
        413,
        'payload_too_large',
      );
      // Exactly at the limit is not too large (it is a goal that is too long).
      const atLimit = `{"goal":"${'y'.repeat(1024 * 1024 - 11)}"}`;
      expect(new TextEncoder().encode(atLimit).byteLength).toBe(1024 * 1024);
      expectError(
        await req('POST', '/api/agents', { body: atLimit, headers: { 'content-type': 'application/json' } }),
        400,
        'invalid_request',
      );
    });

    it('415 unsupported_media_type for bodies that are not JSON', async () => {
      expectError(
        await req('POST', '/api/agents', { body: '{"goal":"x"}', headers: { 'content-type': 'text/plain' } }),
        415,
        'unsupported_media_type',
      );
      expectError(
        await req('POST', '/api/agents', {
          body: 'goal=x',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
        }),
        415,
      );
      expectError(
        await req('POST', '/api/agents', { body: new Blob(['{"goal":"x"}']) }),
        415,
        'unsupported_media_type',
      );
      expectError(
        await req('POST', '/api/agents', {
          body: '{"goal":"x"}',
          headers: { 'content-type': 'application/json; charset=latin1' },
        }),
        415,
      );
      expectError(
        await req('POST', `/api/agents/${created[0]}/pause`, {
          body: 'now',
          headers: { 'content-type': 'text/plain' },
        }),
        415,
      );
      const ok = await req('POST', '/api/agents', {
        body: '{"goal":"Say done"}',
        headers: { 'content-type': 'application/json; charset=UTF-8' },
      });
      expect(ok.status).toBe(201);
      created.push(ok.json.agent_id as string);
    });

    it('400 invalid_request: malformed JSON, deep nesting, schema errors, unknown model', async () => {
      const bad = (body: string) =>
        req('POST', '/api/agents', { body, headers: { 'content-type': 'application/json' } });
      for (const body of ['', '{', '{"goal": }', 'null', '[]', '"goal"', '42', '{"goal":"x"} trailing', '\u00ff']) {
        expectError(await bad(body), 400, 'invalid_request');
      }
      expectError(await bad(`{"goal":"x","deep":${'['.repeat(100)}${']'.repeat(100)}}`), 400, 'invalid_request');
      expectError(await bad('['.repeat(200_000)), 400, 'invalid_request');
      const schema = [
        {},
        { goal: '' },
        { goal: '   ' },
        { goal: 42 },
        { goal: 'x', extra: 1 },
        { goal: 'x', max_credits: -1 },
        { goal: 'x'.repeat(100_001) },
      ];
      for (const json of schema) {
        const r = await req('POST', '/api/agents', { json });
        expectError(r, 400, 'invalid_request');
        expect(Array.isArray(r.json.error.details)).toBe(true);
        expect(r.json.error.details.length).toBeGreaterThan(0);
      }
      const model = await req('POST', '/api/agents', { json: { goal: 'x', model: 'gpt-nope' } });
      expectError(model, 400, 'invalid_request');
      expect(model.json.error.message).toMatch(/gpt-nope/);
      expectError(
        await req('POST', '/api/agents', { json: { goal: 'x' }, headers: { 'idempotency-key': 'has space' } }),
        400,
      );
    });

    it('Idempotency-Key: same body replays the first response, another body is 409', async () => {
      const key = `idem-${Math.random().toString(36).slice(2)}`;
      const first = await req('POST', '/api/agents', {
        json: { goal: 'Say done', model: 'svc-1-lite' },
        headers: { 'idempotency-key': key },
      });
      expect(first.status).toBe(201);
      const replay = await req('POST', '/api/agents', {
        body: '{ "model": "svc-1-lite",  "goal": "Say done" }',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
      });
      expect(replay.status).toBe(201);
      expect(replay.json).toEqual(first.json);
      const conflict = await req('POST', '/api/agents', {
        json: { goal: 'Something else' },
        headers: { 'idempotency-key': key },
      });
      expectError(conflict, 409, 'idempotency_conflict');
      const concurrent = await Promise.all(
        [1, 2, 3].map(() =>
          req('POST', '/api/agents', { json: { goal: 'Say done' }, headers: { 'idempotency-key': `${key}-c` } }),
        ),
      );
      expect(new Set(concurrent.map((r) => r.json.agent_id)).size).toBe(1);
      const list = await req('GET', '/api/agents?limit=1000');
      const ids = (list.json.data as Array<{ agent_id: string }>).map((a) => a.agent_id);
      expect(ids.filter((id) => id === first.json.agent_id)).toHaveLength(1);
      expect(ids.filter((id) => id === concurrent[0]!.json.agent_id)).toHaveLength(1);
      created.push(first.json.agent_id as string, concurrent[0]!.json.agent_id as string);
    });

    it('x-request-id: a sane one is kept, anything else is replaced', async () => {
      const kept = await req('GET', `/api/agents/${MISSING_ID}`, { headers: { 'x-request-id': 'client-req.42' } });
      expect(kept.headers.get('x-request-id')).toBe('client-req.42');
      expect(kept.json.error.request_id).toBe('client-req.42');
      const replaced = await req('GET', '/api/agents', { headers: { 'x-request-id': 'x'.repeat(500) } });
      expect(replaced.status).toBe(200);
      expect(replaced.headers.get('x-request-id')).toMatch(/^req_[0-9a-f]{32}$/);
      const a = await req('GET', '/api/agents');
      const b = await req('GET', '/api/agents');
      expect(a.headers.get('x-request-id')).not.toBe(b.headers.get('x-request-id'));
    });

    it('GET /api/agents/{id}/events: transcript, status, and Last-Event-ID', async () => {
      const id = created[0]!;
      const all = await req('GET', `/api/agents/${id}/events`);
      expect(all.status).toBe(200);
      expect(all.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const events = all.text
        .split('\n\n')
        .map((block) => ({
          id: /^id: (.*)$/m.exec(block)?.[1],
          event: /^event: (.*)$/m.exec(block)?.[1],
          data: /^data: (.*)$/m.exec(block)?.[1],
        }))
        .filter((e) => e.event !== undefined);
      expect(events.map((e) => e.event)).toEqual(['message', 'message', 'status']);
      expect(events.map((e) => e.id)).toEqual(['1', '2', undefined]);
      expect(JSON.parse(events[2]!.data!).status).toBe('COMPLETED');
      const resumed = await req('GET', `/api/agents/${id}/events`, { headers: { 'last-event-id': '1' } });
      expect(resumed.text).not.toMatch(/^id: 1$/m);
      expect(resumed.text).toMatch(/^id: 2$/m);
    });

    it('a deleted key is refused at once', async () => {
      const { key, keyId } = await t().admin.createKey();
      expect((await req('GET', '/api/agents', { key })).status).toBe(200);
      await t().admin.deleteKey(keyId);
      expectError(await req('GET', '/api/agents', { key }), 401, 'unauthorized');
    });

    it('402 insufficient_credits: create and resume at a zero balance', async () => {
      const held = await req('POST', '/api/agents', { json: { goal: `Wait ${HOLD}` } });
      expect(held.status).toBe(201);
      const heldId = held.json.agent_id as string;
      expect((await req('POST', `/api/agents/${heldId}/pause`)).json.agent.status).toBe('PAUSED');
      const drain = await req('POST', '/api/agents', { json: { goal: `Spend ${DRAIN}` } });
      expect(drain.status, drain.text).toBe(201);
      await waitForStatus(drain.json.agent_id as string, ['COMPLETED', 'FAILED', 'OUT_OF_CREDITS']);

      expectError(await req('POST', '/api/agents', { json: { goal: 'Say done' } }), 402, 'insufficient_credits');
      expectError(await req('POST', `/api/agents/${heldId}/resume`), 402, 'insufficient_credits');
      expect((await req('GET', `/api/agents/${heldId}`)).json.agent.status).toBe('PAUSED');

      await t().admin.addCredits(50);
      const resumed = await req('POST', `/api/agents/${heldId}/resume`);
      expect(resumed.status, resumed.text).toBe(200);
      expect((await req('DELETE', `/api/agents/${heldId}`)).status).toBe(200);
      const again = await req('POST', '/api/agents', { json: { goal: 'Say done' } });
      expect(again.status).toBe(201);
      await waitForStatus(again.json.agent_id as string, ['COMPLETED']);
    });

    it('401 subscription_inactive while the subscription is off', async () => {
      await t().admin.setSubscription(false);
      try {
        expectError(await req('GET', '/api/agents'), 401, 'subscription_inactive');
        expectError(await req('POST', '/api/agents', { json: { goal: 'x' } }), 401, 'subscription_inactive');
        expectError(await req('GET', `/api/agents/${created[0]}`), 401, 'subscription_inactive');
      } finally {
        await t().admin.setSubscription(true);
      }
      expect((await req('GET', '/api/agents')).status).toBe(200);
    });

    it('500 internal_error without a stack trace, and the service goes on', async () => {
      const restore = await t().admin.breakCreate();
      try {
        const r = await req('POST', '/api/agents', { json: { goal: 'Say done' } });
        expectError(r, 500, 'internal_error');
        expect(r.text).not.toMatch(/sqlite|database|boom|Error:/i);
      } finally {
        await restore();
      }
      expect((await req('GET', '/api/agents')).status).toBe(200);
    });

    it('429 rate_limited with Retry-After, per account (last: it empties the account bucket)', async () => {
      const { key } = await t().admin.createKey();
      const burst = 2 * t().rateLimit.capacity + 200;
      const replies = await Promise.all(
        Array.from({ length: burst }, () => req('GET', '/api/agents?limit=1', { key })),
      );
      const limited = replies.filter((r) => r.status === 429);
      expect(limited.length).toBeGreaterThan(0);
      expect(replies.every((r) => r.status === 200 || r.status === 429)).toBe(true);
      for (const r of limited.slice(0, 5)) {
        expectError(r, 429, 'rate_limited');
        expect(r.headers.get('retry-after')).toMatch(/^[1-9]\d*$/);
      }
      // The bucket is the account's, not the key's (test/console/console-limits.test.ts: 30 keys get one burst), so
      // this test runs last: the suite's own key would be limited too.
    });
  });
}
