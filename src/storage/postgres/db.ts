/**
 * @module storage/postgres/db
 * The one way the PostgreSQL adapter talks to the database: a pool whose connections use the adapter's schema, BIGINT
 * (int8) read as a JavaScript number (micro-credits and counters stay far below 2^53), and `tx()`, which runs a
 * function in one transaction on one connection and retries it when PostgreSQL reports a serialization failure or a
 * deadlock (the transaction then had no effect).
 */
import { createHash, randomUUID } from 'node:crypto';
import type { Pool, PoolClient, QueryResultRow } from 'pg';

/** Runs one statement and returns its rows. */
export type Query = <R extends QueryResultRow = Record<string, unknown>>(
  sql: string,
  params?: unknown[],
) => Promise<R[]>;

/** The adapter's access to its database. */
export interface Db {
  /** A statement outside any transaction (a single statement is atomic by itself). */
  q: Query;
  /**
   * Runs `fn` in a transaction (READ COMMITTED; take row locks with `SELECT … FOR UPDATE` where a read decides a
   * write). Committed when `fn` resolves, rolled back when it throws. Do not nest: `fn` gets the transaction's query.
   */
  tx<T>(fn: (q: Query) => Promise<T>): Promise<T>;
  /** The schema's name, quoted for SQL (e.g. `"agentry"`). */
  schema: string;
  /**
   * This adapter's worker id (a `workers` row while it drives agents). Every adapter instance is one worker:
   * it tags the holds it takes, the messages it queues and the timers and agents it claims with it.
   */
  workerId: string;
  /**
   * Whether several processes may drive this database's agents at once (leases, claimed timers), or only one
   * (`exclusive`: an advisory lock refuses a second).
   */
  mode: 'workers' | 'exclusive';
  /** How long a lease (of an agent, of a due timer) lasts unless renewed, in ms; a gone worker's work waits this long. */
  leaseMs: number;
  /** How often a worker renews its leases and heartbeat and looks for pause and delete requests, in ms. */
  heartbeatMs: number;
  /**
   * A worker whose heartbeat is older than this (database time) is gone: the sweeper ends its leases and drops its
   * holds then, whatever the lease's length (fencing keeps a worker that was only slow from writing). A few heartbeats.
   */
  goneAfterMs: number;
  /**
   * The agents whose lease this worker holds, with the lease's epoch (leases.ts keeps it). Writes of these agents are
   * fenced by it: a worker that lost a lease writes nothing more for that agent.
   */
  held: Map<string, number>;
}

/**
 * The epoch `held` keeps for an agent whose lease this worker no longer has while its driver may still be running (lost
 * to another worker, or given up by the step commit that ended the agent): no lease has it, so every write fenced by
 * it fails instead of being written unfenced.
 */
export const LEASE_GONE = -1;

/** SQLSTATE of failures after which a transaction can simply run again. */
const RETRYABLE = new Set(['40001', '40P01']);

/**
 * The name a statement is prepared under on each connection: its text's hash, so the same text is parsed and planned
 * once per connection and a name never stands for two texts. Only parametrised DML is prepared (PostgreSQL prepares
 * nothing else); the adapter's statement texts are a bounded set (no values are ever written into them).
 */
function preparedName(sql: string): string | undefined {
  if (!/^\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b/i.test(sql)) return undefined;
  return `agentry_${createHash('sha1').update(sql).digest('hex').slice(0, 16)}`;
}

export function createDb(
  pool: Pool,
  schema: string,
  worker: Pick<Db, 'workerId' | 'mode' | 'leaseMs' | 'heartbeatMs' | 'goneAfterMs'> = {
    workerId: randomUUID(),
    mode: 'exclusive',
    leaseMs: 15_000,
    heartbeatMs: 1_000,
    goneAfterMs: 3_000,
  },
): Db {
  const names = new Map<string, string | undefined>();
  const run =
    (client: Pool | PoolClient): Query =>
    async (sql, params) => {
      if (!params || params.length === 0) return (await client.query(sql)).rows as never;
      let name = names.get(sql);
      if (name === undefined && !names.has(sql)) names.set(sql, (name = preparedName(sql)));
      return (await client.query({ text: sql, values: params as unknown[], ...(name ? { name } : {}) })).rows as never;
    };
  const single = run(pool);
  return {
    // A single statement outside a transaction that PostgreSQL chose as a deadlock's victim (batched lease renewals
    // and gates lock many agent rows in no fixed order) was rolled back whole: running it again is safe.
    async q(sql, params) {
      for (let attempt = 1; ; attempt++) {
        try {
          return await single(sql, params);
        } catch (error) {
          const code = (error as { code?: string }).code;
          if (code && RETRYABLE.has(code) && attempt < 5) continue;
          throw error;
        }
      }
    },
    ...worker,
    held: new Map(),
    schema: `"${schema.replaceAll('"', '""')}"`,
    async tx(fn) {
      for (let attempt = 1; ; attempt++) {
        const client = await pool.connect();
        // The server may end the session mid-transaction (a worker frozen past idle_in_transaction_session_timeout):
        // the error then also arrives as an event, which must not crash the process; the statement fails, and the
        // connection is discarded instead of going back to the pool.
        let broken: Error | undefined;
        const onError = (error: Error) => (broken = error);
        client.on('error', onError);
        try {
          await client.query('BEGIN');
          const result = await fn(run(client));
          await client.query('COMMIT');
          return result;
        } catch (error) {
          await client.query('ROLLBACK').catch(() => undefined);
          const code = (error as { code?: string }).code;
          if (code && RETRYABLE.has(code) && attempt < 5) continue;
          throw error;
        } finally {
          client.off('error', onError);
          client.release(broken);
        }
      }
    },
  };
}
