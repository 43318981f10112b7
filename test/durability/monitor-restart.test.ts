/**
 * Monitors across restarts: a runtime is closed between two checks and a new one opened on
 * the same SQLite file continues the monitor; a runtime that opens after five missed intervals makes one catch-up
 * check, not five, and plans the next one from then. The waiting agent holds no run slot and does not spin: on each
 * open its wait runs once and suspends again. Fake clocks, the local price page, no sleeps.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { AgentRuntime, sqliteStorage } from 'agentry-runtime';
import { fakeClock, scriptedModel, type FakeClock } from 'agentry-runtime/testing';
import { startPricePage, type PricePage } from '../fixtures/price-page.js';
import { eventually } from '../support/runtime.js';
import { isConditionCall, monitorTools, watcherScript } from '../tools/monitor-support.js';

let dir: string;
let page: PricePage;
const T0 = Date.parse('2026-01-01T00:00:00.000Z');
const iso = (ms: number) => new Date(ms).toISOString();

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'agentry-monitor-'));
  page = await startPricePage();
});
afterEach(async () => {
  await page.close();
  rmSync(dir, { recursive: true, force: true });
});

async function open(clock: FakeClock) {
  const model = scriptedModel({ turns: watcherScript() });
  const runtime = await AgentRuntime.open({
    storage: sqliteStorage({ path: join(dir, 'agentry.db') }),
    clock,
    model,
    builtinTools: monitorTools,
  });
  return { runtime, model };
}

async function lastChecked(runtime: AgentRuntime, agentId: string): Promise<string | null> {
  return (await runtime.monitors(agentId))[0]?.last_checked_at ?? null;
}

it('continues a monitor after a restart between two checks', async () => {
  const clock = fakeClock(T0);
  let { runtime } = await open(clock);
  const { agent_id } = await runtime.create({ goal: JSON.stringify({ url: page.url, interval_s: 60 }) });
  await eventually(async () => (await runtime.get(agent_id)).agent.status_message.startsWith('Watching'));
  clock.advance(60_000);
  await eventually(async () => (await lastChecked(runtime, agent_id)) === iso(T0 + 60_000), 5_000, 'the first check');
  clock.advance(30_000);
  await runtime.close();

  // Between two checks: the next is still due at T0 + 120 s.
  const second = await open(clock);
  runtime = second.runtime;
  const model = second.model;
  await eventually(async () => (await runtime.get(agent_id)).agent.status_message.startsWith('Watching'));
  const requests = page.requests;
  page.set({ price: 42 });
  clock.advance(30_000);
  await eventually(async () => (await lastChecked(runtime, agent_id)) === iso(T0 + 120_000), 5_000, 'the next check');
  expect(page.requests).toBe(requests + 1);
  // The change reached the agent through its wait, in the new process.
  await eventually(() => model.calls.some((c) => !isConditionCall(c) && JSON.stringify(c.messages).includes('$42.00')));
  expect((await runtime.monitors(agent_id))[0]).toMatchObject({ changes: 1, status: 'active' });
  await runtime.close();
});

it('makes one catch-up check after five missed intervals, not five', async () => {
  const clock = fakeClock(T0);
  let { runtime } = await open(clock);
  const { agent_id } = await runtime.create({ goal: JSON.stringify({ url: page.url, interval_s: 60 }) });
  await eventually(async () => (await runtime.get(agent_id)).agent.status_message.startsWith('Watching'));
  await runtime.close();
  const before = page.requests;

  // Down for five intervals and a half.
  const later = fakeClock(T0 + 5 * 60_000 + 30_000);
  const second = await open(later);
  runtime = second.runtime;
  const model = second.model;
  await eventually(
    async () => (await lastChecked(runtime, agent_id)) === iso(later.now()),
    5_000,
    'the catch-up check',
  );
  await runtime.whenIdle();
  expect(page.requests).toBe(before + 1);
  const [m] = await runtime.monitors(agent_id);
  expect(m!.next_check_at).toBe(iso(later.now() + 60_000));
  // The recovered wait ran once and suspended again: no model call, no run slot held.
  expect(model.calls).toHaveLength(0);
  expect((await runtime.get(agent_id)).agent.status).toBe('ACTIVE');
  later.advance(60_000);
  await eventually(async () => (await lastChecked(runtime, agent_id)) === iso(later.now()), 5_000, 'the next check');
  expect(page.requests).toBe(before + 2);
  await runtime.close();
});
