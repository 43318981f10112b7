/**
 * Safe to expose (docs/decisions.md#safe-to-expose-http-event-streams-storage): event streams end when access ends,
 * live only so long, are capped per key and drop a reader too slow (which resumes with Last-Event-ID); MCP refuses
 * JSON-RPC batches so that the rate limit counts every operation; failed authentication is rate limited per client
 * address.
 */
import { Agent, get as httpGet } from 'node:http';
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { AgentRuntime, defineTool, memoryStorage, sqliteStorage, type Tool } from 'agentry-runtime';
import { AgentryClient } from 'agentry-runtime/client';
import { createFetchHandler, startServer, withClientAddress, type RunningServer } from 'agentry-runtime/http';
import { scriptedModel } from 'agentry-runtime/testing';
import { tempDir } from './helpers.js';

/** Reads a Server-Sent Events body into events until it ends; `onEvent` sees each as it comes. */
async function readEvents(
  body: ReadableStream<Uint8Array>,
  onEvent: (event: { event: string; data: string; id?: string; retry?: string }) => void = () => {},
): Promise<Array<{ event: string; data: string; id?: string; retry?: string }>> {
  const events: Array<{ event: string; data: string; id?: string; retry?: string }> = [];
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const fields: Record<string, string> = {};
      for (const line of block.split('\n')) {
        const at = line.indexOf(':');
        if (at > 0) fields[line.slice(0, at)] = line.slice(at + 1).trim();
      }
      if (fields.event === undefined && fields.retry === undefined) continue;
      const event = {
        event: fields.event ?? '',
        data: fields.data ?? '',
        ...(fields.id ? { id: fields.id } : {}),
        ...(fields.retry ? { retry: fields.retry } : {}),
      };
      events.push(event);
      onEvent(event);
    }
  }
  return events;
}

/** A tool that waits until the agent is stopped: the agent stays ACTIVE. */
const wait = defineTool({
  name: 'wait',
  description: 'Waits until stopped.',
  input: z.object({}),
  idempotent: true,
  run: (_input, ctx) =>
    new Promise<string>((resolve) => ctx.signal.addEventListener('abort', () => resolve('stopped'), { once: true })),
});

