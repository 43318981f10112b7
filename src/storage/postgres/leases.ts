/**
 * @module storage/postgres/leases
 * The {@link WorkerCoordination} of PostgreSQL (README.md#several-processes): this process is a worker with a row in
 * `workers`; it steps an agent only while it holds the agent's lease.
 *
 * - **Claim**: `SELECT … FOR UPDATE SKIP LOCKED LIMIT n`, then `UPDATE … SET lease_owner, lease_epoch + 1,
 *   lease_expires_at` (database time), one statement. An agent another live worker holds gets
 *   `wake_requested` instead: its holder sees it when it releases the agent and drives it again.
 * - **Fence**: the adapter adds `{worker, epoch}` of every agent it holds to that agent's step commits and "started"
 *   marks of calls that must never run twice (`db.held`); a write whose lease is gone writes nothing. Status changes
 *   are compare-and-set on the status instead (a pause or delete may come from any process, holder or not).
 * - **Release**: a step commit that leaves its agent not runnable ends the lease in the same statement; a driver that
 *   stops otherwise gives the lease back (below).
 * - **Heartbeat** (every `heartbeatMs`, jittered): renews the worker's row and every lease it holds in one statement.
 *   The answer also tells which agents were taken over or deleted (lost) and which were paused or stopped by another
 *   process (the backstop of the `control` notification). A worker that could not renew for most of a lease stops
 *   stepping before its leases run out. Then it claims claimable work while it has room, and sweeps (sweeper.ts).
 * - **Release**: when a driver stops, the lease goes back (`lease_owner = NULL`) unless a wake arrived meanwhile.
 * Claims, releases and gates asked for in the same turn of the event loop share one statement (batcher.ts).
 */
import { hostname } from 'node:os';
import type { WorkerCoordination, WorkerHooks } from '../workers.js';
import { groupCommit } from './batcher.js';
import { LEASE_GONE as LOST, type Db, type Query } from './db.js';
import type { NotifyBus } from './notify.js';
import { sweep, type GoneWorkersHook } from './sweeper.js';

/** The statuses a worker steps. */
const RUNNABLE = ['ACTIVE', 'STARTING_UP'];
/** A worker that has not renewed for this share of a lease stops stepping: its leases may be another's soon. */
const RENEW_DEADLINE_SHARE = 0.7;
const MAX_BATCH = 1_000;
/**
 * Claimable agents one claim of this worker's own takes at most. Workers that look at the same moment (a
 * `work` notification wakes them all) take turns in small bites with `SKIP LOCKED`, so each gets its share instead of
 * the first one taking everything it has room for.
 */
export const CLAIM_BATCH = 16;

/**
 * Claims agents for worker $1, $3 at most, and answers them with their new epoch and the owner whose lease had run out
 * (a takeover). `%s` is what to claim: the ids given (an index lookup), or any claimable agent (the partial index
 * `agents_claimable`, whose predicate the query repeats so that the planner uses it).
 */
const CLAIM = `WITH c AS (
    SELECT agent_id AS id, lease_owner AS old_owner FROM agents
    WHERE %s
    ORDER BY seq LIMIT $3
    FOR UPDATE SKIP LOCKED
  )
  UPDATE agents a SET lease_owner = $1, lease_epoch = a.lease_epoch + 1,
      lease_expires_at = now() + $4::bigint * interval '1 millisecond', wake_requested = false
    FROM c WHERE a.agent_id = c.id
    RETURNING a.agent_id, a.lease_epoch AS epoch, CASE WHEN c.old_owner IS DISTINCT FROM $1 THEN c.old_owner END AS previous`;
const CLAIM_IDS = CLAIM.replace(
  '%s',
  `agent_id = ANY($2::text[]) AND status IN ('ACTIVE', 'STARTING_UP')
      AND (lease_owner IS NULL OR lease_expires_at < now())`,
);
const CLAIM_ANY = CLAIM.replace(
  '%s',
  `status IN ('ACTIVE', 'STARTING_UP') AND (wake_requested OR lease_owner IS NOT NULL)
      AND ((lease_owner IS NULL AND wake_requested) OR lease_expires_at < now()) AND $2::text[] IS NULL`,
);

interface Held {
  id: string;
  epoch: number;
}

