/**
 * The monitor tool through a real runtime: a scripted agent creates a monitor of a
 * local page whose content the test changes, and waits; a fake clock drives the checks. Each real change is one
 * `monitor.changed` event and the result of the agent's wait; a changed timestamp, counter or ignored ad is none; a
 * condition decides with a billed model call; pause stops checks, resume continues them, delete removes them, and
 * `until` completes the agent.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, type AgentEvents, type ModelRequest } from 'agentry-runtime';
import type { ScriptedTurn } from 'agentry-runtime/testing';
import { eventually, openTestRuntime, type TestRuntime } from '../support/runtime.js';
import { startPricePage, type PricePage } from '../fixtures/price-page.js';
import { isConditionCall, monitorTools, watcherScript } from './monitor-support.js';
import { MonitorService, monitorTool, normaliseVolatile } from '../../src/tools/builtin/monitor/index.js';
import { diffText, htmlLines } from '../../src/tools/builtin/monitor/check.js';
import { RuntimeEvents } from '../../src/core/events.js';
import type { PlatformServices } from '../../src/tools/platform.js';
import { deferred } from '../support/runtime.js';
import { lastToolResult } from './monitor-support.js';

type Changed = Parameters<AgentEvents['monitor.changed']>[0];
type Failed = Parameters<AgentEvents['monitor.error']>[0];

let page: PricePage;
let t: TestRuntime;
let changes: Changed[];
let errors: Failed[];
let results: Array<Record<string, unknown>>;

beforeEach(async () => {
  page = await startPricePage();
  results = [];
  t = await openTestRuntime(watcherScript(results), { builtinTools: monitorTools });
  changes = [];
  errors = [];
  t.runtime.on('monitor.changed', (e) => changes.push(e));
  t.runtime.on('monitor.error', (e) => errors.push(e));
});
afterEach(async () => {
  await t.runtime.close();
  await page.close();
});

const iso = (ms: number) => new Date(ms).toISOString();
/** What the agent's waits returned (the create call's result is not one). */
const waited = () => results.filter((r) => 'diff_summary' in r || 'timed_out' in r);

async function watch(input: Record<string, unknown>): Promise<string> {
  const { agent_id } = await t.runtime.create({ goal: JSON.stringify({ url: page.url, interval_s: 60, ...input }) });
  await eventually(
    async () => (await t.runtime.get(agent_id)).agent.status_message.startsWith('Watching'),
    5_000,
    'the agent to wait on its monitor',
  );
  return agent_id;
}

/** Moves the clock one interval and waits until the monitor's check at that time has been decided. */
async function nextCheck(agentId: string, ms = 60_000): Promise<void> {
  t.clock.advance(ms);
  const at = iso(t.clock.now());
  await eventually(
    async () => (await t.runtime.monitors(agentId))[0]?.last_checked_at === at,
    5_000,
    `the check at ${at}`,
  );
}

