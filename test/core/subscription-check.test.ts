/**
 * The subscription check before every step (core/subscription-check.ts): it keeps an active answer for a moment, and
 * the agents asking at once when that answer expires share one read of the account.
 */
import { describe, expect, it } from 'vitest';
import { SubscriptionCheck, SUBSCRIPTION_CACHE_MS } from '../../src/core/subscription-check.js';
import type { AccountRow } from '../../src/storage/adapter.js';
import { fakeClock } from '../../src/testing/index.js';

function accounts(active: boolean) {
  const row: AccountRow = {
    id: 'acct',
    name: 'acct',
    subscription_active: active,
    balance: 0,
    reserved: 0,
    created_at: new Date(0).toISOString(),
  };
  const pending: Array<() => void> = [];
  const storage = {
    reads: 0,
    row,
    /** Reads wait until `answer()`, so that callers can pile up behind one. */
    getAccount: async (id: string) => {
      storage.reads++;
      await new Promise<void>((resolve) => pending.push(resolve));
      return id === row.id ? { ...row } : null;
    },
    answer: () => pending.splice(0).forEach((resolve) => resolve()),
  };
  return storage;
}

describe('SubscriptionCheck', () => {
  it('shares one read among the steps asking at once, then keeps the active answer for a moment', async () => {
    const storage = accounts(true);
    const clock = fakeClock();
    const check = new SubscriptionCheck(storage, clock);
    const asked = Array.from({ length: 300 }, () => check.isActive('acct'));
    expect(storage.reads).toBe(1);
    storage.answer();
    expect(await Promise.all(asked)).toEqual(Array(300).fill(true));
    // Kept: no read within the moment.
    expect(await check.isActive('acct')).toBe(true);
    expect(storage.reads).toBe(1);
    // Expired: the next askers share one new read again.
    clock.advance(SUBSCRIPTION_CACHE_MS);
    const again = [check.isActive('acct'), check.isActive('acct')];
    expect(storage.reads).toBe(2);
    storage.answer();
    expect(await Promise.all(again)).toEqual([true, true]);
  });

  it('after forget(), asks anew instead of joining a read that started before the change, and keeps nothing of it', async () => {
    const storage = accounts(true);
    const clock = fakeClock();
    const check = new SubscriptionCheck(storage, clock);
    const before = check.isActive('acct');
    // The subscription is deactivated while the first read is on its way.
    storage.row.subscription_active = false;
    check.forget('acct');
    const after = check.isActive('acct');
    expect(storage.reads).toBe(2);
    storage.answer();
    await before;
    expect(await after).toBe(false);
    // The superseded read's answer was not kept: the next ask reads again (and sees inactive).
    const next = check.isActive('acct');
    expect(storage.reads).toBe(3);
    storage.answer();
    expect(await next).toBe(false);
  });

  it('a failed read fails its askers and is not kept', async () => {
    const clock = fakeClock();
    let reads = 0;
    const check = new SubscriptionCheck(
      {
        getAccount: async () => {
          reads++;
          throw new Error('database down');
        },
      },
      clock,
    );
    await expect(Promise.all([check.isActive('acct'), check.isActive('acct')])).rejects.toThrow('database down');
    expect(reads).toBe(1);
    await expect(check.isActive('acct')).rejects.toThrow('database down');
    expect(reads).toBe(2);
  });
});
