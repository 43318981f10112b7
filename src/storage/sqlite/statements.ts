/**
 * @module storage/sqlite/statements
 * What both of the SQLite storage's connections share: the prepared statements, the row shapes SQLite returns and
 * their conversions to the adapter's rows, and how a connection is opened. The runtime's thread reads through one
 * connection; the writer (see writer.ts) writes through another, usually on a thread of its own.
 */
import { chmodSync, closeSync, constants, fstatSync, fchmodSync, openSync } from 'node:fs';
import Database from 'better-sqlite3';
import type {
  AccountRow,
  AgentRow,
  ApiKeyRow,
  ConsoleSessionRow,
  ArtifactRow,
  IdempotencyRecord,
  LedgerRow,
  MessageRow,
  PageReadRow,
  StatusChange,
  StatusMarkRow,
  StepCommit,
  ToolCallRow,
  TurnRow,
} from '../adapter.js';
import type { AgentStatus } from '../../base/status.js';
import type { TreeTotalsGroup } from '../tree-totals.js';

/**
 * Opens a connection with the storage's settings: WAL (readers never wait for the writer), `synchronous=NORMAL`
 * (a commit is durable once the WAL is synced at a checkpoint; a power loss can lose the last commits, a process crash
 * cannot), and a busy timeout for the write lock.
 */
export function openConnection(path: string, busyTimeoutMs: number, readonly = false): Database.Database {
  // A reader needs none of the settings below: WAL is a property of the file, set by the writer.
  if (readonly) return new Database(path, { timeout: busyTimeoutMs, readonly: true, fileMustExist: true });
  makePrivate(path);
  const db = new Database(path, { timeout: busyTimeoutMs });
  try {
    // Free pages can go back to the file system (retention's incremental_vacuum). It takes effect only on a database
    // with no tables yet; an older one is converted by `agentry gc` (a VACUUM).
    db.pragma('auto_vacuum = INCREMENTAL');
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    // Checkpoint every ~40 MB of WAL rather than every 4 MB: a busy runtime commits often, and each checkpoint
    // copies pages back into the database file and syncs it.
    db.pragma('wal_autocheckpoint = 10000');
    // The goal search's exact check (index.ts, searchGoals): V8's substring search is linear on the text, where
    // SQLite's instr() compares the whole needle at every position (200 × 4,096 steps a row for a crafted needle).
    db.function('agentry_contains', { deterministic: true }, (text: unknown, needle: unknown) =>
      typeof text === 'string' && typeof needle === 'string' && text.includes(needle) ? 1 : 0,
    );
  } catch (err) {
    db.close();
    throw err;
  }
  return db;
}

/**
 * Creates the database file owner-only (0600) before SQLite opens it, or takes group and other access away from one
 * that exists: it holds every tenant's transcripts and artifacts. SQLite gives the `-wal` and `-shm` files the mode of
 * the database file, so they follow; ones left by an earlier run are tightened too. In-memory and `file:` URI paths
 * are left to SQLite.
 */
export function makePrivate(path: string): void {
  if (path === '' || path === ':memory:' || path.startsWith('file:')) return;
  const fd = openSync(path, constants.O_RDWR | constants.O_CREAT, 0o600);
  try {
    if ((fstatSync(fd).mode & 0o077) !== 0) fchmodSync(fd, 0o600);
  } finally {
    closeSync(fd);
  }
  for (const suffix of ['-wal', '-shm']) {
    try {
      chmodSync(`${path}${suffix}`, 0o600);
    } catch {
      // not there: SQLite creates it with the database's mode
    }
  }
}

// Rows as SQLite returns them: booleans are INTEGER 0/1.
export type Flag = 0 | 1;
export type AccountRecord = Omit<AccountRow, 'subscription_active'> & { subscription_active: Flag };
/**
 * An agent read in raw mode: `seq` then the columns of {@link AGENT_COLUMNS}, in order. Arrays, not objects, because
 * better-sqlite3 builds a 26-key object per row about 2.5 times slower (it shows on 10,000-child listings).
 */
