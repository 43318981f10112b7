/**
 * @module core/credit-gate
 * Credit reservations that wait their turn, and the registry of the holds they make.
 *
 * Storage refuses a reservation when the available balance (balance less open holds) cannot cover it. Holds are
 * temporary: they belong to model and tool calls in flight, which always end. So a refusal that only holds cause is
 * not "out of credits" but "not yet": the request waits in a first-in-first-out queue of its account (or of its tree,
 * when the tree's `max_credits` is what refuses it) and is granted as holds are settled or released. Only a request
 * that the settled balance itself cannot cover is refused, with the amount that could still be paid, so that the
 * caller can ask for less (a lower `max_tokens`) or stop.
 *
 * Waking is per queue and in order: a released hold makes one pass over its queue that grants from the head until the
 * first request that still does not fit. 10,000 waiting agents cost 10,000 small records and no wake-up storm.
 *
 * Every reservation of the runtime goes through one gate, which therefore knows which holds are live; a wait is only
 * entered while a live hold stands in the way, which is what guarantees that every wait ends. A granted reservation is
 * a {@link CreditHold} (core/credit-hold.ts), the one object through which it is settled or released; the gate counts
 * it until it ends (`openHolds`).
 *
 * Several workers on one database (storage with `workers`): each process has its own gate, and the holds of
 * the others are rows this gate does not track. A refused request whose settled balance would cover it then also waits
 * while *other workers* hold credits of its account (or tree): the account's `reserved` less what this gate holds. It
 * is asked again when a worker says on the bus (`credits` topic) that credits of the account came back, and, because
 * notifications are best effort, by a jittered poll while it waits. Waiting, it says so on the bus (`wait:<account>`,
 * again at every poll); a worker that hears it gives back its unused float (`yieldCredits`) and, for a while, says
 * `free:<account>` whenever its holds of that account end. Never overshooting stays the database's job
 * (`agentry_reserve` checks the balance; every charge is at most the balance). Requests are granted first in first
 * out within a process; across processes, whoever asks the database first after credits come back gets them.
 */
import type { ReservationRefusal, ReservationRequest, Settlement, StorageAdapter } from '../storage/adapter.js';
import type { WorkerBus } from '../storage/workers.js';
import { CreditHold, nextHoldId, type HoldKeeper } from './credit-hold.js';
import { CreditWaitTally, type CreditWaiting, type WaitingCall } from './credit-waits.js';
import { ExpiringMarks } from '../base/expiring-marks.js';

/** What a reservation came to. */
export type Reservation =
  | { granted: true }
  /**
   * The settled balance (or the tree's cap less its settled spend) cannot cover the request. `payable` is what it
   * could cover, micro-credits: a smaller request up to it may succeed.
   */
  | { granted: false; refusal: ReservationRefusal; payable: number };

/** What {@link CreditGate.hold} came to: the hold, or the refusal with what could be paid. */
export type HoldResult = { granted: true; hold: CreditHold } | Extract<Reservation, { granted: false }>;

/** A hold asked for: whose credits, how many, and what for (the gate picks its id). */
export interface HoldRequest extends Omit<ReservationRequest, 'id'> {
  /** What the credits are held for, in words ("model call", "tool calls", …). */
  purpose: string;
}

export interface ReserveOptions {
  /** Aborting it takes the request out of its queue; `reserve` then rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Called once if the request has to wait, with the number of live holds it waits behind. */
  onWait?(heldBy: number): void;
  /** What the credits are held for, kept on the hold the reservation makes. */
  purpose?: string;
}

export interface CreditGateOptions {
  /**
   * The bus to the other workers of the database. Default: the storage's (`storage.workers?.bus`, looked up when
   * first needed, since it appears with `init()`). Without one the gate knows every hold (one process).
   */
  bus?: WorkerBus;
  /**
   * How often a reservation waiting for other workers' holds is asked again without a word from them, ms (each wait
   * between half and one and a half of it, so that workers do not ask in step).
   * @default 1000
   */
  pollMs?: number;
}

/** How long this gate tells of the ends of its holds of an account after another worker said it waits for it, ms. */
const CONTESTED_MS = 5_000;
/** How often a reservation waiting for other workers' holds and not granted is asked again at most, in one go. */
const SHARED_RETRIES = 3;

