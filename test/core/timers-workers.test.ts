/**
 * The timer loop where several processes share the timers (storage.workers present): a schedule is
 * announced on the workers' bus (topic `timers`) and another process's loop looks again at once; a lost announcement
 * is made up for by the `sharedPollMs` backstop. Memory storage stands for the shared database, a fake clock drives
 * due times, and an in-process bus stands for LISTEN/NOTIFY.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { fakeClock, type FakeClock } from 'agentry-runtime/testing';
import { memoryStorage } from '../../src/storage/memory.js';
import type { StorageAdapter } from '../../src/storage/adapter.js';
import type { WorkerBus, WorkerTopic } from '../../src/storage/workers.js';
import { TimerService } from '../../src/core/timers.js';
import { eventually } from '../support/runtime.js';

/** An in-process bus: delivers to every subscriber (the publisher included) unless told to lose messages. */
class FakeBus implements WorkerBus {
  readonly published: Array<[WorkerTopic, string]> = [];
  readonly listeners = new Set<{ topic: WorkerTopic; listener: (payloads: string[] | null) => void }>();
  losing = false;
  publish(topic: WorkerTopic, payload: string): void {
    this.published.push([topic, payload]);
    if (this.losing) return;
    for (const l of this.listeners) if (l.topic === topic) queueMicrotask(() => l.listener([payload]));
  }
  subscribe(topic: WorkerTopic, listener: (payloads: string[] | null) => void): () => void {
    const entry = { topic, listener };
    this.listeners.add(entry);
    return () => this.listeners.delete(entry);
  }
}

/** One process's view of the shared storage: the same rows, with the workers' bus. */
function processView(storage: StorageAdapter, bus: WorkerBus): StorageAdapter {
  return new Proxy(storage, {
    get(target, key) {
      if (key === 'workers') return { bus };
      const value = Reflect.get(target, key, target) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

let shared: StorageAdapter;
let clock: FakeClock;
let bus: FakeBus;
let services: TimerService[];
let errors: unknown[];
const fired: string[] = [];

/** A process's timer service; `poll` is its backstop (real time). */
function timerProcess(pollMs: number): TimerService {
  const timers = new TimerService(processView(shared, bus), clock, {
    sharedPollMs: pollMs,
    onError: (e) => errors.push(e),
  });
  timers.register('test', async (t) => void fired.push(`${t.timer_id}@${t.due_at}`));
  services.push(timers);
  return timers;
}

beforeEach(async () => {
  shared = memoryStorage();
  await shared.init();
  clock = fakeClock();
  bus = new FakeBus();
  services = [];
  errors = [];
  fired.length = 0;
  const now = new Date(clock.now()).toISOString();
  await shared.insertAgents(
    [
      {
        agent_id: 'a1',
        account_id: 'local',
        parent_id: null,
        root_id: 'a1',
        spawn_key: null,
        goal: 'g',
        model: 'svc-1-lite',
        status: 'ACTIVE',
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
        trace_context: null,
      },
    ],
    [],
    [],
  );
});

afterEach(async () => {
  await Promise.all(services.map((s) => s.close()));
  expect(bus.listeners.size).toBe(0); // close() unsubscribes
  expect(errors).toEqual([]);
});

describe('timers shared by several processes', () => {
  it('a timer scheduled by another process wakes this loop through the bus', async () => {
    // No backstop within the test: only the announcement can wake the loop, which waits with no timer at all.
    const worker = timerProcess(600_000);
    worker.start();
    const frontEnd = timerProcess(600_000); // schedules, but drives nothing (its loop never starts)
    const due = clock.now() + 1_000;
    await frontEnd.schedule({ timer_id: 't1', agent_id: 'a1', kind: 'test', due_at: due });
    expect(bus.published).toEqual([['timers', String(due)]]);
    await eventually(() => clock.pendingSleeps > 0, 5_000, 'the worker to sleep until the announced timer');
    clock.advance(1_000);
    await eventually(() => fired.length === 1, 5_000, 'the timer to fire');
    expect(fired).toEqual([`t1@${due}`]);
  });

  it('announces a later timer only once the earlier announced one has passed', async () => {
    const frontEnd = timerProcess(600_000);
    const at = (ms: number) => clock.now() + ms;
    const t0 = clock.now();
    await frontEnd.schedule({ timer_id: 't1', agent_id: 'a1', kind: 'test', due_at: at(1_000) });
    await frontEnd.schedule({ timer_id: 't2', agent_id: 'a1', kind: 'test', due_at: at(2_000) });
    await frontEnd.schedule({ timer_id: 't3', agent_id: 'a1', kind: 'test', due_at: at(500) });
    clock.advance(600);
    frontEnd.noteScheduled(at(5_000)); // t3 (500) has passed: announced again
    expect(bus.published.map(([, p]) => Number(p) - t0)).toEqual([1_000, 500, 5_600]);
  });

  it('finds a timer whose announcement was lost on its backstop poll', async () => {
    const worker = timerProcess(20);
    worker.start();
    const frontEnd = timerProcess(600_000);
    bus.losing = true;
    const due = clock.now() + 1_000;
    await frontEnd.schedule({ timer_id: 't1', agent_id: 'a1', kind: 'test', due_at: due });
    await eventually(() => clock.pendingSleeps > 0, 5_000, 'the backstop poll to find the timer');
    clock.advance(1_000);
    await eventually(() => fired.length === 1, 5_000, 'the timer to fire');
    expect(fired).toEqual([`t1@${due}`]);
  });
});
