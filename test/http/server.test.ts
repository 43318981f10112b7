/**
 * startServer: over a SQLite file, HTTP runs on a thread of its own that answers polls from a read-only connection
 * and hands every other request to the runtime's thread. (The whole conformance suite runs against it in
 * mounts.test.ts; this file checks what is particular to it.)
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AgentRuntime, memoryStorage, sqliteStorage, type StorageAdapter } from 'agentry-runtime';
import { startServer, type RunningServer } from 'agentry-runtime/http';
import { scriptedModel } from 'agentry-runtime/testing';
import { eventually, tempDir } from './helpers.js';

/**
 * Fetches `url` from another process while this thread waits, blocked, for it to end: only a server that does not
 * need this thread can answer. Prints the body, or `timeout`.
 */
function fetchWhileBlocked(url: string, key: string, timeoutMs: number): string {
  const script =
    `fetch(${JSON.stringify(url)}, { headers: { 'x-api-key': ${JSON.stringify(key)} }, ` +
    `signal: AbortSignal.timeout(${timeoutMs}) }).then((r) => r.text(), () => 'timeout')` +
    '.then((t) => process.stdout.write(t))';
  const child = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 30_000 });
  return child.stdout;
}

describe('startServer', () => {
  let dir: ReturnType<typeof tempDir>;
  let runtime: AgentRuntime;
  let server: RunningServer | undefined;
  beforeEach(() => {
    dir = tempDir('agentry-server-');
  });
  afterEach(async () => {
    await server?.close();
    server = undefined;
    await runtime?.close();
    dir.remove();
  });

  async function openWithKey(
    storage: StorageAdapter = sqliteStorage({ path: path.join(dir.dir, 'agentry.db') }),
    scheduler: 'auto' | 'manual' = 'auto',
  ) {
    runtime = await AgentRuntime.open({
      storage,
      scheduler,
      model: scriptedModel({ turns: () => ({ text: 'done' }) }),
    });
    const { account, apiKey } = await runtime.accounts.create({ name: 't', credits: 10, subscribe: true });
    return { accountId: account.account_id, key: apiKey!.key };
  }

  it('answers polls on its own thread while the runtime thread is blocked; other routes wait for it', async () => {
    // Manual scheduling: the agent takes no step, so what the poll shows is exactly what was committed.
    const { accountId, key } = await openWithKey(undefined, 'manual');
    const agent = await runtime.create({ goal: 'poll me', accountId });
    await runtime.pause(agent.agent_id);
    server = await startServer(runtime, { port: 0, rateLimit: false });
    expect(server.pollThread).toBe(true);

    const polled = JSON.parse(fetchWhileBlocked(`${server.url}/api/agents/${agent.agent_id}`, key, 10_000));
    expect(polled.agent).toMatchObject({ agent_id: agent.agent_id, status: 'PAUSED', goal: 'poll me' });
    expect(polled.messages).toHaveLength(1);

    // The list route is the router's, on this (blocked) thread: it cannot answer until the thread is free.
    expect(fetchWhileBlocked(`${server.url}/api/agents`, key, 1_000)).toBe('timeout');
    const listed = await fetch(`${server.url}/api/agents`, { headers: { 'x-api-key': key } });
    expect(listed.status).toBe(200);
  });

  it('sees what the runtime commits: a resumed agent polls as COMPLETED once it is done', async () => {
    const { accountId, key } = await openWithKey();
    const agent = await runtime.create({ goal: 'finish', accountId });
    const done = await runtime.waitFor(agent.agent_id);
    expect(done.status).toBe('COMPLETED');
    server = await startServer(runtime, { port: 0 });
    const r = await fetch(`${server.url}/api/agents/${agent.agent_id}`, { headers: { 'x-api-key': key } });
    expect(r.status).toBe(200);
    expect(r.headers.get('x-request-id')).toMatch(/^req_/);
    expect(((await r.json()) as { agent: { status: string } }).agent.status).toBe('COMPLETED');
  });

  it('keeps a poll answer no longer than the next commit, from any connection or process', async () => {
    const { accountId, key } = await openWithKey(undefined, 'manual');
    const agent = await runtime.create({ goal: 'poll me', accountId });
    server = await startServer(runtime, { port: 0, rateLimit: false });
    const url = `${server.url}/api/agents/${agent.agent_id}`;
    const statusOf = async (apiKey = key) => {
      const r = await fetch(url, { headers: { 'x-api-key': apiKey } });
      return r.status === 200 ? ((await r.json()) as { agent: { status: string } }).agent.status : r.status;
    };
    const first = await statusOf();
    expect(await statusOf()).toBe(first); // answered from the cache: nothing was committed in between

    // A write through HTTP (relayed from the runtime's thread), then one through the runtime's API.
    const paused = await fetch(`${url}/pause`, { method: 'POST', headers: { 'x-api-key': key } });
    expect(paused.status).toBe(200);
    expect(await statusOf()).toBe('PAUSED');
    await runtime.resume(agent.agent_id);
    expect(await statusOf()).not.toBe('PAUSED');

    // A write from another connection, as the CLI makes from its own process.
    const other = sqliteStorage({ path: path.join(dir.dir, 'agentry.db') });
    await other.init();
    const [keyInfo] = await other.listApiKeys(accountId);
    await other.deleteApiKey(accountId, keyInfo!.id);
    await other.close();
    expect(await statusOf()).toBe(401);
  });

  it('streams Server-Sent Events through its thread, and a client that leaves ends the stream on the runtime thread', async () => {
    const { accountId, key } = await openWithKey(undefined, 'manual');
    const agent = await runtime.create({ goal: 'watch me', accountId });
    server = await startServer(runtime, { port: 0 });
    const leave = new AbortController();
    const response = await fetch(`${server.url}/api/agents/${agent.agent_id}/events`, {
      headers: { 'x-api-key': key },
      signal: leave.signal,
    });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const reader = response.body!.getReader();
    let text = '';
    while (!text.includes('watch me')) text += new TextDecoder().decode((await reader.read()).value);
    expect(text).toMatch(/^id: /m); // the goal came through as a `message` event with its id
    // While the stream is open, the runtime thread listens for the agent's events on its behalf.
    const listeners = () =>
      (runtime as unknown as { events: { listenerCount(e: string): number } }).events.listenerCount('agent.status');
    expect(listeners()).toBeGreaterThan(0);
    leave.abort();
    await reader.cancel().catch(() => {});
    // The client left: its stream on the runtime thread ends and lets go of the events.
    await eventually(async () => (listeners() === 0 ? true : undefined), 'the stream to let go of the events');
    const after = await fetch(`${server.url}/api/agents`, { headers: { 'x-api-key': key } });
    expect(after.status).toBe(200);
  });

  it('keeps basePath and CORS: polls under the base path only, and with CORS on they carry its headers', async () => {
    const { accountId, key } = await openWithKey(undefined, 'manual');
    const agent = await runtime.create({ goal: 'based', accountId });
    server = await startServer(runtime, { port: 0, basePath: '/v1', cors: { origins: ['https://app.example'] } });
    const headers = { 'x-api-key': key, origin: 'https://app.example' };
    const polled = await fetch(`${server.url}/v1/api/agents/${agent.agent_id}`, { headers });
    expect(polled.status).toBe(200);
    expect(polled.headers.get('access-control-allow-origin')).toBe('https://app.example');
    expect(((await polled.json()) as { agent: { goal: string } }).agent.goal).toBe('based');
    const outside = await fetch(`${server.url}/api/agents/${agent.agent_id}`, { headers });
    expect(outside.status).toBe(404);
    await server.close();
    server = await startServer(runtime, { port: 0, basePath: '/v1' });
    const plain = await fetch(`${server.url}/v1/api/agents/${agent.agent_id}/`, { headers: { 'x-api-key': key } });
    expect(plain.status).toBe(200);
    expect(plain.headers.get('access-control-allow-origin')).toBeNull();
    expect((await fetch(`${server.url}/api/agents/${agent.agent_id}`, { headers })).status).toBe(404);
  });

  it('serves on the runtime thread over in-memory storage, which no other thread can open', async () => {
    const { key } = await openWithKey(memoryStorage());
    server = await startServer(runtime, { port: 0 });
    expect(server.pollThread).toBe(false);
    const r = await fetch(`${server.url}/api/agents`, { headers: { 'x-api-key': key } });
    expect(r.status).toBe(200);
  });

  it('refuses bad options with invalid_request and a port in use with a clear error', async () => {
    await openWithKey();
    await expect(startServer(runtime, { port: -1 })).rejects.toMatchObject({ code: 'invalid_request' });
    server = await startServer(runtime, { port: 0 });
    await expect(startServer(runtime, { port: server.port })).rejects.toThrow(/EADDRINUSE/);
  });
});