interface Waiter {
  request: ReservationRequest;
  /** The queue it waits in. */
  key: string;
  resolve(result: Reservation): void;
  reject(error: unknown): void;
  /** Set once the waiter has left its queue (granted, refused or aborted). */
  settled: boolean;
  /** Whether it was told that it waits (and listens for its abort since). */
  told: boolean;
  options: ReserveOptions;
  /** Set while it listens for its signal's abort: only waiters that wait listen (most never wait). */
  stopListening: (() => void) | undefined;
  /** When it asked (ms since the epoch). */
  since: number;
  /** How the tally of waiting calls knows it, once it was told that it waits. */
  counted: WaitingCall | undefined;
}

interface Queue {
  waiters: Waiter[];
  /** Index of the head: shifting a 10,000-long array one by one would be quadratic. */
  head: number;
  /** Waiters before this index were told that they wait (see tellWaiting). */
  toldUpTo: number;
  pumping: boolean;
  pumpAgain: boolean;
  /** The head waits for holds of other workers (asked again by the poll and by their word on the bus). */
  remote: boolean;
}

type Outcome =
  { kind: 'granted' } | { kind: 'refused'; result: Reservation } | { kind: 'wait'; key: string; remote: boolean };

const accountKey = (id: string) => `a:${id}`;
const treeKey = (id: string) => `t:${id}`;

export class CreditGate {
  private readonly queues = new Map<string, Queue>();
  /** The holds this gate granted that have not ended, by id: the registry of open holds. */
  private readonly live = new Map<string, CreditHold>();
  /** How the holds this gate made reach storage and tell it that they ended. */
  private readonly keeper: HoldKeeper;
  /** Live holds per queue key (account and tree). */
  private readonly liveCount = new Map<string, number>();
  /** Live holds per agent: an agent never waits for its own holds, which it settles only after the call it asks for. */
  private readonly liveByAgent = new Map<string, number>();
  /** Per account, the end of the chain of reservation decisions under way (see decide). */
  private readonly deciding = new Map<string, Promise<void>>();
  /** Micro-credits of live holds per queue key: what of the database's `reserved` sums is this gate's. */
  private readonly liveAmount = new Map<string, number>();
  /** Accounts other workers wait for, until when (ms): the ends of this gate's holds of them are told on the bus. */
  private readonly contested = new ExpiringMarks();
  /** The reservations told that they wait and not yet out of their queue, by account and tree (for dashboards). */
  private readonly waits = new CreditWaitTally();
  /** When this gate last said on the bus that it waits for an account (ms). */
  private readonly waitSaid = new Map<string, number>();
  private bus: WorkerBus | undefined;
  private unsubscribe: (() => void) | undefined;
  private pollTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly pollMs: number;

  constructor(
    private readonly storage: StorageAdapter,
    private readonly options: CreditGateOptions = {},
  ) {
    this.pollMs = options.pollMs ?? 1_000;
    this.keeper = { storage, ended: (hold) => this.untrack(hold) };
  }

  /** Stops listening to the other workers and polling; waiting requests stay as they are. */
  close(): void {
    this.closed = true;
    clearTimeout(this.pollTimer);
    this.pollTimer = undefined;
    this.unsubscribe?.();
    this.unsubscribe = undefined;
  }

  /** Holds granted and not yet settled or released. */
  get openHolds(): number {
    return this.live.size;
  }

  /** The open holds of one agent. */
  openHoldsOf(agentId: string): number {
    return this.liveByAgent.get(agentId) ?? 0;
  }

  /**
   * Holds credits for a call about to run, as {@link reserve} does, and answers the hold itself: the object through
   * which it is settled or released (core/credit-hold.ts).
   */
  async hold(request: HoldRequest, options: Omit<ReserveOptions, 'purpose'> = {}): Promise<HoldResult> {
    const { purpose, ...rest } = request;
    const id = nextHoldId();
    // The uncontended case (nothing waits, the balance covers it) is granted here and now, without a reservation
    // promise to wait for or a hold to look up.
    const now = options.signal?.aborted ? undefined : this.grantNow({ id, ...rest }, purpose);
    if (now) return { granted: true, hold: now };
    const reservation = await this.reserve({ id, ...rest }, { ...options, purpose });
    if (!reservation.granted) return reservation;
    // Granted and counted in one step; only an agent deleted in between (agentsGone) can have ended it since. The
    // caller then gets the ended hold, and its model signal, aborted by the delete, stops it.
    const hold = this.live.get(id) ?? new CreditHold(this.keeper, { id, ...rest }, purpose);
    if (!this.live.has(id)) hold.gone('its agent was deleted');
    return { granted: true, hold };
  }

