/**
 * @module core/timers
 * Durable timers: work the runtime does at a time for an agent — wake a call that waits until then, check
 * a monitored page. A timer is a storage row `{timer_id, agent_id, due_at, kind, payload}`, so it survives restarts,
 * and only due rows are read (an index on `due_at`): 10,000 idle monitors cost rows, not memory.
 *
 * One loop sleeps on the clock until the soonest timer is due (the fake clock of `agentry-runtime/testing` drives it in tests),
 * reads the due timers in batches and fires each through a lane of bounded concurrency, calling the handler
 * registered for its `kind`. A handler that wants to run again reschedules its own timer (same id, new time); one that
 * does not is deleted after it returned — only if it was not rescheduled meanwhile. A timer whose handler was cut short
 * by a crash is still in storage and fires when the next process starts; one missed while no process ran fires once,
 * however many times it would have fired meanwhile, because the row holds one time and the handler plans the next from
 * now, not from the old due time.
 *
 * Where several workers share the timers (`storage.timerClaims`, PostgreSQL in workers mode), reading due
 * timers claims them for this worker, so each due time fires once across workers. The claims of handlers that run or
 * wait in the lane are renewed every third of the claim's lease (in real time: leases are database time); a claim
 * that was lost anyway (this process froze past it) is reported and its handler aborted, and the worker that took it
 * over fires it. A worker that dies mid-handler renews nothing: its claims expire and another worker fires those timers
 * once. A schedule is announced on the workers' bus (topic `timers`) so that other processes' loops look sooner, and
 * since notifications are best effort, a loop there never sleeps longer than `sharedPollMs`.
 */
import { z } from 'zod';
import type { StorageAdapter, TimerRow } from '../storage/adapter.js';
import type { WorkerBus } from '../storage/workers.js';
import { isAbortError, type Clock } from '../base/clock.js';
import type { TimerHandler, Timers, TimerSpec } from '../tools/platform.js';
import { ConcurrencyLane } from './lane.js';
import { parseArgs } from '../base/validate.js';

export interface TimerServiceOptions {
  /** Handlers running at once (they mostly wait on I/O: a fetch, a commit). @default 128 */
  concurrency?: number;
  /** Due timers read per query. @default 256 */
  batchSize?: number;
  /**
   * The longest the loop sleeps on the clock before it looks at storage again while timers exist. Timers scheduled by
   * this process wake it at once; this bounds how late one written directly to storage can be. With no timer at all,
   * the loop waits for the next schedule. @default 60 s
   */
  maxSleepMs?: number;
  /**
   * Where other processes share the timers (`storage.workers` or `storage.timerClaims`): the longest the loop goes
   * without looking at storage, in real time, timers or not — a timer another process scheduled, or one whose claim
   * expired with its worker, is found this late at worst when a notification was lost. @default 2 s
   */
  sharedPollMs?: number;
  onError(error: unknown, agentId: string | undefined): void;
}

const TimerSpecSchema = z
  .object({
    timer_id: z.string().min(1).max(300),
    agent_id: z.string().min(1).max(200),
    kind: z.string().min(1).max(100),
    due_at: z.number().finite(),
    payload: z.unknown().optional(),
  })
  .strict();

// The monitor tool and the runtime's cancelMonitor share the check timer's id; it lives with the monitor's record form.
export { monitorTimerId } from '../tools/monitors.js';

/** Firings whose lateness {@link TimerService.stats} keeps for its percentile. */
const LATE_SAMPLE = 100_000;

/** A failed handler's timer is tried again after this long (it stays in storage meanwhile). */
const RETRY_AFTER_FAILURE_MS = 60_000;

/** A timer whose handler runs or waits in the lane. */
interface InFlight {
  timer: TimerRow;
  run: Promise<void>;
  /** Aborted when this worker lost the timer's claim: another worker fires it now. */
  lost: AbortController;
}

/**
 * @example
 * const timers = new TimerService(storage, clock, { onError: console.error });
 * timers.register('agent.wake', async (t) => scheduler.kick(t.agent_id));
 * timers.start();
 * await timers.schedule({ timer_id: `agent.wake:${id}`, agent_id: id, kind: 'agent.wake', due_at: Date.now() + 60_000 });
 */
