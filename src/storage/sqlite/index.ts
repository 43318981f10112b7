/**
 * @module storage/sqlite
 * The default {@link StorageAdapter}: one SQLite file through better-sqlite3, in WAL mode with `synchronous=NORMAL`.
 * better-sqlite3 is synchronous and runs on the event loop, so every method is one short transaction over statements
 * prepared once in `init()`. Semantics follow `memoryStorage()`, the reference; the contract suite in
 * `test/storage/contract.ts` holds both to them.
 */
import Database from 'better-sqlite3';
import { z } from 'zod';
import { AgentryError } from '../../errors.js';
import type {
  AccountRow,
  AgentPage,
  AgentQuery,
  AgentRow,
  ApiKeyRow,
  IdempotencyRecord,
  LedgerRow,
  MessageRow,
  ReservationRefusal,
  ReservationRequest,
  SpawnPage,
  Settlement,
  StatusChange,
  StepCommit,
  StepCommitResult,
  StorageAdapter,
  ToolCallRow,
  TurnRow,
} from '../adapter.js';
import type { AgentStatus } from '../../core/status.js';
import { migrate } from './migrations.js';
import { acquireRunnerLock, releaseRunnerLock } from './runner-lock.js';

export interface SqliteStorageOptions {
  /**
   * The database file; created if missing (its directory must exist). `':memory:'` gives a private in-memory database.
   * @default './agentry.db'
   */
  path?: string;
  /**
   * How long a statement waits for another connection's write lock before failing with SQLITE_BUSY.
   * @default 5000
   */
  busyTimeoutMs?: number;
}

const OptionsSchema = z
  .object({
    path: z.string().min(1).optional(),
    busyTimeoutMs: z.number().int().min(0).optional(),
  })
  .strict();

// Rows as SQLite returns them: booleans are INTEGER 0/1.
type Flag = 0 | 1;
type AccountRecord = Omit<AccountRow, 'subscription_active'> & { subscription_active: Flag };
/**
 * An agent read in raw mode: `seq` then the columns of {@link AGENT_COLUMNS}, in order. Arrays, not objects, because
 * better-sqlite3 builds a 25-key object per row about 2.5 times slower (it shows on 10,000-child listings).
 */
type AgentTuple = [
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
  created_at: string,
  updated_at: string,
];
type ToolCallRecord = Omit<ToolCallRow, 'idempotent' | 'is_error'> & { idempotent: Flag; is_error: Flag };
type Bind = string | number | null;
type Stmt<R = unknown> = Database.Statement<Bind[], R>;

const flag = (value: boolean): Flag => (value ? 1 : 0);

const toAccount = (r: AccountRecord): AccountRow => ({
  id: r.id,
  name: r.name,
  subscription_active: r.subscription_active === 1,
  balance: r.balance,
  reserved: r.reserved,
  created_at: r.created_at,
});

const toAgent = ([
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
  created_at,
  updated_at,
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
  created_at,
  updated_at,
});

