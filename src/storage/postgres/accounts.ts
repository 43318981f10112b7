/**
 * @module storage/postgres/accounts
 * Accounts, the credit ledger, reservations (holds), API keys and idempotency keys on PostgreSQL. Unlike SQLite,
 * which keeps holds in its one process, holds here are rows (`reservations`), mirrored as sums on the account
 * (`reserved`) and on the tree's root (`agents.tree_reserved`), so every process sharing the database sees them.
 *
 * Lock order, wherever several are taken: reservation row, then account, then agents (root before the spending
 * agent). `db.tx` retries the rare deadlock that a caller taking another order (a step commit locking its agent
 * first) can still cause.
 */
import type {
  AccountRow,
  ApiKeyRow,
  ConsoleSessionRow,
  IdempotencyRecord,
  LedgerPageRow,
  LedgerRow,
  LedgerSpendRow,
  ReservationRefusal,
  ReservationRequest,
  StorageAdapter,
} from '../adapter.js';
import type { Db, Query } from './db.js';

const ACCOUNT_COLUMNS = 'id, name, subscription_active, balance, reserved, created_at';
const LEDGER_COLUMNS =
  'account_id, agent_id, kind, item, tokens_in, tokens_out, amount, created_at, tokens_cache_write, tokens_cache_read, ' +
  'latency_ms';
/**
 * An agent's ledger rows newest first, up to $2: a backward range scan of the `(agent_id, seq)` index of migration 11.
 * Exported for the test that checks the plan.
 */
export const AGENT_LEDGER_NEWEST = `SELECT ${LEDGER_COLUMNS} FROM ledger WHERE agent_id = $1 ORDER BY seq DESC LIMIT $2`;
/** A page of an account's ledger newest first, below a seq: a backward range scan of `ledger_account` (migration 1). */
export const LEDGER_PAGE = `SELECT seq, ${LEDGER_COLUMNS} FROM ledger WHERE account_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3`;
/** The credits page's totals: one aggregate over the account's rows, found through `ledger_account`. */
const LEDGER_SPEND =
  'SELECT kind, item, SUM(amount)::bigint AS amount, SUM(tokens_in)::bigint AS tokens_in, ' +
  'SUM(tokens_out)::bigint AS tokens_out, COUNT(*) AS count FROM ledger ' +
  "WHERE account_id = $1 AND kind IN ('model', 'tool') AND item IS NOT NULL GROUP BY kind, item";
const API_KEY_COLUMNS = 'id, account_id, name, hash, last4, created_at';

/**
 * A row type as `Query` wants it (pg's QueryResultRow). The columns come back in the row's shape already: BIGINT as a
 * number, BOOLEAN as a boolean.
 */
type Rows<T> = T & Record<string, unknown>;

async function insertLedger(q: Query, e: LedgerRow): Promise<void> {
  await q(`INSERT INTO ledger (${LEDGER_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`, [
    e.account_id,
    e.agent_id,
    e.kind,
    e.item,
    e.tokens_in,
    e.tokens_out,
    e.amount,
    e.created_at,
    e.tokens_cache_write ?? 0,
    e.tokens_cache_read ?? 0,
    e.latency_ms ?? null,
  ]);
}

/** A hold's amount taken off the sums that mirror it (its account and its tree's root, where they exist). */
async function unmirrorHold(q: Query, hold: Pick<ReservationRequest, 'account_id' | 'root_id' | 'amount'>) {
  await q('UPDATE accounts SET reserved = reserved - $2 WHERE id = $1', [hold.account_id, hold.amount]);
  await q('UPDATE agents SET tree_reserved = tree_reserved - $2 WHERE agent_id = $1', [hold.root_id, hold.amount]);
}

/** Drops one hold, if it is still there. */
async function dropReservation(q: Query, reservationId: string): Promise<void> {
  const [hold] = await q<Rows<ReservationRequest>>(
    'DELETE FROM reservations WHERE id = $1 RETURNING account_id, root_id, amount',
    [reservationId],
  );
  if (hold) await unmirrorHold(q, hold);
}

