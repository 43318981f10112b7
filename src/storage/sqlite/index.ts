/**
 * @module storage/sqlite
 * The default {@link StorageAdapter}: one SQLite file through better-sqlite3, in WAL mode with `synchronous=NORMAL`.
 * better-sqlite3 is synchronous and runs on the event loop: reads are single statements prepared once in `init()`, and
 * writes are group-committed — the writes issued in one turn of the event loop form a batch that the writer
 * (writer.ts) commits in one transaction. Semantics follow `memoryStorage()`, the reference; the contract suite in
 * `test/storage/contract.ts` holds both to them.
 */
import type Database from 'better-sqlite3';
import { z } from 'zod';
import { AgentryError, notFound } from '../../errors.js';
import type {
  TreeTotalsRow,
  AccountRow,
  AgentLedger,
  AgentPage,
  AgentToolCalls,
  AgentQuery,
  AgentSearch,
  AgentSearchPage,
  ConsoleSessionRow,
  AgentRow,
  ApiKeyRow,
  FinishedRootsQuery,
  ArtifactLimits,
  ArtifactRow,
  IdempotencyRecord,
  LedgerPage,
  LedgerRow,
  LedgerSpendRow,
  MessageRow,
  MonitorChangeRow,
  MonitorRow,
  OptOutRow,
  OutboxChannel,
  OutboxOutcome,
  OutboxRateLimits,
  OutboxRefusal,
  OutboxRow,
  OutboxStatus,
  PageReadRow,
  ReservationRefusal,
  ReservationRequest,
  SpawnPage,
  Settlement,
  StatusChange,
  StatusMarkRow,
  StepCommit,
  StepCommitResult,
  StorageAdapter,
  TimerRow,
  ToolCallRow,
  TurnRow,
} from '../adapter.js';
import type { AgentStatus } from '../../base/status.js';
import {
  MAX_SEARCH_MATCHES,
  SEARCH_SLICE_ROWS,
  SearchQueue,
  searchDeadline,
  searchNeedle,
  yieldToOthers,
} from '../search.js';
import { migrate } from './migrations.js';
import { foldTreeTotals } from '../tree-totals.js';
import { prepareOutboxStatements, type OutboxStatements } from './outbox.js';
import { monitorFromSql, prepareMonitorStatements, type MonitorStatements } from './monitors.js';
import { acquireRunnerLock, releaseRunnerLock } from './runner-lock.js';
import {
  SELECT_AGENTS,
  openConnection,
  prepareStatements,
  toAccount,
  toAgent,
  toToolCall,
  type AccountRecord,
  type AgentTuple,
  type Bind,
  type Statements,
  type Stmt,
} from './statements.js';
import {
  agentArtifactsTooLarge,
  artifactExists,
  checkArtifact,
  checkPageRead,
  checkStatusChange,
} from '../validate.js';
import { SqliteWriter, type WriteOp, type WriteOps, type WriteRequest, type WriteResults } from './writer.js';

/** Characters of a needle that the trigram index is asked for (the rest is checked on its candidates). */
const INDEX_PATTERN_CHARS = 16;

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
  /**
   * Open an existing database for reading only: no migration, no runner lock, and every write is refused with
   * `invalid_state`. For readers beside the process that runs the agents (dashboards, the HTTP poll thread).
   * @default false
   */
  readonly?: boolean;
}

const OptionsSchema = z
  .object({
    path: z.string().min(1).optional(),
    busyTimeoutMs: z.number().int().min(0).optional(),
    readonly: z.boolean().optional(),
  })
  .strict();

/** Writes committed together at most; ~5 ms of work on this machine's kind, so HTTP polls get a turn between batches. */
const MAX_WRITES_PER_COMMIT = 512;

