/**
 * Tenant isolation: two accounts on one server. On every route each key sees and touches only its own agents; another
 * account's agent answers exactly like an id that does not exist, and lists never show it.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentRuntime, memoryStorage } from 'agentry-runtime';
import { createNodeHandler } from 'agentry-runtime/http';
import { scriptedModel } from 'agentry-runtime/testing';
import { call, expectError } from './conformance.js';
import { eventually, HOLD } from './helpers.js';

let runtime: AgentRuntime;
let server: Server;
let base: string;
const keys = { a: '', b: '' };
const agents = { a: [] as string[], b: [] as string[] };

beforeAll(async () => {
  runtime = await AgentRuntime.open({
    storage: memoryStorage(),
    model: scriptedModel({
      turns: (request) =>
        JSON.stringify(request.messages[0]).includes(HOLD) ? { text: 'late', delayMs: 60_000 } : { text: 'Done.' },
    }),
  });
  keys.a = (await runtime.accounts.create({ name: 'a', credits: 100 })).apiKey!.key;
  keys.b = (await runtime.accounts.create({ name: 'b', credits: 100 })).apiKey!.key;
  server = createServer(createNodeHandler(runtime, { rateLimit: false }));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  for (const who of ['a', 'b'] as const) {
    for (const goal of [`Wait ${HOLD}`, 'Finish']) {
      const r = await call(base, keys[who], 'POST', '/api/agents', { json: { goal: `${who}: ${goal}` } });
      expect(r.status).toBe(201);
      agents[who].push(r.json.agent_id as string);
    }
  }
  await eventually(async () => {
    const r = await call(base, keys.a, 'GET', `/api/agents/${agents.a[1]}`);
    return r.json.agent.status === 'COMPLETED' ? true : undefined;
  }, 'a finished agent');
});

afterAll(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve));
  await runtime?.close();
});

describe('tenant isolation', () => {
  const MISSING = '00000000-0000-4000-8000-000000000000';
  const routes = (id: string): Array<[string, string]> => [
    ['GET', `/api/agents/${id}`],
    ['POST', `/api/agents/${id}/pause`],
    ['POST', `/api/agents/${id}/resume`],
    ['GET', `/api/agents/${id}/events`],
    ['DELETE', `/api/agents/${id}`],
  ];

  it("another account's agent is 404 on every route, exactly like a missing id, and is left untouched", async () => {
    for (const [owner, intruder] of [
      ['a', 'b'],
      ['b', 'a'],
    ] as const) {
      for (const id of agents[owner]) {
        const before = (await call(base, keys[owner], 'GET', `/api/agents/${id}`)).json;
        for (const [method, path] of routes(id)) {
          const r = await call(base, keys[intruder], method, path);
          expectError(r, 404, 'not_found');
          const missing = await call(base, keys[intruder], method, path.replace(id, MISSING));
          expect(r.json.error.message.replace(id, MISSING)).toBe(missing.json.error.message);
        }
        const after = (await call(base, keys[owner], 'GET', `/api/agents/${id}`)).json;
        expect(after.agent.status).toBe(before.agent.status);
        expect(after.messages).toEqual(before.messages);
      }
    }
  });

  it("lists show only the caller's agents, with every filter and page size", async () => {
    for (const who of ['a', 'b'] as const) {
      const other = who === 'a' ? 'b' : 'a';
      for (const query of ['', '?limit=1', '?status=ACTIVE', '?status=COMPLETED', '?limit=1000']) {
        const seen: string[] = [];
        let cursor: string | null = null;
        do {
          const sep = query === '' ? '?' : '&';
          const r: Awaited<ReturnType<typeof call>> = await call(
            base,
            keys[who],
            'GET',
            `/api/agents${query}${cursor ? `${sep}cursor=${encodeURIComponent(cursor)}` : ''}`,
          );
          expect(r.status).toBe(200);
          seen.push(...(r.json.data as Array<{ agent_id: string }>).map((a) => a.agent_id));
          cursor = r.json.next_cursor as string | null;
        } while (cursor);
        for (const id of agents[other]) expect(seen).not.toContain(id);
        if (query === '' || query.startsWith('?limit')) expect(seen.sort()).toEqual([...agents[who]].sort());
      }
    }
  });

  it("a cursor from one account does not reveal the other's agents", async () => {
    const page = await call(base, keys.a, 'GET', '/api/agents?limit=1');
    expect(page.json.next_cursor).toEqual(expect.any(String));
    const r = await call(
      base,
      keys.b,
      'GET',
      `/api/agents?limit=10&cursor=${encodeURIComponent(page.json.next_cursor as string)}`,
    );
    if (r.status === 200)
      for (const id of agents.a)
        expect((r.json.data as Array<{ agent_id: string }>).map((x) => x.agent_id)).not.toContain(id);
    else expectError(r, 400, 'invalid_request');
  });

  it('Idempotency-Keys are per account', async () => {
    const a = await call(base, keys.a, 'POST', '/api/agents', {
      json: { goal: 'Finish' },
      headers: { 'idempotency-key': 'shared' },
    });
    const b = await call(base, keys.b, 'POST', '/api/agents', {
      json: { goal: 'Finish' },
      headers: { 'idempotency-key': 'shared' },
    });
    expect(a.status).toBe(201);
    expect(b.status).toBe(201);
    expect(a.json.agent_id).not.toBe(b.json.agent_id);
    expectError(await call(base, keys.b, 'GET', `/api/agents/${a.json.agent_id}`), 404, 'not_found');
    agents.a.push(a.json.agent_id as string);
    agents.b.push(b.json.agent_id as string);
  });

  it('each key can pause, resume and delete its own agents', async () => {
    for (const who of ['a', 'b'] as const) {
      const id = agents[who][0]!;
      expect((await call(base, keys[who], 'POST', `/api/agents/${id}/pause`)).json.agent.status).toBe('PAUSED');
      expect(['ACTIVE', 'STARTING_UP']).toContain(
        (await call(base, keys[who], 'POST', `/api/agents/${id}/resume`)).json.agent.status,
      );
      expect((await call(base, keys[who], 'DELETE', `/api/agents/${id}`)).json).toEqual({
        agent_id: id,
        deleted: true,
      });
    }
    // The other account's agents survived every attempt above.
    for (const who of ['a', 'b'] as const) {
      for (const id of agents[who].slice(1))
        expect((await call(base, keys[who], 'GET', `/api/agents/${id}`)).status).toBe(200);
    }
  });
});
