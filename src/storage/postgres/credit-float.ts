/**
 * @module storage/postgres/credit-float
 * Credits a process holds in advance, so that most reservations are made without a round trip (`reserveNow`).
 *
 * The runtime's credit gate decides the reservations of one account one at a time; with a round trip each, 2,000 model
 * calls of a fan-out wait for 2,000 round trips in a row. Instead, a process takes a *float*: one hold row
 * (`reservations`, id `float:<process>:<account>`) of many calls' worth of credits, counted in the account's `reserved`
 * like any hold, so every other process sees those credits as taken. The holds of this process's calls are then carved
 * from the float in memory. A settlement of such a hold debits the balance as always and shrinks the float by what it
 * charged (at most the hold) in the same transaction; a release only gives the credits back to the float. A float
 * nobody draws on goes back to the account after {@link FLOAT_IDLE_MS}; a process that dies leaves its float as it
 * leaves any hold (the next exclusive runner drops every hold; in workers mode the sweeper drops the holds and floats
 * of a gone worker, whose float rows carry its id in `worker_id` and in their id, `float:<worker>:<account>`).
 *
 * Several workers (README.md#several-processes): a float never takes more than {@link FLOAT_SHARE} of the available balance
 * (but always what the request at hand needs), so one worker cannot sit on credits that another needs. And when
 * another worker waits for an account (`yield`, called when the credit gate hears so on the bus), the account is
 * *contested* for {@link CONTESTED_MS}: the unused part of its float goes back at once, and until then its holds are
 * rows (`agentry_reserve`) and every carved hold that ends gives its credits straight back to the account.
 *
 * Never more than the balance: a float is taken only from the available balance (balance less every hold), and every
 * charge is at most the balance, as before. Only trees without `max_credits` draw on the float: a capped tree's holds
 * stay rows, checked against its cap on the server (`agentry_reserve`).
 *
 * What callers see: `getAccount().reserved` counts what this process's calls hold, not the float's unused part.
 */
import type { AccountRow, ReservationRefusal, ReservationRequest, Settlement } from '../adapter.js';
import type { Db } from './db.js';
import { ExpiringMarks } from '../../base/expiring-marks.js';

/** A float covers this many requests of the size that made it grow (fewer when the balance is smaller). */
const FLOAT_REQUESTS = 128;
/** How long a float that holds no call's credits stays before it goes back to the account. */
export const FLOAT_IDLE_MS = 200;
/** The most of an account's available balance one worker's float takes in workers mode (exclusive: all of it). */
export const FLOAT_SHARE = 0.25;
/** How long an account stays contested after the last word that another worker waits for it. */
export const CONTESTED_MS = 5_000;

interface Float {
  id: string;
  accountId: string;
  /** Micro-credits of the float's row in the database (as this process last changed it). */
  size: number;
  /** Micro-credits held by calls out of it. */
  held: number;
  idleTimer: NodeJS.Timeout | undefined;
}

interface CarvedHold {
  accountId: string;
  agentId: string;
  amount: number;
}

/** What the settlement of a carved hold adds for `agentry_settle`: shrink the float by the charge, at most `amount`. */
export type FloatSettlement = Settlement & { float_id?: string; float_amount?: number };

export class CreditFloats {
  private readonly floats = new Map<string, Float>();
  private readonly holds = new Map<string, CarvedHold>();
  /** Roots known to have no `max_credits` (caps never change after creation). */
  private readonly uncapped = new Set<string>();
  /** Accounts another worker waits for, until when (ms, this process's clock). */
  private readonly contested = new ExpiringMarks();
  /** Give-backs under way (see flush). */
  private readonly pending = new Set<Promise<unknown>>();
  private readonly share: number;
  private closed = false;
  /** Counts resets: a float grown across a reset belongs to no one (see reserve). */
  private generation = 0;

  constructor(private readonly db: Db) {
    this.share = db.mode === 'workers' ? FLOAT_SHARE : 1;
  }

