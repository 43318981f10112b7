/**
 * @module testing/fake-clock
 * A {@link Clock} that only moves when told. Sleeps resolve when `advance()` passes their deadline.
 */
import { abortError, type Clock } from '../base/clock.js';

export interface FakeClock extends Clock {
  /** Moves time forward, resolving every sleep whose deadline is passed. */
  advance(ms: number): void;
  /** Sets the time (never backwards). */
  set(ms: number): void;
  /** Sleeps not yet resolved. */
  readonly pendingSleeps: number;
}

/**
 * @example
 * const clock = fakeClock(Date.parse('2026-01-01T00:00:00.000Z'));
 * const runtime = await AgentRuntime.open({ clock, ... });
 * clock.advance(60_000);
 */
export function fakeClock(startMs = Date.parse('2026-01-01T00:00:00.000Z')): FakeClock {
  let now = startMs;
  let sleeps: Array<{ at: number; resolve: () => void }> = [];
  const fire = () => {
    const due = sleeps.filter((s) => s.at <= now);
    sleeps = sleeps.filter((s) => s.at > now);
    for (const s of due) s.resolve();
  };
  return {
    now: () => now,
    sleep(ms, signal) {
      return new Promise<void>((resolve, reject) => {
        if (signal?.aborted) return reject(abortError(signal));
        const entry = {
          at: now + Math.max(0, ms),
          resolve: () => {
            signal?.removeEventListener('abort', onAbort);
            resolve();
          },
        };
        const onAbort = () => {
          sleeps = sleeps.filter((s) => s !== entry);
          reject(abortError(signal));
        };
        signal?.addEventListener('abort', onAbort, { once: true });
        sleeps.push(entry);
        if (ms <= 0) fire();
      });
    },
    advance(ms) {
      now += ms;
      fire();
    },
    set(ms) {
      now = Math.max(now, ms);
      fire();
    },
    get pendingSleeps() {
      return sleeps.length;
    },
  };
}