describe('event streams of agentry serve (SQLite, poll thread)', () => {
  let dir: { dir: string; remove(): void };
  let runtime: AgentRuntime;
  let server: RunningServer;
  let accountId: string;
  let agentId: string;
  beforeAll(async () => {
    dir = tempDir('agentry-exposed-streams-');
    runtime = await AgentRuntime.open({
      storage: sqliteStorage({ path: `${dir.dir}/agentry.db` }),
      tools: [wait as Tool],
      model: scriptedModel({ turns: [{ text: 'Waiting.', toolCalls: [{ name: 'wait', input: {} }] }] }),
    });
    const { account } = await runtime.accounts.create({ credits: 100 });
    accountId = account.account_id;
    ({ agent_id: agentId } = await runtime.create({ goal: 'Wait', accountId }));
    server = await startServer(runtime, { port: 0, eventStreams: { maxPerKey: 2 } });
  });
  afterAll(async () => {
    await server.close();
    await runtime.delete(agentId);
    await runtime.close();
    dir.remove();
  });

  const open = (key: string) => fetch(`${server.url}/api/agents/${agentId}/events`, { headers: { 'x-api-key': key } });

  it("ends within 5 s of its key's deletion, with a closed event", async () => {
    const key = await runtime.accounts.createApiKey(accountId, { name: 'doomed' });
    const response = await open(key.key);
    expect(response.status).toBe(200);
    let deletedAt = 0;
    const events = await readEvents(response.body!, (event) => {
      // Once the stream has said where the agent is, the key goes.
      if (event.event === 'status' && deletedAt === 0) {
        deletedAt = Date.now();
        void runtime.accounts.deleteApiKey(accountId, key.key_id);
      }
    });
    const endedAfter = Date.now() - deletedAt;
    expect(deletedAt).toBeGreaterThan(0);
    expect(endedAfter).toBeLessThan(5000);
    expect(events.at(-1)).toMatchObject({ event: 'closed', data: '{"reason":"access"}' });
    expect((await open(key.key)).status).toBe(401);
  });

  it('ends when the subscription lapses', async () => {
    const other = await runtime.accounts.create({ credits: 10 });
    const otherAgent = await runtime.create({ goal: 'Wait', accountId: other.account.account_id });
    const response = await fetch(`${server.url}/api/agents/${otherAgent.agent_id}/events`, {
      headers: { 'x-api-key': other.apiKey!.key },
    });
    expect(response.status).toBe(200);
    let deactivated = 0;
    const events = await readEvents(response.body!, (event) => {
      if (event.event === 'status' && deactivated === 0) {
        deactivated = Date.now();
        void runtime.accounts.unsubscribe(other.account.account_id);
      }
    });
    expect(Date.now() - deactivated).toBeLessThan(5000);
    expect(events.at(-1)).toMatchObject({ event: 'closed', data: '{"reason":"access"}' });
    await runtime.delete(otherAgent.agent_id);
  });

  it('caps the streams of one key: one more is 429 with Retry-After, and a place frees when one closes', async () => {
    const key = await runtime.accounts.createApiKey(accountId, { name: 'capped' });
    const first = new AbortController();
    const a = await fetch(`${server.url}/api/agents/${agentId}/events`, {
      headers: { 'x-api-key': key.key },
      signal: first.signal,
    });
    const b = await open(key.key);
    expect([a.status, b.status]).toEqual([200, 200]);
    const c = await open(key.key);
    expect(c.status).toBe(429);
    expect(c.headers.get('retry-after')).toBe('5');
    expect(((await c.json()) as { error: { code: string } }).error.code).toBe('rate_limited');
    // Another key of the same account has places of its own.
    const otherKey = await runtime.accounts.createApiKey(accountId, { name: 'other' });
    const d = await open(otherKey.key);
    expect(d.status).toBe(200);
    await d.body!.cancel();

    first.abort();
    await a.body!.cancel().catch(() => {});
    const deadline = Date.now() + 10_000;
    let again = await open(key.key);
    while (again.status === 429 && Date.now() < deadline) {
      await again.body?.cancel();
      await new Promise((resolve) => setTimeout(resolve, 50));
      again = await open(key.key);
    }
    expect(again.status).toBe(200);
    await again.body!.cancel();
    await b.body!.cancel();
  });
});