export class TimerService implements Timers {
  private readonly handlers = new Map<string, TimerHandler>();
  private readonly lane: ConcurrencyLane;
  private readonly batchSize: number;
  private readonly maxSleepMs: number;
  private readonly sharedPollMs: number;
  /** Timers whose handler runs now or waits in the lane: a query that still finds them due skips them. */
  private readonly inFlight = new Map<string, InFlight>();
  /** The renewal of the in-flight timers' claims (workers mode), and whether one is under way. */
  private renewer: ReturnType<typeof setInterval> | undefined;
  private renewing = false;
  private unsubscribe: (() => void) | undefined;
  /** The soonest due time announced on the bus that has not passed: a later one need not be announced. */
  private announcedDue: number | undefined;
  /** At most this many handlers run or wait in the lane; the loop reads more due timers only when a batch fits. */
  private readonly maxInFlight: number;
  /** Called (once each) when a handler ends: the loop waits on this, never on a race over every handler's promise. */
  private finishWaiters: Array<() => void> = [];
  /**
   * Firings (timer id → due time) whose handler ended while a read of due timers was under way: that read may answer
   * the row as it was before the handler moved or deleted it, and must not fire it again.
   */
  private endedDuringRead: Map<string, number> | undefined;
  private sleeping: { until: number; controller: AbortController } | undefined;
  private loop: Promise<void> | undefined;
  private closed = false;
  /** Aborted by close(): handlers stop waiting on the network, and their timers fire again on the next start. */
  private readonly closing = new AbortController();
  /** Set when a timer was scheduled while the loop was reading: it looks again before it sleeps. */
  private dirty = false;
  private firedCount = 0;
  private maxLateMs = 0;
  private lateSumMs = 0;
  /** The lateness of the last firings (at most {@link LATE_SAMPLE}), for a percentile. */
  private lateSample: number[] = [];

  constructor(
    private readonly storage: StorageAdapter,
    private readonly clock: Clock,
    private readonly options: TimerServiceOptions,
  ) {
    const concurrency = options.concurrency ?? 128;
    this.lane = new ConcurrencyLane(concurrency);
    this.batchSize = options.batchSize ?? 256;
    this.maxInFlight = concurrency + 2 * this.batchSize;
    this.maxSleepMs = options.maxSleepMs ?? 60_000;
    this.sharedPollMs = options.sharedPollMs ?? 2_000;
  }

  /** Whether other processes read the same timers (known after the storage's init()). */
  private get shared(): boolean {
    return this.storage.workers !== undefined || this.storage.timerClaims !== undefined;
  }

  private get bus(): WorkerBus | undefined {
    return this.storage.workers?.bus;
  }

  register(kind: string, handler: TimerHandler): void {
    if (this.handlers.has(kind)) throw new Error(`a timer handler for ${JSON.stringify(kind)} is registered already`);
    this.handlers.set(kind, handler);
  }

  async schedule(timer: TimerSpec): Promise<void> {
    const t = parseArgs(TimerSpecSchema, timer, 'timer');
    await this.storage.putTimer({
      timer_id: t.timer_id,
      agent_id: t.agent_id,
      kind: t.kind,
      due_at: Math.floor(t.due_at),
      payload: JSON.stringify(t.payload ?? null),
    });
    this.noteScheduled(t.due_at);
  }

  noteScheduled(dueAt: number): void {
    this.wake(dueAt);
    this.announce(dueAt);
  }

  /** Makes the loop look again before it sleeps, and wakes it now when `dueAt` is sooner than its sleep. */
  private wake(dueAt: number): void {
    this.dirty = true;
    if (this.sleeping && dueAt < this.sleeping.until) this.sleeping.controller.abort();
  }

  /**
   * Tells the other processes' loops (workers mode). Each that hears it plans again from storage, which then shows
   * every later timer too: while an earlier announced time has not passed, a later one is not announced.
   */
  private announce(dueAt: number): void {
    const bus = this.bus;
    if (!bus) return;
    if (this.announcedDue !== undefined && this.announcedDue > this.clock.now() && dueAt >= this.announcedDue) return;
    this.announcedDue = dueAt;
    bus.publish('timers', String(Math.floor(dueAt)));
  }

  async cancel(timerId: string): Promise<void> {
    await this.storage.deleteTimer(timerId);
  }

