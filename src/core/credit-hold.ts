/**
 * @module core/credit-hold
 * A credit hold as one object. The credit gate makes it when it grants a reservation (core/credit-gate.ts); the
 * object knows its account, agent, tree, amount and what it is for, and it is the only way a hold ends:
 *
 * - `settlement(charge)` writes the ledger row that settles it, for a step to commit together with its turn; once
 *   storage applied that commit, `settled()` ends the hold;
 * - `settle(charge)` settles it on its own (work outside a step, such as a monitor's check);
 * - `release(reason)` drops it unspent.
 *
 * A hold ends once. Ending it again is a no-op that answers false, because the second end is nearly always a cleanup
 * path (a step's `finally`) running after the ordinary one, and a cleanup must not fail for having nothing to do.
 * Only `settlement()` of an ended hold throws: charging a hold that no longer exists would charge with no hold behind
 * it, which is a bug in the caller.
 */
import { randomUUID } from 'node:crypto';
import { settlementOf } from './credits.js';
import type { ReservationRequest, Settlement, StorageAdapter } from '../storage/adapter.js';

/** How a hold ended. */
export type HoldEnd = { how: 'settled' } | { how: 'released'; reason: string };

/** What a hold needs from the gate that made it. */
export interface HoldKeeper {
  /** Where the hold is dropped or settled. */
  storage: Pick<StorageAdapter, 'release' | 'settle'>;
  /** The hold ended: the gate stops counting it and lets waiting reservations have its credits. */
  ended(hold: CreditHold): void;
}

/** One call's charge against its hold (micro-credits and, for a model call, its tokens). */
export type HoldCharge = Parameters<typeof settlementOf>[2];

/** Hold ids only need to be unique among live holds: a per-process prefix and a counter (no UUID per step). */
const HOLD_PREFIX = `h${randomUUID().slice(0, 8)}:`;
let holdSeq = 0;

/** A fresh hold id. */
export function nextHoldId(): string {
  return HOLD_PREFIX + (++holdSeq).toString(36);
}

/** Credits held for one model or tool call (or one turn's priced tool calls) until they are settled or released. */
export class CreditHold {
  readonly id: string;
  readonly accountId: string;
  readonly agentId: string;
  /** The root of the agent's tree, whose credit cap the hold also counts against. */
  readonly rootId: string;
  /** Micro-credits held. */
  readonly amount: number;
  /** What the credits are held for, in words ("model call", "tool calls", …), for logs and debugging. */
  readonly purpose: string;
  private end: HoldEnd | undefined;
  /** Set while a release is on its way to storage: a second end meanwhile is already a no-op. */
  private ending = false;

  /** @internal Made by the credit gate when it grants a reservation. */
  constructor(
    private readonly keeper: HoldKeeper,
    request: ReservationRequest,
    purpose: string,
  ) {
    this.id = request.id;
    this.accountId = request.account_id;
    this.agentId = request.agent_id;
    this.rootId = request.root_id;
    this.amount = request.amount;
    this.purpose = purpose;
  }

  /** Whether the hold still stands. */
  get isOpen(): boolean {
    return this.end === undefined && !this.ending;
  }

  /** How it ended; undefined while it stands. */
  get ended(): HoldEnd | undefined {
    return this.end;
  }

  /**
   * The ledger row that settles this hold at a call's real cost, to be committed by the caller; several rows may
   * settle one hold (a turn's priced tool calls share one). Call {@link settled} once storage applied it.
   * @throws Error when the hold has ended.
   */
  settlement(charge: HoldCharge): Settlement {
    if (!this.isOpen) throw new Error(`credit hold ${this.id} (${this.purpose}) has ended: it cannot be charged`);
    return settlementOf({ account_id: this.accountId, agent_id: this.agentId, root_id: this.rootId }, this.id, charge);
  }

  /** Storage applied a settlement of this hold (a step's commit): it ends settled. False when it had ended already. */
  settled(): boolean {
    return this.finish({ how: 'settled' });
  }

  /**
   * Settles the hold on its own with one ledger row (work outside a step). When storage fails the hold is released
   * instead, and the error thrown. Resolves with the micro-credits charged.
   */
  async settle(charge: HoldCharge): Promise<number> {
    const settlement = this.settlement(charge);
    let charged: number[];
    try {
      charged = await this.keeper.storage.settle([settlement]);
    } catch (err) {
      await this.release('its settlement failed').catch(() => undefined);
      throw err;
    }
    this.settled();
    return charged[0] ?? 0;
  }

  /**
   * Drops the hold unspent. The gate forgets it even when storage fails (a hold the gate counted for good would hold
   * other reservations back for good; storage drops what is left of it on recovery). Answers false, and does nothing,
   * when the hold had ended already.
   */
  async release(reason: string): Promise<boolean> {
    if (!this.isOpen) return false;
    this.ending = true;
    try {
      await this.keeper.storage.release(this.id);
    } finally {
      this.ending = false;
      this.finish({ how: 'released', reason });
    }
    return true;
  }

  /**
   * @internal Storage already dropped the hold (its agent was deleted): it ends without a word to storage. False when
   * it had ended already.
   */
  gone(reason: string): boolean {
    return this.finish({ how: 'released', reason });
  }

  private finish(end: HoldEnd): boolean {
    if (this.end) return false;
    this.end = end;
    this.keeper.ended(this);
    return true;
  }
}