describe('event streams: lifetime and slow readers (the router)', () => {
  it("a paused agent's stream ends at its lifetime with a retry: hint, and resumes after Last-Event-ID", async () => {
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      tools: [wait as Tool],
      model: scriptedModel({
        turns: (_r, { turnIndex }) =>
          turnIndex === 0 ? { text: 'One.', toolCalls: [{ name: 'wait', input: {} }] } : { text: 'Two.' },
      }),
    });
    try {
      const { account, apiKey } = await runtime.accounts.create({ credits: 100 });
      const { agent_id } = await runtime.create({ goal: 'Count', accountId: account.account_id });
      await runtime.waitFor(agent_id, { until: ['ACTIVE'] }).catch(() => undefined);
      await runtime.pause(agent_id);
      const handle = createFetchHandler(runtime, { eventStreams: { maxLifetimeMs: 300, recheckMs: 50 } });
      const stream = (lastEventId?: string) =>
        handle(
          new Request(`http://x/api/agents/${agent_id}/events`, {
            headers: { 'x-api-key': apiKey!.key, ...(lastEventId ? { 'last-event-id': lastEventId } : {}) },
          }),
        );
      const first = await readEvents((await stream()).body!);
      expect(first.filter((e) => e.event === 'message').map((e) => e.id)).toEqual(['1', '2']);
      expect(first.at(-2)).toMatchObject({ retry: '1000' });
      expect(first.at(-1)).toMatchObject({ event: 'closed', data: '{"reason":"lifetime"}' });

      // Reconnected after the last id seen: nothing twice, and the stream goes on from there.
      const again = await readEvents((await stream('2')).body!);
      expect(again.filter((e) => e.event === 'message')).toEqual([]);
      expect(again.find((e) => e.event === 'status')?.data).toContain('"PAUSED"');

      // The typed client reopens such a stream by itself, from the last message it saw: nothing twice.
      const client = new AgentryClient({
        baseUrl: 'http://x',
        apiKey: apiKey!.key,
        fetch: ((input: RequestInfo | URL, init?: RequestInit) => handle(new Request(input, init))) as typeof fetch,
      });
      const seen: string[] = [];
      for await (const event of client.events(agent_id)) {
        seen.push(event.type === 'message' ? `message ${event.id}` : event.type);
        if (seen.filter((t) => t === 'status').length === 3) break; // three streams in a row
      }
      expect(seen).toEqual(['message 1', 'message 2', 'status', 'status', 'status']);
    } finally {
      await runtime.close();
    }
  });

  it('drops a reader that takes nothing while events pile up; it resumes with Last-Event-ID', async () => {
    const BIG = 'y'.repeat(3000);
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const gate = defineTool({
      name: 'gate',
      description: 'Waits for the test.',
      input: z.object({}),
      idempotent: false,
      run: async () => {
        await released;
        return 'open';
      },
    });
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      tools: [gate as Tool],
      model: scriptedModel({
        turns: (_r, { turnIndex }) =>
          turnIndex === 0
            ? { text: 'Start.', toolCalls: [{ name: 'gate', input: {} }] }
            : turnIndex < 8
              ? { text: `${turnIndex} ${BIG}`, toolCalls: [{ name: 'gate', input: {} }] }
              : { text: 'Done.' },
      }),
    });
    try {
      const { account, apiKey } = await runtime.accounts.create({ credits: 1000 });
      const { agent_id } = await runtime.create({ goal: 'Talk', accountId: account.account_id });
      const handle = createFetchHandler(runtime, { eventStreams: { slowReaderBytes: 4096 } });
      const request = (lastEventId?: string) =>
        handle(
          new Request(`http://x/api/agents/${agent_id}/events`, {
            headers: { 'x-api-key': apiKey!.key, ...(lastEventId ? { 'last-event-id': lastEventId } : {}) },
          }),
        );
      const slow = await request();
      expect(slow.status).toBe(200);
      // The reader takes nothing while the agent says 7 × 3 kB.
      release();
      await runtime.waitFor(agent_id);
      const reader = slow.body!.getReader();
      let failed: unknown;
      try {
        for (;;) if ((await reader.read()).done) break;
      } catch (error) {
        failed = error;
      }
      expect(String(failed)).toMatch(/fell too far behind/);

      // Reconnected after message 2: the rest, then the end.
      const resumed = await readEvents((await request('2')).body!);
      const ids = resumed.filter((e) => e.event === 'message').map((e) => Number(e.id));
      expect(ids[0]).toBe(3);
      expect(ids).toEqual(Array.from({ length: ids.length }, (_, i) => i + 3));
      expect(resumed.at(-1)?.data).toContain('"COMPLETED"');
    } finally {
      await runtime.close();
    }
  });
});

