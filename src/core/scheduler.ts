/**
 * @module core/scheduler
 * Decides which agents step, and how many at once. A runnable agent waiting for a run slot costs one id
 * in a queue; only agents holding a slot have a driver (an async loop over {@link runStep}) and abort handles.
 * Model and tool calls run in lanes with their own concurrency caps (core/lane.ts).
 */
import type { Clock } from '../base/clock.js';
import { ConcurrencyLane, RateLimitedLane, type Lane } from './lane.js';
import { LeaseLostError, type WorkerCoordination } from '../storage/workers.js';
import { runStep } from './loop.js';
import { newRunControl, type RunControl, type StepDeps } from './step-types.js';

export interface SchedulerOptions {
  /** Agents stepping at once. */
  runSlots: number;
  /**
   * Several workers: the most agents this worker claims beyond what its free run slots can start now (a look-ahead
   * that hides the claim's round trip). What it actually claims ahead follows how fast its slots free up (see
   * {@link DrainRate}), so a worker whose slots are busy for a while leaves new work to the others. Default 32.
   */
  claimAhead?: number;
  /**
   * Several workers on one database (storage/workers.ts): an agent is driven only under this worker's lease. Absent:
   * this process drives every agent of its storage.
   */
  leases?: WorkerCoordination;
  /** Whether agents are driven automatically; `false` leaves stepping to `runtime.step()`. */
  auto: boolean;
  onError(error: unknown, agentId: string): void;
  /**
   * Awaited before this process starts stepping an agent (a drive or a manual step): changes another process made are
   * emitted here first (core/remote-agents.ts). Never rejects.
   */
  beforeSteps?: (agentId: string) => Promise<void> | undefined;
}

export interface LaneOptions {
  /** Model calls in flight at once. */
  modelConcurrency: number;
  /** Model calls started per `modelIntervalMs`, or 0 for no cap. */
  modelRequestsPerInterval: number;
  modelIntervalMs: number;
  /** Tool calls in flight at once, per lane unless the lane has its own cap. */
  toolConcurrency: number;
  /** Caps of named tool lanes (e.g. `browser: 4`). */
  laneConcurrency: Record<string, number>;
}

/** The lanes model and tool calls run in. */
export class Lanes {
  readonly models: Lane;
  private readonly toolLanes = new Map<string, Lane>();

  constructor(private readonly options: LaneOptions) {
    this.models =
      options.modelRequestsPerInterval > 0
        ? new RateLimitedLane(options.modelConcurrency, options.modelRequestsPerInterval, options.modelIntervalMs)
        : new ConcurrencyLane(options.modelConcurrency);
  }

  private backoffUntil = 0;

  /**
   * Pauses the model lane for `ms` (calls in flight finish; no new one starts), so a rate-limited provider sees the
   * whole runtime slow down instead of each agent hammering it. Overlapping back-offs extend to the latest end.
   */
  backOffModels(ms: number, clock: Clock): void {
    const until = clock.now() + ms;
    if (until <= this.backoffUntil) return;
    const alreadyPaused = this.backoffUntil > clock.now();
    this.backoffUntil = until;
    this.models.pause();
    if (alreadyPaused) return;
    const wake = (): void => {
      const left = this.backoffUntil - clock.now();
      if (left > 0) {
        void clock.sleep(left).then(wake);
        return;
      }
      this.models.start();
    };
    void clock.sleep(ms).then(wake);
  }

  inModelLane<T>(fn: () => Promise<T>): Promise<T> {
    return this.models.run(fn);
  }

  /** Each lane's calls in flight and waiting, by lane name (`models`, then the tool lanes in order of first use). */
  load(): Array<{ lane: string; active: number; waiting: number }> {
    return [{ lane: 'models', ...this.models.load }, ...[...this.toolLanes].map(([lane, l]) => ({ lane, ...l.load }))];
  }

  inToolLane<T>(name: string, fn: () => Promise<T>): Promise<T> {
    let lane = this.toolLanes.get(name);
    if (!lane) {
      lane = new ConcurrencyLane(this.options.laneConcurrency[name] ?? this.options.toolConcurrency);
      this.toolLanes.set(name, lane);
    }
    return lane.run(fn);
  }
}