  /** Starts the loop (the runtime does, when it drives agents). */
  start(): void {
    if (this.loop || this.closed) return;
    this.unsubscribe = this.bus?.subscribe('timers', (payloads) => {
      // null: the bus reconnected and may have missed announcements; look again.
      const due =
        payloads === null
          ? -Infinity
          : payloads.reduce(
              (soonest, p) => (Number.isFinite(Number(p)) ? Math.min(soonest, Number(p)) : soonest),
              Infinity,
            );
      if (due !== Infinity) this.wake(due);
    });
    const claims = this.storage.timerClaims;
    if (claims) {
      // Real time, not the runtime's clock: the claims expire in database time.
      this.renewer = setInterval(() => void this.renewClaims(), Math.max(1, Math.floor(claims.leaseMs / 3)));
      this.renewer.unref();
    }
    this.loop = this.run().catch((error: unknown) => this.options.onError(error, undefined));
  }

  /**
   * Timers fired since the start (or the last reset), and how late their handlers started (milliseconds after
   * `due_at`, lane wait included): for benchmarks and diagnostics.
   */
  stats(options: { reset?: boolean } = {}): {
    fired: number;
    maxLateMs: number;
    meanLateMs: number;
    p99LateMs: number;
    inFlight: number;
  } {
    const late = [...this.lateSample].sort((a, b) => a - b);
    const result = {
      fired: this.firedCount,
      maxLateMs: this.maxLateMs,
      meanLateMs: this.firedCount === 0 ? 0 : this.lateSumMs / this.firedCount,
      p99LateMs: late[Math.min(late.length - 1, Math.floor(late.length * 0.99))] ?? 0,
      inFlight: this.inFlight.size,
    };
    if (options.reset) {
      this.firedCount = 0;
      this.maxLateMs = 0;
      this.lateSumMs = 0;
      this.lateSample = [];
    }
    return result;
  }

  /** Stops the loop and waits for the handlers running now. Timers stay in storage for the next process. */
  async close(): Promise<void> {
    this.closed = true;
    this.closing.abort();
    this.sleeping?.controller.abort();
    clearInterval(this.renewer);
    this.unsubscribe?.();
    await this.loop;
    await Promise.allSettled([...this.inFlight.values()].map((f) => f.run));
    // The handlers were cut short: the other workers fire those timers now rather than after the claims' lease.
    if (this.loop) {
      await this.storage.timerClaims?.releaseAll().catch((error: unknown) => this.options.onError(error, undefined));
    }
  }

  /**
   * Renews the claims of the timers in flight; a claim lost anyway (this process was frozen or cut off for longer than
   * the lease) is reported and its handler aborted: the worker that claimed it since fires it, and this one leaves the
   * timer's row alone.
   */
  private async renewClaims(): Promise<void> {
    const claims = this.storage.timerClaims;
    if (!claims || this.renewing || this.closed || this.inFlight.size === 0) return;
    this.renewing = true;
    try {
      const lost = await claims.renew([...this.inFlight.values()].map((f) => f.timer));
      for (const timerId of lost) {
        const f = this.inFlight.get(timerId);
        if (!f || f.lost.signal.aborted) continue;
        const error = new Error(
          `timer ${timerId} (${f.timer.kind}) was claimed by another worker while its handler ran here: this worker ` +
            `did not renew its claim within ${claims.leaseMs} ms; the handler here is aborted and the other worker fires it`,
        );
        f.lost.abort(error);
        this.options.onError(error, f.timer.agent_id);
      }
    } catch (error) {
      // The next renewal tries again; the lease is three renewals long.
      if (!this.closed) this.options.onError(error, undefined);
    } finally {
      this.renewing = false;
    }
  }