interface PendingWrite {
  request: WriteRequest;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

/** What exists while the storage is open. */
interface Connection {
  db: Database.Database;
  st: Statements;
  writer: SqliteWriter;
  /** listAgents statements by which filters are present (24 shapes at most), prepared on first use. */
  listStatements: Map<string, Stmt<AgentTuple>>;
  /** message_person's reads (its tables, migration 5). */
  outbox: OutboxStatements;
  /** Timers' and monitors' reads (their tables, migration 4). */
  monitors: MonitorStatements;
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

const isMemoryPath = (path: string) => path === ':memory:' || path === '';

class SqliteStorage implements SqliteStorageAdapter {
  readonly kind = 'sqlite';
  private conn: Connection | null = null;

  constructor(
    private readonly path: string,
    private readonly busyTimeoutMs: number,
    private readonly readonly: boolean,
  ) {}

  async init(): Promise<void> {
    if (this.conn) return;
    let db: Database.Database;
    try {
      db = openConnection(this.path, this.busyTimeoutMs, this.readonly);
    } catch (err) {
      throw new AgentryError(
        'invalid_request',
        `Cannot open the SQLite database ${JSON.stringify(this.path)}: ${String(err)}`,
        { cause: err },
      );
    }
    try {
      if (!this.readonly) migrate(db);
      this.conn = {
        db,
        st: prepareStatements(db),
        writer: new SqliteWriter(db),
        listStatements: new Map(),
        outbox: prepareOutboxStatements(db),
        monitors: prepareMonitorStatements(db),
      };
    } catch (err) {
      db.close();
      throw err;
    }
  }

  async close(): Promise<void> {
    const conn = this.conn;
    if (!conn) return;
    while (this.pending.length > 0) this.flush();
    this.conn = null;
    conn.db.close();
    if (this.lockPath) releaseRunnerLock(this.lockPath);
    this.lockPath = undefined;
  }

  private lockPath: string | undefined;

  sharedLocation(): { kind: 'sqlite'; path: string } | null {
    return isMemoryPath(this.path) ? null : { kind: 'sqlite', path: this.path };
  }

  /** One process drives a database file's agents (see runner-lock.ts); in-memory databases need no lock. */
  async acquireRunnerLock(): Promise<void> {
    if (this.readonly) throw new AgentryError('invalid_state', 'A read-only SQLite storage cannot run agents');
    if (this.lockPath || isMemoryPath(this.path)) return;
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

  // group commit

  private pending: PendingWrite[] = [];
  private flushScheduled = false;

  /**
   * Queues a write for the next batch. Writes issued in the same turn of the event loop share one IMMEDIATE
   * transaction, and each stays all-or-nothing on its own (see SqliteWriter.runBatch) while the commit (and its WAL
   * write) is paid once per batch. The promise settles after the batch has committed.
   */
  private write<K extends WriteOp>(op: K, ...args: WriteOps[K]): Promise<WriteResults[K]> {
    return new Promise((resolve, reject) => {
      if (!this.conn) {
        reject(new AgentryError('internal_error', 'sqliteStorage: the storage is closed'));
        return;
      }
      if (this.readonly) {
        reject(new AgentryError('invalid_state', `This SQLite storage is read-only (${op} refused)`));
        return;
      }
      this.pending.push({ request: { op, args } as WriteRequest, resolve: resolve as (v: unknown) => void, reject });
      this.scheduleFlush();
    });
  }

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => {
      this.flushScheduled = false;
      this.flush();
    });
  }

