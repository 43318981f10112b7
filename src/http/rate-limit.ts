/**
 * @module http/rate-limit
 * A token bucket per API key, in memory. Each key may burst `capacity` requests and then `refillPerSecond` a second.
 * It limits one process; several processes behind a load balancer each apply their own bucket.
 */

/** Token-bucket settings of {@link createFetchHandler}'s `rateLimit` option. */
export interface RateLimitOptions {
  /** Requests a key may make in a burst. */
  capacity: number;
  /** Tokens given back per second. */
  refillPerSecond: number;
}

interface Bucket {
  tokens: number;
  at: number;
}

/** Above this many buckets, full ones (idle keys) are dropped: a full bucket is the same as no bucket. */
const SWEEP_THRESHOLD = 10_000;

export class TokenBuckets {
  private readonly buckets = new Map<string, Bucket>();

  constructor(
    private readonly options: RateLimitOptions,
    private readonly now: () => number,
  ) {}

  /** Takes one token for `key`: 0 if allowed, else how many seconds until a token is back (at least 1). */
  take(key: string): number {
    const now = this.now();
    const bucket = this.refilled(this.buckets.get(key), now);
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      this.buckets.set(key, bucket);
      if (this.buckets.size > SWEEP_THRESHOLD) this.sweep(now);
      return 0;
    }
    this.buckets.set(key, bucket);
    return Math.max(1, Math.ceil((1 - bucket.tokens) / this.options.refillPerSecond));
  }

  /** How many seconds until `key` has a token again (0 when it has one now), without taking it. */
  wait(key: string): number {
    const bucket = this.buckets.get(key);
    if (!bucket) return 0;
    const tokens = this.refilled(bucket, this.now()).tokens;
    return tokens >= 1 ? 0 : Math.max(1, Math.ceil((1 - tokens) / this.options.refillPerSecond));
  }

  private refilled(bucket: Bucket | undefined, now: number): Bucket {
    if (!bucket) return { tokens: this.options.capacity, at: now };
    const elapsed = Math.max(0, now - bucket.at) / 1000;
    return { tokens: Math.min(this.options.capacity, bucket.tokens + elapsed * this.options.refillPerSecond), at: now };
  }

  private sweep(now: number): void {
    for (const [key, bucket] of this.buckets) {
      if (this.refilled(bucket, now).tokens >= this.options.capacity) this.buckets.delete(key);
    }
  }
}