export class Scheduler {
  /** Ids waiting for a run slot, in order; `head` avoids O(n) shifts on a 10,000-long queue. */
  private queue: string[] = [];
  private head = 0;
  private readonly queued = new Set<string>();
  private readonly running = new Map<string, { control: RunControl; done: Promise<void> }>();
  /** Agents made runnable again while their driver was still finishing: started again when it exits. */
  private readonly again = new Set<string>();
  private closing = false;
  private idleWaiters: Array<() => void> = [];
  /** Agents whose lease is being claimed (several workers): they join the queue once claimed. */
  private readonly claiming = new Set<string>();
  /** How fast run slots free up here: sizes the claim-ahead (several workers). */
  private readonly drain = new DrainRate(DRAIN_TAU_MS);

  constructor(
    private readonly deps: StepDeps,
    private readonly options: SchedulerOptions,
  ) {}

  /** Makes an agent runnable (created, resumed, recovered, woken). Cheap and idempotent. */
  kick(agentId: string): void {
    if (this.closing || !this.options.auto) return;
    if (this.running.has(agentId)) {
      this.again.add(agentId);
      return;
    }
    if (this.queued.has(agentId)) return;
    const leases = this.options.leases;
    if (leases && !leases.holds(agentId)) {
      this.claim(agentId, leases);
      return;
    }
    this.queued.add(agentId);
    this.queue.push(agentId);
    this.pump();
  }

  /**
   * Several workers (storage/workers.ts): starts this process's part — claims agents while it has room, drives what it
   * claimed, drops what it lost, and aborts the model call of an agent paused elsewhere. A no-op with one process.
   */
  async joinWorkers(): Promise<void> {
    const leases = this.options.leases;
    if (!leases || !this.options.auto) return;
    await leases.start(
      {
        // Claimed on its own (new work, a gone worker's agents): they hold a lease, so they join the queue.
        onClaimed: (ids) => ids.forEach((id) => this.kick(id)),
        onLost: (ids) => ids.forEach((id) => this.abort(id, 'lease lost: another worker continues the agent')),
        // Paused or stopped by another process: the model request in flight is aborted, as a pause here does.
        onStopped: (ids) => ids.forEach((id) => this.controlOf(id)?.model.abort(abortReason('agent paused'))),
        onError: (error) => this.options.onError(error, '(workers)'),
      },
      () => this.roomForClaims(),
    );
  }

  /**
   * How many more agents this worker may claim: what its free run slots can start now, plus what they will free within
   * a short horizon at the rate they have been freeing up (capped by `claimAhead`), less what it has claimed and not
   * started. The rest stays claimable, so idle workers take it (so a tree spreads over every worker).
   */
  private roomForClaims(): number {
    const free = this.options.runSlots - this.running.size;
    const ahead = Math.min(this.options.claimAhead ?? DEFAULT_CLAIM_AHEAD, this.drain.expectedWithin(CLAIM_HORIZON_MS));
    return Math.max(0, free + ahead - this.queued.size - this.claiming.size);
  }

  private claim(agentId: string, leases: WorkerCoordination): void {
    if (this.claiming.has(agentId)) return;
    this.claiming.add(agentId);
    // With no room left the claim only marks the agent claimable, for this worker or another, later.
    leases.claim([agentId], this.roomForClaims()).then(
      (got) => {
        this.claiming.delete(agentId);
        if (got.length > 0) this.kick(agentId);
        else this.pump();
      },
      (error: unknown) => {
        this.claiming.delete(agentId);
        this.options.onError(error, agentId);
        this.pump();
      },
    );
  }

  /** Abort handles of an agent that is stepping in this process. */
  controlOf(agentId: string): RunControl | undefined {
    return this.running.get(agentId)?.control;
  }

  /** Forgets a deleted agent: drops it from the queue and aborts its in-flight work. */
  abort(agentId: string, reason: string): void {
    this.queued.delete(agentId);
    this.again.delete(agentId);
    const running = this.running.get(agentId);
    running?.control.abortAll(abortReason(reason));
  }

  /** Runs exactly one step of an agent now (manual mode, tests). */
  async stepOnce(agentId: string): Promise<void> {
    if (this.running.has(agentId)) return;
    const control = newRunControl();
    let release!: () => void;
    const done = new Promise<void>((r) => (release = r));
    this.running.set(agentId, { control, done });
    try {
      await this.options.beforeSteps?.(agentId);
      await runStep(this.deps, agentId, control);
    } finally {
      control.trace?.end();
      this.running.delete(agentId);
      release();
    }
  }

  get runningCount(): number {
    return this.running.size;
  }

  get queuedCount(): number {
    return this.queued.size;
  }