  /** Requests waiting, over all queues. */
  get waitingCount(): number {
    let n = 0;
    for (const q of this.queues.values()) n += q.waiters.length - q.head;
    return n;
  }

  /**
   * The reservations of one account that wait for credits in this gate now: how many, since when, and how much they
   * ask for together. Only this process's: with several workers, each has its own gate and its own waits.
   */
  waitingOf(accountId: string): CreditWaiting {
    return this.waits.ofAccount(accountId);
  }

  /** The reservations of one tree (by its root agent's id) that wait for credits in this gate now; see waitingOf. */
  waitingOfTree(rootId: string): CreditWaiting {
    return this.waits.ofTree(rootId);
  }

  /**
   * Holds `request.amount` for a call about to run. Resolves granted at once when the account and tree can cover it;
   * waits while other calls' holds stand in the way; resolves refused when the settled balance cannot pay it.
   * Requests of one account are granted in the order they were made: a small one never overtakes a large one that
   * waits.
   */
  reserve(request: ReservationRequest, options: ReserveOptions = {}): Promise<Reservation> {
    if (options.signal?.aborted) return Promise.reject(options.signal.reason);
    try {
      if (this.grantNow(request, options.purpose)) return Promise.resolve({ granted: true });
    } catch (error) {
      return Promise.reject(error);
    }
    return new Promise<Reservation>((resolve, reject) => {
      const waiter: Waiter = {
        request,
        key: accountKey(request.account_id),
        resolve,
        reject,
        settled: false,
        told: false,
        options,
        stopListening: undefined,
        since: Date.now(),
        counted: undefined,
      };
      this.push(waiter);
      this.pump(waiter.key);
    });
  }

  /**
   * Drops a hold by its id without spending it, and lets waiting requests have its credits: the hold's own
   * {@link CreditHold.release} when the gate made it, for callers that reserved by id.
   */
  async release(reservationId: string): Promise<void> {
    const hold = this.live.get(reservationId);
    if (hold) await hold.release('released by id');
    else await this.storage.release(reservationId);
  }

  /**
   * Call after storage applied these settlements (their holds are gone): the holds end, and waiting requests may fit
   * now. For callers that reserved by id; a step ends its {@link CreditHold}s itself.
   */
  settled(settlements: readonly Settlement[]): void {
    for (const s of settlements) this.live.get(s.reservation_id)?.settled();
  }

  /** Call after storage dropped every hold of these agents (deleted): their holds end without a word to storage. */
  agentsGone(agentIds: readonly string[]): void {
    const gone = new Set(agentIds);
    for (const hold of [...this.live.values()]) if (gone.has(hold.agentId)) hold.gone('its agent was deleted');
  }

  /** Call after credits were added to an account: its waiting requests may fit now (in every worker). */
  toppedUp(accountId: string): void {
    this.pump(accountKey(accountId));
    this.shared()?.publish('credits', `free:${accountId}`);
  }

  /**
   * The uncontended case: nothing waits or is being decided for this account or tree, and the storage can answer at
   * once. The hold is then made and counted in one synchronous step, so no other request can come between. Undefined
   * when the request has to go the ordinary way (a refusal is judged, and asked again, in order there).
   */
  private grantNow(request: ReservationRequest, purpose: string | undefined): CreditHold | undefined {
    this.shared(); // listens to the other workers from the first reservation on: they may soon wait for its holds
    if (!this.storage.reserveNow || !this.idle(request)) return undefined;
    return this.storage.reserveNow(request) === null ? this.track(request, purpose) : undefined;
  }

