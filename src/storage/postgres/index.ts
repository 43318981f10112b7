/**
 * @module storage/postgres
 * A {@link StorageAdapter} on PostgreSQL (`agentry-runtime/storage/postgres`), through `pg` (an optional peer dependency,
 * loaded by `init()`). It keeps its tables in one schema (the `schema` option, else the URL's `?schema=`, else
 * `agentry`; created if missing), and follows
 * `memoryStorage()`, the reference, as the contract suite in `test/storage/contract.ts` checks. Every write that must
 * be atomic is one transaction (`db.ts`); reads that decide a write lock their rows (`FOR UPDATE`).
 *
 * The stores, by what they keep: `accounts.ts` (accounts, ledger, reservations, API keys, idempotency keys),
 * `agents.ts` (agents, messages, turns, tool calls, tool state, steps), `extras.ts` (artifacts, page reads, outbox,
 * opt-outs, timers, monitors). Their tables and server functions come from `migrations/`: numbered files of literal
 * SQL, applied by `init()`.
 *
 * Several runtime processes may drive one database's agents: each adapter instance is a worker that steps
 * an agent only under its lease (leases.ts), hears pause, delete and new work over LISTEN/NOTIFY (notify.ts, sealed
 * with a secret of the schema: any role of the database may listen and notify), and cleans up after workers that are
 * gone (sweeper.ts). `exclusive: true` keeps one process per database instead (an advisory lock refuses a second, as
 * SQLite does).
 */
import { randomUUID } from 'node:crypto';
import type { Pool, PoolClient } from 'pg';
import { z } from 'zod';
import { AgentryError } from '../../errors.js';
import type { StorageAdapter } from '../adapter.js';
import {
  accountsStore,
  releaseAllHoldsIn,
  releaseHoldsOfGoneWorkersIn,
  releaseHoldsOfWorkers,
  releaseOrphanHoldsIn,
} from './accounts.js';
import { agentsStore } from './agents.js';
import { CreditFloats } from './credit-float.js';
import { createDb, type Db } from './db.js';
import { extrasStore, markOutboxOfWorkersUnknown } from './extras.js';
import { PgWorkers } from './leases.js';
import { migrate } from './migrations/index.js';
import { NotifyBus } from './notify.js';