describe('monitor: changes', () => {
  it('reports each real change once, and no noise', async () => {
    const id = await watch({ ignore_selectors: ['.ad'] });
    const [created] = await t.runtime.monitors(id);
    expect(created).toMatchObject({ url: page.url, interval_s: 60, status: 'active', changes: 0, last_error: null });
    const agent = (await t.runtime.get(id)).agent;
    expect(agent.status).toBe('ACTIVE');
    expect(agent.status_message).toBe(`Watching ${page.url}; next check ${iso(t.clock.now() + 60_000).slice(11, 16)}`);
    expect(agent.monitors).toHaveLength(1);

    // An unchanged page: a conditional request answered 304.
    await nextCheck(id);
    expect(page.notModified).toBe(1);
    // Noise: a new timestamp and viewer count, and a new ad inside ignore_selectors.
    page.set({ updatedAt: '12:07', viewers: 41 });
    await nextCheck(id);
    page.set({ ad: 'Half price on all gadgets!' });
    await nextCheck(id);
    expect((await t.runtime.monitors(id))[0]!.changes).toBe(0);
    expect(changes).toHaveLength(0);

    // A real change: one event, one message, and the agent's wait returns it.
    page.set({ price: 45 });
    await nextCheck(id);
    await eventually(() => waited().length === 1, 5_000, 'the wait to return the change');
    expect(changes).toHaveLength(1);
    expect(changes[0]).toMatchObject({ agent_id: id, url: page.url, changed_at: iso(t.clock.now()) });
    expect(changes[0]!.diff_summary).toBe('Changed: "Price: $59.00" → "Price: $45.00"');
    expect(waited()[0]).toEqual({
      monitor_id: created!.monitor_id,
      url: page.url,
      diff_summary: changes[0]!.diff_summary,
      changed_at: changes[0]!.changed_at,
    });
    const { messages } = await t.runtime.get(id);
    expect(messages.filter((m) => m.text.startsWith('Change on'))).toEqual([
      expect.objectContaining({ role: 'ASSISTANT', text: `Change on ${page.url}: ${changes[0]!.diff_summary}` }),
    ]);
    await eventually(async () => (await t.runtime.get(id)).agent.status_message.startsWith('Watching'));

    // The next identical check is silent; a second real change is a second event.
    await nextCheck(id);
    expect(changes).toHaveLength(1);
    page.set({ price: 39, updatedAt: '12:09' });
    await nextCheck(id);
    await eventually(() => waited().length === 2, 5_000, 'the second change');
    expect(changes).toHaveLength(2);
    expect((await t.runtime.monitors(id))[0]!.changes).toBe(2);

    // Every check was billed at the tool's price, as was every call.
    const ledger = await t.storage.listLedger('local');
    const checks = 6;
    const calls = t.model.calls.filter((c) => !isConditionCall(c)).length - 1; // every turn but the last asked a call
    expect(ledger.filter((l) => l.kind === 'tool' && l.item === 'monitor')).toHaveLength(checks + calls);
  });

  it('asks the model whether a change meets the condition, and reports only the one that does', async () => {
    const id = await watch({ selector: '.price', condition: 'price below 50' });
    page.set({ price: 55 });
    await nextCheck(id);
    page.set({ price: 55, viewers: 12 }); // noise outside the selector: not even a model call
    await nextCheck(id);
    expect(changes).toHaveLength(0);
    page.set({ price: 45 });
    await nextCheck(id);
    await eventually(() => changes.length === 1);
    expect(changes[0]!.diff_summary).toBe('Changed: "Price: $55.00" → "Price: $45.00"');
    const asked = t.model.calls.filter(isConditionCall);
    expect(asked).toHaveLength(2);
    // Billed like model use.
    const ledger = await t.storage.listLedger('local');
    const modelRows = ledger.filter((l) => l.kind === 'model');
    expect(modelRows.length).toBe(t.model.calls.length);
  });

  it('reports a selector that matches nothing as an error event, never as a change', async () => {
    const id = await watch({ selector: '.price' });
    page.set({ priceClass: 'cost', price: 45 }); // a redesign: the price box is renamed
    await nextCheck(id);
    await nextCheck(id);
    expect(changes).toHaveLength(0);
    expect(errors).toHaveLength(2); // every check that finds nothing
    expect(errors[0]!.error).toBe('the selector ".price" matches nothing on the page');
    expect((await t.runtime.monitors(id))[0]).toMatchObject({ changes: 0, last_error: errors[0]!.error });
  });

  it('backs off a failing site and reports it after three failures, once', async () => {
    const id = await watch({});
    page.set({ failWith: 503 });
    const gaps: number[] = [];
    for (const gap of [60_000, 60_000, 120_000, 240_000]) {
      const before = (await t.runtime.monitors(id))[0]!;
      gaps.push(Date.parse(before.next_check_at!) - t.clock.now());
      await nextCheck(id, gap);
    }
    expect(gaps).toEqual([60_000, 60_000, 120_000, 240_000]);
    const [m] = await t.runtime.monitors(id);
    expect(m).toMatchObject({ last_error: `${page.url} answered HTTP 503` });
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ failures: 3 });
    const { messages } = await t.runtime.get(id);
    expect(messages.filter((x) => x.text.includes('checks in a row failed'))).toHaveLength(1);
    // Back to normal: the failure count resets, no change is reported for an unchanged page.
    page.set({ failWith: null });
    await nextCheck(id, Date.parse(m!.next_check_at!) - t.clock.now());
    expect(await t.storage.getMonitor(m!.monitor_id)).toMatchObject({ failures: 0, last_error: null, changes: 0 });
  });
});