export interface PgWorkersOptions {
  bus: NotifyBus;
  /** Cleanup of what gone workers leave (holds, queued messages), run by the sweeper. */
  onGone: readonly GoneWorkersHook[];
  /** Every sweep, in its transaction: drops holds of workers that have no row (swept already, or never registered). */
  dropOrphanHolds(q: Query): Promise<unknown>;
  /** Drops the stale holds of agents taken over from a gone worker. */
  dropHoldsOf(agentIds: string[]): Promise<unknown>;
  /**
   * This worker was taken for gone (it could not renew within the gone-worker grace: frozen, partitioned) and its holds and
   * float were dropped by the sweeper: forget what this process thought it held, and drop what it took since.
   */
  onRevived(): Promise<void>;
}

export class PgWorkers implements WorkerCoordination {
  private hooks: WorkerHooks | undefined;
  private capacity: () => number = () => 0;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** When (performance.now()) the last renewal that succeeded was sent. */
  private renewedAt = performance.now();
  private firstSweep = true;
  private claiming: Promise<void> | undefined;
  /**
   * Signals that claimable work may be waiting (a `work` notification, a heartbeat), counted; `workSeen` is the count
   * as of the last claim that found less than it had room for. A signal that arrives during a claim is not lost.
   */
  private workSignals = 1;
  private workSeen = 0;
  private readonly unsubscribe: Array<() => void> = [];
  private readonly claimIds: (item: { id: string; limit: number }) => Promise<boolean>;
  private readonly releaseOne: (item: Held & { unfinished: boolean }) => Promise<boolean>;
  /** Agents whose model-call gate said no or failed: let go, they stay claimable if still runnable. */
  private readonly interrupted = new Set<string>();
  private readonly gate: (item: Held) => Promise<boolean>;

  constructor(
    private readonly db: Db,
    private readonly options: PgWorkersOptions,
  ) {
    this.claimIds = groupCommit(async (items: Array<{ id: string; limit: number }>) => {
      const claimed = await this.claimWith(
        items.map((i) => i.id),
        // Each asked with the room it saw; the first asked saw the most.
        Math.max(...items.map((i) => i.limit)),
      );
      const got = new Set(claimed);
      const missed = items.filter((i) => !got.has(i.id)).map((i) => i.id);
      if (missed.length > 0) {
        // Held by another worker (it drives them again when it lets them go), or left for any worker with room.
        await this.db.q(
          `WITH t AS (
             SELECT agent_id FROM agents
             WHERE agent_id = ANY($1::text[]) AND status = ANY($2::text[]) AND NOT wake_requested
             ORDER BY agent_id FOR UPDATE
           ) UPDATE agents a SET wake_requested = true FROM t WHERE a.agent_id = t.agent_id`,
          [missed, RUNNABLE],
        );
        this.options.bus.publish('work', '');
      }
      return items.map((i) => ({ ok: true as const, value: got.has(i.id) }));
    }, MAX_BATCH);
    this.releaseOne = groupCommit(async (items: Array<Held & { unfinished: boolean }>) => {
      // An agent whose driver stopped with work left (its gate could not be checked, its step failed) stays
      // claimable; one that waits (for children, a timer) needs a wake. Rows locked in agent_id order, like the
      // step commits', so that two batches never wait for each other in a circle.
      const rows = await this.db.q<{ agent_id: string; again: boolean }>(
        `WITH r AS (
           SELECT a.agent_id, a.wake_requested AND a.status = ANY($4::text[]) AS again,
             u.unfinished AND a.status = ANY($4::text[]) AS unfinished FROM agents a
           JOIN unnest($2::text[], $3::bigint[], $6::boolean[]) AS u(id, e, unfinished)
             ON a.agent_id = u.id AND a.lease_epoch = u.e
           WHERE a.agent_id = ANY($2::text[]) AND a.lease_owner = $1 ORDER BY a.agent_id FOR UPDATE OF a
         )
         UPDATE agents a SET
           lease_owner = CASE WHEN r.again THEN a.lease_owner END,
           lease_expires_at = CASE WHEN r.again THEN now() + $5::bigint * interval '1 millisecond' END,
           wake_requested = NOT r.again AND r.unfinished
         FROM r WHERE a.agent_id = r.agent_id RETURNING a.agent_id, r.again`,
        [
          this.db.workerId,
          items.map((i) => i.id),
          items.map((i) => i.epoch),
          RUNNABLE,
          this.db.leaseMs,
          items.map((i) => i.unfinished),
        ],
      );
      if (rows.some((r) => !r.again)) this.options.bus.publish('work', '');
      const again = new Set(rows.filter((r) => r.again).map((r) => r.agent_id));
      return items.map((i) => ({ ok: true as const, value: again.has(i.id) }));
    }, MAX_BATCH);
    this.gate = groupCommit(async (items: Held[]) => {
      // A read: a pause or takeover committed before it is seen, one committed after it is as if it came after the
      // call started. Locking the rows would order nothing more, and would cost a row version per agent and call.
      // Looked up by id (the epochs compared here): a join with the ids' array would have the planner scan the table.
      const rows = await this.db.q<{ agent_id: string; lease_epoch: number }>(
        `SELECT agent_id, lease_epoch FROM agents
         WHERE agent_id = ANY($2::text[]) AND lease_owner = $1 AND status = ANY($3::text[]) AND lease_expires_at > now()`,
        [this.db.workerId, items.map((i) => i.id), RUNNABLE],
      );
      const epochs = new Map(rows.map((r) => [r.agent_id, r.lease_epoch]));
      return items.map((i) => ({ ok: true as const, value: epochs.get(i.id) === i.epoch }));
    }, MAX_BATCH);
  }

