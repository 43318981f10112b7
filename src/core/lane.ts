/**
 * @module core/lane
 * Lanes cap how many model or tool calls run at once. A call that finds a free slot runs at once and costs nothing
 * but its own promise; only calls that must wait are queued (FIFO). A lane with a requests-per-interval cap is a
 * p-queue, whose interval accounting is what it is for; a plain concurrency cap does not need p-queue's events and
 * bookkeeping, which cost about 2 KB per call — at 30,000 calls per 10,000 sub-agents, that shows.
 */
import PQueue from 'p-queue';

export interface Lane {
  run<T>(fn: () => Promise<T>): Promise<T>;
  /** No new call starts until `start()`; calls in flight finish. */
  pause(): void;
  start(): void;
  /** Calls running now, and calls waiting for a slot (metrics). */
  readonly load: { active: number; waiting: number };
}

/** A counting semaphore with a FIFO of waiters. */
export class ConcurrencyLane implements Lane {
  private active = 0;
  private paused = false;
  private waiters: Array<() => void> = [];
  private head = 0;

  constructor(private readonly concurrency: number) {}

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.paused || this.active >= this.concurrency || this.head < this.waiters.length) {
      // The slot is handed over by release() or start(), which count it for us.
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    } else {
      this.active++;
    }
    try {
      return await fn();
    } finally {
      this.release();
    }
  }

  pause(): void {
    this.paused = true;
  }

  start(): void {
    this.paused = false;
    while (this.active < this.concurrency && this.head < this.waiters.length) {
      this.active++;
      this.next()();
    }
  }

  /** Calls running now, and calls waiting for a slot. */
  get load(): { active: number; waiting: number } {
    return { active: this.active, waiting: this.waiters.length - this.head };
  }

  private release(): void {
    if (!this.paused && this.head < this.waiters.length)
      this.next()(); // the slot passes on, still counted
    else this.active--;
  }

  private next(): () => void {
    const resolve = this.waiters[this.head++]!;
    if (this.head > 1024 && this.head * 2 > this.waiters.length) {
      this.waiters = this.waiters.slice(this.head);
      this.head = 0;
    }
    return resolve;
  }
}

/** A lane with a requests-per-interval cap (a provider's rate limit), on p-queue. */
export class RateLimitedLane implements Lane {
  private readonly queue: PQueue;

  constructor(concurrency: number, requestsPerInterval: number, intervalMs: number) {
    this.queue = new PQueue({ concurrency, intervalCap: requestsPerInterval, interval: intervalMs });
  }

  run<T>(fn: () => Promise<T>): Promise<T> {
    return this.queue.add(fn) as Promise<T>;
  }

  pause(): void {
    this.queue.pause();
  }

  start(): void {
    this.queue.start();
  }

  get load(): { active: number; waiting: number } {
    return { active: this.queue.pending, waiting: this.queue.size };
  }
}
