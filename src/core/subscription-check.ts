/**
 * @module core/subscription-check
 * Agents work only while their account's subscription is active. A deactivated subscription pauses its
 * running agents at their next step with the status message {@link SUBSCRIPTION_PAUSED}; resuming them works again
 * once the subscription is active. The check runs before every step, so it keeps what it read for a moment instead of
 * reading the account each time: a second at most, and only an active answer (an inactive one pauses the agent, so
 * it is not asked again soon). Changes made through this runtime's `accounts` are seen at once; a change made by
 * another process (the CLI beside `agentry serve`) within {@link SUBSCRIPTION_CACHE_MS}.
 */
import type { StorageAdapter } from '../storage/adapter.js';
import type { Clock } from '../base/clock.js';

/** The status message of an agent paused because its account's subscription is not active. */
export const SUBSCRIPTION_PAUSED = 'Paused: subscription inactive';

/** How long an active answer is kept, in milliseconds of the runtime's clock. */
export const SUBSCRIPTION_CACHE_MS = 1000;

/** Whether an account may run agents; see the module comment. */
export class SubscriptionCheck {
  private readonly active = new Map<string, number>();
  /**
   * Reads on their way, by account: when the kept answer expires, every agent stepping at that moment asks at once,
   * and they share one read instead of sending hundreds.
   */
  private readonly reading = new Map<string, Promise<boolean>>();

  constructor(
    private readonly storage: Pick<StorageAdapter, 'getAccount'>,
    private readonly clock: Clock,
  ) {}

  /** True while the account exists and its subscription is active. */
  async isActive(accountId: string): Promise<boolean> {
    const now = this.clock.now();
    const checkedAt = this.active.get(accountId);
    if (checkedAt !== undefined && now - checkedAt >= 0 && now - checkedAt < SUBSCRIPTION_CACHE_MS) return true;
    const shared = this.reading.get(accountId);
    if (shared) return shared;
    const read = this.storage.getAccount(accountId).then(
      (account) => {
        // A read that forget() superseded keeps nothing: it may have seen the account before the change.
        const current = this.reading.get(accountId) === read;
        if (current) this.reading.delete(accountId);
        const active = account?.subscription_active === true;
        if (current && active) this.active.set(accountId, now);
        else if (current) this.active.delete(accountId);
        return active;
      },
      (error: unknown) => {
        if (this.reading.get(accountId) === read) this.reading.delete(accountId);
        throw error;
      },
    );
    this.reading.set(accountId, read);
    return read;
  }

  /** Forgets what was read of an account (its subscription changed in this process). */
  forget(accountId: string): void {
    this.active.delete(accountId);
    this.reading.delete(accountId);
  }
}