describe('MCP over HTTP: every operation counts', () => {
  it('refuses a JSON-RPC batch with 400 (-32600); each single message takes a token', async () => {
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model: scriptedModel({ turns: [{ text: 'Done.' }] }),
    });
    try {
      const { account, apiKey } = await runtime.accounts.create({ credits: 100 });
      const handle = createFetchHandler(runtime, { mcp: true, rateLimit: { capacity: 3, refillPerSecond: 0.001 } });
      const post = (body: unknown) =>
        handle(
          new Request('http://x/mcp', {
            method: 'POST',
            headers: {
              'x-api-key': apiKey!.key,
              'content-type': 'application/json',
              accept: 'application/json, text/event-stream',
              'mcp-protocol-version': '2025-06-18',
            },
            body: JSON.stringify(body),
          }),
        );
      const call = (id: number) => ({
        jsonrpc: '2.0',
        id,
        method: 'tools/call',
        params: { name: 'create_agent', arguments: { goal: `agent ${id}` } },
      });
      const batch = await post(Array.from({ length: 100 }, (_, i) => call(i)));
      expect(batch.status).toBe(400);
      expect(((await batch.json()) as { error: { code: number } }).error.code).toBe(-32600);
      expect((await runtime.list({ accountId: account.account_id })).data).toHaveLength(0);

      // The batch took one token; two single calls take the other two; the next is refused.
      expect((await post(call(1))).status).toBe(200);
      expect((await post(call(2))).status).toBe(200);
      const limited = await post(call(3));
      expect(limited.status).toBe(429);
      expect((await runtime.list({ accountId: account.account_id })).data).toHaveLength(2);
    } finally {
      await runtime.close();
    }
  });
});

describe('failed authentication is rate limited per client address', () => {
  it('refuses an address after its failures, lets known keys through, and leaves other addresses alone', async () => {
    const runtime = await AgentRuntime.open({ storage: memoryStorage(), scheduler: 'manual' });
    try {
      const known = await runtime.accounts.create({ credits: 1 });
      const fresh = await runtime.accounts.create({ credits: 1 });
      let now = 1_000_000;
      const handle = createFetchHandler(runtime, {
        failedAuthLimit: { capacity: 3, refillPerSecond: 0.5 },
        now: () => now,
      });
      const list = (key: string | null, address: string) =>
        handle(
          withClientAddress(
            new Request('http://x/api/agents', { headers: key === null ? {} : { 'x-api-key': key } }),
            address,
          ),
        );
      expect((await list(known.apiKey!.key, '192.0.2.1')).status).toBe(200);
      const statuses = [];
      for (let i = 0; i < 5; i++) statuses.push((await list(i % 2 ? null : `agk_guess${i}`, '192.0.2.1')).status);
      expect(statuses).toEqual([401, 401, 401, 429, 429]);
      const refused = await list('agk_guess', '192.0.2.1');
      expect(refused.headers.get('retry-after')).toBe('2');
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('rate_limited');

      // A key that worked from here before still works; a key never seen waits like a guess; other addresses are
      // untouched.
      expect((await list(known.apiKey!.key, '192.0.2.1')).status).toBe(200);
      expect((await list(fresh.apiKey!.key, '192.0.2.1')).status).toBe(429);
      expect((await list('agk_guess', '198.51.100.7')).status).toBe(401);
      expect((await list(fresh.apiKey!.key, '198.51.100.7')).status).toBe(200);

      // Tokens come back with time.
      now += 2000;
      expect((await list('agk_guess', '192.0.2.1')).status).toBe(401);
    } finally {
      await runtime.close();
    }
  });

  it('counts failures by the peer address on a real server', async () => {
    const dir = tempDir('agentry-failed-auth-');
    const runtime = await AgentRuntime.open({
      storage: sqliteStorage({ path: `${dir.dir}/a.db` }),
      scheduler: 'manual',
    });
    const server = await startServer(runtime, { port: 0, failedAuthLimit: { capacity: 2, refillPerSecond: 0.01 } });
    try {
      // Polls are answered on the server's thread, the rest by the router: each counts its own (as each has its own
      // per-key buckets), and each refuses the third failure.
      const status = async (path: string) =>
        (await fetch(server.url + path, { headers: { 'x-api-key': 'agk_nope' } })).status;
      const poll = '/api/agents/00000000-0000-4000-8000-000000000000';
      expect([await status(poll), await status(poll), await status(poll)]).toEqual([401, 401, 429]);
      expect([await status('/api/agents'), await status('/api/agents'), await status('/api/agents')]).toEqual([
        401, 401, 429,
      ]);
    } finally {
      await server.close();
      await runtime.close();
      dir.remove();
    }
  });
});