  /** Remembers which roots are uncapped, from rows this process wrote or read. */
  noteAgents(rows: ReadonlyArray<{ agent_id: string; root_id: string; max_credits: number | null }>): void {
    for (const r of rows) if (r.agent_id === r.root_id && r.max_credits === null) this.uncapped.add(r.agent_id);
  }

  /** Carves the hold from the float at once when it has room; 'account' (ask `reserve`) otherwise. */
  reserveNow(r: ReservationRequest): ReservationRefusal | null {
    const float = this.floats.get(r.account_id);
    if (
      !float ||
      !this.uncapped.has(r.root_id) ||
      float.size - float.held < r.amount ||
      this.holds.has(r.id) ||
      this.contested.has(r.account_id)
    ) {
      return 'account';
    }
    this.carve(float, r);
    return null;
  }

  /**
   * The asynchronous path: carves from the float, growing it first when needed. Returns undefined when the request
   * is not one for the float (its tree is capped, or its root is unknown): the caller makes a hold row instead.
   */
  async reserve(r: ReservationRequest): Promise<ReservationRefusal | null | undefined> {
    // A contested account's credits go to whoever asks the database first: no float keeps them in one worker.
    if (this.closed || this.holds.has(r.id) || this.contested.has(r.account_id)) return undefined;
    if (!this.uncapped.has(r.root_id)) {
      const [root] = await this.db.q<{ max_credits: number | null }>(
        'SELECT max_credits FROM agents WHERE agent_id = $1 AND root_id = agent_id',
        [r.root_id],
      );
      if (!root || root.max_credits !== null) return undefined;
      this.uncapped.add(r.root_id);
    }
    let float = this.floats.get(r.account_id);
    if (!float) {
      float = {
        id: `float:${this.db.workerId}:${r.account_id}`,
        accountId: r.account_id,
        size: 0,
        held: 0,
        idleTimer: undefined,
      };
      this.floats.set(r.account_id, float);
    }
    const need = r.amount - (float.size - float.held);
    if (need > 0) {
      const generation = this.generation;
      const [row] = await this.db.q<{ granted: number }>(
        'SELECT agentry_float_grow($1, $2, $3, $4, $5, $6) AS granted',
        [float.id, r.account_id, need, Math.max(need, r.amount * FLOAT_REQUESTS), this.db.workerId, this.share],
      );
      if (generation !== this.generation) {
        // Reset while it grew (this worker was taken for gone, its holds dropped): the grant is nobody's, give it back.
        const granted = row?.granted ?? 0;
        if (granted > 0) {
          await this.db
            .q('SELECT agentry_float_shrink($1, $2, $3)', [float.id, r.account_id, granted])
            .catch(() => undefined);
        }
        return 'account';
      }
      float.size += row?.granted ?? 0;
      if ((row?.granted ?? 0) < need) return 'account';
    }
    // Another carve may have taken the room while the float grew.
    if (float.size - float.held < r.amount) return 'account';
    this.carve(float, r);
    return null;
  }

  /** Whether this hold was carved from a float (and is still held). */
  has(reservationId: string): boolean {
    return this.holds.has(reservationId);
  }

  /** Settlements as `agentry_settle` takes them: a carved hold names its float. */
  forServer(settlements: readonly Settlement[]): FloatSettlement[] {
    return settlements.map((s) => {
      const hold = this.holds.get(s.reservation_id);
      const float = hold && this.floats.get(hold.accountId);
      return hold && float ? { ...s, float_id: float.id, float_amount: hold.amount } : s;
    });
  }

  /**
   * After settlements committed: each named float shrank by its hold's charge (at most the hold) on the server, so
   * here too — even when the hold was released meanwhile (its agent deleted while the commit was on its way) — and the
   * hold ends.
   */
  settled(settlements: readonly FloatSettlement[], charged: readonly number[]): void {
    settlements.forEach((s, i) => {
      if (s.float_id === undefined) return;
      const float = [...this.floats.values()].find((f) => f.id === s.float_id);
      if (float) float.size -= Math.min(charged[i] ?? 0, s.float_amount ?? 0);
      this.drop(s.reservation_id);
    });
  }

