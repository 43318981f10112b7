/**
 * @module storage/postgres/sweeper
 * Cleans up after workers that are gone: a worker whose row says `stopped`, or whose heartbeat is older
 * than the gone-worker grace (`goneAfterMs`, a few heartbeats; not the lease, which may be much longer). One sweeper at a time (a transaction-scoped advisory lock; the others skip the round), every
 * heartbeat of every worker, so the sweep goes on while any worker lives.
 *
 * What a gone worker leaves, and what happens to it:
 * - the agents it held: their leases end now (claims take them; the new owner drops their stale holds);
 * - wakes it may have been about to deliver (a child finished, the parent not yet woken): every runnable agent nobody
 *   holds is marked claimable once, and steps once — the same rule as a restart of a single process, where every
 *   runnable agent steps once and an agent that waits finds it still waits;
 * - its holds and float, its queued messages: the cleanup hooks (credits, outbox) run in the same transaction; a hold
 *   its last statements took after that (they were on their way when it died) is dropped by the next sweep (`orphans`);
 * - its row: deleted.
 * The first sweep of a worker that finds no other live worker does the same for every runnable agent: the database
 * was left by processes that are all gone (or by an exclusive runtime).
 */
import type { Db, Query } from './db.js';

/** Cleanup of what gone workers leave, run in the sweep's transaction. */
export type GoneWorkersHook = (q: Query, workerIds: string[]) => Promise<unknown>;

/** An advisory lock number (with the schema's hash): one sweeper at a time per schema. */
const SWEEPER_LOCK = 7_305_003;

export interface SweepResult {
  /** Workers cleaned up after. */
  gone: string[];
  /** Whether agents became claimable (idle workers should claim). */
  freed: boolean;
}

/**
 * One sweep. `everything`: also when no worker is gone, if this worker is the only live one (its first sweep).
 */
export async function sweep(
  db: Db,
  hooks: readonly GoneWorkersHook[],
  everything: boolean,
  orphans?: (q: Query) => Promise<unknown>,
): Promise<SweepResult> {
  return db.tx(async (q) => {
    const [lock] = await q<{ ok: boolean }>('SELECT pg_try_advisory_xact_lock($1::int, hashtext($2)) AS ok', [
      SWEEPER_LOCK,
      db.schema,
    ]);
    if (!lock?.ok) return { gone: [], freed: false };
    const rows = await q<{ worker_id: string; gone: boolean }>(
      `SELECT worker_id, (stopped OR heartbeat_at < now() - $2::bigint * interval '1 millisecond') AS gone
       FROM workers WHERE worker_id <> $1 FOR UPDATE`,
      [db.workerId, db.goneAfterMs],
    );
    const gone = rows.filter((r) => r.gone).map((r) => r.worker_id);
    const othersLive = rows.some((r) => !r.gone);
    // Holds whose worker has no row any more: taken by a statement of a worker that was already swept (it was in
    // flight when the worker died, or blocked behind the sweep's own locks, and committed after it). Every sweep drops
    // them, or they would hold the account's credits for good. Last, as the holds of gone workers below:
    // holds and the account are locked after the agents, never before.
    if (gone.length === 0 && !(everything && !othersLive)) {
      await orphans?.(q);
      return { gone, freed: false };
    }
    if (gone.length > 0) {
      // Their leases of runnable agents end now rather than when they run out (others run out: nobody claims them).
      await q(
        `UPDATE agents SET lease_expires_at = now()
         WHERE status IN ('ACTIVE', 'STARTING_UP') AND (wake_requested OR lease_owner IS NOT NULL)
           AND lease_owner = ANY($1::text[]) AND lease_expires_at > now()`,
        [gone],
      );
    }
    // Wakes in flight died with them: every runnable agent that nobody holds steps once.
    await q(
      `UPDATE agents SET wake_requested = true
       WHERE status IN ('ACTIVE', 'STARTING_UP') AND NOT wake_requested AND lease_owner IS NULL`,
    );
    if (gone.length > 0) {
      for (const hook of hooks) await hook(q, gone);
      await q('DELETE FROM workers WHERE worker_id = ANY($1::text[])', [gone]);
    }
    await orphans?.(q);
    return { gone, freed: true };
  });
}
