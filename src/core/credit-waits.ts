/**
 * @module core/credit-waits
 * The reservations a credit gate (core/credit-gate.ts) holds back right now, counted by account and by tree, so that
 * a dashboard can say "3 calls waiting for credits" instead of guessing from the balance.
 *
 * A request is counted from the moment the gate tells it that it waits (live holds stand in its way) until it leaves
 * its queue, granted, refused or aborted. Requests the gate only queues for a moment while another decision of the
 * account is under way are not counted: they are not waiting for credits. Each count is kept as the calls arrive and
 * leave, so reading it costs nothing however long the queue is (a dashboard asks every second).
 *
 * Several workers on one database: each process has its own gate, so these are the waits of this process only.
 */

/** What is waiting for credits in one account or one tree, in this process. */
export interface CreditWaiting {
  /** Calls (model calls, priced tool calls) whose reservation waits for credits. */
  calls: number;
  /** When the longest-waiting of them asked for its credits (ms since the epoch), or null when none waits. */
  oldestSince: number | null;
  /** Micro-credits they ask for together. */
  neededMicros: number;
}

/** One waiting reservation as the tally knows it. */
export interface WaitingCall {
  accountId: string;
  rootId: string;
  /** Micro-credits asked for. */
  amount: number;
  /** When it asked (ms since the epoch). */
  since: number;
}

interface Group {
  /** In the order they started to wait: the first is the oldest. */
  calls: Set<WaitingCall>;
  neededMicros: number;
}

/** Waiting reservations by account and by tree root. */
export class CreditWaitTally {
  private readonly byAccount = new Map<string, Group>();
  private readonly byTree = new Map<string, Group>();

  /** A reservation started to wait. Adding one twice counts it once. */
  add(call: WaitingCall): void {
    this.join(this.byAccount, call.accountId, call);
    this.join(this.byTree, call.rootId, call);
  }

  /** A reservation left its queue (granted, refused or aborted). Removing one that was never added does nothing. */
  remove(call: WaitingCall): void {
    this.leave(this.byAccount, call.accountId, call);
    this.leave(this.byTree, call.rootId, call);
  }

  /** What waits in one account. */
  ofAccount(accountId: string): CreditWaiting {
    return summary(this.byAccount.get(accountId));
  }

  /** What waits in the tree under one root agent. */
  ofTree(rootId: string): CreditWaiting {
    return summary(this.byTree.get(rootId));
  }

  private join(groups: Map<string, Group>, key: string, call: WaitingCall): void {
    let group = groups.get(key);
    if (!group) groups.set(key, (group = { calls: new Set(), neededMicros: 0 }));
    if (group.calls.has(call)) return;
    group.calls.add(call);
    group.neededMicros += call.amount;
  }

  private leave(groups: Map<string, Group>, key: string, call: WaitingCall): void {
    const group = groups.get(key);
    if (!group?.calls.delete(call)) return;
    group.neededMicros -= call.amount;
    if (group.calls.size === 0) groups.delete(key);
  }
}

function summary(group: Group | undefined): CreditWaiting {
  if (!group) return { calls: 0, oldestSince: null, neededMicros: 0 };
  // A Set iterates in insertion order: its first entry is the call that has waited longest.
  const first = group.calls.values().next().value as WaitingCall;
  return { calls: group.calls.size, oldestSince: first.since, neededMicros: group.neededMicros };
}