/**
 * Deletes the holds `where` selects (a condition on `reservations r`, with `params`) and takes their amounts off the
 * sums that mirror them; returns how many. Ordered by id so that two callers dropping overlapping holds lock them in
 * the same order. A float (credit-float.ts) has an empty root, so only its account's sum changes.
 */
async function dropHoldsWhere(q: Query, where: string, params: unknown[]): Promise<number> {
  const holds = await q<Rows<ReservationRequest>>(
    `DELETE FROM reservations WHERE id IN (
       SELECT r.id FROM reservations r WHERE ${where} ORDER BY r.id FOR UPDATE
     ) RETURNING account_id, root_id, amount`,
    params,
  );
  if (holds.length > 0) {
    // One statement per table, whatever the number of holds: their sums come off their accounts, then their roots.
    await q(
      `UPDATE accounts a SET reserved = a.reserved - t.amount
       FROM (SELECT id, sum(amount)::bigint AS amount FROM unnest($1::text[], $2::bigint[]) AS u(id, amount) GROUP BY id) t
       WHERE a.id = t.id`,
      [holds.map((h) => h.account_id), holds.map((h) => h.amount)],
    );
    await q(
      `UPDATE agents a SET tree_reserved = a.tree_reserved - t.amount
       FROM (SELECT id, sum(amount)::bigint AS amount FROM unnest($1::text[], $2::bigint[]) AS u(id, amount) GROUP BY id) t
       WHERE a.agent_id = t.id`,
      [holds.map((h) => h.root_id), holds.map((h) => h.amount)],
    );
  }
  return holds.length;
}

/**
 * SQL: the hold `r` belongs to no live worker other than this one (`me`, a parameter like `$2`). A worker is live while
 * its `workers` row is not `stopped` and its heartbeat is younger than the gone-worker grace (`goneAfterMs`, database time). A hold
 * without a worker (taken by an exclusive-mode runner, or before migration 5) and one whose worker has no row (the
 * sweeper deleted it) belong to nobody live: a worker registers its row before it takes holds.
 */
const notOfAnotherLiveWorker = (me: string, goneAfterMs: string) => `(r.worker_id IS NULL OR r.worker_id = ${me} OR
  NOT EXISTS (SELECT 1 FROM workers w WHERE w.worker_id = r.worker_id AND NOT w.stopped
    AND w.heartbeat_at >= now() - ${goneAfterMs}::bigint * interval '1 millisecond'))`;

/**
 * Drops holds of these agents inside the caller's transaction; returns how many. Without `scope` every hold of them
 * (deleting a tree: its holds go whoever took them). With `scope` (workers mode) only the holds of this worker and of
 * workers that are gone: another live worker's holds are its calls in flight, which it settles or releases itself.
 */
export async function releaseAgentReservationsIn(
  q: Query,
  agentIds: readonly string[],
  scope?: { workerId: string; goneAfterMs: number },
): Promise<number> {
  if (agentIds.length === 0) return 0;
  if (!scope) return dropHoldsWhere(q, 'r.agent_id = ANY($1::text[])', [[...agentIds]]);
  return dropHoldsWhere(q, `r.agent_id = ANY($1::text[]) AND ${notOfAnotherLiveWorker('$2', '$3')}`, [
    [...agentIds],
    scope.workerId,
    scope.goneAfterMs,
  ]);
}

/**
 * For the sweeper, in its transaction: drops every hold and every float (`float:<worker>:<account>`) of these gone
 * workers, taking their amounts off `accounts.reserved` and `agents.tree_reserved`. Returns how many rows went.
 */
export async function releaseHoldsOfWorkers(q: Query, workerIds: string[]): Promise<number> {
  if (workerIds.length === 0) return 0;
  return dropHoldsWhere(q, 'r.worker_id = ANY($1::text[])', [workerIds]);
}