  /** Resolves when no agent is stepping or waiting for a slot. */
  whenIdle(): Promise<void> {
    if (this.running.size === 0 && this.queued.size === 0 && this.claiming.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /**
   * Stops starting steps; lets running steps finish for up to `graceMs`, then aborts them. Aborted agents stay
   * ACTIVE in storage and resume from their last saved step when a runtime opens the storage again.
   */
  async close(graceMs: number): Promise<void> {
    this.closing = true;
    this.queue = [];
    this.head = 0;
    this.queued.clear();
    const all = () => Promise.all([...this.running.values()].map((r) => r.done));
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      all().then(() => false),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), graceMs);
      }),
    ]);
    clearTimeout(timer);
    if (timedOut) {
      for (const { control } of this.running.values()) {
        control.abortAll(abortReason('runtime closed'));
      }
      // A tool that ignores its abort signal must not hold shutdown hostage: give up on it after one more grace
      // period. Whatever it commits later fails against the closed storage, and recovery treats it as a crash.
      await Promise.race([all(), new Promise<void>((resolve) => setTimeout(resolve, graceMs).unref())]);
    }
  }

  private pump(): void {
    while (!this.closing && this.running.size < this.options.runSlots && this.head < this.queue.length) {
      const id = this.queue[this.head++]!;
      if (!this.queued.delete(id)) continue; // dropped by abort()
      this.drive(id);
    }
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
    // Several workers: room for more takes claimable work, if there may be some.
    if (this.options.leases && !this.closing && this.roomForClaims() > 0) {
      this.options.leases.wantWork();
    }
    if (this.running.size === 0 && this.queued.size === 0 && this.claiming.size === 0 && this.idleWaiters.length > 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
    }
  }

  /** Several workers: gives the lease of an agent that stopped stepping back, unless a wake came meanwhile. */
  private letGo(agentId: string, leases: WorkerCoordination, unfinished: boolean, lost: boolean): void {
    leases.release([agentId], { unfinished, lost }).then(
      (again) => {
        for (const id of again) this.kick(id);
      },
      (error: unknown) => this.options.onError(error, agentId),
    );
  }

  private drive(agentId: string): void {
    const control = newRunControl();
    let release!: () => void;
    const done = new Promise<void>((r) => (release = r));
    this.running.set(agentId, { control, done });
    let failed = false;
    let lost = false;
    void (async () => {
      try {
        await this.options.beforeSteps?.(agentId);
        while (!this.closing) {
          const outcome = await runStep(this.deps, agentId, control);
          if (outcome.kind === 'continue') continue;
          if (outcome.kind === 'retry') {
            try {
              await this.deps.clock.sleep(outcome.afterMs, control.model.signal);
            } catch {
              break; // paused or deleted while backing off
            }
            continue;
          }
          break;
        }
      } catch (err) {
        // Another worker took the agent over (this one was too slow to renew): not the agent's failure.
        if (err instanceof LeaseLostError) lost = true;
        else {
          failed = true;
          this.options.onError(err, agentId);
        }
      } finally {
        control.trace?.end();
        this.running.delete(agentId);
        this.drain.note(performance.now());
        release();
        if (this.again.delete(agentId)) this.kick(agentId);
        else if (this.options.leases) this.letGo(agentId, this.options.leases, failed, lost);
        this.pump();
      }
    })();
  }
}

/** The cap on claims ahead of free run slots, by default (SchedulerOptions.claimAhead). */
export const DEFAULT_CLAIM_AHEAD = 32;
/** The horizon a worker claims ahead for: long enough to hide a claim's round trip, short against a model call. */
const CLAIM_HORIZON_MS = 250;
/** How long the drain rate remembers: a burst of ends (a round of children finishing together) counts spread out. */
const DRAIN_TAU_MS = 2_000;

/**
 * The rate at which run slots free up, as an exponentially decaying count of drivers that ended (time constant `tau`):
 * a steady flow of r ends per second reads r; a burst of n ends at once reads n / tau at most, and fades.
 */
export class DrainRate {
  private count = 0;
  private at = 0;

  constructor(private readonly tauMs: number) {}

  /** A run slot freed up at `now` (ms, monotonic). */
  note(now: number): void {
    this.count = this.decayed(now) + 1;
    this.at = now;
  }

  /** How many slots are expected to free up within the next `horizonMs` (rounded up; a faded trace reads 0). */
  expectedWithin(horizonMs: number, now = performance.now()): number {
    return Math.max(0, Math.ceil((this.decayed(now) / this.tauMs) * horizonMs - 0.05));
  }

  private decayed(now: number): number {
    return this.count * Math.exp(-Math.max(0, now - this.at) / this.tauMs);
  }
}

function abortReason(message: string): Error {
  const err = new Error(message);
  err.name = 'AbortError';
  return err;
}
