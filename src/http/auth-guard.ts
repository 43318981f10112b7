/**
 * @module http/auth-guard
 * Failed authentication is rate limited per client address. Each missing, unknown or lapsed key takes a token from
 * its address's bucket; once the bucket is empty, requests from that address are refused with 429 `rate_limited`
 * before their key is even looked up, so guessing keys costs the server a hash and no read.
 *
 * Many clients may share an address (a NAT, a reverse proxy that does not say who is behind it), and one of them
 * failing must not lock the others out: a key that authenticated recently is let through whatever its address's
 * bucket holds. So a blocked address keeps working for the clients that already had a working key, and only a key
 * never seen working is refused until a token is back.
 */
import { hashApiKey } from '../core/accounts.js';
import { AgentryError } from '../errors.js';
import { TokenBuckets, type RateLimitOptions } from './rate-limit.js';

/** Failed authentications per address: bursts of 30, then one every 2 seconds (30 a minute). */
export const DEFAULT_FAILED_AUTH_LIMIT: RateLimitOptions = Object.freeze({ capacity: 30, refillPerSecond: 0.5 });

/** How many key hashes that authenticated are remembered (oldest forgotten first). */
const TRUSTED_KEYS = 10_000;

/** The address bucket of requests whose adapter could not tell one (a fetch runtime without a socket). */
export const UNKNOWN_ADDRESS = 'unknown';

export class FailedAuthGuard {
  private readonly failures: TokenBuckets;
  private readonly trusted = new Set<string>();

  constructor(options: RateLimitOptions, now: () => number) {
    this.failures = new TokenBuckets(options, now);
  }

  /**
   * Seconds the caller must wait before its key is looked up, or 0 to go on: 0 unless `address` has failed too often
   * and `key` is not one that authenticated recently.
   */
  refusal(address: string, key: string | null): number {
    const wait = this.failures.wait(address);
    if (wait === 0) return 0;
    if (key !== null && key.length <= 512 && this.trusted.has(hashApiKey(key))) return 0;
    return wait;
  }

  /** Records a failed authentication from `address`. */
  failed(address: string): void {
    this.failures.take(address);
  }

  /** Records a key that authenticated. */
  succeeded(keyHash: string): void {
    if (this.trusted.has(keyHash)) {
      // Moved to the end: the set forgets from its start.
      this.trusted.delete(keyHash);
    } else if (this.trusted.size >= TRUSTED_KEYS) {
      this.trusted.delete(this.trusted.values().next().value!);
    }
    this.trusted.add(keyHash);
  }
}

/** True for the errors of a failed authentication (missing or unknown key, inactive subscription). */
export function isAuthFailure(error: unknown): boolean {
  return AgentryError.isInstance(error) && (error.code === 'unauthorized' || error.code === 'subscription_inactive');
}