const toToolCall = (r: ToolCallRecord): ToolCallRow => ({
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

const AGENT_COLUMNS =
  'agent_id, account_id, parent_id, root_id, spawn_key, goal, model, status, progress, status_message, token_count, ' +
  'message_count, credits_spent, sub_agent_count, max_credits, tree_spent, tree_reserved, step_count, started, ' +
  'active_ms, active_since, plan, created_at, updated_at';
const SELECT_AGENTS = `SELECT seq, ${AGENT_COLUMNS} FROM agents`;
const TOOL_CALL_COLUMNS =
  'agent_id, tool_use_id, turn_idx, name, input, status, idempotent, result, is_error, updated_at';
const TOOL_CALL_UPSERT =
  'ON CONFLICT (agent_id, tool_use_id) DO UPDATE SET turn_idx = excluded.turn_idx, name = excluded.name, ' +
  'input = excluded.input, status = excluded.status, idempotent = excluded.idempotent, result = excluded.result, ' +
  'is_error = excluded.is_error, updated_at = excluded.updated_at';
const DESCENDANTS =
  'WITH RECURSIVE tree(id) AS (SELECT c.agent_id FROM agents p JOIN agents c ON c.parent_id = p.agent_id ' +
  'WHERE p.agent_id = ? UNION SELECT a.agent_id FROM agents a JOIN tree ON a.parent_id = tree.id) SELECT id FROM tree';
/** Binds a JSON array of ids as a set: `x IN ${ID_SET}`. */
const ID_SET = '(SELECT value FROM json_each(?))';

function prepareStatements(db: Database.Database) {
  const p = <R = unknown>(sql: string): Stmt<R> => db.prepare<Bind[], R>(sql);
  return {
    insertAccount: p(
      'INSERT INTO accounts (id, name, subscription_active, balance, reserved, created_at) VALUES (?, ?, ?, ?, 0, ?)',
    ),
    accountExists: p<number>('SELECT 1 FROM accounts WHERE id = ?').pluck(),
    getAccount: p<AccountRecord>('SELECT * FROM accounts WHERE id = ?'),
    listAccounts: p<AccountRecord>('SELECT * FROM accounts ORDER BY rowid'),
    setSubscription: p<AccountRecord>('UPDATE accounts SET subscription_active = ? WHERE id = ? RETURNING *'),
    addBalance: p<AccountRecord>('UPDATE accounts SET balance = balance + ? WHERE id = ? RETURNING *'),
    debit: p('UPDATE accounts SET balance = balance - ? WHERE id = ?'),
    available: p<{ balance: number; reserved: number }>('SELECT balance, reserved FROM accounts WHERE id = ?'),
    insertLedger: p(
      'INSERT INTO ledger (account_id, agent_id, kind, item, tokens_in, tokens_out, amount, created_at) ' +
        'VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
    ),
    listLedger: p<LedgerRow>(
      'SELECT account_id, agent_id, kind, item, tokens_in, tokens_out, amount, created_at FROM ledger ' +
        'WHERE account_id = ? ORDER BY seq',
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
    apiKeyByHash: p<ApiKeyRow>('SELECT id, account_id, name, hash, last4, created_at FROM api_keys WHERE hash = ?'),

    insertAgent: p(`INSERT INTO agents (${AGENT_COLUMNS}) VALUES (${AGENT_COLUMNS.split(',').map(() => '?')})`),
    agentExists: p<number>('SELECT 1 FROM agents WHERE agent_id = ?').pluck(),
    getAgent: p<AgentTuple>(`${SELECT_AGENTS} WHERE agent_id = ?`).raw(),
    agentHead: p<{ status: AgentStatus; parent_id: string | null; next_idx: number }>(
      'SELECT status, parent_id, (SELECT coalesce(max(idx) + 1, 0) FROM turns WHERE agent_id = a.agent_id) AS next_idx ' +
        'FROM agents a WHERE agent_id = ?',
    ),
    addSubAgents: p('UPDATE agents SET sub_agent_count = sub_agent_count + ? WHERE agent_id = ?'),
    agentWithNextTurn: p<AgentTuple>(
      `SELECT seq, ${AGENT_COLUMNS}, (SELECT coalesce(max(t.idx) + 1, 0) FROM turns t WHERE t.agent_id = agents.agent_id) ` +
        'FROM agents WHERE agent_id = ?',
    ).raw(),
    // What a step changes, written as values computed from the row read in the same transaction. The status has its
    // own statement so that the common step, which keeps it, does not rewrite the status indexes.
    writeAgent: p(
      'UPDATE agents SET progress = ?, status_message = ?, plan = ?, token_count = ?, message_count = ?, ' +
        'step_count = ?, credits_spent = ?, started = ?, active_ms = ?, active_since = ?, updated_at = ? WHERE agent_id = ?',
    ),
    writeAgentWithStatus: p(
      'UPDATE agents SET progress = ?, status_message = ?, plan = ?, token_count = ?, message_count = ?, ' +
        'step_count = ?, credits_spent = ?, started = ?, active_ms = ?, active_since = ?, updated_at = ?, status = ? ' +
        'WHERE agent_id = ?',
    ),
    childrenWithSpawnKey: p<AgentTuple>(
      `${SELECT_AGENTS} WHERE parent_id = ? AND spawn_key IS NOT NULL ORDER BY seq`,
    ).raw(),
    childrenInSpawnKeyRange: p<AgentTuple>(
      `${SELECT_AGENTS} WHERE parent_id = ? AND spawn_key >= ? AND spawn_key < ? ORDER BY seq LIMIT ? OFFSET ?`,
    ).raw(),
    countChildrenWithSpawnKey: p<{ status: AgentStatus; n: number }>(
      'SELECT status, count(*) AS n FROM agents WHERE parent_id = ? AND spawn_key IS NOT NULL GROUP BY status',
    ),
    countChildrenInSpawnKeyRange: p<{ status: AgentStatus; n: number }>(
      'SELECT status, count(*) AS n FROM agents WHERE parent_id = ? AND spawn_key >= ? AND spawn_key < ? ' +
        'AND substr(spawn_key, 1, length(?)) = ? GROUP BY status',
    ),
    idsByStatus: p<string>(`SELECT agent_id FROM agents WHERE status IN ${ID_SET} ORDER BY seq`).pluck(),
    descendants: p<string>(DESCENDANTS).pluck(),
    deleteAgents: p(`DELETE FROM agents WHERE agent_id IN ${ID_SET}`),
    deleteMessagesOf: p(`DELETE FROM messages WHERE agent_id IN ${ID_SET}`),
    deleteTurnsOf: p(`DELETE FROM turns WHERE agent_id IN ${ID_SET}`),
    deleteToolCallsOf: p(`DELETE FROM tool_calls WHERE agent_id IN ${ID_SET}`),

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

    getIdempotency: p<IdempotencyRecord>(
      'SELECT account_id, key, request_hash, response, status, created_at FROM idempotency_keys ' +
        'WHERE account_id = ? AND key = ?',
    ),
    putIdempotency: p(
      'INSERT OR IGNORE INTO idempotency_keys (account_id, key, request_hash, response, status, created_at) ' +
        'VALUES (?, ?, ?, ?, ?, ?)',
    ),
    begin: db.prepare('BEGIN IMMEDIATE'),
    commit: db.prepare('COMMIT'),
  };
}

type Statements = ReturnType<typeof prepareStatements>;

interface Deferred {
  balances: Map<string, { balance: number; debit: number }>;
  treeSpent: Map<string, number>;
}
const emptyDeferred = (): Deferred => ({ balances: new Map(), treeSpent: new Map() });

/** Writes committed together at most; ~5 ms of work on this machine's kind. */
const MAX_WRITES_PER_COMMIT = 512;

interface PendingWrite {
  run: () => unknown;
  /** Only touches balances and tree totals through the batch's deferred sums (settlements, step commits). */
  deferrable: boolean;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}
type Transactions = ReturnType<SqliteStorage['transactions']>;

/** What exists while the storage is open. */
interface Connection {
  db: Database.Database;
  st: Statements;
  tx: Transactions;
  /** listAgents statements by which filters are present (24 shapes at most), prepared on first use. */
  listStatements: Map<string, Stmt<AgentTuple>>;
}

/**
 * The smallest string above every string that starts with `prefix` (in SQLite's BINARY order, which is code point
 * order), or null when there is none. Lets a prefix search use the (parent_id, spawn_key) index as a range.
 */
function prefixUpperBound(prefix: string): string | null {
  const points = Array.from(prefix);
  while (points.length > 0) {
    const last = points.pop()!.codePointAt(0)!;
    if (last < 0x10ffff) return points.join('') + String.fromCodePoint(last === 0xd7ff ? 0xe000 : last + 1);
  }
  return null;
}

class SqliteStorage implements StorageAdapter {
  readonly kind = 'sqlite';
  private conn: Connection | null = null;

  constructor(
    private readonly path: string,
    private readonly busyTimeoutMs: number,
  ) {}

  async init(): Promise<void> {
    if (this.conn) return;
    let db: Database.Database;
    try {
      db = new Database(this.path, { timeout: this.busyTimeoutMs });
    } catch (err) {
      throw new AgentryError(
        'invalid_request',
        `Cannot open the SQLite database ${JSON.stringify(this.path)}: ${String(err)}`,
        {
          cause: err,
        },
      );
    }
    try {
      db.pragma('journal_mode = WAL');
      db.pragma('synchronous = NORMAL');
      // Checkpoint every ~40 MB of WAL rather than every 4 MB: a busy runtime commits often, and each checkpoint
      // copies pages back into the database file and syncs it.
      db.pragma('wal_autocheckpoint = 10000');
      migrate(db);
      this.conn = { db, st: prepareStatements(db), tx: this.transactions(db), listStatements: new Map() };
    } catch (err) {
      db.close();
      throw err;
    }
  }

  async close(): Promise<void> {
    while (this.pending.length > 0) this.flushWrites();
    const conn = this.conn;
    this.conn = null;
    conn?.db.close();
    if (this.lockPath) releaseRunnerLock(this.lockPath);
    this.lockPath = undefined;
  }

  private lockPath: string | undefined;

  /** One process drives a database file's agents (see runner-lock.ts); in-memory databases need no lock. */
  async acquireRunnerLock(): Promise<void> {
    if (this.lockPath || this.path === ':memory:' || this.path === '') return;
    const lockPath = `${this.path}.runner.lock`;
    acquireRunnerLock(lockPath, this.path);
    this.lockPath = lockPath;
  }

  private get c(): Connection {
    if (!this.conn) throw new AgentryError('internal_error', 'sqliteStorage: call init() before using the storage');
    return this.conn;
  }

  private get s(): Statements {
    return this.c.st;
  }

  private get t(): Transactions {
    return this.c.tx;
  }

  /**
   * Every write method's body, run through group commit: writes issued in the same turn of the event loop share one
   * IMMEDIATE transaction, and each stays all-or-nothing on its own (see flushWrites) while the commit
   * (and its WAL write) is paid once per batch. A write's promise settles after the batch has committed.
   */
  private transactions(_db: Database.Database) {
    const wrap =
      <A extends unknown[], R>(fn: (...args: A) => R, deferrable = false) =>
      (...args: A): Promise<R> =>
        this.enqueueWrite(() => fn(...args), deferrable);
    return {
      createAccount: wrap((a: AccountRow) => this.createAccountTx(a)),
      setSubscription: wrap((id: string, active: boolean) => this.s.setSubscription.get(flag(active), id)),
      addCredits: wrap((e: LedgerRow) => this.addCreditsTx(e)),
      settle: wrap((settlements: Settlement[]) => settlements.map((s) => this.applySettlement(s)), true),
      insertApiKey: wrap(
        (k: ApiKeyRow) => void this.s.upsertApiKey.run(k.id, k.account_id, k.name, k.hash, k.last4, k.created_at),
      ),
      deleteApiKey: wrap((accountId: string, keyId: string) => this.s.deleteApiKey.run(keyId, accountId).changes > 0),
      insertAgents: wrap((agents: AgentRow[], messages: MessageRow[], turns: TurnRow[]) =>
        this.insertAgentsTx(agents, messages, turns),
      ),
      changeStatus: wrap((id: string, change: StatusChange, updatedAt: string) =>
        this.changeStatusTx(id, change, updatedAt),
      ),
      deleteAgentTree: wrap((id: string) => this.deleteAgentTreeTx(id)),
      putToolCalls: wrap((calls: ToolCallRow[]) => {
        for (const c of calls) this.s.upsertToolCallOfLiveAgent.run(...toolCallParams(c), c.agent_id);
      }),
      commitStep: wrap((c: StepCommit) => this.commitStepTx(c), true),
      putIdempotency: wrap(
        (r: IdempotencyRecord) =>
          void this.s.putIdempotency.run(r.account_id, r.key, r.request_hash, r.response, r.status, r.created_at),
      ),
    };
  }

  private pending: PendingWrite[] = [];
  private flushScheduled = false;

  private enqueueWrite<R>(run: () => R, deferrable = false): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.pending.push({ run, deferrable, resolve: resolve as (value: unknown) => void, reject });
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(() => this.flushWrites());
      }
    });
  }

  /** Commits queued writes in one transaction; if one throws, each is redone in its own (see below). */
  private flushWrites(): void {
    this.flushScheduled = false;
    // A bounded batch keeps the event loop responsive (HTTP polls between batches); the rest goes in the next turn.
    const batch =
      this.pending.length <= MAX_WRITES_PER_COMMIT ? this.pending : this.pending.splice(0, MAX_WRITES_PER_COMMIT);
    if (batch === this.pending) this.pending = [];
    else if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(() => this.flushWrites());
    }
    if (batch.length === 0) return;
    if (!this.conn) {
      const err = new AgentryError('internal_error', 'sqliteStorage: the storage was closed before a write committed');
      for (const w of batch) w.reject(err);
      return;
    }
    const { st, db } = this.conn;
    // Fast path: the whole batch in one transaction. Writes validate before they write, so one rarely throws; when
    // one does, the batch is rolled back and every write is redone in a transaction of its own, so each still
    // commits or fails alone.
    const values: unknown[] = [];
    try {
      st.begin.run();
      for (const w of batch) {
        if (!w.deferrable) this.writeDeferred();
        values.push(w.run());
      }
      this.writeDeferred();
      st.commit.run();
    } catch {
      if (db.inTransaction) db.exec('ROLLBACK');
      this.deferred = emptyDeferred();
      this.flushOneByOne(batch);
      return;
    }
    batch.forEach((w, i) => w.resolve(values[i]));
  }

  private flushOneByOne(batch: PendingWrite[]): void {
    const { st, db } = this.c;
    for (const w of batch) {
      try {
        st.begin.run();
        const value = w.run();
        this.writeDeferred();
        st.commit.run();
        w.resolve(value);
      } catch (error) {
        if (db.inTransaction) db.exec('ROLLBACK');
        this.deferred = emptyDeferred();
        w.reject(error);
      }
    }
  }

  /**
   * Debits of the hot rows (the account's balance, the root's tree_spent) summed over a batch and written once at its
   * end, instead of once per settlement. Settlements read the balance through {@link balanceInBatch}.
   */
  private deferred = emptyDeferred();

  private writeDeferred(): void {
    const d = this.deferred;
    if (d.balances.size === 0 && d.treeSpent.size === 0) return;
    for (const [id, b] of d.balances) {
      if (b.debit > 0) this.s.debit.run(b.debit, id);
      this.knownBalances.set(id, b.balance);
    }
    for (const [id, spent] of d.treeSpent) if (spent > 0) this.s.addTreeSpent.run(spent, id);
    this.deferred = emptyDeferred();
  }

  private balanceInBatch(accountId: string): { balance: number; debit: number } | undefined {
    let b = this.deferred.balances.get(accountId);
    if (!b) {
      const row = this.s.available.get(accountId);
      if (!row) return undefined;
      b = { balance: row.balance, debit: 0 };
      this.deferred.balances.set(accountId, b);
    }
    return b;
  }

  // accounts and credits

  async createAccount(account: AccountRow): Promise<void> {
    await this.t.createAccount(account);
  }

  private createAccountTx(a: AccountRow): void {
    if (this.s.accountExists.get(a.id) !== undefined) throw new Error(`account ${a.id} exists`);
    this.s.insertAccount.run(a.id, a.name, flag(a.subscription_active), a.balance, a.created_at);
    if (a.balance > 0) this.s.insertLedger.run(a.id, null, 'topup', null, 0, 0, a.balance, a.created_at);
  }

  async getAccount(id: string): Promise<AccountRow | null> {
    const r = this.s.getAccount.get(id);
    return r ? this.account(r) : null;
  }

  async listAccounts(): Promise<AccountRow[]> {
    return this.s.listAccounts.all().map((r) => this.account(r));
  }

  async setSubscription(id: string, active: boolean): Promise<AccountRow | null> {
    const r = await this.t.setSubscription(id, active);
    return r ? this.account(r) : null;
  }

  async addCredits(entry: LedgerRow): Promise<AccountRow | null> {
    return this.t.addCredits(entry);
  }

  private addCreditsTx(e: LedgerRow): AccountRow | null {
    const r = this.s.addBalance.get(e.amount, e.account_id);
    if (!r) return null;
    this.knownBalances.set(e.account_id, r.balance);
    this.s.insertLedger.run(
      e.account_id,
      e.agent_id,
      e.kind,
      e.item,
      e.tokens_in,
      e.tokens_out,
      e.amount,
      e.created_at,
    );
    return this.account(r);
  }

  async listLedger(accountId: string): Promise<LedgerRow[]> {
    return this.s.listLedger.all(accountId);
  }

  /*
   * Holds live in this process's memory, not in the file: a SQLite database is served by one runtime process, and a
   * hold never outlives the process that took it (recovery releases them all). Checking and taking a hold is then a
   * read or two and no write. A hold is dropped inside the same flush that applies its settlement, so a debit that is
   * queued but not yet committed is still covered by its hold: the available balance can never be counted twice.
   */
  private readonly holds = new Map<string, ReservationRequest>();
  private readonly heldByAccount = new Map<string, number>();
  private readonly heldByTree = new Map<string, number>();
  /** `max_credits` of the roots seen, by root id (null: no cap). */
  private readonly treeCaps = new Map<string, number | null>();
  /** Balances as this process last read or wrote them (see reserveNow). */
  private readonly knownBalances = new Map<string, number>();

  async reserve(request: ReservationRequest): Promise<ReservationRefusal | null> {
    return this.reserveNow(request);
  }

  private reserveNow(r: ReservationRequest): ReservationRefusal | null {
    if (this.holds.has(r.id)) throw new Error(`reservation ${r.id} exists`);
    const held = this.heldByAccount.get(r.account_id) ?? 0;
    // The balance this process last wrote or read. Only another process can change it (a top-up from the CLI), and
    // only upwards, so it is re-read before a refusal, never trusted for one.
    let balance = this.knownBalances.get(r.account_id);
    if (balance === undefined || balance - held < r.amount) {
      balance = this.s.available.get(r.account_id)?.balance;
      if (balance === undefined) return 'account';
      this.knownBalances.set(r.account_id, balance);
    }
    if (balance - held < r.amount) return 'account';
    // A tree's cap never changes, so it is read once; the tree's spend is read only when there is a cap.
    let cap = this.treeCaps.get(r.root_id);
    let spent = 0;
    if (cap === undefined) {
      const root = this.s.treeBudget.get(r.root_id);
      if (root) {
        cap = root.max_credits;
        spent = root.tree_spent;
        this.treeCaps.set(r.root_id, cap);
      }
    } else if (cap !== null) {
      spent = this.s.treeBudget.get(r.root_id)?.tree_spent ?? 0;
    }
    const treeHeld = this.heldByTree.get(r.root_id) ?? 0;
    if (cap != null && spent + treeHeld + r.amount > cap) return 'tree_cap';
    this.holds.set(r.id, { ...r });
    this.heldByAccount.set(r.account_id, held + r.amount);
    if (cap !== undefined) this.heldByTree.set(r.root_id, treeHeld + r.amount);
    return null;
  }

  async release(reservationId: string): Promise<void> {
    this.dropReservation(reservationId);
  }

  async releaseAgentReservations(agentIds: readonly string[]): Promise<number> {
    const ids = new Set(agentIds);
    let n = 0;
    for (const [id, r] of this.holds) {
      if (ids.has(r.agent_id)) {
        this.dropReservation(id);
        n++;
      }
    }
    return n;
  }

  async settle(settlements: Settlement[]): Promise<number[]> {
    return this.t.settle(settlements);
  }

  private dropReservation(id: string): void {
    const r = this.holds.get(id);
    if (!r) return;
    this.holds.delete(id);
    const account = (this.heldByAccount.get(r.account_id) ?? 0) - r.amount;
    if (account > 0) this.heldByAccount.set(r.account_id, account);
    else this.heldByAccount.delete(r.account_id);
    const tree = (this.heldByTree.get(r.root_id) ?? 0) - r.amount;
    if (tree > 0) this.heldByTree.set(r.root_id, tree);
    else this.heldByTree.delete(r.root_id);
  }

  /** An account row with its holds, which live in memory. */
  private account(r: Parameters<typeof toAccount>[0]): AccountRow {
    const a = toAccount(r);
    a.reserved = this.heldByAccount.get(a.id) ?? 0;
    return a;
  }

  /** An agent row with its tree's holds, which live in memory. */
  private readonly agent = (tuple: Parameters<typeof toAgent>[0]): AgentRow => {
    const a = toAgent(tuple);
    a.tree_reserved = this.heldByTree.get(a.agent_id) ?? 0;
    return a;
  };

  /**
   * Drops the hold, debits min(cost, balance) and writes the ledger row. The agent's own `credits_spent` is left to
   * the caller when it is `ownAgentId` (a step commit writes its agent once); the account and tree sums are deferred
   * to the end of the batch.
   */
  private applySettlement(s: Settlement, ownAgentId?: string): number {
    this.dropReservation(s.reservation_id);
    const { cost, ...entry } = s.ledger;
    const account = this.balanceInBatch(entry.account_id);
    if (!account) return 0;
    const charge = Math.max(0, Math.min(cost, account.balance));
    account.balance -= charge;
    account.debit += charge;
    this.s.insertLedger.run(
      entry.account_id,
      entry.agent_id,
      entry.kind,
      entry.item,
      entry.tokens_in,
      entry.tokens_out,
      0 - charge,
      entry.created_at,
    );
    this.deferred.treeSpent.set(s.root_id, (this.deferred.treeSpent.get(s.root_id) ?? 0) + charge);
    if (entry.agent_id && entry.agent_id !== ownAgentId) this.s.addCreditsSpent.run(charge, entry.agent_id);
    return charge;
  }

  // api keys

  async insertApiKey(key: ApiKeyRow): Promise<void> {
    await this.t.insertApiKey(key);
  }

  async listApiKeys(accountId: string): Promise<ApiKeyRow[]> {
    return this.s.listApiKeys.all(accountId);
  }

  async deleteApiKey(accountId: string, keyId: string): Promise<boolean> {
    return this.t.deleteApiKey(accountId, keyId);
  }

  async findApiKeyByHash(hash: string): Promise<ApiKeyRow | null> {
    return this.s.apiKeyByHash.get(hash) ?? null;
  }

  // agents

  async insertAgents(agents: AgentRow[], messages: MessageRow[], turns: TurnRow[]): Promise<void> {
    await this.t.insertAgents(agents, messages, turns);
  }

  private insertAgentsTx(agents: AgentRow[], messages: MessageRow[], turns: TurnRow[]): void {
    const s = this.s;
    // Whether an agent exists by now: inserted in this batch, or found in the table (memoized: 10,000 children of one
    // parent cost one lookup of it, and one UPDATE of its sub_agent_count).
    const known = new Map<string, boolean>();
    const exists = (id: string): boolean => {
      let e = known.get(id);
      if (e === undefined) known.set(id, (e = s.agentExists.get(id) !== undefined));
      return e;
    };
    const newChildren = new Map<string, number>();
    for (const a of agents) {
      try {
        s.insertAgent.run(
          a.agent_id,
          a.account_id,
          a.parent_id,
          a.root_id,
          a.spawn_key,
          a.goal,
          a.model,
          a.status,
          a.progress,
          a.status_message,
          a.token_count,
          a.message_count,
          a.credits_spent,
          a.sub_agent_count,
          a.max_credits,
          a.tree_spent,
          a.tree_reserved,
          a.step_count,
          flag(a.started),
          a.active_ms,
          a.active_since,
          a.plan,
          a.created_at,
          a.updated_at,
        );
      } catch (err) {
        if ((err as { code?: string }).code === 'SQLITE_CONSTRAINT_UNIQUE')
          throw new Error(`agent ${a.agent_id} exists`);
        throw err;
      }
      known.set(a.agent_id, true);
      // As in memoryStorage: a parent is counted only if it exists when its child is inserted.
      if (a.parent_id !== null && exists(a.parent_id)) {
        newChildren.set(a.parent_id, (newChildren.get(a.parent_id) ?? 0) + 1);
      }
    }
    for (const [parentId, n] of newChildren) s.addSubAgents.run(n, parentId);
    for (const m of messages) {
      if (exists(m.agent_id)) s.insertMessage.run(m.agent_id, m.message_id, m.role, m.text, m.timestamp);
    }
    for (const t of turns) {
      if (exists(t.agent_id)) s.insertTurn.run(t.agent_id, t.idx, t.role, t.content, t.created_at);
    }
  }

  async getAgent(id: string): Promise<AgentRow | null> {
    const r = this.s.getAgent.get(id);
    return r ? this.agent(r) : null;
  }

  async findAgentsBySpawnKey(parentId: string, spawnKeyPrefix: string, page?: SpawnPage): Promise<AgentRow[]> {
    const upper = prefixUpperBound(spawnKeyPrefix);
    const offset = page?.offset ?? 0;
    if (upper === null) {
      const all = this.s.childrenWithSpawnKey.all(parentId).map(this.agent);
      const matching = all.filter((a) => a.spawn_key!.startsWith(spawnKeyPrefix));
      return page ? matching.slice(offset, offset + page.limit) : matching;
    }
    return this.s.childrenInSpawnKeyRange
      .all(parentId, spawnKeyPrefix, upper, page?.limit ?? -1, offset)
      .map(this.agent);
  }

  async countChildrenByStatus(parentId: string, spawnKeyPrefix: string): Promise<Partial<Record<AgentStatus, number>>> {
    const upper = prefixUpperBound(spawnKeyPrefix);
    const rows =
      upper === null
        ? this.s.countChildrenWithSpawnKey.all(parentId)
        : this.s.countChildrenInSpawnKeyRange.all(parentId, spawnKeyPrefix, upper, spawnKeyPrefix, spawnKeyPrefix);
    const counts: Partial<Record<AgentStatus, number>> = {};
    for (const r of rows) counts[r.status] = r.n;
    return counts;
  }

  async listAgents(query: AgentQuery): Promise<AgentPage> {
    const after = query.after === undefined ? NaN : Number(query.after);
    const params: Bind[] = [];
    const where: string[] = [];
    let shape = '';
    if (query.account_id !== undefined) {
      where.push('account_id = ?');
      params.push(query.account_id);
      shape += 'a';
    }
    if (query.status !== undefined) {
      where.push('status = ?');
      params.push(query.status);
      shape += 's';
    }
    if (query.parent_id === null) {
      where.push('parent_id IS NULL');
      shape += 'r';
    } else if (query.parent_id !== undefined) {
      where.push('parent_id = ?');
      params.push(query.parent_id);
      shape += 'p';
    }
    // Like memoryStorage, a cursor that is not a number is no cursor.
    if (!Number.isNaN(after)) {
      where.push('seq < ?');
      params.push(after);
      shape += 'c';
    }
    params.push(query.limit);
    const { db, listStatements } = this.c;
    let stmt = listStatements.get(shape);
    if (!stmt) {
      stmt = db
        .prepare<Bind[], AgentTuple>(
          `${SELECT_AGENTS} ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY seq DESC LIMIT ?`,
        )
        .raw();
      listStatements.set(shape, stmt);
    }
    const rows = stmt.all(...params);
    const last = rows.at(-1);
    return { rows: rows.map(this.agent), last: last ? String(last[0]) : null };
  }

  async listAgentIdsByStatus(statuses: readonly AgentStatus[]): Promise<string[]> {
    return this.s.idsByStatus.all(JSON.stringify(statuses));
  }

  async changeStatus(agentId: string, change: StatusChange, updatedAt: string): Promise<AgentRow | null> {
    return this.t.changeStatus(agentId, change, updatedAt);
  }

  private changeStatusTx(agentId: string, change: StatusChange, updatedAt: string): AgentRow | null {
    const tuple = this.s.getAgent.get(agentId);
    if (!tuple) return null;
    const row = this.agent(tuple);
    if (!change.from.includes(row.status)) return null;
    applyStatusChange(row, change);
    row.updated_at = updatedAt;
    this.s.writeAgentWithStatus.run(...agentWriteParams(row, true));
    return row;
  }

  async deleteAgentTree(agentId: string): Promise<string[]> {
    return this.t.deleteAgentTree(agentId);
  }

  private deleteAgentTreeTx(agentId: string): string[] {
    const s = this.s;
    const head = s.agentHead.get(agentId);
    if (!head) return [];
    const ids = [agentId, ...s.descendants.all(agentId)];
    const idSet = JSON.stringify(ids);
    const deleted = new Set(ids);
    for (const id of ids) this.treeCaps.delete(id);
    for (const [id, r] of this.holds) if (deleted.has(r.agent_id)) this.dropReservation(id);
    if (head.parent_id !== null) s.addSubAgents.run(-1, head.parent_id);
    s.deleteMessagesOf.run(idSet);
    s.deleteTurnsOf.run(idSet);
    s.deleteToolCallsOf.run(idSet);
    s.deleteAgents.run(idSet);
    return ids;
  }

  async listDescendantIds(agentId: string): Promise<string[]> {
    return this.s.descendants.all(agentId);
  }

  // step log

  async listMessages(agentId: string): Promise<MessageRow[]> {
    return this.s.listMessages.all(agentId);
  }

  async listTurns(agentId: string): Promise<TurnRow[]> {
    return this.s.listTurns.all(agentId);
  }

  async listToolCalls(agentId: string, turnIdx: number): Promise<ToolCallRow[]> {
    return this.s.listToolCalls.all(agentId, turnIdx).map(toToolCall);
  }

  async putToolCalls(calls: ToolCallRow[]): Promise<void> {
    await this.t.putToolCalls(calls);
  }

  async commitStep(commit: StepCommit): Promise<StepCommitResult> {
    return this.t.commitStep(commit);
  }

  private commitStepTx(c: StepCommit): StepCommitResult {
    const s = this.s;
    const found = s.agentWithNextTurn.get(c.agent_id);
    const turns = c.turns ?? [];
    if (found) {
      const nextIdx = (found as unknown as unknown[])[AGENT_TUPLE_LENGTH] as number;
      turns.forEach((t, i) => {
        if (t.idx !== nextIdx + i) throw new Error(`turn ${t.idx} out of order for agent ${t.agent_id}`);
      });
    }
    const charged = (c.settlements ?? []).map((settlement) => this.applySettlement(settlement, c.agent_id));
    if (!found) return { agent: null, statusChanged: false, charged };
    for (const t of turns) s.insertTurn.run(t.agent_id, t.idx, t.role, t.content, t.created_at);
    const messages = c.messages ?? [];
    for (const m of messages) s.insertMessage.run(m.agent_id, m.message_id, m.role, m.text, m.timestamp);
    for (const call of c.tool_calls ?? []) s.upsertToolCall.run(...toolCallParams(call));

    // The agent after the commit, computed from the row just read (nothing else writes it in this transaction),
    // and written back with one UPDATE instead of several plus a read-back.
    const row = this.agent(found);
    const p = c.patch;
    if (p.progress !== undefined) row.progress = p.progress;
    if (p.status_message !== undefined) row.status_message = p.status_message;
    if (p.plan !== undefined) row.plan = p.plan;
    row.token_count += p.token_count_delta ?? 0;
    row.message_count += messages.length;
    row.step_count += p.step_count_delta ?? 0;
    row.updated_at = p.updated_at;
    (c.settlements ?? []).forEach((settlement, i) => {
      if (settlement.ledger.agent_id === row.agent_id) row.credits_spent += charged[i]!;
      if (settlement.root_id === row.agent_id) row.tree_spent += charged[i]!; // written with the batch's tree sums
    });
    // After the patch, so that the status change's own fields win (as in memoryStorage).
    const statusChanged = c.status !== undefined && c.status.from.includes(row.status);
    if (statusChanged) applyStatusChange(row, c.status!);
    (statusChanged ? s.writeAgentWithStatus : s.writeAgent).run(...agentWriteParams(row, statusChanged));
    return { agent: row, statusChanged, charged };
  }

  // idempotency keys

  async getIdempotency(accountId: string, key: string): Promise<IdempotencyRecord | null> {
    return this.s.getIdempotency.get(accountId, key) ?? null;
  }

  async putIdempotency(record: IdempotencyRecord): Promise<void> {
    await this.t.putIdempotency(record);
  }
}