describe('monitor: the agent', () => {
  it('pause stops checks, resume continues them, delete removes them', async () => {
    const id = await watch({});
    await t.runtime.pause(id);
    const before = page.requests;
    t.clock.advance(60_000);
    await eventually(async () => (await t.runtime.monitors(id))[0]!.next_check_at === null, 5_000, 'the paused check');
    t.clock.advance(600_000);
    await new Promise((r) => setImmediate(r));
    expect(page.requests).toBe(before);

    await t.runtime.resume(id);
    // The interval has passed: one check at once.
    await eventually(() => page.requests === before + 1, 5_000, 'the check after resume');
    await eventually(async () => (await t.runtime.get(id)).agent.status_message.startsWith('Watching'));
    page.set({ price: 10 });
    await nextCheck(id);
    await eventually(() => changes.length === 1);

    await t.runtime.delete(id);
    expect(await t.storage.listMonitors(id)).toEqual([]);
    expect(await t.storage.nextTimerDue()).toBeNull();
  });

  it('cancelMonitor ends the wait of an agent whose only monitor it was', async () => {
    const id = await watch({});
    const [m] = await t.runtime.monitors(id);
    const cancelled = await t.runtime.cancelMonitor(m!.monitor_id);
    expect(cancelled).toMatchObject({ status: 'cancelled', next_check_at: null });
    await expect(t.runtime.cancelMonitor(m!.monitor_id, { accountId: 'someone-else' })).rejects.toMatchObject({
      code: 'not_found',
    });
    expect((await t.runtime.waitFor(id)).status).toBe('COMPLETED');
    expect(results.at(-1)).toMatchObject({ timed_out: true });
  });

  it('completes an agent that only watches once `until` passes', async () => {
    const until = iso(t.clock.now() + 150_000);
    const id = await watch({ until });
    await nextCheck(id);
    await nextCheck(id);
    t.clock.advance(30_000); // the wait's durable timer at `until`
    const done = await t.runtime.waitFor(id);
    expect(done.status).toBe('COMPLETED');
    expect(results.at(-1)).toEqual({ timed_out: true });
    expect(changes).toHaveLength(0);
  });

  it('stops the agent as OUT_OF_CREDITS when a check cannot be paid', async () => {
    await t.runtime.close();
    t = await openTestRuntime(watcherScript(results), {
      builtinTools: monitorTools,
      prices: { tools: { monitor: 40 } },
    });
    const id = await watch({});
    // 100 credits: the create call and one check at 40 (and some model use) leave less than a check costs.
    await nextCheck(id);
    t.clock.advance(60_000);
    await eventually(async () => (await t.runtime.get(id)).agent.status === 'OUT_OF_CREDITS', 5_000, 'out of credits');
    expect((await t.storage.getAccount('local'))!.balance).toBeGreaterThanOrEqual(0);
  });
});

describe('monitor: changes while the agent is busy', () => {
  it('queues them for its next wait, in order', async () => {
    await t.runtime.close();
    const release = deferred();
    const busy = defineTool({
      name: 'busy',
      description: 'Works for a while',
      input: z.object({}),
      idempotent: true,
      run: async () => {
        await release.promise;
        return 'done';
      },
    });
    const seen: Array<Record<string, unknown>> = [];
    const script = (req: ModelRequest, { turnIndex }: { turnIndex: number }): ScriptedTurn => {
      if (turnIndex > 0) seen.push(lastToolResult(req) ?? {});
      if (turnIndex === 0) {
        return { toolCalls: [{ name: 'monitor', input: { action: 'create', url: page.url, interval_s: 60 } }] };
      }
      if (turnIndex === 1) return { toolCalls: [{ name: 'busy', input: {} }] };
      if (turnIndex <= 3) return { toolCalls: [{ name: 'monitor', input: { action: 'wait' } }] };
      return { text: 'Seen both.' };
    };
    t = await openTestRuntime(script, { builtinTools: monitorTools, tools: [busy] });
    changes = [];
    t.runtime.on('monitor.changed', (e) => changes.push(e));
    const { agent_id: id } = await t.runtime.create({ goal: 'watch while busy' });
    await eventually(async () => (await t.runtime.get(id)).agent.status_message === 'Calling busy');
    page.set({ price: 50 });
    await nextCheck(id);
    page.set({ price: 40 });
    await nextCheck(id);
    await eventually(() => changes.length === 2);
    release.resolve();
    expect((await t.runtime.waitFor(id)).status).toBe('COMPLETED');
    expect(seen.slice(2).map((r) => r.diff_summary)).toEqual([
      'Changed: "Price: $59.00" → "Price: $50.00"',
      'Changed: "Price: $50.00" → "Price: $40.00"',
    ]);
  });

  it('a wait re-run after a crash returns the change it took, not the next one', async () => {
    const service = new MonitorService(() => Promise.reject(new Error('no fetch')), 1);
    service.attach({
      storage: t.storage,
      clock: t.clock,
      events: new RuntimeEvents(),
      timers: { register() {}, schedule: async () => {}, cancel: async () => {}, noteScheduled() {} },
    } as unknown as PlatformServices);
    const id = await watch({});
    const [m] = await t.runtime.monitors(id);
    const row = (await t.storage.getMonitor(m!.monitor_id))!;
    for (const n of [1, 2]) {
      await t.storage.updateMonitor(row, {
        change: { agent_id: id, monitor_id: row.monitor_id, change: JSON.stringify({ n }), created_at: iso(n) },
      });
    }
    let saved: unknown;
    const state = { get: async <T>() => saved as T, set: async (v: unknown) => void (saved = v) };
    expect(await service.takeChange(id, undefined, state)).toEqual({ n: 1 });
    expect(await service.takeChange(id, undefined, state)).toEqual({ n: 1 }); // the same call, run again
    saved = undefined; // the next wait call
    expect(await service.takeChange(id, undefined, state)).toEqual({ n: 2 });
  });
});