const OptionsSchema = z
  .object({
    connectionString: z.string().regex(/^postgres(ql)?:\/\//, 'must be a postgres:// URL'),
    schema: z
      .string()
      .regex(/^[a-z_][a-z0-9_]{0,62}$/, 'must be a lower-case SQL identifier')
      .optional(),
    maxConnections: z.number().int().min(1).max(100).optional(),
    synchronousCommit: z.boolean().optional(),
    exclusive: z.boolean().optional(),
    leaseMs: z.number().int().min(1_000).max(600_000).optional(),
    heartbeatMs: z.number().int().min(100).max(60_000).optional(),
    goneAfterMs: z.number().int().min(500).max(600_000).optional(),
  })
  .strict();

/**
 * Options of {@link postgresStorage}.
 * - `connectionString`: `postgres://…`; a `?schema=` parameter names the schema (else `schema`, else `agentry`).
 * - `maxConnections`: the pool's size (default 10).
 * - `synchronousCommit`: `false` sets PostgreSQL's `synchronous_commit = off` for the adapter's sessions: a commit
 *   returns before its WAL is flushed, so a crash of the *database server* (not of the runtime) may lose the last
 *   fraction of a second of commits, never corrupt them — the guarantee SQLite's `synchronous=NORMAL` gives. Default
 *   `true`: every commit is on disk when it returns.
 * - `exclusive`: `true` lets one process only drive the agents of this database (an advisory lock refuses a second,
 *   the mode before workers existed). Default `false`: every runtime that drives agents on it is a *worker*; workers
 *   share the agents through leases (README, "Several processes").
 * - `leaseMs`: how long a worker's claim on an agent or a due timer lasts unless renewed (default 15,000): what a
 *   worker's death costs its agents before another worker continues them.
 * - `heartbeatMs`: how often a worker renews its leases and heartbeat and checks for pause and delete requests
 *   (default 1,000; at most a third of `leaseMs` and of `goneAfterMs`).
 * - `goneAfterMs`: a worker whose heartbeat is older than this is *gone* (default 3,000, at most `leaseMs`): the
 *   sweeper ends its leases and drops its credit holds at once, so its agents move to other workers after this grace,
 *   not after a whole lease. Safe whatever the lease's length: a worker that was only paused (a long GC pause, a
 *   stopped VM) finds its leases taken, and its late writes are fenced out by the lease's epoch.
 *
 * @example
 * postgresStorage({ connectionString: 'postgres://app@db/app', leaseMs: 30_000, goneAfterMs: 5_000 });
 */
export type PostgresStorageOptions = z.input<typeof OptionsSchema>;

/**
 * Any fixed number: the advisory lock that marks the process that drives the agents (migrations/index.ts has the one
 * that serialises migrations). It is taken as (number, hash of the schema's name): schemas on one database (tenants,
 * parallel test suites) never share a runner.
 */
const RUNNER_LOCK = 7_305_002;
/** How long a new runner waits for the lock of one that is going away. */
const RUNNER_LOCK_WAIT_MS = 5_000;

/** The stores' methods that the process's credit floats stand in front of. */
type FloatedMethods = Pick<
  StorageAdapter,
  | 'reserve'
  | 'release'
  | 'releaseAgentReservations'
  | 'settle'
  | 'commitStep'
  | 'insertAgents'
  | 'deleteAgentTree'
  | 'getAccount'
  | 'listAccounts'
  | 'setSubscription'
  | 'addCredits'
  | 'findAccountByKeyHash'
>;

/**
 * The stores' credit methods with the process's credit floats (credit-float.ts) in front: holds carved from a float
 * are made, released and settled in memory, and named to the server when they settle; accounts read back count what
 * this process's calls hold, not the float's unused part. `db` is the stores' own methods, which these call through.
 */
function creditsThroughFloats(
  db: FloatedMethods,
  floats: CreditFloats,
): FloatedMethods & Required<Pick<StorageAdapter, 'reserveNow' | 'yieldCredits'>> {
  return {
    reserveNow: (r) => floats.reserveNow(r),
    async reserve(r) {
      const carved = await floats.reserve(r);
      if (carved !== undefined) return carved;
      const refusal = await db.reserve(r);
      // A hold row may be refused for credits this worker's own float keeps unused (a capped tree's call, or an
      // account another worker contests): they go back, and the row is asked once more.
      if (refusal === 'account' && (await floats.giveBackUnused(r.account_id)) > 0) return db.reserve(r);
      return refusal;
    },
    // Each path below waits for the float's give-backs it started (a contested account's credits go straight back),
    // so that the gate's word to other workers that credits are back comes after they are.
    async release(id) {
      if (!floats.release(id)) await db.release(id);
      await floats.flush();
    },
    async releaseAgentReservations(ids) {
      const n = floats.releaseAgents(ids) + (await db.releaseAgentReservations(ids));
      await floats.flush();
      return n;
    },
    async settle(settlements) {
      const named = floats.forServer(settlements);
      const charged = await db.settle(named);
      floats.settled(named, charged);
      await floats.flush();
      return charged;
    },
    async commitStep(commit) {
      const named = floats.forServer(commit.settlements ?? []);
      const result = await db.commitStep(named.length ? { ...commit, settlements: named } : commit);
      floats.settled(named, result.charged);
      if (named.length) await floats.flush();
      return result;
    },
    yieldCredits: (accountId) => floats.yield(accountId),
    async insertAgents(...args) {
      await db.insertAgents(...args);
      floats.noteAgents(args[0]);
    },
    async deleteAgentTree(id) {
      const ids = await db.deleteAgentTree(id);
      floats.releaseAgents(ids);
      return ids;
    },
    getAccount: async (id) => floats.view(await db.getAccount(id)),
    listAccounts: async () => (await db.listAccounts()).map((a) => floats.view(a)),
    setSubscription: async (id, active) => floats.view(await db.setSubscription(id, active)),
    addCredits: async (entry) => floats.view(await db.addCredits(entry)),
    findAccountByKeyHash: async (hash) => floats.view(await db.findAccountByKeyHash(hash)),
  };
}

/** Why a message queued by a worker that is gone is `unknown` (the outbox's own wording for a crash). */
const UNKNOWN_AFTER_WORKER_GONE =
  'The worker process sending this message stopped after it was recorded and before the provider answered: it may ' +
  'have been sent. It is never sent again automatically.';

/** `pg` is an optional peer dependency: loaded when the first adapter opens. */
const loadPg = async () => (await import('pg')).default;

/**
 * PostgreSQL storage.
 *
 * @example
 * import { postgresStorage } from 'agentry-runtime/storage/postgres';
 * const runtime = await AgentRuntime.open({ storage: postgresStorage({ connectionString: process.env.DATABASE_URL! }) });
 */
export function postgresStorage(options: PostgresStorageOptions): StorageAdapter {
  const parsed = OptionsSchema.safeParse(options);
  if (!parsed.success) {
    throw new AgentryError('invalid_request', `Invalid postgresStorage options: ${z.prettifyError(parsed.error)}`, {
      details: parsed.error.issues,
      cause: parsed.error,
    });
  }
  const { maxConnections = 10, synchronousCommit = true, exclusive = false, leaseMs = 15_000 } = parsed.data;
  // A worker is gone after a few missed heartbeats, never later than its leases run out by themselves.
  const goneAfterMs = Math.min(parsed.data.goneAfterMs ?? 3_000, leaseMs);
  const heartbeatMs = Math.min(parsed.data.heartbeatMs ?? 1_000, Math.floor(leaseMs / 3), Math.floor(goneAfterMs / 3));
  // A `schema` parameter of the URL (for the CLI's --db and AGENTRY_DB) is the adapter's, not the driver's.
  const url = new URL(parsed.data.connectionString);
  const schema = parsed.data.schema ?? url.searchParams.get('schema') ?? 'agentry';
  url.searchParams.delete('schema');
  // The driver lets an `options` parameter of the URL replace the pool's own `options` (which set the schema): the
  // user's session settings (statement_timeout, …) go first, and the adapter's after them.
  const userOptions = url.searchParams.get('options');
  url.searchParams.delete('options');
  const connectionString = url.toString();
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(schema)) {
    throw new AgentryError(
      'invalid_request',
      `Invalid postgresStorage schema ${JSON.stringify(schema)}: must be a lower-case SQL identifier`,
    );
  }
  let pool: Pool | undefined;
  let runnerClient: PoolClient | undefined;
  let db: Db | undefined;
  let floats: CreditFloats | undefined;
  let workers: PgWorkers | undefined;

  const adapter = {
    kind: 'postgres',
    async init() {
      if (!pool) {
        let pg: Awaited<ReturnType<typeof loadPg>>;
        try {
          pg = await loadPg();
        } catch (error) {
          throw new AgentryError(
            'not_configured',
            `postgresStorage needs the pg package (npm install pg): ${String(error)}`,
          );
        }
        // A worker frozen (SIGSTOP, a VM paused) inside a transaction would hold its row locks (an agent, the
        // account) for as long as it stays frozen, and the others could not take its agents over: the server ends
        // such a session once it has been idle in a transaction for the gone-worker grace (when the others take over).
        const idleTimeout = exclusive ? '' : ` -c idle_in_transaction_session_timeout=${goneAfterMs}`;
        const sessionOptions = `${userOptions ? `${userOptions} ` : ''}-c search_path=${schema}${synchronousCommit ? '' : ' -c synchronous_commit=off'}${idleTimeout}`;
        pool = new pg.Pool({
          connectionString,
          max: maxConnections,
          options: sessionOptions,
          types: {
            // int8 (micro-credits, counters) as numbers: they stay far below 2^53.
            getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
              oid === 20 ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format as never)) as never,
          },
        });
        // An idle connection whose session the server ended: the pool drops it and opens another when needed.
        pool.on('error', () => undefined);
        db = createDb(pool, schema, {
          workerId: randomUUID(),
          mode: exclusive ? 'exclusive' : 'workers',
          leaseMs,
          heartbeatMs,
          goneAfterMs,
        });
        floats = new CreditFloats(db);
        const stores = { ...accountsStore(db), ...agentsStore(db), ...extrasStore(db) };
        const credits = creditsThroughFloats(stores, floats);
        Object.assign(adapter, stores, credits);
        if (db.mode === 'workers') {
          const bus = new NotifyBus({
            pool,
            connect: () => new pg.Client({ connectionString, options: sessionOptions }),
            schema,
            heartbeatMs,
            // The worker's heartbeat on a connection of its own: step commits filling the pool never delay it.
            keepAlive: {
              sql: 'UPDATE workers SET heartbeat_at = now() WHERE worker_id = $1 AND NOT stopped',
              params: [db.workerId],
            },
            onError: () => undefined, // best effort: every listener has a polling backstop
          });
          workers = new PgWorkers(db, {
            bus,
            // What a gone worker leaves: its queued messages may have left (never sent again), and its holds.
            onGone: [
              (q, ids) => markOutboxOfWorkersUnknown(q, ids, UNKNOWN_AFTER_WORKER_GONE),
              (q, ids) => releaseHoldsOfWorkers(q, ids),
            ],
            dropOrphanHolds: (q) => releaseOrphanHoldsIn(q, db!.workerId),
            dropHoldsOf: (ids) => credits.releaseAgentReservations(ids),
            // Taken for gone: the sweeper dropped its holds, but a float grown after that sweep may still be there.
            onRevived: async () => {
              floats?.reset();
              await db!.tx((q) => releaseHoldsOfWorkers(q, [db!.workerId]));
            },
          });
          Object.assign(adapter, { workers });
        }
      }
      await migrate(db!);
    },
    async acquireRunnerLock() {
      if (!pool || runnerClient) return;
      if (db!.mode === 'workers') {
        // Several workers share the agents through leases (leases.ts); only an exclusive runtime locks the database.
        // Holds left by workers that are gone (or by processes before workers) go; a live worker's stay.
        await db!.tx((q) => releaseHoldsOfGoneWorkersIn(q, db!.workerId, db!.goneAfterMs));
        return;
      }
      const client = await pool.connect();
      try {
        // Waits a little rather than refusing at once: the server ends the session of a runner that was just killed
        // a moment after its socket closed, and only then frees its lock.
        await client.query(`SET lock_timeout = ${RUNNER_LOCK_WAIT_MS}`);
        await client.query('SELECT pg_advisory_lock($1::int, hashtext($2))', [RUNNER_LOCK, db!.schema]);
        await client.query('SET lock_timeout = 0');
      } catch (error) {
        client.release(true); // a fresh connection next time, not one with a half-set session
        if ((error as { code?: string }).code === '55P03') {
          throw new AgentryError(
            'invalid_state',
            'Another runtime process is driving the agents of this PostgreSQL database (one per database for now)',
          );
        }
        throw error;
      }
      runnerClient = client; // the session lock lives as long as this connection
      await db!.tx(releaseAllHoldsIn);
      floats?.reset();
    },
    async close() {
      await workers?.stop();
      await floats?.close();
      if (db?.mode === 'workers' && pool) {
        // Every call of this worker has ended (the runtime closed before its storage): whatever hold or float of it is
        // still in the table is stale (a float whose row and memory parted) and goes now, not at the next sweep of
        // another worker, which may never come when the last worker stops.
        await db.tx((q) => releaseHoldsOfWorkers(q, [db!.workerId])).catch(() => undefined);
      }
      runnerClient?.release();
      runnerClient = undefined;
      await pool?.end();
      pool = undefined;
    },
    sharedLocation: () => null,
    // Replaced by the stores in init(); here so that AgentRuntime.open(), which checks for it before init(), sees an adapter.
    async commitStep(): Promise<never> {
      throw new AgentryError('invalid_state', 'postgresStorage: init() has not run');
    },
  };
  return adapter as unknown as StorageAdapter;
}