  get workerId(): string {
    return this.db.workerId;
  }

  get bus(): NotifyBus {
    return this.options.bus;
  }

  async start(hooks: WorkerHooks, capacity: () => number): Promise<void> {
    this.hooks = hooks;
    this.capacity = capacity;
    await this.db.q(
      `INSERT INTO workers (worker_id, host, pid) VALUES ($1, $2, $3)
       ON CONFLICT (worker_id) DO UPDATE SET heartbeat_at = now(), stopped = false`,
      [this.db.workerId, hostname(), process.pid],
    );
    this.renewedAt = performance.now();
    this.unsubscribe.push(
      this.bus.subscribe('control', (ids) => {
        // A pause or delete somewhere: check the agents named that this worker holds (all of them after a reconnect).
        const mine = ids === null ? this.live() : ids.filter((id) => this.holds(id));
        if (mine.length > 0) void this.renew(mine).catch((e: unknown) => this.hooks?.onError(e));
      }),
      this.bus.subscribe('work', () => this.mayHaveWork()),
    );
    await this.bus.start();
    await this.tick();
  }

  holds(agentId: string): boolean {
    return (this.db.held.get(agentId) ?? LOST) !== LOST;
  }

  async claim(agentIds: readonly string[], limit: number): Promise<string[]> {
    // A worker whose last renewal is overdue claims nothing until it has renewed (see claimWhileRoom).
    if (this.overdue()) return [];
    const wanted = agentIds.filter((id) => !this.holds(id));
    const results = await Promise.all(wanted.map((id) => this.claimIds({ id, limit })));
    return wanted.filter((_, i) => results[i]);
  }

  async release(
    agentIds: readonly string[],
    options: { unfinished?: boolean; lost?: boolean } = {},
  ): Promise<string[]> {
    // A fenced-out step left its holds (the commit that would have settled them failed): they go first, before any new
    // driver of these agents in this process could take a hold of its own (a hold must not outlive its use).
    const dropping = options.lost ? this.options.dropHoldsOf([...agentIds]) : undefined;
    const items = agentIds.flatMap((id) => {
      const epoch = this.db.held.get(id);
      this.db.held.delete(id); // a lost lease's tombstone goes with its driver
      const unfinished = this.interrupted.delete(id) || options.unfinished === true;
      return epoch === undefined || epoch === LOST ? [] : [{ id, epoch, unfinished }];
    });
    const again = await Promise.all(items.map((i) => this.releaseOne(i)));
    await dropping;
    const kept = items.filter((_, k) => again[k]);
    // Still held (a wake arrived while it was): the caller drives it again under the same lease.
    for (const i of kept) this.db.held.set(i.id, i.epoch);
    return kept.map((i) => i.id);
  }

