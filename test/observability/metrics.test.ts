/**
 * The operations routes of the HTTP adapter, in process: `/metrics` (an optional mount, no API key) with values that
 * match the runtime's state while agents run, `/healthz` and `/readyz` (always there, no key, nothing revealed).
 */
import { readFileSync } from 'node:fs';
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { AgentRuntime, defineTool, memoryStorage, type ModelRequest } from 'agentry-runtime';
import { createFetchHandler } from 'agentry-runtime/http';
import { scriptedModel } from 'agentry-runtime/testing';
import { deferred, eventually } from '../support/runtime.js';

async function scrape(handle: (r: Request) => Promise<Response>) {
  const response = await handle(new Request('http://localhost/metrics'));
  expect(response.status).toBe(200);
  const families = parsePrometheusTextFormat(await response.text());
  const value = (name: string, labels: Record<string, string> = {}) => {
    const f = families.find((x) => x.name === name);
    const m = f?.metrics.find((x) => Object.entries(labels).every(([k, v]) => x.labels?.[k] === v));
    return m?.value === undefined ? undefined : Number(m.value);
  };
  return { families, value };
}

describe('operations routes', () => {
  it('serves /metrics without a key, matching the runtime while agents wait and run', async () => {
    const gate = deferred();
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model: scriptedModel({ turns: [{ toolCalls: [{ name: 'gate', input: {} }] }, { text: 'done' }] }),
      tools: [
        defineTool({
          name: 'gate',
          description: 'Waits for the test',
          input: z.object({}),
          price: 0.25,
          idempotent: true,
          run: async () => {
            await gate.promise;
            return 'open';
          },
        }),
      ],
      builtinTools: false,
      concurrency: { runSlots: 1 },
    });
    const handle = createFetchHandler(runtime, { metrics: true });
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push((await runtime.create({ goal: `task ${i}` })).agent_id);
    await eventually(() => runtime.load().lanes.some((l) => l.lane === 'tools' && l.active === 1), 5_000, 'the gate');

    const during = await scrape(handle);
    expect(during.value('agentry_agents', { status: 'ACTIVE' })).toBe(3);
    expect(during.value('agentry_run_slots_in_use')).toBe(1);
    expect(during.value('agentry_run_slot_queue_depth')).toBe(2);
    expect(during.value('agentry_lane_in_flight', { lane: 'tools' })).toBe(1);
    expect(during.value('agentry_lane_queue_depth', { lane: 'models' })).toBe(0);
    expect(during.value('agentry_steps_total', { model: 'svc-1-lite' })).toBe(1);

    gate.resolve();
    for (const id of ids) expect((await runtime.waitFor(id)).status).toBe('COMPLETED');
    await runtime.whenIdle(); // the last driver gives its slot back just after the status change
    const after = await scrape(handle);
    expect(after.value('agentry_agents', { status: 'COMPLETED' })).toBe(3);
    expect(after.value('agentry_agents', { status: 'ACTIVE' })).toBeUndefined();
    expect(after.value('agentry_steps_total', { model: 'svc-1-lite' })).toBe(6);
    expect(after.value('agentry_tool_calls_total', { tool: 'gate', outcome: 'ok' })).toBe(3);
    expect(after.value('agentry_credits_charged_total', { kind: 'tool', item: 'gate' })).toBeCloseTo(0.75, 9);
    expect(after.value('agentry_run_slots_in_use')).toBe(0);

    // Without the option the path is not one of the router's.
    const plain = createFetchHandler(runtime);
    expect((await plain(new Request('http://localhost/metrics'))).status).toBe(404);
    await runtime.close();
  });

  it('counts a spawn once, times tool calls by outcome, and says its version in agentry_build_info', async () => {
    const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model: scriptedModel({
        turns: (req, { turnIndex }) => {
          if (goalOf(req) !== 'root') return { text: 'child done' };
          if (turnIndex === 0) {
            return {
              toolCalls: [
                { name: 'spawn_sub_agents', input: { tasks: [{ goal: 'child 0' }, { goal: 'child 1' }] } },
                { name: 'fails', input: {} },
              ],
            };
          }
          return { text: 'done' };
        },
      }),
      tools: [
        defineTool({
          name: 'fails',
          description: 'Always fails',
          input: z.object({}),
          idempotent: true,
          run: async () => {
            throw new Error('no');
          },
        }),
      ],
    });
    const handle = createFetchHandler(runtime, { metrics: true });
    const { agent_id } = await runtime.create({ goal: 'root' });
    expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
    await runtime.whenIdle();
    const response = await handle(new Request('http://localhost/metrics'));
    const text = await response.text();
    const { value } = await scrape(handle);
    // The spawn ran in two stretches (spawn, then collect the children's results): one call, counted when it ended.
    expect(value('agentry_tool_calls_total', { tool: 'spawn_sub_agents', outcome: 'ok' })).toBe(1);
    expect(value('agentry_tool_calls_total', { tool: 'spawn_sub_agents', outcome: 'suspended' })).toBeUndefined();
    expect(value('agentry_tool_calls_total', { tool: 'fails', outcome: 'error' })).toBe(1);
    // The parser drops a histogram's labels: its series are read from the lines.
    expect(text).toMatch(/^agentry_tool_call_duration_seconds_count\{tool="spawn_sub_agents",outcome="ok"\} 1$/m);
    expect(text).toMatch(/^agentry_tool_call_duration_seconds_count\{tool="fails",outcome="error"\} 1$/m);
    const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
      version: string;
    };
    expect(text).toContain(`agentry_build_info{version="${version}"} 1`);
    await runtime.close();
  });

  it('answers /healthz and /readyz without a key, and /readyz is 503 once the runtime closes', async () => {
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model: scriptedModel({ turns: [{ text: 'done' }] }),
      builtinTools: false,
    });
    const handle = createFetchHandler(runtime, { basePath: '/v1' });
    const get = async (path: string, method = 'GET') => {
      const r = await handle(new Request(`http://localhost${path}`, { method }));
      return { status: r.status, text: await r.text(), type: r.headers.get('content-type') };
    };
    expect(await get('/v1/healthz')).toEqual({
      status: 200,
      text: '{"status":"ok"}',
      type: expect.stringContaining('json'),
    });
    expect(await get('/v1/readyz')).toMatchObject({ status: 200, text: '{"status":"ok"}' });
    expect((await get('/v1/readyz', 'HEAD')).status).toBe(200);
    expect((await get('/v1/healthz', 'POST')).status).toBe(405);
    await runtime.close();
    expect(await get('/v1/readyz')).toMatchObject({ status: 503, text: '{"status":"unavailable"}' });
    expect((await get('/v1/healthz')).status).toBe(200);
  });
});
