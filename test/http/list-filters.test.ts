/**
 * The public list's filters: `GET /api/agents` items carry the start of the goal and the parent;
 * `roots=true`, `parent_id=`, `status=` and `q=` (the indexed goal search) narrow it, and without them the list is
 * what it was (every agent of the account, newest first).
 */
import type { AddressInfo } from 'node:net';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentRuntime, sqliteStorage } from 'agentry-runtime';
import { AgentryClient } from 'agentry-runtime/client';
import { createNodeHandler } from 'agentry-runtime/http';
import { scriptedModel } from 'agentry-runtime/testing';
import type { AgentRow } from '../../src/storage/adapter.js';
import { call } from './conformance.js';
import { tempDir } from './helpers.js';
import { finishedAgent, insertRows } from './seed-agents.js';

const dir = tempDir('agentry-list-');
let runtime: AgentRuntime;
let server: Server;
let base: string;
let key = '';
let otherKey = '';
const roots: AgentRow[] = [];
const children = new Map<string, AgentRow[]>();

beforeAll(async () => {
  runtime = await AgentRuntime.open({
    storage: sqliteStorage({ path: join(dir.dir, 'list.db') }),
    model: scriptedModel({ turns: () => ({ text: 'Done.' }) }),
  });
  const account = await runtime.accounts.create({ name: 'lists', credits: 100 });
  key = account.apiKey!.key;
  const other = await runtime.accounts.create({ name: 'other', credits: 100 });
  otherKey = other.apiKey!.key;
  const rows: AgentRow[] = [];
  for (let r = 0; r < 3; r++) {
    const root = finishedAgent(account.account.account_id, `Root ${r}: ${'survey the market '.repeat(20)}`);
    roots.push(root);
    rows.push(root);
    const kids = Array.from({ length: 20 }, (_, i) =>
      finishedAgent(root.account_id, `Child ${r}.${i} of root ${r}`, root),
    );
    children.set(root.agent_id, kids);
    rows.push(...kids);
  }
  await insertRows(runtime.storage, rows);
  await insertRows(runtime.storage, [finishedAgent(other.account.account_id, 'Child of nobody, other account')]);
  server = createServer(createNodeHandler(runtime, { rateLimit: false }));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve));
  await runtime?.close();
  dir.remove();
});

const ids = (data: Array<{ agent_id: string }>) => data.map((a) => a.agent_id).sort();

describe('GET /api/agents filters', () => {
  it('roots=true returns the 3 roots of a database with 3 roots and 60 children', async () => {
    const r = await call(base, key, 'GET', '/api/agents?roots=true');
    expect(r.status).toBe(200);
    expect(ids(r.json.data)).toEqual(ids(roots));
    expect(r.json.has_more).toBe(false);
    const item = r.json.data.find((a: { agent_id: string }) => a.agent_id === roots[0]!.agent_id);
    expect(item.parent_id).toBeNull();
    expect(item.goal).toHaveLength(200);
    expect(item.goal.endsWith('…')).toBe(true);
    expect(item.goal.startsWith('Root 0: survey the market')).toBe(true);
  });

  it("parent_id= returns that parent's children, paged by cursor", async () => {
    const parent = roots[1]!;
    const first = await call(base, key, 'GET', `/api/agents?parent_id=${parent.agent_id}&limit=15`);
    expect(first.status).toBe(200);
    expect(first.json.data).toHaveLength(15);
    expect(first.json.has_more).toBe(true);
    const second = await call(
      base,
      key,
      'GET',
      `/api/agents?parent_id=${parent.agent_id}&limit=15&cursor=${first.json.next_cursor}`,
    );
    expect(ids([...first.json.data, ...second.json.data])).toEqual(ids(children.get(parent.agent_id)!));
    expect(second.json.data.every((a: { parent_id: string }) => a.parent_id === parent.agent_id)).toBe(true);
    // Another account's parent id lists nothing.
    expect((await call(base, otherKey, 'GET', `/api/agents?parent_id=${parent.agent_id}`)).json.data).toEqual([]);
  });

  it('without filters the list is every agent of the account, as before', async () => {
    const r = await call(base, key, 'GET', '/api/agents?limit=1000');
    expect(r.json.data).toHaveLength(63);
    expect(r.json.data[0]).toMatchObject({ agent_id: expect.any(String), status: 'COMPLETED', progress: 1 });
  });

  it('q= searches goals (the account only), with status and parent filters and cursor paging', async () => {
    const r = await call(base, key, 'GET', '/api/agents?q=CHILD%201.&limit=4');
    expect(r.status).toBe(200);
    expect(r.json.data).toHaveLength(4);
    const all = [...r.json.data];
    let cursor = r.json.next_cursor as string | null;
    while (cursor !== null) {
      const next = await call(base, key, 'GET', `/api/agents?q=CHILD%201.&limit=4&cursor=${cursor}`);
      all.push(...next.json.data);
      cursor = next.json.next_cursor;
    }
    expect(ids(all)).toEqual(ids(children.get(roots[1]!.agent_id)!));
    const root1 = await call(base, key, 'GET', '/api/agents?q=root%201&roots=true');
    expect(ids(root1.json.data)).toEqual([roots[1]!.agent_id]);
    expect((await call(base, key, 'GET', '/api/agents?q=of%20root&status=PAUSED')).json.data).toEqual([]);
    expect((await call(base, otherKey, 'GET', '/api/agents?q=child')).json.data).toHaveLength(1);
  });

  it('refuses bad filters with 400', async () => {
    for (const query of [
      'roots=yes',
      'parent_id=nope',
      `q=${'x'.repeat(201)}`,
      'q=',
      `roots=true&parent_id=${roots[0]!.agent_id}`,
    ]) {
      const r = await call(base, key, 'GET', `/api/agents?${query}`);
      expect(r.status, query).toBe(400);
      expect(r.json.error.code).toBe('invalid_request');
    }
  });

  it('the client passes the filters', async () => {
    const client = new AgentryClient({ baseUrl: base, apiKey: key });
    expect(ids((await client.list({ roots: true })).data)).toEqual(ids(roots));
    const kids = await client.list({ parentId: roots[2]!.agent_id, limit: 100 });
    expect(ids(kids.data)).toEqual(ids(children.get(roots[2]!.agent_id)!));
    expect((await client.list({ q: 'child 2.1', limit: 100 })).data).toHaveLength(11);
  });
});