  async mayProceed(agentId: string): Promise<boolean> {
    const epoch = this.db.held.get(agentId);
    if (epoch === undefined || epoch === LOST) return false;
    // The database decides, even when this worker's heartbeat has not told it yet that a lease is gone. Its yes is
    // trusted only while this worker's last renewal is recent: a process frozen (SIGSTOP, a long GC pause, a starved
    // event loop) between the database's answer and reading it may have been taken for gone meanwhile, and the answer
    // is then about a lease that someone else may hold by now.
    const ok = (await this.gate({ id: agentId, epoch }).catch(() => false)) && !this.overdue();
    if (!ok) this.interrupted.add(agentId);
    return ok;
  }

  wantWork(): void {
    // Asked whenever the scheduler's queue runs low: only worth a query when there may be claimable work (a `work`
    // notification, a heartbeat, or the last claim took all it had room for).
    if (this.stopped || !this.hooks || this.workSeen >= this.workSignals || this.claiming) return;
    const run = this.claimWhileRoom();
    this.claiming = run;
    // Cleared after the fact: a loop that ends at once (no room) must not leave itself marked as running.
    void run.finally(() => {
      if (this.claiming === run) this.claiming = undefined;
    });
  }

  /** Claims claimable agents while this worker has room and there may be more. */
  private async claimWhileRoom(): Promise<void> {
    try {
      while (this.workSeen < this.workSignals && !this.stopped) {
        // Not while this worker's last renewal is overdue: it may have been frozen and taken for gone, and its view of
        // what it holds is stale until the next renewal reports what it lost. An agent claimed again before that
        // would look kept to the renewal, and a call its old driver still runs would never be told to stop. The next
        // heartbeat asks again.
        if (this.overdue()) break;
        const signals = this.workSignals;
        const room = Math.min(this.capacity(), CLAIM_BATCH);
        if (room <= 0) break; // asked again when a run slot frees up
        const ids = await this.claimWith(null, room);
        // Less than it had room for: nothing more was claimable, as of the signals seen when it asked.
        if (ids.length < room) this.workSeen = signals;
        if (ids.length > 0) this.hooks?.onClaimed(ids);
      }
    } catch (error) {
      if (!this.stopped) this.hooks?.onError(error);
    }
  }

  private mayHaveWork(): void {
    this.workSignals++;
    this.wantWork();
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    clearTimeout(this.timer);
    for (const off of this.unsubscribe) off();
    await this.claiming;
    const ids = this.live();
    this.db.held.clear();
    try {
      // Runnable agents it held are claimable at once by the others; the row tells the sweeper this worker is gone.
      await this.db.tx(async (q) => {
        await q(
          `UPDATE agents SET lease_owner = NULL, lease_expires_at = NULL,
             wake_requested = status = ANY($3::text[])
           WHERE lease_owner = $1 AND agent_id = ANY($2::text[])`,
          [this.db.workerId, ids, RUNNABLE],
        );
        await q('UPDATE workers SET stopped = true WHERE worker_id = $1', [this.db.workerId]);
      });
      if (ids.length > 0) this.bus.publish('work', '');
    } finally {
      await this.bus.stop();
    }
  }

  /** Claims agents (`ids`, or any claimable with null) and records their epochs; drops stale holds of takeovers. */
  private async claimWith(ids: string[] | null, limit: number): Promise<string[]> {
    if (limit <= 0 || this.stopped) return [];
    const rows = await this.db.q<{ agent_id: string; epoch: number; previous: string | null }>(
      ids === null ? CLAIM_ANY : CLAIM_IDS,
      [this.db.workerId, ids, limit, this.db.leaseMs],
    );
    for (const r of rows) this.db.held.set(r.agent_id, r.epoch);
    const takenOver = rows.filter((r) => r.previous !== null).map((r) => r.agent_id);
    if (takenOver.length > 0) await this.options.dropHoldsOf(takenOver);
    return rows.map((r) => r.agent_id);
  }

  /** The agents whose lease this worker holds (not those it lost). */
  private live(): string[] {
    return [...this.db.held].filter(([, epoch]) => epoch !== LOST).map(([id]) => id);
  }