export type AgentTuple = [
  seq: number,
  agent_id: string,
  account_id: string,
  parent_id: string | null,
  root_id: string,
  spawn_key: string | null,
  goal: string,
  model: string,
  status: AgentStatus,
  progress: number,
  status_message: string,
  token_count: number,
  message_count: number,
  credits_spent: number,
  sub_agent_count: number,
  max_credits: number | null,
  tree_spent: number,
  tree_reserved: number,
  step_count: number,
  started: Flag,
  active_ms: number,
  active_since: string | null,
  plan: string | null,
  spec: string | null,
  created_at: string,
  updated_at: string,
  trace_context: string | null,
];
export type ToolCallRecord = Omit<ToolCallRow, 'idempotent' | 'is_error'> & { idempotent: Flag; is_error: Flag };
export type Bind = string | number | null | Uint8Array;
/** The part of a prepared statement the storage uses (better-sqlite3's own type cannot be named in declarations). */
export interface Stmt<R = unknown> {
  run(...params: Bind[]): Database.RunResult;
  get(...params: Bind[]): R | undefined;
  all(...params: Bind[]): R[];
}

export const flag = (value: boolean): Flag => (value ? 1 : 0);

export const toAccount = (r: AccountRecord): AccountRow => ({
  id: r.id,
  name: r.name,
  subscription_active: r.subscription_active === 1,
  balance: r.balance,
  reserved: r.reserved,
  created_at: r.created_at,
});

export const toAgent = ([
  ,
  agent_id,
  account_id,
  parent_id,
  root_id,
  spawn_key,
  goal,
  model,
  status,
  progress,
  status_message,
  token_count,
  message_count,
  credits_spent,
  sub_agent_count,
  max_credits,
  tree_spent,
  tree_reserved,
  step_count,
  started,
  active_ms,
  active_since,
  plan,
  spec,
  created_at,
  updated_at,
  trace_context,
]: AgentTuple): AgentRow => ({
  agent_id,
  account_id,
  parent_id,
  root_id,
  spawn_key,
  goal,
  model,
  status,
  progress,
  status_message,
  token_count,
  message_count,
  credits_spent,
  sub_agent_count,
  max_credits,
  tree_spent,
  tree_reserved,
  step_count,
  started: started === 1,
  active_ms,
  active_since,
  plan,
  spec,
  created_at,
  updated_at,
  trace_context,
});

export const toToolCall = (r: ToolCallRecord): ToolCallRow => ({
  agent_id: r.agent_id,
  tool_use_id: r.tool_use_id,
  turn_idx: r.turn_idx,
  name: r.name,
  input: r.input,
  status: r.status,
  idempotent: r.idempotent === 1,
  result: r.result,
  is_error: r.is_error === 1,
  updated_at: r.updated_at,
});

export const AGENT_COLUMNS =
  'agent_id, account_id, parent_id, root_id, spawn_key, goal, model, status, progress, status_message, token_count, ' +
  'message_count, credits_spent, sub_agent_count, max_credits, tree_spent, tree_reserved, step_count, started, ' +
  'active_ms, active_since, plan, spec, created_at, updated_at, trace_context';
export const SELECT_AGENTS = `SELECT seq, ${AGENT_COLUMNS} FROM agents`;
export const TOOL_CALL_COLUMNS =
  'agent_id, tool_use_id, turn_idx, name, input, status, idempotent, result, is_error, updated_at';
export const TOOL_CALL_UPSERT =
  'ON CONFLICT (agent_id, tool_use_id) DO UPDATE SET turn_idx = excluded.turn_idx, name = excluded.name, ' +
  'input = excluded.input, status = excluded.status, idempotent = excluded.idempotent, result = excluded.result, ' +
  'is_error = excluded.is_error, updated_at = excluded.updated_at';
export const DESCENDANTS =
  'WITH RECURSIVE tree(id) AS (SELECT c.agent_id FROM agents p JOIN agents c ON c.parent_id = p.agent_id ' +
  'WHERE p.agent_id = ? UNION SELECT a.agent_id FROM agents a JOIN tree ON a.parent_id = tree.id) SELECT id FROM tree';
/**
 * Each given agent's tree summed by status: a recursive walk down the `agents_parent` index from every seed at once,
 * carrying the columns it sums so that each agent row is read once.
 */
export const TREE_TOTALS =
  'WITH RECURSIVE tree(top, id, status, tokens, spent, created, updated) AS (' +
  'SELECT agent_id, agent_id, status, token_count, credits_spent, created_at, updated_at FROM agents ' +
  'WHERE agent_id IN (SELECT value FROM json_each(?)) ' +
  'UNION ALL SELECT tree.top, a.agent_id, a.status, a.token_count, a.credits_spent, a.created_at, a.updated_at ' +
  'FROM agents a JOIN tree ON a.parent_id = tree.id) ' +
  'SELECT tree.top AS top, a.account_id AS account_id, tree.status AS status, count(*) AS n, ' +
  'sum(tree.tokens) AS tokens, sum(tree.spent) AS spent, min(tree.created) AS first, max(tree.updated) AS last ' +
  'FROM tree JOIN agents a ON a.agent_id = tree.top GROUP BY tree.top, tree.status';