  private async run(): Promise<void> {
    while (!this.closed) {
      this.dirty = false;
      const next = await this.storage.nextTimerDue();
      if (this.closed) return;
      // Read after the query: the time may have moved while it ran (a fake clock advanced in a test, a slow disk).
      const now = this.clock.now();
      if (next !== null && next <= now) {
        // A full batch must fit before storage is asked again: each query then starts many handlers, not one.
        if (this.inFlight.size + this.batchSize > this.maxInFlight) {
          await this.handlerFinished();
          continue;
        }
        const started = await this.fireDue(now);
        // Every due timer is already running: wait for one to end rather than asking storage again at once.
        if (started === 0 && this.inFlight.size > 0) await this.handlerFinished();
        continue;
      }
      if (this.dirty) continue;
      const controller = new AbortController();
      // Other processes schedule too, and their announcements may be lost: look again after sharedPollMs at most, in
      // real time (a claim of a gone worker expires in database time, whatever the runtime's clock says).
      const backstop = this.shared ? setTimeout(() => controller.abort(), this.sharedPollMs) : undefined;
      backstop?.unref();
      try {
        if (next === null) {
          // No timer at all: nothing to sleep on the clock for; the next schedule() (or close) wakes the loop. A
          // runtime without timers thus keeps no sleep pending on its clock.
          this.sleeping = { until: Infinity, controller };
          await new Promise<void>((resolve) => controller.signal.addEventListener('abort', () => resolve()));
        } else {
          const wait = Math.min(this.maxSleepMs, next - now);
          this.sleeping = { until: now + wait, controller };
          await this.clock.sleep(wait, controller.signal);
        }
      } catch (err) {
        if (!isAbortError(err)) throw err;
      } finally {
        clearTimeout(backstop);
        this.sleeping = undefined;
      }
    }
  }

  /** Starts the handlers of the timers due at `now` (a batch); returns how many it started. */
  private async fireDue(now: number): Promise<number> {
    // Skips the ones already running, so the batch asks for that many more.
    const ended = (this.endedDuringRead = new Map());
    let due: TimerRow[];
    try {
      due = await this.storage.listDueTimers(now, this.batchSize + this.inFlight.size);
    } finally {
      this.endedDuringRead = undefined;
    }
    let started = 0;
    for (const timer of due) {
      if (this.closed) break;
      if (this.inFlight.has(timer.timer_id) || ended.get(timer.timer_id) === timer.due_at) continue;
      const late = Math.max(0, this.clock.now() - timer.due_at);
      const lost = new AbortController();
      const run = this.lane
        .run(() => this.fire(timer, late, lost.signal))
        .finally(() => {
          this.endedDuringRead?.set(timer.timer_id, timer.due_at);
          this.inFlight.delete(timer.timer_id);
          const waiters = this.finishWaiters;
          this.finishWaiters = [];
          for (const w of waiters) w();
        });
      this.inFlight.set(timer.timer_id, { timer, run, lost });
      started++;
    }
    return started;
  }

  /** Resolves when the next handler ends (or at once when none runs). */
  private handlerFinished(): Promise<void> {
    if (this.inFlight.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.finishWaiters.push(resolve));
  }

  private async fire(timer: TimerRow, lateMs: number, lost: AbortSignal): Promise<void> {
    if (lost.aborted) return; // lost while it waited in the lane: the other worker fires it
    this.firedCount++;
    this.lateSumMs += lateMs;
    if (lateMs > this.maxLateMs) this.maxLateMs = lateMs;
    if (this.lateSample.length < LATE_SAMPLE) this.lateSample.push(lateMs);
    else this.lateSample[this.firedCount % LATE_SAMPLE] = lateMs;
    const handler = this.handlers.get(timer.kind);
    try {
      if (!handler) throw new Error(`no handler for timers of kind ${JSON.stringify(timer.kind)}`);
      const moved = await handler(
        timer,
        this.storage.timerClaims ? AbortSignal.any([this.closing.signal, lost]) : this.closing.signal,
      );
      // A lost claim: the timer is the other worker's now (it may be running it), so its row is left alone.
      if (moved !== true && !lost.aborted) await this.storage.deleteTimer(timer.timer_id, timer.due_at);
    } catch (error) {
      if (this.closed) return; // the storage may be closing under it: the timer fires again on the next start
      if (lost.aborted) return; // reported when the claim was found lost
      this.options.onError(error, timer.agent_id);
      // Tried again later; a handler that rescheduled itself before failing keeps its own time.
      try {
        if (await this.storage.deleteTimer(timer.timer_id, timer.due_at)) {
          const retryAt = this.clock.now() + RETRY_AFTER_FAILURE_MS;
          await this.storage.putTimer({ ...timer, due_at: retryAt });
          this.noteScheduled(retryAt);
        }
      } catch (again) {
        this.options.onError(again, timer.agent_id);
      }
    }
  }
}