/**
 * For every sweep, in its transaction: drops the holds whose worker has no `workers` row (not this worker's own). A
 * worker registers its row before it takes holds and the sweeper deletes the row with the holds, so these were taken
 * by a statement that committed after the sweep of its (dead) worker. Returns how many rows went.
 */
export async function releaseOrphanHoldsIn(q: Query, workerId: string): Promise<number> {
  return dropHoldsWhere(
    q,
    `r.worker_id IS NOT NULL AND r.worker_id <> $1
       AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.worker_id = r.worker_id)`,
    [workerId],
  );
}

/**
 * What a worker does at startup in workers mode, instead of {@link releaseAllHoldsIn}: drops the holds that belong to
 * no live worker (see notOfAnotherLiveWorker: untagged ones, and those of gone workers that no sweeper has
 * cleaned up yet). Nothing of a live worker is touched. Returns how many rows went.
 */
export async function releaseHoldsOfGoneWorkersIn(q: Query, workerId: string, goneAfterMs: number): Promise<number> {
  // This worker's own holds are left too: it has just started and has none, unless it is running already.
  return dropHoldsWhere(q, `r.worker_id IS DISTINCT FROM $1 AND ${notOfAnotherLiveWorker('$1', '$2')}`, [
    workerId,
    goneAfterMs,
  ]);
}

type AccountsStore = Pick<
  StorageAdapter,
  | 'createAccount'
  | 'getAccount'
  | 'listAccounts'
  | 'setSubscription'
  | 'addCredits'
  | 'listLedger'
  | 'listAgentLedger'
  | 'listLedgerPage'
  | 'sumLedgerSpend'
  | 'reserve'
  | 'release'
  | 'releaseAgentReservations'
  | 'settle'
  | 'insertApiKey'
  | 'listApiKeys'
  | 'deleteApiKey'
  | 'findApiKeyByHash'
  | 'findAccountByKeyHash'
  | 'touchApiKey'
  | 'putConsoleSession'
  | 'getConsoleSession'
  | 'deleteExpiredConsoleSessions'
  | 'listLiveConsoleSessions'
  | 'apiKeysLastUsed'
  | 'getIdempotency'
  | 'putIdempotency'
>;

