/**
 * The typed client against a live server: `waitUntilDone` drives an agent to COMPLETED; every method maps to its
 * route; errors carry code, status and request_id; polling backs off and stops on abort.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentRuntime, anthropicProvider, memoryStorage } from 'agentry-runtime';
import { AgentryClient, AgentryClientError, type AgentEvent } from 'agentry-runtime/client';
import { createNodeHandler } from 'agentry-runtime/http';
import type { FakeAnthropic } from 'agentry-runtime/testing';
import { HOLD, startGoalDrivenAnthropic } from './helpers.js';

let fake: FakeAnthropic;
let runtime: AgentRuntime;
let server: Server;
let baseUrl: string;
let client: AgentryClient;

beforeAll(async () => {
  fake = await startGoalDrivenAnthropic();
  runtime = await AgentRuntime.open({
    storage: memoryStorage(),
    model: anthropicProvider({ baseURL: fake.url, apiKey: 'k', maxRetries: 0 }),
  });
  const { apiKey } = await runtime.accounts.create({ name: 'client', credits: 100 });
  server = createServer(createNodeHandler(runtime, { rateLimit: false }));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  client = new AgentryClient({ baseUrl, apiKey: apiKey!.key });
});

afterAll(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve));
  await runtime?.close();
  await fake?.close();
});

describe('AgentryClient', () => {
  it('waitUntilDone drives an agent to COMPLETED against a live server', async () => {
    const created = await client.create({ goal: 'Say done' });
    expect(created.status).toBe('ACTIVE');
    const { agent, messages } = await client.waitUntilDone(created.agent_id, { intervalMs: 10, maxIntervalMs: 50 });
    expect(agent.status).toBe('COMPLETED');
    expect(agent.progress).toBe(1);
    expect(messages.map((m) => m.role)).toEqual(['USER', 'ASSISTANT']);
    expect(messages.at(-1)!.text).toBe('Done.');
  });

  it('polls with growing waits and stops when the signal aborts', async () => {
    const times: number[] = [];
    const counting = new AgentryClient({
      baseUrl,
      apiKey: (
        await runtime.accounts.createApiKey(
          (await runtime.accounts.list()).find((a) => a.name === 'client')!.account_id,
        )
      ).key,
      fetch: (input, init) => {
        times.push(performance.now());
        return fetch(input, init);
      },
    });
    const { agent_id } = await counting.create({ goal: `Wait ${HOLD}` });
    times.length = 0;
    const controller = new AbortController();
    const waiting = counting.waitUntilDone(agent_id, { intervalMs: 20, maxIntervalMs: 80, signal: controller.signal });
    const deadline = Date.now() + 10_000;
    while (times.length < 6 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    controller.abort(new Error('enough'));
    await expect(waiting).rejects.toThrow('enough');
    const gaps = times.slice(1).map((t, i) => t - times[i]!);
    expect(gaps.length).toBeGreaterThanOrEqual(5);
    // Waits of 20, 30, 45, 67.5, then 80 (the cap): each gap between polls is at least its wait.
    [20, 30, 45, 67.5, 80].forEach((wait, i) => expect(gaps[i]!).toBeGreaterThanOrEqual(wait - 2));
    await counting.delete(agent_id);
  });

  it('create (with an idempotency key), get, list, pause, resume, delete', async () => {
    const a = await client.create(
      { goal: `Wait ${HOLD}`, model: 'svc-1-ultra', max_credits: 50 },
      { idempotencyKey: 'job-1' },
    );
    const again = await client.create(
      { goal: `Wait ${HOLD}`, model: 'svc-1-ultra', max_credits: 50 },
      { idempotencyKey: 'job-1' },
    );
    expect(again.agent_id).toBe(a.agent_id);
    expect((await client.get(a.agent_id)).agent.model).toBe('svc-1-ultra');
    const page = await client.list({ limit: 1 });
    expect(page.data).toHaveLength(1);
    expect(page.has_more).toBe(true);
    const next = await client.list({ limit: 1, cursor: page.next_cursor! });
    expect(next.data[0]!.agent_id).not.toBe(page.data[0]!.agent_id);
    expect((await client.list({ status: 'COMPLETED' })).data.every((x) => x.status === 'COMPLETED')).toBe(true);
    expect((await client.pause(a.agent_id)).status).toBe('PAUSED');
    const paused = await client.waitUntilDone(a.agent_id, { intervalMs: 5 });
    expect(paused.agent.status).toBe('PAUSED');
    expect(['ACTIVE', 'STARTING_UP']).toContain((await client.resume(a.agent_id)).status);
    expect(await client.delete(a.agent_id)).toEqual({ agent_id: a.agent_id, deleted: true });
  });

  it('errors carry code, status and request_id', async () => {
    const missing = '00000000-0000-4000-8000-000000000000';
    const error = await client.get(missing).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AgentryClientError);
    expect(error).toMatchObject({ code: 'not_found', status: 404, name: 'AgentryClientError' });
    expect((error as AgentryClientError).request_id).toMatch(/^req_/);

    const invalid = await client.create({ goal: '' }).then(
      () => null,
      (e: unknown) => e as AgentryClientError,
    );
    expect(invalid).toMatchObject({ code: 'invalid_request', status: 400 });
    expect(Array.isArray(invalid?.details)).toBe(true);

    const done = await client.create({ goal: 'Say done' });
    await client.waitUntilDone(done.agent_id, { intervalMs: 5 });
    await expect(client.pause(done.agent_id)).rejects.toMatchObject({ code: 'invalid_state', status: 409 });

    const badKey = new AgentryClient({ baseUrl, apiKey: 'agk_nope' });
    await expect(badKey.list()).rejects.toMatchObject({ code: 'unauthorized', status: 401 });

    const nowhere = new AgentryClient({ baseUrl: 'http://127.0.0.1:1', apiKey: 'agk_x' });
    await expect(nowhere.list()).rejects.toMatchObject({ code: 'network_error', status: 0, request_id: null });

    const deleted = await client.create({ goal: `Wait ${HOLD}` });
    await client.delete(deleted.agent_id);
    await expect(client.waitUntilDone(deleted.agent_id, { intervalMs: 5 })).rejects.toMatchObject({
      code: 'not_found',
    });

    expect(() => new AgentryClient({ baseUrl: 'ftp://x', apiKey: 'k' })).toThrow(/baseUrl/);
  });

  it('events() yields the transcript and the final status', async () => {
    const { agent_id } = await client.create({ goal: 'Say done' });
    const events: AgentEvent[] = [];
    for await (const event of client.events(agent_id)) events.push(event);
    const messages = events.filter((e) => e.type === 'message');
    expect(messages.map((e) => (e.type === 'message' ? e.message.role : ''))).toEqual(['USER', 'ASSISTANT']);
    expect(messages.map((e) => (e.type === 'message' ? e.id : ''))).toEqual(['1', '2']);
    const last = events.at(-1)!;
    expect(last.type === 'status' && last.agent.status).toBe('COMPLETED');
    const resumed: AgentEvent[] = [];
    for await (const event of client.events(agent_id, { lastEventId: '1' })) resumed.push(event);
    expect(resumed.filter((e) => e.type === 'message')).toHaveLength(1);
  });

  it('events() reports a deletion while streaming', async () => {
    const { agent_id } = await client.create({ goal: `Wait ${HOLD}` });
    const seen: string[] = [];
    for await (const event of client.events(agent_id)) {
      seen.push(event.type);
      if (event.type === 'status') await client.delete(agent_id);
    }
    expect(seen.at(-1)).toBe('deleted');
  });
});