  /** A granted reservation becomes a hold the gate counts until it ends. */
  private track(request: ReservationRequest, purpose = 'a reservation'): CreditHold {
    const hold = new CreditHold(this.keeper, request, purpose);
    const account = accountKey(hold.accountId);
    const tree = treeKey(hold.rootId);
    this.live.set(hold.id, hold);
    this.count(this.liveCount, account, 1);
    this.count(this.liveCount, tree, 1);
    this.count(this.liveByAgent, hold.agentId, 1);
    this.count(this.liveAmount, account, hold.amount);
    this.count(this.liveAmount, tree, hold.amount);
    return hold;
  }

  /** A hold ended (every end comes through CreditHold): its credits may let waiting requests through. */
  private untrack(hold: CreditHold): void {
    if (this.live.get(hold.id) !== hold) return;
    this.live.delete(hold.id);
    const account = accountKey(hold.accountId);
    const tree = treeKey(hold.rootId);
    this.count(this.liveCount, account, -1);
    this.count(this.liveCount, tree, -1);
    this.count(this.liveByAgent, hold.agentId, -1);
    this.count(this.liveAmount, account, -hold.amount);
    this.count(this.liveAmount, tree, -hold.amount);
    this.pump(account);
    this.pump(tree);
    // Other workers wait for this account: its credits are back in the database now (storage has applied it).
    if (this.contested.has(hold.accountId)) this.bus?.publish('credits', `free:${hold.accountId}`);
  }

  /**
   * The bus to the other workers, subscribed on first use; undefined with one process. The storage's coordination
   * appears with its `init()`, after the gate was made, hence the late lookup.
   */
  private shared(): WorkerBus | undefined {
    if (this.bus || this.closed) return this.bus;
    const bus = this.options.bus ?? this.storage.workers?.bus;
    if (!bus) return undefined;
    this.bus = bus;
    this.unsubscribe = bus.subscribe('credits', (payloads) => this.heard(payloads));
    return bus;
  }

  /** What other workers (and this one) said on the `credits` topic. */
  private heard(payloads: string[] | null): void {
    if (this.closed) return;
    if (payloads === null) {
      // The bus reconnected: words may have been lost meanwhile. Everyone waiting on other workers asks again.
      for (const [key, q] of this.queues) if (q.remote) this.pump(key);
      return;
    }
    for (const payload of new Set(payloads)) {
      const colon = payload.indexOf(':');
      const what = payload.slice(0, colon);
      const accountId = payload.slice(colon + 1);
      if (colon < 0 || !accountId) continue;
      if (what === 'wait') {
        this.contested.mark(accountId, CONTESTED_MS);
        // Credits this process holds in advance go back, and the waiters hear that they did.
        void this.storage
          .yieldCredits?.(accountId)
          .then((gaveBack) => gaveBack && this.bus?.publish('credits', `free:${accountId}`))
          .catch(() => undefined); // best effort: the float goes back when idle anyway, and waiters poll
      } else if (what === 'free') {
        for (const [key, q] of this.queues) {
          if (key === accountKey(accountId) || (q.remote && q.waiters[q.head]?.request.account_id === accountId)) {
            this.pump(key);
          }
        }
      }
    }
  }

  /** The head of a queue waits for other workers' holds of its account: they hear it, and the poll is on. */
  private waitForOthers(accountId: string): void {
    const bus = this.shared();
    const now = Date.now();
    if (bus && now - (this.waitSaid.get(accountId) ?? -Infinity) >= this.pollMs / 2) {
      this.waitSaid.set(accountId, now);
      bus.publish('credits', `wait:${accountId}`);
    }
    if (this.pollTimer || this.closed) return;
    this.pollTimer = setTimeout(
      () => {
        this.pollTimer = undefined;
        for (const [key, q] of this.queues) if (q.remote) this.pump(key);
      },
      this.pollMs * (0.5 + Math.random()),
    );
    this.pollTimer.unref();
  }

  private count(counts: Map<string, number>, key: string, delta: number): void {
    const n = (counts.get(key) ?? 0) + delta;
    if (n > 0) counts.set(key, n);
    else counts.delete(key);
  }