export function accountsStore(db: Db): AccountsStore {
  const one = async <T>(sql: string, params: unknown[]): Promise<T | null> =>
    ((await db.q<Rows<T>>(sql, params))[0] as T | undefined) ?? null;

  return {
    async createAccount(a) {
      await db.tx(async (q) => {
        // A second account with the same id fails here on the primary key, before any ledger row.
        await q(
          'INSERT INTO accounts (id, name, subscription_active, balance, reserved, created_at) VALUES ($1, $2, $3, $4, 0, $5)',
          [a.id, a.name, a.subscription_active, a.balance, a.created_at],
        );
        if (a.balance > 0) {
          await insertLedger(q, {
            account_id: a.id,
            agent_id: null,
            kind: 'topup',
            item: null,
            tokens_in: 0,
            tokens_out: 0,
            amount: a.balance,
            created_at: a.created_at,
          });
        }
      });
    },

    getAccount: (id) => one<AccountRow>(`SELECT ${ACCOUNT_COLUMNS} FROM accounts WHERE id = $1`, [id]),

    listAccounts: () => db.q<Rows<AccountRow>>(`SELECT ${ACCOUNT_COLUMNS} FROM accounts ORDER BY seq`),

    setSubscription: (id, active) =>
      one<AccountRow>(`UPDATE accounts SET subscription_active = $2 WHERE id = $1 RETURNING ${ACCOUNT_COLUMNS}`, [
        id,
        active,
      ]),

    addCredits: (entry) =>
      db.tx(async (q) => {
        const [account] = await q<Rows<AccountRow>>(
          `UPDATE accounts SET balance = balance + $2 WHERE id = $1 RETURNING ${ACCOUNT_COLUMNS}`,
          [entry.account_id, entry.amount],
        );
        if (!account) return null;
        await insertLedger(q, entry);
        return account;
      }),

    listLedger: (accountId) =>
      db
        .q<Rows<LedgerRow>>(`SELECT ${LEDGER_COLUMNS} FROM ledger WHERE account_id = $1 ORDER BY seq`, [accountId])
        .then((rows) => rows.map(ledgerRowOf)),

    // Newest first with one row past the limit (which says whether older rows were left out), then oldest first.
    listAgentLedger: async (agentId, limit) => {
      const newest = await db.q<Rows<LedgerRow>>(AGENT_LEDGER_NEWEST, [agentId, limit + 1]);
      return { rows: newest.slice(0, limit).reverse().map(ledgerRowOf), truncated: newest.length > limit };
    },

    // One row past the limit says whether there is an older page.
    listLedgerPage: async (accountId, { limit, before }) => {
      const newest = await db.q<Rows<LedgerPageRow>>(LEDGER_PAGE, [
        accountId,
        before ?? Number.MAX_SAFE_INTEGER,
        limit + 1,
      ]);
      const rows = newest.slice(0, limit).map((r) => ledgerRowOf(r) as LedgerPageRow);
      return { rows, next_before: newest.length > limit ? rows[rows.length - 1]!.seq : null };
    },

    sumLedgerSpend: (accountId) => db.q<Rows<LedgerSpendRow>>(LEDGER_SPEND, [accountId]),

    // One round trip: agentry_reserve (a server function: migrations/) checks the account's available balance and the tree's cap and makes the hold on the server, atomic as one statement.
    // The hold is tagged with this worker, so that only it (or, once it is gone, the sweeper) drops it.
    reserve: async (request) =>
      (
        await db.q<{ refusal: ReservationRefusal | null }>('SELECT agentry_reserve($1::jsonb) AS refusal', [
          JSON.stringify({ ...request, worker_id: db.workerId }),
        ])
      )[0]?.refusal ?? null,

    release: (reservationId) => db.tx((q) => dropReservation(q, reservationId)),

    releaseAgentReservations: (agentIds) =>
      db.tx((q) =>
        releaseAgentReservationsIn(
          q,
          agentIds,
          db.mode === 'workers' ? { workerId: db.workerId, goneAfterMs: db.goneAfterMs } : undefined,
        ),
      ),

    settle: async (settlements) =>
      (
        await db.q<{ charged: number[] }>('SELECT agentry_settle_all($1::jsonb) AS charged', [
          JSON.stringify(settlements),
        ])
      )[0]!.charged,

    async insertApiKey(k) {
      // An upsert, as in SQLite: a key written again keeps its place in the account's list.
      await db.q(
        `INSERT INTO api_keys (${API_KEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (id) DO UPDATE SET account_id = excluded.account_id, name = excluded.name, hash = excluded.hash,
           last4 = excluded.last4, created_at = excluded.created_at`,
        [k.id, k.account_id, k.name, k.hash, k.last4, k.created_at],
      );
    },

    listApiKeys: (accountId) =>
      db.q<Rows<ApiKeyRow>>(`SELECT ${API_KEY_COLUMNS} FROM api_keys WHERE account_id = $1 ORDER BY seq`, [accountId]),

    async deleteApiKey(accountId, keyId) {
      const deleted = await db.q('DELETE FROM api_keys WHERE id = $1 AND account_id = $2 RETURNING id', [
        keyId,
        accountId,
      ]);
      return deleted.length > 0;
    },

    async touchApiKey(hash, at) {
      await db.q(
        'UPDATE api_keys SET last_used_at = $1 WHERE hash = $2 AND (last_used_at IS NULL OR last_used_at < $1)',
        [at, hash],
      );
    },

    async apiKeysLastUsed(accountId) {
      const rows = await db.q<{ id: string; last_used_at: string }>(
        'SELECT id, last_used_at FROM api_keys WHERE account_id = $1 AND last_used_at IS NOT NULL',
        [accountId],
      );
      return Object.fromEntries(rows.map((r) => [r.id, r.last_used_at]));
    },

    findApiKeyByHash: (hash) => one<ApiKeyRow>(`SELECT ${API_KEY_COLUMNS} FROM api_keys WHERE hash = $1`, [hash]),

    findAccountByKeyHash: (hash) =>
      one<AccountRow>(
        `SELECT a.id, a.name, a.subscription_active, a.balance, a.reserved, a.created_at
         FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE k.hash = $1`,
        [hash],
      ),

    async putConsoleSession(r) {
      await db.q(
        `INSERT INTO console_sessions (id_hash, account_id, key_hash, key_id, expires_at, ended)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (id_hash) DO UPDATE SET account_id = excluded.account_id, key_hash = excluded.key_hash,
           key_id = excluded.key_id, expires_at = excluded.expires_at, ended = excluded.ended`,
        [r.id_hash, r.account_id, r.key_hash, r.key_id, r.expires_at, r.ended],
      );
    },

    getConsoleSession: (idHash) =>
      one<ConsoleSessionRow>(
        'SELECT id_hash, account_id, key_hash, key_id, expires_at, ended FROM console_sessions WHERE id_hash = $1',
        [idHash],
      ),

    listLiveConsoleSessions: (accountId, now) =>
      db.q<ConsoleSessionRow>(
        `SELECT id_hash, account_id, key_hash, key_id, expires_at, ended FROM console_sessions
         WHERE account_id = $1 AND ended IS NULL AND expires_at > $2 ORDER BY expires_at`,
        [accountId, now],
      ),
    async deleteExpiredConsoleSessions(now) {
      return (await db.q('DELETE FROM console_sessions WHERE expires_at < $1 RETURNING id_hash', [now])).length;
    },

    getIdempotency: (accountId, key) =>
      one<IdempotencyRecord>(
        'SELECT account_id, key, request_hash, response, status, created_at FROM idempotency_keys WHERE account_id = $1 AND key = $2',
        [accountId, key],
      ),

    async putIdempotency(r) {
      // The first record of a key wins: a retried request must get the first answer again.
      await db.q(
        `INSERT INTO idempotency_keys (account_id, key, request_hash, response, status, created_at)
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (account_id, key) DO NOTHING`,
        [r.account_id, r.key, r.request_hash, r.response, r.status, r.created_at],
      );
    },
  };
}

/**
 * Drops every hold, for the process that has just taken the runner lock: only the runner takes holds, so any hold in
 * the table then was taken by a runner that died (SIGKILL, power loss) and would strand its credits otherwise. SQLite
 * gets the same by keeping holds in its process's memory.
 */
export async function releaseAllHoldsIn(q: Query): Promise<number> {
  const dropped = await q<{ n: number }>(
    'WITH d AS (DELETE FROM reservations RETURNING 1) SELECT count(*)::bigint AS n FROM d',
  );
  await q('UPDATE accounts SET reserved = 0 WHERE reserved <> 0');
  await q('UPDATE agents SET tree_reserved = 0 WHERE tree_reserved <> 0');
  return dropped[0]?.n ?? 0;
}

/** A ledger row as the adapter contract has it: the prompt-cache token counts only where they are not 0. */
function ledgerRowOf(row: LedgerRow): LedgerRow {
  const { tokens_cache_write: write, tokens_cache_read: read, latency_ms: latency, ...rest } = row;
  return {
    ...rest,
    ...(write ? { tokens_cache_write: write } : {}),
    ...(read ? { tokens_cache_read: read } : {}),
    ...(typeof latency === 'number' ? { latency_ms: latency } : {}),
  };
}