describe('monitor: text', () => {
  it('normalises volatile noise and keeps prices', () => {
    expect(normaliseVolatile('Updated 12:05 UTC · 1,204 views · Price: $49')).toBe(
      'Updated <time> · <n> views · Price: $49',
    );
    expect(normaliseVolatile('Posted 5 minutes ago on 2026-11-26T12:05:00Z')).toBe('Posted <ago> on <datetime>');
    expect(normaliseVolatile('Only 3 left in stock')).toBe('Only 3 left in stock');
  });

  it('stays linear on a page line made to backtrack (`1,1,1,…`: 12 s of event loop before the fix)', () => {
    const line = `${'1,'.repeat(50_000)}2 views`;
    expect(normaliseVolatile(line)).toMatch(/<n> views$/);
  }, 5_000);

  it('bounds the work of a selector that backtracks on the page (seconds per combinator before, unbounded)', () => {
    const deep = `${'<div>'.repeat(300)}<span>x</span>${'</div>'.repeat(300)}`;
    expect(() => htmlLines(deep, { selector: 'p div div div div div div span', ignoreSelectors: [] })).toThrow(
      /takes too many steps to match on this page/,
    );
    expect(() => htmlLines(deep, { selector: null, ignoreSelectors: ['p div div div div div div span'] })).toThrow(
      /ignore_selectors: .* takes too many steps/,
    );
    expect(htmlLines(deep, { selector: 'div > span', ignoreSelectors: [] })).toEqual(['x']);
  }, 5_000);

  it('takes the selector text, drops ignore_selectors and scripts', () => {
    const html = '<main><p class="a">A <b>1</b></p><div class="ad">ad</div><script>x()</script><p>B</p></main>';
    expect(htmlLines(html, { selector: null, ignoreSelectors: ['.ad'] })).toEqual(['A 1', 'B']);
    expect(htmlLines(html, { selector: '.a', ignoreSelectors: [] })).toEqual(['A 1']);
    expect(() => htmlLines(html, { selector: '.missing', ignoreSelectors: [] })).toThrow(/matches nothing/);
  });

  it('reads AGENTRY_MONITOR_MIN_INTERVAL_S at the door', () => {
    const fetch = () => Promise.reject(new Error('unused'));
    expect(monitorTool({ fetch, env: {} }).minIntervalS).toBe(60);
    expect(monitorTool({ fetch, env: { AGENTRY_MONITOR_MIN_INTERVAL_S: '5' } }).minIntervalS).toBe(5);
    expect(() => monitorTool({ fetch, env: { AGENTRY_MONITOR_MIN_INTERVAL_S: 'soon' } })).toThrow(
      /AGENTRY_MONITOR_MIN_INTERVAL_S must be a positive number of seconds; got "soon"/,
    );
  });

  it('summarises a diff', () => {
    expect(diffText('a\nb', 'a\nc').summary).toBe('Changed: "b" → "c"');
    expect(diffText('a', 'a\nb\nc').summary).toBe('Added "b", "c"');
  });
});