  /**
   * Whether a refusal is for good. It is not when the settled balance (and the tree's cap less its settled spend)
   * covers the request and other agents' live holds stand in the way: those holds end, and the request waits for
   * them. The requester's own holds do not count: it settles them only after the call it is asking for, so waiting
   * for them would never end; the caller is told `payable` and can settle them first.
   */
  private async judge(
    request: ReservationRequest,
    refusal: ReservationRefusal,
  ): Promise<{ final: true; result: Reservation; fits: boolean } | { final: false; key: string; remote: boolean }> {
    const [account, root] = await Promise.all([
      this.storage.getAccount(request.account_id),
      this.storage.getAgent(request.root_id),
    ]);
    const balance = account?.balance ?? 0;
    const capLeft = root?.max_credits != null ? Math.max(0, root.max_credits - root.tree_spent) : Infinity;
    const payable = Math.min(balance, capLeft);
    const key = refusal === 'tree_cap' ? treeKey(request.root_id) : accountKey(request.account_id);
    const othersHolds = (this.liveCount.get(key) ?? 0) - (this.liveByAgent.get(request.agent_id) ?? 0);
    if (request.amount <= payable && othersHolds > 0) return { final: false, key, remote: false };
    if (request.amount <= payable && this.shared()) {
      // What the database counts as held less what this gate holds: other workers' holds and floats, which end too.
      const reserved = refusal === 'tree_cap' ? (root?.tree_reserved ?? 0) : (account?.reserved ?? 0);
      if (reserved - (this.liveAmount.get(key) ?? 0) > 0) return { final: false, key, remote: true };
    }
    return { final: true, result: { granted: false, refusal, payable }, fits: request.amount <= payable };
  }

  private push(waiter: Waiter): void {
    let q = this.queues.get(waiter.key);
    if (!q) {
      q = { waiters: [], head: 0, toldUpTo: 0, pumping: false, pumpAgain: false, remote: false };
      this.queues.set(waiter.key, q);
    }
    q.waiters.push(waiter);
  }

  /** Grants from the head of a queue, in order, until a request that still has to wait. */
  private pump(key: string): void {
    const q = this.queues.get(key);
    if (!q) return;
    if (q.pumping) {
      q.pumpAgain = true;
      return;
    }
    q.pumping = true;
    void (async () => {
      try {
        do {
          q.pumpAgain = false;
          await this.grantFromHead(key, q);
        } while (q.pumpAgain);
      } finally {
        q.pumping = false;
        if (q.head >= q.waiters.length) this.queues.delete(key);
      }
    })();
  }

  private async grantFromHead(key: string, q: Queue): Promise<void> {
    q.remote = false;
    while (q.head < q.waiters.length) {
      const waiter = q.waiters[q.head]!;
      if (waiter.settled) {
        this.shift(q);
        continue;
      }
      const signal = waiter.options.signal;
      if (signal?.aborted) {
        this.finish(q, waiter);
        waiter.reject(signal.reason);
        continue;
      }
      let outcome: Outcome;
      try {
        outcome = await this.decide(waiter.request, waiter.options.purpose);
      } catch (error) {
        this.finish(q, waiter);
        waiter.reject(error);
        continue;
      }
      if (waiter.settled || signal?.aborted) {
        // Aborted while its reservation was being made: the hold it got is not wanted.
        let failure: unknown;
        if (outcome.kind === 'granted') {
          try {
            // Forgotten even when storage fails (CreditHold.release): a hold the gate counts for good would hold the
            // others back for good.
            await this.live.get(waiter.request.id)?.release('its reservation was aborted as it was granted');
          } catch (error) {
            failure = error;
          }
        }
        if (!waiter.settled) {
          this.finish(q, waiter);
          waiter.reject(failure ?? signal!.reason);
        } else this.shift(q);
        continue;
      }
      if (outcome.kind === 'wait') {
        if (outcome.key === key) {
          // The head waits for holds to end, and so does everyone behind it.
          q.remote = outcome.remote;
          if (outcome.remote) this.waitForOthers(waiter.request.account_id);
          this.tellWaiting(q, key);
          return;
        }
        // Its account has room now but not its tree's cap (or the other way round): it waits there instead.
        this.shift(q);
        waiter.key = outcome.key;
        this.push(waiter);
        this.pump(outcome.key);
        continue;
      }
      this.finish(q, waiter);
      if (outcome.kind === 'granted') {
        waiter.resolve({ granted: true });
      } else {
        waiter.resolve(outcome.result);
      }
    }
  }

