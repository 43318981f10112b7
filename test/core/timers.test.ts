/**
 * Durable timers (core/timers.ts): a fake clock drives the loop; rows in storage are the only state. Counts only, no
 * timed assertions.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { fakeClock, type FakeClock } from 'agentry-runtime/testing';
import { memoryStorage } from '../../src/storage/memory.js';
import type { StorageAdapter, TimerRow } from '../../src/storage/adapter.js';
import { TimerService } from '../../src/core/timers.js';
import { eventually } from '../support/runtime.js';

let storage: StorageAdapter;
let clock: FakeClock;
let timers: TimerService;
let errors: unknown[];

async function agents(...ids: string[]): Promise<void> {
  const now = new Date(clock.now()).toISOString();
  await storage.insertAgents(
    ids.map((id) => ({
      agent_id: id,
      account_id: 'local',
      parent_id: null,
      root_id: id,
      spawn_key: null,
      goal: 'g',
      model: 'svc-1-lite',
      status: 'ACTIVE' as const,
      progress: 0,
      status_message: '',
      token_count: 0,
      message_count: 0,
      credits_spent: 0,
      sub_agent_count: 0,
      max_credits: null,
      tree_spent: 0,
      tree_reserved: 0,
      step_count: 0,
      started: true,
      active_ms: 0,
      active_since: null,
      plan: null,
      spec: null,
      created_at: now,
      updated_at: now,
    })),
    [],
    [],
  );
}

beforeEach(async () => {
  storage = memoryStorage();
  await storage.init();
  clock = fakeClock();
  errors = [];
  timers = new TimerService(storage, clock, { onError: (e) => errors.push(e), batchSize: 16 });
});
afterEach(async () => {
  await timers.close();
});

describe('TimerService', () => {
  it('fires a timer when the clock reaches it, once, and deletes it', async () => {
    await agents('a');
    const fired: TimerRow[] = [];
    timers.register('ping', async (t) => void fired.push(t));
    timers.start();
    await timers.schedule({
      timer_id: 'p1',
      agent_id: 'a',
      kind: 'ping',
      due_at: clock.now() + 60_000,
      payload: { n: 1 },
    });
    clock.advance(59_999);
    await new Promise((r) => setImmediate(r));
    expect(fired).toHaveLength(0);
    clock.advance(1);
    await eventually(() => fired.length === 1);
    expect(JSON.parse(fired[0]!.payload)).toEqual({ n: 1 });
    await eventually(async () => (await storage.nextTimerDue()) === null);
    clock.advance(600_000);
    await new Promise((r) => setImmediate(r));
    expect(fired).toHaveLength(1);
  });

  it('wakes early for a timer scheduled sooner than its sleep', async () => {
    await agents('a');
    const fired: string[] = [];
    timers.register('ping', async (t) => void fired.push(t.timer_id));
    timers.start();
    await timers.schedule({ timer_id: 'late', agent_id: 'a', kind: 'ping', due_at: clock.now() + 50_000 });
    await eventually(() => clock.pendingSleeps > 0);
    await timers.schedule({ timer_id: 'soon', agent_id: 'a', kind: 'ping', due_at: clock.now() + 1_000 });
    clock.advance(1_000);
    await eventually(() => fired.length === 1);
    expect(fired).toEqual(['soon']);
  });

  it('keeps a timer its handler rescheduled, and plans from now: missed intervals fire once', async () => {
    await agents('a');
    let fired = 0;
    timers.register('every-minute', async (t) => {
      fired++;
      await timers.schedule({ timer_id: t.timer_id, agent_id: t.agent_id, kind: t.kind, due_at: clock.now() + 60_000 });
    });
    await timers.schedule({ timer_id: 'm', agent_id: 'a', kind: 'every-minute', due_at: clock.now() + 60_000 });
    // Five intervals pass before the loop runs (a process that was down): one catch-up firing.
    clock.advance(5 * 60_000 + 30_000);
    timers.start();
    await eventually(() => fired === 1);
    await eventually(async () => (await storage.nextTimerDue()) === clock.now() + 60_000);
    clock.advance(60_000);
    await eventually(() => fired === 2);
    expect(timers.stats().fired).toBe(2);
  });

  it('fires many due timers in batches through its lane', async () => {
    await agents('a');
    let fired = 0;
    timers.register('ping', async () => void fired++);
    for (let i = 0; i < 200; i++) {
      await timers.schedule({ timer_id: `t${i}`, agent_id: 'a', kind: 'ping', due_at: clock.now() + 1_000 + i });
    }
    timers.start();
    clock.advance(2_000);
    await eventually(() => fired === 200);
    await eventually(async () => (await storage.nextTimerDue()) === null);
  });

  it('retries a failed handler later and reports the error', async () => {
    await agents('a');
    let calls = 0;
    timers.register('flaky', async () => {
      if (++calls === 1) throw new Error('boom');
    });
    timers.start();
    await timers.schedule({ timer_id: 'f', agent_id: 'a', kind: 'flaky', due_at: clock.now() + 10 });
    clock.advance(10);
    await eventually(() => errors.length === 1);
    await eventually(async () => (await storage.nextTimerDue()) === clock.now() + 60_000);
    clock.advance(60_000);
    await eventually(() => calls === 2);
    await eventually(async () => (await storage.nextTimerDue()) === null);
  });

  it('validates what it schedules', async () => {
    await expect(timers.schedule({ timer_id: '', agent_id: 'a', kind: 'k', due_at: 1 })).rejects.toMatchObject({
      code: 'invalid_request',
    });
    expect(() => timers.register('k', async () => {})).not.toThrow();
    expect(() => timers.register('k', async () => {})).toThrow(/registered already/);
  });
});
