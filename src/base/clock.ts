/**
 * @module base/clock
 * Time as the runtime sees it. Everything that reads the time or waits goes through a {@link Clock}, so tests can
 * swap in `fakeClock()` from `agentry-runtime/testing` and never sleep.
 */

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /**
   * Milliseconds on a clock that never goes back (its zero is arbitrary), for measuring durations such as a model
   * call's latency. Optional: without it durations are measured on {@link Clock.now}, which is what a fake clock wants.
   */
  monotonic?(): number;
  /** Resolves after `ms`, or rejects with an AbortError when `signal` aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export function abortError(signal?: AbortSignal): Error {
  const reason: unknown = signal?.reason;
  if (reason instanceof Error && reason.name === 'AbortError') return reason;
  const err = new Error('The operation was aborted');
  err.name = 'AbortError';
  return err;
}

export function isAbortError(err: unknown): boolean {
  return err instanceof Error && (err.name === 'AbortError' || err.name === 'APIUserAbortError');
}

/** The real clock. */
export const systemClock: Clock = {
  now: () => Date.now(),
  // The wall clock can be stepped back (NTP, an operator); a duration must not come out negative or inflated.
  monotonic: () => performance.now(),
  sleep(ms, signal) {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(abortError(signal));
      const onAbort = () => {
        clearTimeout(timer);
        reject(abortError(signal));
      };
      const timer = setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  },
};

let lastMs = NaN;
let lastIso = '';

/** ISO 8601 UTC with milliseconds and `Z`, as every record carries. */
export function isoTime(ms: number): string {
  // Thousands of rows are stamped within one millisecond under load: format each millisecond once.
  if (ms !== lastMs) {
    lastIso = new Date(ms).toISOString();
    lastMs = ms;
  }
  return lastIso;
}

/** Milliseconds on the clock's monotonic time (its wall time where it has none): subtract two to get a duration. */
export function monotonicMs(clock: Clock): number {
  return clock.monotonic ? clock.monotonic() : clock.now();
}