  /**
   * Asks storage for the hold and, when refused, judges the refusal. Decisions of one account are made one at a time
   * (its account queue and its trees' queues would otherwise interleave): a hold storage has made is then counted
   * before any other request of the account is judged, and a refusal is never judged against holds it never saw.
   */
  private decide(request: ReservationRequest, purpose: string | undefined): Promise<Outcome> {
    return this.exclusive(request.account_id, async () => {
      for (let retries = 0; ; retries++) {
        const refusal = await this.storage.reserve(request);
        if (refusal === null) {
          this.track(request, purpose);
          return { kind: 'granted' };
        }
        const verdict = await this.judge(request, refusal);
        if (!verdict.final) return { kind: 'wait', key: verdict.key, remote: verdict.remote };
        // The settled balance covers it and no other live hold is in the way: the hold that made storage refuse
        // ended in between (released or settled while the refusal was on its way). Asked again a bounded number of
        // times, not in a loop: only the requester's own holds may be in the way, and waiting for them never ends.
        // With other workers a few more, as their holds come and go between the refusal and its judgement.
        if (verdict.fits && retries < (this.shared() ? SHARED_RETRIES : 1)) continue;
        return { kind: 'refused', result: verdict.result };
      }
    });
  }

  /** No queue of this request's account or tree has anything in it or under way, and nothing is being decided. */
  private idle(request: ReservationRequest): boolean {
    if (this.deciding.has(request.account_id)) return false;
    // No queue at all is the common case: no key is built for it.
    if (this.queues.size === 0) return true;
    return this.quiet(accountKey(request.account_id)) && this.quiet(treeKey(request.root_id));
  }

  /** Whether a queue has nothing in it or under way. */
  private quiet(key: string): boolean {
    const q = this.queues.get(key);
    return !q || (!q.pumping && q.head >= q.waiters.length);
  }

  private async exclusive<T>(accountId: string, fn: () => Promise<T>): Promise<T> {
    const before = this.deciding.get(accountId);
    let done!: () => void;
    const mine = new Promise<void>((resolve) => (done = resolve));
    const tail = before ? before.then(() => mine) : mine;
    this.deciding.set(accountId, tail);
    try {
      if (before) await before;
      return await fn();
    } finally {
      done();
      if (this.deciding.get(accountId) === tail) this.deciding.delete(accountId);
    }
  }

  private tellWaiting(q: Queue, key: string): void {
    const heldBy = this.liveCount.get(key) ?? 0;
    for (let i = Math.max(q.head, q.toldUpTo); i < q.waiters.length; i++) {
      const w = q.waiters[i]!;
      if (w.settled || w.told) continue;
      w.told = true;
      w.counted = {
        accountId: w.request.account_id,
        rootId: w.request.root_id,
        amount: w.request.amount,
        since: w.since,
      };
      this.waits.add(w.counted);
      this.listenForAbort(w);
      try {
        w.options.onWait?.(heldBy);
      } catch {
        // telling is a courtesy; the wait goes on
      }
    }
    q.toldUpTo = q.waiters.length;
  }

  /** A pause or delete takes a waiting request out of its queue. */
  private listenForAbort(waiter: Waiter): void {
    const { signal } = waiter.options;
    if (!signal) return;
    const onAbort = () => {
      if (waiter.settled) return;
      waiter.settled = true;
      this.uncount(waiter);
      waiter.reject(signal.reason);
      // It may have been the head that held the others back.
      this.pump(waiter.key);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    waiter.stopListening = () => signal.removeEventListener('abort', onAbort);
  }

  private finish(q: Queue, waiter: Waiter): void {
    waiter.settled = true;
    waiter.stopListening?.();
    this.uncount(waiter);
    this.shift(q);
  }

  /** The waiter left its queue: it no longer counts as waiting for credits. */
  private uncount(waiter: Waiter): void {
    if (waiter.counted) this.waits.remove(waiter.counted);
    waiter.counted = undefined;
  }

  private shift(q: Queue): void {
    q.waiters[q.head] = undefined as unknown as Waiter; // let it be collected
    q.head++;
    if (q.head > 1024 && q.head * 2 > q.waiters.length) {
      q.waiters = q.waiters.slice(q.head);
      q.toldUpTo = Math.max(0, q.toldUpTo - q.head);
      q.head = 0;
    }
  }
}