  /**
   * Leases lost: the agents stay in `db.held` as tombstones until their drivers stop, so that whatever their work still
   * tries to write is fenced out (an epoch no lease has) instead of written unfenced.
   */
  private loseAll(ids: string[]): void {
    for (const id of ids) this.db.held.set(id, LOST);
    if (ids.length > 0) this.hooks?.onLost(ids);
  }

  /**
   * Whether the last successful renewal is so old that the leases may be someone else's soon: the sweepers of the
   * others take this worker for gone after `goneAfterMs` (or its leases run out, whichever comes first).
   */
  private overdue(): boolean {
    return performance.now() - this.renewedAt > Math.min(this.db.leaseMs, this.db.goneAfterMs) * RENEW_DEADLINE_SHARE;
  }

  /**
   * Renews the leases of `ids` (default: all held) and the worker's row; reports lost and stopped agents. Returns
   * false when the worker's row is gone (the sweeper took this worker for dead: every lease was lost with it).
   */
  private async renew(ids: string[] = this.live()): Promise<void> {
    const sent = performance.now();
    const epochs = ids.map((id) => this.db.held.get(id) ?? -1);
    const [alive] = await this.db.q<{ ok: boolean }>(
      'UPDATE workers SET heartbeat_at = now() WHERE worker_id = $1 AND NOT stopped RETURNING true AS ok',
      [this.db.workerId],
    );
    const rows =
      ids.length === 0
        ? []
        : await this.db.q<{ agent_id: string; status: string }>(
            `WITH r AS (
               SELECT a.agent_id FROM agents a JOIN unnest($2::text[], $3::bigint[]) AS u(id, e)
                 ON a.agent_id = u.id AND a.lease_epoch = u.e
               WHERE a.agent_id = ANY($2::text[]) AND a.lease_owner = $1 ORDER BY a.agent_id FOR UPDATE OF a
             ) UPDATE agents a SET lease_expires_at = now() + $4::bigint * interval '1 millisecond'
               FROM r WHERE a.agent_id = r.agent_id RETURNING a.agent_id, a.status`,
            [this.db.workerId, ids, epochs, this.db.leaseMs],
          );
    if (!alive) {
      // Taken for dead and cleaned up after: nothing it holds is its own any more. It starts a new life.
      this.loseAll(this.live());
      await this.options.onRevived();
      await this.db.q(
        `INSERT INTO workers (worker_id, host, pid) VALUES ($1, $2, $3)
         ON CONFLICT (worker_id) DO UPDATE SET heartbeat_at = now(), stopped = false`,
        [this.db.workerId, hostname(), process.pid],
      );
      this.renewedAt = sent;
      return;
    }
    this.renewedAt = Math.max(this.renewedAt, sent);
    const kept = new Map(rows.map((r) => [r.agent_id, r.status]));
    // An agent claimed again meanwhile has a newer epoch than the one sent: not lost.
    const lost = ids.filter((id, k) => !kept.has(id) && this.db.held.get(id) === epochs[k]);
    this.loseAll(lost);
    const stopped = [...kept].filter(([, status]) => !RUNNABLE.includes(status)).map(([id]) => id);
    if (stopped.length > 0) this.hooks?.onStopped(stopped);
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    const began = performance.now();
    try {
      await this.renew();
    } catch (error) {
      this.hooks?.onError(error);
      if (this.overdue()) {
        // Could not renew for most of a lease: stop stepping before another worker may take the agents.
        this.loseAll(this.live());
      }
    }
    try {
      const swept = await sweep(this.db, this.options.onGone, this.firstSweep, this.options.dropOrphanHolds);
      this.firstSweep = false;
      if (swept.freed) this.bus.publish('work', '');
    } catch (error) {
      this.hooks?.onError(error);
    }
    this.mayHaveWork();
    if (this.stopped) return;
    // Jittered, so that workers started together do not renew and sweep in step; counted from when this tick began, so
    // that a slow renewal or sweep does not stretch the time between heartbeats towards the gone-worker grace.
    const next = this.db.heartbeatMs * (0.75 + Math.random() * 0.5) - (performance.now() - began);
    this.timer = setTimeout(() => void this.tick(), Math.max(0, next));
    this.timer.unref();
  }
}