export const ARTIFACT_COLUMNS = 'artifact_id, agent_id, account_id, name, mime_type, size, created_at';
export const PAGE_READ_COLUMNS = 'agent_id, tool_use_id, url, final_url, title, content_sha256, retrieved_at';
/** Binds a JSON array of ids as a set: `x IN ${ID_SET}`. */
export const ID_SET = '(SELECT value FROM json_each(?))';

export function prepareStatements(db: Database.Database) {
  const p = <R = unknown>(sql: string): Stmt<R> => db.prepare<Bind[], R>(sql);
  // Statements read as single values (pluck) or as arrays (raw).
  const pluck = <R>(sql: string): Stmt<R> => db.prepare<Bind[], R>(sql).pluck() as unknown as Stmt<R>;
  const raw = <R>(sql: string): Stmt<R> => db.prepare<Bind[], R>(sql).raw() as unknown as Stmt<R>;
  return {
    insertAccount: p(
      'INSERT INTO accounts (id, name, subscription_active, balance, reserved, created_at) VALUES (?, ?, ?, ?, 0, ?)',
    ),
    accountExists: pluck<number>('SELECT 1 FROM accounts WHERE id = ?'),
    getAccount: p<AccountRecord>('SELECT * FROM accounts WHERE id = ?'),
    listAccounts: p<AccountRecord>('SELECT * FROM accounts ORDER BY rowid'),
    setSubscription: p<AccountRecord>('UPDATE accounts SET subscription_active = ? WHERE id = ? RETURNING *'),
    addBalance: p<AccountRecord>('UPDATE accounts SET balance = balance + ? WHERE id = ? RETURNING *'),
    debit: p('UPDATE accounts SET balance = balance - ? WHERE id = ?'),
    available: p<{ balance: number; reserved: number }>('SELECT balance, reserved FROM accounts WHERE id = ?'),
    insertLedger: p(
      'INSERT INTO ledger (account_id, agent_id, kind, item, tokens_in, tokens_out, amount, created_at, ' +
        'tokens_cache_write, tokens_cache_read, latency_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
    ),
    listLedger: p<LedgerRow>(
      'SELECT account_id, agent_id, kind, item, tokens_in, tokens_out, amount, created_at, tokens_cache_write, ' +
        'tokens_cache_read, latency_ms FROM ledger WHERE account_id = ? ORDER BY seq',
    ),
    // Newest first, so that LIMIT keeps the newest rows: a backward range scan of ledger_agent (migration 10).
    listAgentLedgerNewest: p<LedgerRow>(
      'SELECT account_id, agent_id, kind, item, tokens_in, tokens_out, amount, created_at, tokens_cache_write, ' +
        'tokens_cache_read, latency_ms FROM ledger WHERE agent_id = ? ORDER BY seq DESC LIMIT ?',
    ),
    // Status marks (migration 11): the newest MAX_STATUS_MARKS of an agent are kept, older ones go as one is added.
    insertStatusMark: p('INSERT INTO status_marks (agent_id, at, status, previous, message) VALUES (?, ?, ?, ?, ?)'),
    trimStatusMarks: p(
      'DELETE FROM status_marks WHERE agent_id = ? AND seq <= ' +
        '(SELECT seq FROM status_marks WHERE agent_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)',
    ),
    listStatusMarks: p<StatusMarkRow>(
      'SELECT agent_id, at, status, previous, message FROM status_marks WHERE agent_id = ? ORDER BY seq',
    ),
    deleteStatusMarksOf: p(`DELETE FROM status_marks WHERE agent_id IN ${ID_SET}`),
    // A page of the account's ledger, newest first from below a seq: a backward range scan of ledger_account.
    listLedgerPage: p<LedgerRow & { seq: number }>(
      'SELECT seq, account_id, agent_id, kind, item, tokens_in, tokens_out, amount, created_at, tokens_cache_write, ' +
        'tokens_cache_read, latency_ms FROM ledger WHERE account_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?',
    ),
    // The credits page's totals: one aggregate over the account's rows (found through ledger_account).
    sumLedgerSpend: p<{
      kind: 'model' | 'tool';
      item: string;
      amount: number;
      tokens_in: number;
      tokens_out: number;
      count: number;
    }>(
      'SELECT kind, item, SUM(amount) AS amount, SUM(tokens_in) AS tokens_in, SUM(tokens_out) AS tokens_out, ' +
        "COUNT(*) AS count FROM ledger WHERE account_id = ? AND kind IN ('model', 'tool') AND item IS NOT NULL " +
        'GROUP BY kind, item',
    ),

    treeBudget: p<{ max_credits: number | null; tree_spent: number; tree_reserved: number }>(
      'SELECT max_credits, tree_spent, tree_reserved FROM agents WHERE agent_id = ?',
    ),
    addTreeSpent: p('UPDATE agents SET tree_spent = tree_spent + ? WHERE agent_id = ?'),
    addCreditsSpent: p('UPDATE agents SET credits_spent = credits_spent + ? WHERE agent_id = ?'),

    upsertApiKey: p(
      'INSERT INTO api_keys (id, account_id, name, hash, last4, created_at) VALUES (?, ?, ?, ?, ?, ?) ' +
        'ON CONFLICT (id) DO UPDATE SET account_id = excluded.account_id, name = excluded.name, ' +
        'hash = excluded.hash, last4 = excluded.last4, created_at = excluded.created_at',
    ),
    listApiKeys: p<ApiKeyRow>(
      'SELECT id, account_id, name, hash, last4, created_at FROM api_keys WHERE account_id = ? ORDER BY rowid',
    ),
    deleteApiKey: p('DELETE FROM api_keys WHERE id = ? AND account_id = ?'),
    touchApiKey: p(
      'UPDATE api_keys SET last_used_at = ? WHERE hash = ? AND (last_used_at IS NULL OR last_used_at < ?)',
    ),
    putConsoleSession: p(
      'INSERT INTO console_sessions (id_hash, account_id, key_hash, key_id, expires_at, ended) VALUES (?, ?, ?, ?, ?, ?) ' +
        'ON CONFLICT (id_hash) DO UPDATE SET account_id = excluded.account_id, key_hash = excluded.key_hash, ' +
        'key_id = excluded.key_id, expires_at = excluded.expires_at, ended = excluded.ended',
    ),
    getConsoleSession: p<ConsoleSessionRow>(
      'SELECT id_hash, account_id, key_hash, key_id, expires_at, ended FROM console_sessions WHERE id_hash = ?',
    ),
    deleteExpiredConsoleSessions: p('DELETE FROM console_sessions WHERE expires_at < ?'),
    listLiveConsoleSessions: p<ConsoleSessionRow>(
      'SELECT id_hash, account_id, key_hash, key_id, expires_at, ended FROM console_sessions ' +
        'WHERE account_id = ? AND ended IS NULL AND expires_at > ? ORDER BY expires_at',
    ),
    apiKeysLastUsed: p<{ id: string; last_used_at: string }>(
      'SELECT id, last_used_at FROM api_keys WHERE account_id = ? AND last_used_at IS NOT NULL',
    ),
    apiKeyByHash: p<ApiKeyRow>('SELECT id, account_id, name, hash, last4, created_at FROM api_keys WHERE hash = ?'),
    accountByKeyHash: p<AccountRecord>(
      'SELECT a.* FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE k.hash = ?',
    ),

    agentExists: pluck<number>('SELECT 1 FROM agents WHERE agent_id = ?'),
    agentStatus: pluck<AgentStatus>('SELECT status FROM agents WHERE agent_id = ?'),
    // Changes whenever another connection commits; this connection's own commits leave it alone.
    dataVersion: pluck<number>('PRAGMA data_version'),
    getAgent: raw<AgentTuple>(`${SELECT_AGENTS} WHERE agent_id = ?`),
    agentHead: p<{ status: AgentStatus; parent_id: string | null; next_idx: number }>(
      'SELECT status, parent_id, (SELECT coalesce(max(idx) + 1, 0) FROM turns WHERE agent_id = a.agent_id) AS next_idx ' +
        'FROM agents a WHERE agent_id = ?',
    ),
    addSubAgents: p('UPDATE agents SET sub_agent_count = sub_agent_count + ? WHERE agent_id = ?'),
    // A step's patch in one statement that checks, writes and reads back: increments in SQL, the turn-order check in
    // the WHERE clause (the log's length must be the first new turn's idx; null skips it). No row: the agent is gone,
    // or the turns do not continue its log.
    patchAgent: raw<AgentTuple>(
      'UPDATE agents SET progress = coalesce(?, progress), status_message = coalesce(?, status_message), ' +
        'plan = CASE WHEN ? THEN ? ELSE plan END, token_count = token_count + ?, message_count = message_count + ?, ' +
        'step_count = step_count + ?, credits_spent = credits_spent + ?, updated_at = ? ' +
        'WHERE agent_id = ? AND (? IS NULL OR ' +
        '(SELECT coalesce(max(t.idx) + 1, 0) FROM turns t WHERE t.agent_id = agents.agent_id) = ?) ' +
        `RETURNING seq, ${AGENT_COLUMNS}`,
    ),
    // A step's patch and its status change in one statement, for the common case of one `from` status (an agent's
    // final step: its answer and COMPLETED). Every SET expression sees the row before the update, so `status = ?` tells
    // each of them whether the change applies; where it does, the change's own fields win over the patch's. A row
    // already in the target status is left alone (no row back), so a returned row is in the target status exactly
    // when the change applied; the caller then takes the two-statement path, which also tells "gone" from "out of
    // order".
    patchAgentWithStatus: raw<AgentTuple>(
      'UPDATE agents SET status = CASE WHEN status = ? THEN ? ELSE status END, ' +
        'progress = CASE WHEN status = ? AND ? IS NOT NULL THEN ? ELSE coalesce(?, progress) END, ' +
        'status_message = CASE WHEN status = ? AND ? IS NOT NULL THEN ? ELSE coalesce(?, status_message) END, ' +
        'started = CASE WHEN status = ? AND ? IS NOT NULL THEN ? ELSE started END, ' +
        'active_ms = CASE WHEN status = ? AND ? IS NOT NULL THEN ? ELSE active_ms END, ' +
        'active_since = CASE WHEN status = ? AND ? THEN ? ELSE active_since END, ' +
        'plan = CASE WHEN ? THEN ? ELSE plan END, token_count = token_count + ?, message_count = message_count + ?, ' +
        'step_count = step_count + ?, credits_spent = credits_spent + ?, updated_at = ? ' +
        'WHERE agent_id = ? AND status <> ? AND (? IS NULL OR ' +
        '(SELECT coalesce(max(t.idx) + 1, 0) FROM turns t WHERE t.agent_id = agents.agent_id) = ?) ' +
        `RETURNING seq, ${AGENT_COLUMNS}`,
    ),
    // A status change in one statement: applied only while the status is one of `from` (8 slots, padded with NULL,
    // which matches nothing), with the change's own fields; answers the changed row, or none.
    changeAgentStatus: raw<AgentTuple>(
      'UPDATE agents SET status = ?, progress = coalesce(?, progress), status_message = coalesce(?, status_message), ' +
        'started = coalesce(?, started), active_ms = coalesce(?, active_ms), ' +
        'active_since = CASE WHEN ? THEN ? ELSE active_since END, updated_at = coalesce(?, updated_at) ' +
        'WHERE agent_id = ? AND status IN (?, ?, ?, ?, ?, ?, ?, ?) ' +
        `RETURNING seq, ${AGENT_COLUMNS}`,
    ),
    childrenWithSpawnKey: raw<AgentTuple>(
      `${SELECT_AGENTS} WHERE parent_id = ? AND spawn_key IS NOT NULL ORDER BY seq`,
    ),
    childrenInSpawnKeyRange: raw<AgentTuple>(
      `${SELECT_AGENTS} WHERE parent_id = ? AND spawn_key >= ? AND spawn_key < ? ORDER BY seq LIMIT ? OFFSET ?`,
    ),
    countChildrenWithSpawnKey: p<{ status: AgentStatus; n: number }>(
      'SELECT status, count(*) AS n FROM agents WHERE parent_id = ? AND spawn_key IS NOT NULL GROUP BY status',
    ),
    countChildrenInSpawnKeyRange: p<{ status: AgentStatus; n: number }>(
      'SELECT status, count(*) AS n FROM agents WHERE parent_id = ? AND spawn_key >= ? AND spawn_key < ? ' +
        'AND substr(spawn_key, 1, length(?)) = ? GROUP BY status',
    ),
    idsByStatus: pluck<string>(`SELECT agent_id FROM agents WHERE status IN ${ID_SET} ORDER BY seq`),
    countByStatus: p<{ status: AgentStatus; n: number }>('SELECT status, count(*) AS n FROM agents GROUP BY status'),
    // Retention: the partial index agents_finished_roots (migration 7) serves both.
    finishedRoots: pluck<string>(
      `SELECT agent_id FROM agents WHERE parent_id IS NULL AND status IN ${ID_SET} AND updated_at < ? ` +
        'ORDER BY updated_at, seq LIMIT ?',
    ),
    finishedRootsWithTranscript: pluck<string>(
      `SELECT agent_id FROM agents a WHERE parent_id IS NULL AND status IN ${ID_SET} AND updated_at < ? ` +
        'AND EXISTS (SELECT 1 FROM turns t WHERE t.agent_id = a.agent_id) ORDER BY updated_at, seq LIMIT ?',
    ),
    descendants: pluck<string>(DESCENDANTS),
    treeTotals: p<TreeTotalsGroup>(TREE_TOTALS),
    deleteAgents: p(`DELETE FROM agents WHERE agent_id IN ${ID_SET}`),
    deleteMessagesOf: p(`DELETE FROM messages WHERE agent_id IN ${ID_SET}`),
    deleteTurnsOf: p(`DELETE FROM turns WHERE agent_id IN ${ID_SET}`),
    deleteToolCallsOf: p(`DELETE FROM tool_calls WHERE agent_id IN ${ID_SET}`),
    deleteToolStatesOf: p(`DELETE FROM tool_state WHERE agent_id IN ${ID_SET}`),
    deleteArtifactDataOf: p(
      `DELETE FROM artifact_data WHERE seq IN (SELECT seq FROM artifacts WHERE agent_id IN ${ID_SET})`,
    ),
    deleteArtifactsOf: p(`DELETE FROM artifacts WHERE agent_id IN ${ID_SET}`),
    deletePageReadsOf: p(`DELETE FROM page_reads WHERE agent_id IN ${ID_SET}`),

    insertMessage: p('INSERT INTO messages (agent_id, message_id, role, text, timestamp) VALUES (?, ?, ?, ?, ?)'),
    listMessages: p<MessageRow>(
      'SELECT message_id, agent_id, role, text, timestamp FROM messages WHERE agent_id = ? ORDER BY seq',
    ),
    insertTurn: p('INSERT INTO turns (agent_id, idx, role, content, created_at) VALUES (?, ?, ?, ?, ?)'),
    listTurns: p<TurnRow>('SELECT agent_id, idx, role, content, created_at FROM turns WHERE agent_id = ? ORDER BY idx'),
    upsertToolCall: p(
      `INSERT INTO tool_calls (${TOOL_CALL_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ${TOOL_CALL_UPSERT}`,
    ),
    // Like memoryStorage, calls of an agent that does not exist (any more) are dropped.
    upsertToolCallOfLiveAgent: p(
      `INSERT INTO tool_calls (${TOOL_CALL_COLUMNS}) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ? ` +
        `WHERE EXISTS (SELECT 1 FROM agents WHERE agent_id = ?) ${TOOL_CALL_UPSERT}`,
    ),
    listToolCalls: p<ToolCallRecord>(
      `SELECT ${TOOL_CALL_COLUMNS} FROM tool_calls WHERE agent_id = ? AND turn_idx = ? ORDER BY rowid`,
    ),
    // Newest first, so that LIMIT keeps the newest calls: a backward scan of tool_calls_turn (its rowid included).
    listAgentToolCallsNewest: p<ToolCallRecord>(
      `SELECT ${TOOL_CALL_COLUMNS} FROM tool_calls WHERE agent_id = ? ORDER BY turn_idx DESC, rowid DESC LIMIT ?`,
    ),

    // Like memoryStorage, the state of a call of an agent that does not exist (any more) is dropped.
    upsertToolStateOfLiveAgent: p(
      'INSERT INTO tool_state (agent_id, tool_use_id, state) SELECT ?, ?, ? ' +
        'WHERE EXISTS (SELECT 1 FROM agents WHERE agent_id = ?) ' +
        'ON CONFLICT (agent_id, tool_use_id) DO UPDATE SET state = excluded.state',
    ),
    getToolState: pluck<string>('SELECT state FROM tool_state WHERE agent_id = ? AND tool_use_id = ?'),

    artifactExists: pluck<number>('SELECT 1 FROM artifacts WHERE agent_id = ? AND artifact_id = ?'),
    artifactBytesOf: pluck<number>('SELECT coalesce(sum(size), 0) FROM artifacts WHERE agent_id = ?'),
    insertArtifact: pluck<number>(
      `INSERT INTO artifacts (${ARTIFACT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING seq`,
    ),
    insertArtifactData: p('INSERT INTO artifact_data (seq, data) VALUES (?, ?)'),
    listArtifacts: p<ArtifactRow>(`SELECT ${ARTIFACT_COLUMNS} FROM artifacts WHERE agent_id = ? ORDER BY seq`),
    getArtifact: p<ArtifactRow & { data: Uint8Array }>(
      `SELECT ${ARTIFACT_COLUMNS}, d.data FROM artifacts a JOIN artifact_data d ON d.seq = a.seq ` +
        'WHERE a.agent_id = ? AND a.artifact_id = ?',
    ),

    insertPage: p('INSERT OR IGNORE INTO pages (content_sha256, text) VALUES (?, ?)'),
    insertPageRead: p(`INSERT INTO page_reads (${PAGE_READ_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)`),
    listPageReads: p<PageReadRow>(
      `SELECT ${PAGE_READ_COLUMNS} FROM page_reads WHERE agent_id IN ${ID_SET} ORDER BY seq`,
    ),
    getPageText: pluck<string>('SELECT text FROM pages WHERE content_sha256 = ?'),

    getIdempotency: p<IdempotencyRecord>(
      'SELECT account_id, key, request_hash, response, status, created_at FROM idempotency_keys ' +
        'WHERE account_id = ? AND key = ?',
    ),
    putIdempotency: p(
      'INSERT OR IGNORE INTO idempotency_keys (account_id, key, request_hash, response, status, created_at) ' +
        'VALUES (?, ?, ?, ?, ?, ?)',
    ),
    begin: p('BEGIN IMMEDIATE'),
    commit: p('COMMIT'),
  };
}