  /** Commits the next batch; a bounded one, so the rest waits for the next turn of the event loop. */
  private flush(): void {
    const conn = this.conn;
    if (this.pending.length === 0 || !conn) return;
    const batch =
      this.pending.length <= MAX_WRITES_PER_COMMIT ? this.pending : this.pending.splice(0, MAX_WRITES_PER_COMMIT);
    if (batch === this.pending) this.pending = [];
    else this.scheduleFlush();
    const outcome = conn.writer.runBatch(batch.map((w) => w.request));
    // The storage's side of the batch, before anyone hears of it: a settlement's hold goes when its write has
    // committed, together with the balance the batch left, so a debit is never counted twice nor missed. (A write
    // that failed changed nothing, and its holds stay for the caller to release.)
    for (const [accountId, balance] of outcome.balances) this.knownBalances.set(accountId, balance);
    batch.forEach(({ request: r }, i) => {
      const o = outcome.outcomes[i]!;
      if (!o.ok) return;
      if (r.op === 'settle') for (const s of r.args[0]) this.dropReservation(s.reservation_id);
      else if (r.op === 'commitStep')
        for (const s of r.args[0].settlements ?? []) this.dropReservation(s.reservation_id);
      else if (r.op === 'deleteAgentTree') this.forgetAgents(o.value as string[]);
    });
    batch.forEach((w, i) => {
      const o = outcome.outcomes[i]!;
      if (o.ok) w.resolve(this.withHolds(w.request.op, o.value));
      else w.reject(o.error);
    });
  }

  /** Rows from the writer carry no holds; these live here. */
  private withHolds(op: WriteOp, value: unknown): unknown {
    if (op === 'setSubscription' || op === 'addCredits') {
      const account = value as AccountRow | null;
      if (account) account.reserved = this.heldByAccount.get(account.id) ?? 0;
    } else if (op === 'changeStatus') {
      const agent = value as AgentRow | null;
      if (agent) agent.tree_reserved = this.heldByTree.get(agent.agent_id) ?? 0;
    } else if (op === 'commitStep') {
      const agent = (value as StepCommitResult).agent;
      if (agent) agent.tree_reserved = this.heldByTree.get(agent.agent_id) ?? 0;
    }
    return value;
  }

  // accounts and credits

  async createAccount(account: AccountRow): Promise<void> {
    await this.write('createAccount', account);
  }

  async getAccount(id: string): Promise<AccountRow | null> {
    const r = this.s.getAccount.get(id);
    return r ? this.account(r) : null;
  }

  async listAccounts(): Promise<AccountRow[]> {
    return this.s.listAccounts.all().map((r) => this.account(r));
  }

  async setSubscription(id: string, active: boolean): Promise<AccountRow | null> {
    return this.write('setSubscription', id, active);
  }

  async addCredits(entry: LedgerRow): Promise<AccountRow | null> {
    return this.write('addCredits', entry);
  }

  async listLedger(accountId: string): Promise<LedgerRow[]> {
    return this.s.listLedger.all(accountId).map(ledgerRowOf);
  }

  async listAgentLedger(agentId: string, limit: number): Promise<AgentLedger> {
    // One row past the limit says whether older rows were left out.
    const newest = this.s.listAgentLedgerNewest.all(agentId, limit + 1);
    return agentLedgerOf(newest, limit);
  }

  async listLedgerPage(accountId: string, query: { limit: number; before?: number }): Promise<LedgerPage> {
    // One row past the limit says whether there is an older page.
    const newest = this.s.listLedgerPage.all(accountId, query.before ?? Number.MAX_SAFE_INTEGER, query.limit + 1);
    const rows = newest.slice(0, query.limit).map((r) => ledgerRowOf(r) as LedgerRow & { seq: number });
    return { rows, next_before: newest.length > query.limit ? rows[rows.length - 1]!.seq : null };
  }

  async sumLedgerSpend(accountId: string): Promise<LedgerSpendRow[]> {
    return this.s.sumLedgerSpend.all(accountId);
  }

  /*
   * Holds live in this process's memory, not in the file: a SQLite database is served by one runtime process, and a
   * hold never outlives the process that took it (recovery releases them all). Checking and taking a hold is then a
   * read or two and no write. A hold is dropped when the batch that applies its settlement comes back from the
   * writer, so a debit that is queued but not yet committed is still covered by its hold: the available balance can
   * never be counted twice.
   */
  private readonly holds = new Map<string, ReservationRequest>();
  /** One goal search at a time per account (storage/search.ts). */
  private readonly searchQueue = new SearchQueue();
  private readonly heldByAccount = new Map<string, number>();
  private readonly heldByTree = new Map<string, number>();
  /** `max_credits` of the roots seen, by root id (null: no cap). */
  private readonly treeCaps = new Map<string, number | null>();
  /** Balances as this process last read or wrote them (see reserveNow). */
  private readonly knownBalances = new Map<string, number>();