  /** Gives a carved hold back to its float. False when it is not a carved hold. */
  release(reservationId: string): boolean {
    if (!this.holds.has(reservationId)) return false;
    this.drop(reservationId);
    return true;
  }

  /** Gives back every carved hold of these agents; how many there were. */
  releaseAgents(agentIds: readonly string[]): number {
    const gone = new Set(agentIds);
    let n = 0;
    for (const [id, hold] of this.holds) {
      if (gone.has(hold.agentId)) {
        this.drop(id);
        n++;
      }
    }
    return n;
  }

  /**
   * Another worker waits for this account: gives the unused part of its float back now, and keeps the account
   * contested (see the module comment) for {@link CONTESTED_MS}. True when credits went back.
   */
  async yield(accountId: string): Promise<boolean> {
    this.contested.mark(accountId, CONTESTED_MS);
    return (await this.giveBackUnused(accountId)) > 0;
  }

  /** Gives the unused part of the account's float back (a hold row of this worker needs the credits); how much. */
  async giveBackUnused(accountId: string): Promise<number> {
    const float = this.floats.get(accountId);
    if (!float) return 0;
    const before = float.size;
    await this.giveBack(float, float.size);
    return before - float.size;
  }

  /** Waits for the give-backs under way, so that a caller's "credits are back" is true when it says so. */
  async flush(): Promise<void> {
    while (this.pending.size > 0) await Promise.allSettled([...this.pending]);
  }

  /** The account as its callers see it: its floats' unused part is not anyone's hold. */
  view<T extends AccountRow | null>(account: T): T {
    const float = account && this.floats.get(account.id);
    return float ? { ...account, reserved: account.reserved - (float.size - float.held) } : account;
  }

  /** Returns every float to its account (the runtime is closing). */
  async close(): Promise<void> {
    this.closed = true;
    for (const float of this.floats.values()) {
      clearTimeout(float.idleTimer);
      await this.giveBack(float, float.size).catch(() => undefined);
    }
    this.floats.clear();
    this.holds.clear();
  }

  /** Forgets every float and carved hold without a word to the database (a runner took over and dropped all holds). */
  reset(): void {
    this.generation++;
    for (const float of this.floats.values()) clearTimeout(float.idleTimer);
    this.floats.clear();
    this.holds.clear();
    this.contested.clear();
  }

  private carve(float: Float, r: ReservationRequest): void {
    float.held += r.amount;
    clearTimeout(float.idleTimer);
    float.idleTimer = undefined;
    this.holds.set(r.id, { accountId: r.account_id, agentId: r.agent_id, amount: r.amount });
  }

  private drop(reservationId: string): void {
    const hold = this.holds.get(reservationId);
    if (!hold) return;
    this.holds.delete(reservationId);
    const float = this.floats.get(hold.accountId);
    if (!float) return;
    float.held -= hold.amount;
    if (this.closed) return;
    if (this.contested.has(hold.accountId)) {
      // Another worker waits for this account: what the call did not spend goes back now, not after the idle time.
      const giving = this.giveBack(float, float.size).catch(() => undefined);
      this.pending.add(giving);
      void giving.finally(() => this.pending.delete(giving));
      return;
    }
    if (float.held === 0) {
      clearTimeout(float.idleTimer);
      float.idleTimer = setTimeout(() => {
        float.idleTimer = undefined;
        if (float.held === 0) void this.giveBack(float, float.size).catch(() => undefined);
      }, FLOAT_IDLE_MS);
      float.idleTimer.unref();
    }
  }

  /** Shrinks a float's row by `amount` (all of its unused part at most). */
  private async giveBack(float: Float, amount: number): Promise<void> {
    const give = Math.min(amount, float.size - float.held);
    if (give <= 0) return;
    float.size -= give; // before the round trip: no carve may count on credits on their way back
    try {
      await this.db.q('SELECT agentry_float_shrink($1, $2, $3)', [float.id, float.accountId, give]);
    } catch (error) {
      float.size += give;
      throw error;
    }
  }
}