export type Statements = ReturnType<typeof prepareStatements>;

export function toolCallParams(c: ToolCallRow): Bind[] {
  return [
    c.agent_id,
    c.tool_use_id,
    c.turn_idx,
    c.name,
    c.input,
    c.status,
    flag(c.idempotent),
    c.result,
    flag(c.is_error),
    c.updated_at,
  ];
}

/** `from` slots of `changeAgentStatus`: more than there are statuses (a set of them always fits). */
const MAX_FROM_STATUSES = 8;

/** Parameters of `changeAgentStatus`; `updatedAt` null keeps the row's. */
export function changeStatusParams(agentId: string, change: StatusChange, updatedAt: string | null): Bind[] {
  const p = change.patch ?? {};
  const from: Bind[] = [...new Set(change.from)];
  while (from.length < MAX_FROM_STATUSES) from.push(null);
  return [
    change.to,
    p.progress ?? null,
    p.status_message ?? null,
    p.started === undefined ? null : flag(p.started),
    p.active_ms ?? null,
    p.active_since === undefined ? 0 : 1,
    p.active_since ?? null,
    updatedAt,
    agentId,
    ...from,
  ];
}

/** Parameters of `patchAgentWithStatus`, in the order of its placeholders. */
export function patchWithStatusParams(
  c: StepCommit,
  change: StatusChange,
  from: AgentStatus,
  messageCount: number,
  ownCharges: number,
  firstTurn: number | null,
): Bind[] {
  const p = c.patch;
  const q = change.patch ?? {};
  const started = q.started === undefined ? null : flag(q.started);
  return [
    from,
    change.to,
    from,
    q.progress ?? null,
    q.progress ?? null,
    p.progress ?? null,
    from,
    q.status_message ?? null,
    q.status_message ?? null,
    p.status_message ?? null,
    from,
    started,
    started,
    from,
    q.active_ms ?? null,
    q.active_ms ?? null,
    from,
    q.active_since === undefined ? 0 : 1,
    q.active_since ?? null,
    p.plan === undefined ? 0 : 1,
    p.plan ?? null,
    p.token_count_delta ?? 0,
    messageCount,
    p.step_count_delta ?? 0,
    ownCharges,
    p.updated_at,
    c.agent_id,
    change.to,
    firstTurn,
    firstTurn,
  ];
}