  async reserve(request: ReservationRequest): Promise<ReservationRefusal | null> {
    return this.reserveNow(request);
  }

  reserveNow(r: ReservationRequest): ReservationRefusal | null {
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
    return this.write('settle', settlements);
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

  /** Deleted agents take their holds and their tree's cap with them. */
  private forgetAgents(ids: readonly string[]): void {
    const deleted = new Set(ids);
    for (const id of ids) this.treeCaps.delete(id);
    for (const [id, r] of this.holds) if (deleted.has(r.agent_id)) this.dropReservation(id);
  }

  /** An account row with its holds, which live in memory. */
  private account(r: AccountRecord): AccountRow {
    const a = toAccount(r);
    a.reserved = this.heldByAccount.get(a.id) ?? 0;
    return a;
  }

  /** An agent row with its tree's holds, which live in memory. */
  private readonly agent = (tuple: AgentTuple): AgentRow => {
    const a = toAgent(tuple);
    a.tree_reserved = this.heldByTree.get(a.agent_id) ?? 0;
    return a;
  };

  // api keys

  async insertApiKey(key: ApiKeyRow): Promise<void> {
    await this.write('insertApiKey', key);
  }

  async listApiKeys(accountId: string): Promise<ApiKeyRow[]> {
    return this.s.listApiKeys.all(accountId);
  }

  async deleteApiKey(accountId: string, keyId: string): Promise<boolean> {
    return this.write('deleteApiKey', accountId, keyId);
  }

  async touchApiKey(hash: string, at: string): Promise<void> {
    await this.write('touchApiKey', hash, at);
  }

  async apiKeysLastUsed(accountId: string): Promise<Record<string, string>> {
    return Object.fromEntries(this.s.apiKeysLastUsed.all(accountId).map((r) => [r.id, r.last_used_at]));
  }

  async findApiKeyByHash(hash: string): Promise<ApiKeyRow | null> {
    return this.s.apiKeyByHash.get(hash) ?? null;
  }

  async findAccountByKeyHash(hash: string): Promise<AccountRow | null> {
    const r = this.s.accountByKeyHash.get(hash);
    return r ? this.account(r) : null;
  }

  // agents

  async insertAgents(agents: AgentRow[], messages: MessageRow[], turns: TurnRow[]): Promise<void> {
    await this.write('insertAgents', agents, messages, turns);
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

  async searchAgents(query: AgentSearch): Promise<AgentSearchPage> {
    const where = ['account_id = ?'];
    const params: Bind[] = [query.account_id];
    if (query.parent_id === null) where.push('parent_id IS NULL');
    else if (query.parent_id !== undefined) {
      where.push('parent_id = ?');
      params.push(query.parent_id);
    }
    if (query.status !== undefined) {
      where.push('status = ?');
      params.push(query.status);
    }
    if (query.goal_contains !== undefined) {
      return this.searchQueue.run(query.account_id, () => this.searchGoals(query, where, params));
    }
    const filter = `WHERE ${where.join(' AND ')}`;
    const { db } = this.c;
    // A read of its own: two statements on one connection see the same committed state (writes are this thread's).
    const total =
      db.prepare<Bind[], { n: number }>(`SELECT count(*) AS n FROM agents ${filter}`).get(...params)?.n ?? 0;
    const rows = db
      .prepare<Bind[], AgentTuple>(
        `${SELECT_AGENTS} ${filter} ORDER BY seq ${query.order === 'newest' ? 'DESC' : 'ASC'} LIMIT ? OFFSET ?`,
      )
      .raw()
      .all(...params, query.limit, query.offset);
    return { rows: rows.map(this.agent), total };
  }

  /**
   * A goal search through the trigram index (migration 8), a slice of the account's positions at a time: each slice
   * looks at no more than {@link SEARCH_SLICE_ROWS} index rows, the budget is checked and other requests run between
   * slices, and it stops at {@link MAX_SEARCH_MATCHES} (storage/search.ts).
   */
  private async searchGoals(query: AgentSearch, where: string[], params: Bind[]): Promise<AgentSearchPage> {
    const needle = searchNeedle(query.goal_contains!);
    // The index answers LIKE for the needle's start (a long pattern costs FTS5 one doclist per trigram, for every row),
    // `_` standing for the needle's own `%` and `_`; agentry_contains() then checks the whole needle exactly against
    // the indexed text, which is ASCII-lowered already (migration 8).
    const pattern = `%${needle.slice(0, INDEX_PATTERN_CHARS).replace(/[%_]/g, '_')}%`;
    const newest = query.order === 'newest';
    const { db } = this.c;
    const filter = where.map((w) => `a.${w}`).join(' AND ');
    // CROSS JOIN keeps the index as the outer loop (LIKE and the position range inside FTS5, agents by primary key):
    // the other order asks FTS5 for a whole LIKE once per agent row.
    const slice = db
      .prepare<Bind[], number>(
        `SELECT g.rowid FROM agent_goal_search g CROSS JOIN agents a ON a.seq = g.rowid
         WHERE g.goal LIKE ? AND g.rowid >= ? AND g.rowid <= ? AND ${filter} AND agentry_contains(g.goal, ?)
         ORDER BY g.rowid ${newest ? 'DESC' : 'ASC'}`,
      )
      .pluck();
    // The next position of the account's matching kind past the slice: slices skip other accounts' runs of agents.
    const next = db
      .prepare<Bind[], number | null>(
        `SELECT ${newest ? 'max' : 'min'}(seq) FROM agents WHERE ${where.join(' AND ')} AND seq ${newest ? '<' : '>'} ?`,
      )
      .pluck();
    const expired = searchDeadline(query.budget_ms);
    const found: number[] = [];
    let truncated = false;
    let from = next.get(...params, newest ? Number.MAX_SAFE_INTEGER : 0);
    while (from !== null && from !== undefined) {
      const [lo, hi] = newest ? [from - SEARCH_SLICE_ROWS + 1, from] : [from, from + SEARCH_SLICE_ROWS - 1];
      for (const seq of slice.iterate(pattern, lo, hi, ...params, needle)) {
        found.push(seq);
        if (found.length > MAX_SEARCH_MATCHES) break;
      }
      if (found.length > MAX_SEARCH_MATCHES) {
        found.length = MAX_SEARCH_MATCHES;
        truncated = true;
        break;
      }
      from = next.get(...params, newest ? lo : hi);
      if (from === null || from === undefined) break;
      if (expired()) {
        truncated = true;
        break;
      }
      await yieldToOthers();
    }
    const pageSeqs = found.slice(query.offset, query.offset + query.limit);
    const bySeq = new Map(
      db
        .prepare<[string], AgentTuple>(`${SELECT_AGENTS} WHERE seq IN (SELECT value FROM json_each(?))`)
        .raw()
        .all(JSON.stringify(pageSeqs))
        .map((t) => [t[0], t] as const),
    );
    const rows = pageSeqs.flatMap((seq) => {
      const t = bySeq.get(seq);
      return t ? [this.agent(t)] : []; // deleted while the search yielded
    });
    return { rows, total: found.length, ...(truncated ? { truncated: true as const } : {}) };
  }

  async listAgentIdsByStatus(statuses: readonly AgentStatus[]): Promise<string[]> {
    return this.s.idsByStatus.all(JSON.stringify(statuses));
  }

  async changeStatus(agentId: string, change: StatusChange, updatedAt: string): Promise<AgentRow | null> {
    checkStatusChange(change);
    return this.write('changeStatus', agentId, change, updatedAt);
  }

  async listStatusMarks(agentId: string): Promise<StatusMarkRow[]> {
    return this.s.listStatusMarks.all(agentId);
  }

  async deleteAgentTree(agentId: string): Promise<string[]> {
    return this.write('deleteAgentTree', agentId);
  }

  async listDescendantIds(agentId: string): Promise<string[]> {
    return this.s.descendants.all(agentId);
  }

  async treeTotals(agentIds: readonly string[]): Promise<TreeTotalsRow[]> {
    if (agentIds.length === 0) return [];
    return foldTreeTotals(this.s.treeTotals.all(JSON.stringify([...new Set(agentIds)])));
  }

  async countAgentsByStatus(): Promise<Partial<Record<AgentStatus, number>>> {
    const counts: Partial<Record<AgentStatus, number>> = {};
    for (const r of this.s.countByStatus.all()) counts[r.status] = r.n;
    return counts;
  }

  async listFinishedRoots(query: FinishedRootsQuery): Promise<string[]> {
    const stmt = query.withTranscript ? this.s.finishedRootsWithTranscript : this.s.finishedRoots;
    return stmt.all(JSON.stringify(query.statuses), query.updatedBefore, query.limit);
  }

  async purgeAgentData(agentIds: readonly string[]): Promise<number> {
    if (agentIds.length === 0) return 0;
    return this.write('purgeAgentData', agentIds);
  }

  /**
   * Hands the free pages back to the file system. A database made with `auto_vacuum = INCREMENTAL` (every new one)
   * frees them with `incremental_vacuum`; an older one keeps them for reuse until `agentry gc` converts it.
   */
  async reclaimSpace(): Promise<void> {
    const db = this.c.db;
    if (Number(db.pragma('auto_vacuum', { simple: true })) !== 2) return;
    db.pragma('incremental_vacuum');
    // The freed pages leave the file at a checkpoint; readers in the way only postpone it to a later one.
    db.pragma('wal_checkpoint(TRUNCATE)');
  }

  /**
   * Converts a database made before `auto_vacuum = INCREMENTAL` with one VACUUM (it rewrites the file: seconds per
   * hundred megabytes, and no writer may run meanwhile). Returns whether it had to.
   */
  async enableIncrementalVacuum(): Promise<boolean> {
    const db = this.c.db;
    if (Number(db.pragma('auto_vacuum', { simple: true })) === 2) return false;
    db.pragma('auto_vacuum = INCREMENTAL');
    db.exec('VACUUM');
    return true;
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

  async listAgentToolCalls(agentId: string, limit: number): Promise<AgentToolCalls> {
    const newest = this.s.listAgentToolCallsNewest.all(agentId, limit + 1);
    return { rows: newest.slice(0, limit).reverse().map(toToolCall), truncated: newest.length > limit };
  }

  async putToolCalls(calls: ToolCallRow[], onlyWhile?: AgentStatus): Promise<boolean> {
    return this.write('putToolCalls', calls, onlyWhile);
  }

  async commitStep(commit: StepCommit): Promise<StepCommitResult> {
    return this.write('commitStep', commit);
  }

  // tool state

  async putToolState(agentId: string, toolUseId: string, state: string): Promise<void> {
    await this.write('putToolState', agentId, toolUseId, state);
  }

  async getToolState(agentId: string, toolUseId: string): Promise<string | null> {
    return this.s.getToolState.get(agentId, toolUseId) ?? null;
  }

  // artifacts

  async putArtifact(row: ArtifactRow, data: Uint8Array, limits: ArtifactLimits): Promise<void> {
    checkArtifact(row, data, limits);
    const refusal = await this.write('putArtifact', row, data, limits);
    if (refusal === null) return;
    if (refusal.reason === 'no_agent') throw notFound('Agent', row.agent_id);
    if (refusal.reason === 'exists') throw artifactExists(row);
    throw agentArtifactsTooLarge(row, refusal.stored, limits.maxBytesPerAgent);
  }

  async listArtifacts(agentId: string): Promise<ArtifactRow[]> {
    return this.s.listArtifacts.all(agentId);
  }

  async getArtifact(agentId: string, artifactId: string): Promise<{ row: ArtifactRow; data: Uint8Array } | null> {
    const r = this.s.getArtifact.get(agentId, artifactId);
    if (!r) return null;
    const { data, ...row } = r;
    // A plain Uint8Array, as memoryStorage gives (better-sqlite3 answers a Buffer).
    return { row, data: new Uint8Array(data) };
  }

  // pages read

  async recordPageRead(read: PageReadRow, text: string): Promise<void> {
    checkPageRead(read, text);
    await this.write('recordPageRead', read, text);
  }

  async listPageReads(agentIds: readonly string[]): Promise<PageReadRow[]> {
    // One statement however many ids: they are bound as one JSON array (ID_SET), not as one parameter each.
    return agentIds.length === 0 ? [] : this.s.listPageReads.all(JSON.stringify(agentIds));
  }

  async getPageText(contentSha256: string): Promise<string | null> {
    return this.s.getPageText.get(contentSha256) ?? null;
  }

  // outbox (message_person)

  async queueOutbox(row: OutboxRow, limits: OutboxRateLimits): Promise<OutboxRefusal | null> {
    return this.write('queueOutbox', row, limits);
  }

  async finishOutbox(messageId: string, outcome: OutboxOutcome): Promise<OutboxRow | null> {
    return this.write('finishOutbox', messageId, outcome);
  }

  async listOutbox(agentId: string): Promise<OutboxRow[]> {
    return this.c.outbox.listOfAgent.all(agentId);
  }

  async countOutbox(agentId: string): Promise<Partial<Record<OutboxStatus, number>>> {
    const counts: Partial<Record<OutboxStatus, number>> = {};
    for (const r of this.c.outbox.countOfAgent.all(agentId)) counts[r.status] = r.n;
    return counts;
  }

  async markQueuedOutboxUnknown(error: string): Promise<OutboxRow[]> {
    return this.write('markQueuedOutboxUnknown', error);
  }

  async putOptOut(row: OptOutRow): Promise<void> {
    await this.write('putOptOut', row);
  }

  async getOptOut(accountId: string, channel: OutboxChannel, recipient: string): Promise<OptOutRow | null> {
    return this.c.outbox.getOptOut.get(accountId, channel, recipient) ?? null;
  }

  // idempotency keys

  // monitors and durable timers

  async putTimer(timer: TimerRow): Promise<void> {
    await this.write('putTimer', timer);
  }

  async deleteTimer(timerId: string, dueAt?: number): Promise<boolean> {
    return this.write('deleteTimer', timerId, dueAt);
  }

  async listDueTimers(dueBy: number, limit: number): Promise<TimerRow[]> {
    return this.c.monitors.dueTimers.all(dueBy, limit);
  }

  async nextTimerDue(): Promise<number | null> {
    return this.c.monitors.nextDue.get() ?? null;
  }

  async insertMonitor(monitor: MonitorRow, timer: TimerRow | null): Promise<MonitorRow> {
    const stored = await this.write('insertMonitor', monitor, timer);
    if (stored === 'no_agent') throw notFound('Agent', monitor.agent_id);
    return stored;
  }

  async getMonitor(monitorId: string): Promise<MonitorRow | null> {
    const row = this.c.monitors.getMonitor.get(monitorId);
    return row ? monitorFromSql(row) : null;
  }

  async listMonitors(agentId: string): Promise<MonitorRow[]> {
    return this.c.monitors.listMonitors.all(agentId).map(monitorFromSql);
  }

  async updateMonitor(
    monitor: MonitorRow,
    also: { change?: Omit<MonitorChangeRow, 'seq'>; timer?: TimerRow; dropTimer?: string } = {},
  ): Promise<boolean> {
    return this.write('updateMonitor', monitor, also);
  }

  async nextMonitorChange(agentId: string, monitorId?: string): Promise<MonitorChangeRow | null> {
    const m = this.c.monitors;
    return (monitorId === undefined ? m.nextChange.get(agentId) : m.nextChangeOf.get(agentId, monitorId)) ?? null;
  }

  async deleteMonitorChange(seq: number): Promise<void> {
    await this.write('deleteMonitorChange', seq);
  }

  async putConsoleSession(row: ConsoleSessionRow): Promise<void> {
    await this.write('putConsoleSession', row);
  }

  async getConsoleSession(idHash: string): Promise<ConsoleSessionRow | null> {
    return this.s.getConsoleSession.get(idHash) ?? null;
  }

  async listLiveConsoleSessions(accountId: string, now: string): Promise<ConsoleSessionRow[]> {
    return this.s.listLiveConsoleSessions.all(accountId, now);
  }

  async deleteExpiredConsoleSessions(now: string): Promise<number> {
    return this.write('deleteExpiredConsoleSessions', now);
  }

  async getIdempotency(accountId: string, key: string): Promise<IdempotencyRecord | null> {
    return this.s.getIdempotency.get(accountId, key) ?? null;
  }

  async putIdempotency(record: IdempotencyRecord): Promise<void> {
    await this.write('putIdempotency', record);
  }

  changeCounter(): number {
    return this.s.dataVersion.get() as number;
  }
}

/** The SQLite storage, with what only it can tell. */
export interface SqliteStorageAdapter extends StorageAdapter {
  /**
   * A number that changes whenever another connection (of this process or another) commits to the database file:
   * SQLite's `PRAGMA data_version`. Equal answers mean that nothing this connection reads has changed in between,
   * so whatever was read then may still be served. A read-only reader (the HTTP server's poll thread) uses it to keep
   * its answers until the runtime writes again.
   */
  changeCounter(): number;
}

/**
 * SQLite storage (the default): one file, WAL mode, survives restarts. `init()` creates or migrates the schema.
 *
 * @example
 * const runtime = await AgentRuntime.open({ storage: sqliteStorage({ path: './agentry.db' }), model });
 */
export function sqliteStorage(options: SqliteStorageOptions = {}): SqliteStorageAdapter {
  const parsed = OptionsSchema.safeParse(options);
  if (!parsed.success) {
    throw new AgentryError('invalid_request', `Invalid sqliteStorage options: ${z.prettifyError(parsed.error)}`, {
      details: parsed.error.issues,
      cause: parsed.error,
    });
  }
  const { path = './agentry.db', busyTimeoutMs = 5000, readonly = false } = parsed.data;
  return new SqliteStorage(path, busyTimeoutMs, readonly);
}

/**
 * A ledger row as the adapter contract has it: the prompt-cache token counts only where they are not 0, the latency
 * only where it was measured.
 */
export function ledgerRowOf(row: LedgerRow): LedgerRow {
  const { tokens_cache_write: write, tokens_cache_read: read, latency_ms: latency, ...rest } = row;
  return {
    ...rest,
    ...(write ? { tokens_cache_write: write } : {}),
    ...(read ? { tokens_cache_read: read } : {}),
    // Null in the column where it was not measured: absent from the row, as the other adapters answer.
    ...(typeof latency === 'number' ? { latency_ms: latency } : {}),
  };
}

/**
 * An agent's ledger from at most `limit + 1` of its rows read newest first: the newest `limit` of them oldest first,
 * and `truncated` when the extra row shows there were more.
 */
export function agentLedgerOf(newest: LedgerRow[], limit: number): AgentLedger {
  const rows = newest.slice(0, limit).reverse().map(ledgerRowOf);
  return { rows, truncated: newest.length > limit };
}