function toolCallParams(c: ToolCallRow): Bind[] {
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

/**
 * SQLite storage (the default): one file, WAL mode, survives restarts. `init()` creates or migrates the schema.
 *
 * @example
 * const runtime = await AgentRuntime.open({ storage: sqliteStorage({ path: './agentry.db' }), model });
 */
export function sqliteStorage(options: SqliteStorageOptions = {}): StorageAdapter {
  const parsed = OptionsSchema.safeParse(options);
  if (!parsed.success) {
    throw new AgentryError('invalid_request', `Invalid sqliteStorage options: ${z.prettifyError(parsed.error)}`, {
      details: parsed.error.issues,
      cause: parsed.error,
    });
  }
  return new SqliteStorage(parsed.data.path ?? './agentry.db', parsed.data.busyTimeoutMs ?? 5000);
}

/** Columns of an agent tuple (seq first); a computed column read with it comes at this index. */
const AGENT_TUPLE_LENGTH = 25;

function applyStatusChange(row: AgentRow, change: StatusChange): void {
  const patch = change.patch ?? {};
  if (patch.progress !== undefined) row.progress = patch.progress;
  if (patch.status_message !== undefined) row.status_message = patch.status_message;
  if (patch.started !== undefined) row.started = patch.started;
  if (patch.active_ms !== undefined) row.active_ms = patch.active_ms;
  if (patch.active_since !== undefined) row.active_since = patch.active_since;
  row.status = change.to;
}

function agentWriteParams(row: AgentRow, withStatus: boolean): Bind[] {
  const params: Bind[] = [
    row.progress,
    row.status_message,
    row.plan,
    row.token_count,
    row.message_count,
    row.step_count,
    row.credits_spent,
    flag(row.started),
    row.active_ms,
    row.active_since,
    row.updated_at,
  ];
  if (withStatus) params.push(row.status);
  params.push(row.agent_id);
  return params;
}