describe('connections without a working key are bounded', () => {
  it('one past the limit closes the oldest stranger; clients with a key are not counted', async () => {
    const dir = tempDir('agentry-strangers-');
    const runtime = await AgentRuntime.open({
      storage: sqliteStorage({ path: `${dir.dir}/a.db` }),
      scheduler: 'manual',
    });
    const { apiKey } = await runtime.accounts.create({ credits: 1 });
    const server = await startServer(runtime, { port: 0, maxUnauthenticatedConnections: 5 });
    const port = Number(new URL(server.url).port);
    const sockets: Socket[] = [];
    try {
      // A keep-alive client with a key, then 8 strangers that connect and send nothing.
      const agent = new Agent({ keepAlive: true, maxSockets: 1 });
      const withKey = () =>
        new Promise<number>((resolve, reject) => {
          httpGet(`${server.url}/api/agents`, { agent, headers: { 'x-api-key': apiKey!.key } }, (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode!));
          }).on('error', reject);
        });
      expect(await withKey()).toBe(200);
      const closed: number[] = [];
      for (let i = 0; i < 8; i++) {
        const socket = connect({ port, host: '127.0.0.1' });
        socket.on('error', () => {});
        socket.on('close', () => closed.push(i));
        sockets.push(socket);
        await new Promise((resolve) => socket.once('connect', resolve));
      }
      const deadline = Date.now() + 10_000;
      while (closed.length < 3 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
      expect(closed.sort((a, b) => a - b)).toEqual([0, 1, 2]); // the three oldest strangers
      // The client with a key kept its connection and still answers on it.
      expect(await withKey()).toBe(200);
      agent.destroy();
    } finally {
      for (const socket of sockets) socket.destroy();
      await server.close();
      await runtime.close();
      dir.remove();
    }
  });
});

describe('request bodies in flight share a budget', () => {
  it('a body that would pass it is refused with 429 and Retry-After; the budget frees as bodies end', async () => {
    const dir = tempDir('agentry-bodies-');
    const runtime = await AgentRuntime.open({
      storage: sqliteStorage({ path: `${dir.dir}/a.db` }),
      scheduler: 'manual',
    });
    const { apiKey } = await runtime.accounts.create({ credits: 1 });
    const server = await startServer(runtime, { port: 0, bodyBytesInFlight: 100_000 });
    const port = Number(new URL(server.url).port);
    const post = (declared: number) =>
      `POST /api/agents HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n` +
      `x-api-key: ${apiKey!.key}\r\ncontent-length: ${declared}\r\n\r\n`;
    const slow = connect({ port, host: '127.0.0.1' });
    slow.on('error', () => {});
    try {
      // A slow upload holds 50,000 bytes so far.
      slow.write(post(60_000));
      slow.write(Buffer.alloc(50_000, 0x20));
      // Until the server holds them, a body of 60,000 still fits; then it does not.
      const deadline = Date.now() + 10_000;
      let refused: Response | undefined;
      while (!refused && Date.now() < deadline) {
        const r = await fetch(`${server.url}/api/agents`, {
          method: 'POST',
          headers: { 'x-api-key': apiKey!.key, 'content-type': 'application/json' },
          body: JSON.stringify({ goal: 'x'.repeat(59_988) }),
        });
        if (r.status === 429) refused = r;
        else await r.arrayBuffer();
      }
      expect(refused?.headers.get('retry-after')).toBe('1');
      expect(((await refused!.json()) as { error: { code: string } }).error.code).toBe('rate_limited');
      // The slow upload leaves: its bytes are given back.
      slow.destroy();
      let after = 429;
      while (after === 429 && Date.now() < deadline + 10_000) {
        const r = await fetch(`${server.url}/api/agents`, {
          method: 'POST',
          headers: { 'x-api-key': apiKey!.key, 'content-type': 'application/json' },
          body: JSON.stringify({ goal: 'x'.repeat(59_988) }),
        });
        after = r.status;
        await r.arrayBuffer();
      }
      expect(after).toBe(201);
    } finally {
      slow.destroy();
      await server.close();
      await runtime.close();
      dir.remove();
    }
  });
});
