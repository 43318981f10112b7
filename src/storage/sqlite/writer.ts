/**
 * @module storage/sqlite/writer
 * Every write of the SQLite storage, as data: a {@link WriteRequest} names an operation and carries its arguments,
 * and {@link SqliteWriter.runBatch} commits a batch of them in one transaction (group commit). It knows nothing of the
 * holds that live in the storage's memory; the storage applies their side of a batch from its {@link BatchOutcome}.
 * Writes as plain data keep the transaction logic in one place and free of the storage's in-memory state.
 */
import type Database from 'better-sqlite3';
import type {
  ConsoleSessionRow,
  AccountRow,
  AgentRow,
  ApiKeyRow,
  ArtifactLimits,
  ArtifactRow,
  IdempotencyRecord,
  LedgerRow,
  MessageRow,
  MonitorChangeRow,
  MonitorRow,
  OptOutRow,
  OutboxOutcome,
  OutboxRateLimits,
  OutboxRefusal,
  OutboxRow,
  PageReadRow,
  Settlement,
  StatusChange,
  StepCommit,
  StepCommitResult,
  TimerRow,
  ToolCallRow,
  TurnRow,
} from '../adapter.js';
import {
  changeStatusParams,
  patchWithStatusParams,
  flag,
  prepareStatements,
  toAccount,
  toAgent,
  toolCallParams,
  type Statements,
} from './statements.js';
import type { AgentStatus } from '../../base/status.js';
import { MAX_STATUS_MARKS } from '../adapter.js';
import { AgentInserts } from './agent-inserts.js';
import {
  deleteMonitorsOf,
  insertMonitor,
  prepareMonitorStatements,
  putTimer,
  updateMonitor,
  type MonitorStatements,
} from './monitors.js';
import { finishOutbox, prepareOutboxStatements, putOptOut, queueOutbox, type OutboxStatements } from './outbox.js';

/** The write operations and their arguments, as the storage sends them. */
export interface WriteOps {
  createAccount: [account: AccountRow];
  setSubscription: [accountId: string, active: boolean];
  addCredits: [entry: LedgerRow];
  settle: [settlements: Settlement[]];
  insertApiKey: [key: ApiKeyRow];
  deleteApiKey: [accountId: string, keyId: string];
  touchApiKey: [hash: string, at: string];
  putConsoleSession: [row: ConsoleSessionRow];
  deleteExpiredConsoleSessions: [now: string];
  insertAgents: [agents: AgentRow[], messages: MessageRow[], turns: TurnRow[]];
  changeStatus: [agentId: string, change: StatusChange, updatedAt: string];
  deleteAgentTree: [agentId: string];
  purgeAgentData: [agentIds: readonly string[]];
  putToolCalls: [calls: ToolCallRow[], onlyWhile: AgentStatus | undefined];
  commitStep: [commit: StepCommit];
  putToolState: [agentId: string, toolUseId: string, state: string];
  putArtifact: [row: ArtifactRow, data: Uint8Array, limits: ArtifactLimits];
  recordPageRead: [read: PageReadRow, text: string];
  putIdempotency: [record: IdempotencyRecord];
  // outbox (message_person)
  queueOutbox: [row: OutboxRow, limits: OutboxRateLimits];
  finishOutbox: [messageId: string, outcome: OutboxOutcome];
  markQueuedOutboxUnknown: [error: string];
  putOptOut: [row: OptOutRow];
  // monitors and durable timers
  putTimer: [timer: TimerRow];
  deleteTimer: [timerId: string, dueAt: number | undefined];
  insertMonitor: [monitor: MonitorRow, timer: TimerRow | null];
  updateMonitor: [
    monitor: MonitorRow,
    also: { change?: Omit<MonitorChangeRow, 'seq'>; timer?: TimerRow; dropTimer?: string },
  ];
  deleteMonitorChange: [seq: number];
}

/** What each operation returns. Account and agent rows come back without the in-memory holds (reserved = 0). */
export interface WriteResults {
  createAccount: void;
  setSubscription: AccountRow | null;
  addCredits: AccountRow | null;
  settle: number[];
  insertApiKey: void;
  deleteApiKey: boolean;
  touchApiKey: void;
  putConsoleSession: void;
  deleteExpiredConsoleSessions: number;
  insertAgents: void;
  changeStatus: AgentRow | null;
  deleteAgentTree: string[];
  purgeAgentData: number;
  putToolCalls: boolean;
  commitStep: StepCommitResult;
  putToolState: void;
  /** Null when stored; otherwise why not (nothing was written), for the storage to throw to its caller. */
  putArtifact: ArtifactRefusal | null;
  recordPageRead: void;
  putIdempotency: void;
  // outbox (message_person)
  /** Null when recorded; otherwise why not (nothing was written), returned like an artifact's refusal. */
  queueOutbox: OutboxRefusal | null;
  finishOutbox: OutboxRow | null;
  markQueuedOutboxUnknown: OutboxRow[];
  putOptOut: void;
  // monitors and durable timers
  putTimer: void;
  deleteTimer: boolean;
  /** The stored row, or 'no_agent' (nothing written) for the storage to throw `not_found`. */
  insertMonitor: MonitorRow | 'no_agent';
  updateMonitor: boolean;
  deleteMonitorChange: void;
}

/**
 * Why an artifact was not stored. Returned rather than thrown: a throw would roll back the whole batch and redo every
 * write of it alone, and a refusal is an ordinary answer, not a failure.
 */
export type ArtifactRefusal = { reason: 'no_agent' } | { reason: 'exists' } | { reason: 'agent_total'; stored: number };

export type WriteOp = keyof WriteOps;
export type WriteRequest = { [K in WriteOp]: { op: K; args: WriteOps[K] } }[WriteOp];

export type WriteOutcome = { ok: true; value: unknown } | { ok: false; error: unknown };

export interface BatchOutcome {
  /** One per request, in order. */
  outcomes: WriteOutcome[];
  /** Account balances as committed by this batch (debits and top-ups), for the storage's reservation checks. */
  balances: Array<[accountId: string, balance: number]>;
}

/** Settlements and step commits touch the account and tree totals only through the batch's deferred sums. */
const DEFERRABLE: ReadonlySet<WriteOp> = new Set(['settle', 'commitStep']);

interface Deferred {
  balances: Map<string, { balance: number; debit: number }>;
  treeSpent: Map<string, number>;
}
const emptyDeferred = (): Deferred => ({ balances: new Map(), treeSpent: new Map() });

export class SqliteWriter {
  private readonly s: Statements;
  /**
   * Debits of the hot rows (the account's balance, the root's tree_spent) summed over a batch and written once at its
   * end, instead of once per settlement. Settlements read the balance through {@link balanceInBatch}.
   */
  private deferred = emptyDeferred();
  /** Balances written by the current batch. */
  private written = new Map<string, number>();

  /** message_person's tables (storage/sqlite/outbox.ts). */
  private readonly outbox: OutboxStatements;

  /** Agent rows many to a statement (storage/sqlite/agent-inserts.ts). */
  private readonly agentInserts: AgentInserts;

  constructor(private readonly db: Database.Database) {
    this.s = prepareStatements(db);
    this.agentInserts = new AgentInserts(db);
    this.outbox = prepareOutboxStatements(db);
    this.monitors = prepareMonitorStatements(db);
  }

  /** Timers and monitors' tables (storage/sqlite/monitors.ts). */
  private readonly monitors: MonitorStatements;

  /**
   * Commits the batch in one IMMEDIATE transaction. Writes validate before they write, so one rarely throws; when one
   * does, the batch is rolled back and every write is redone in a transaction of its own, so each still commits or
   * fails alone.
   */
  runBatch(batch: readonly WriteRequest[]): BatchOutcome {
    this.written = new Map();
    const values: unknown[] = [];
    try {
      this.s.begin.run();
      for (const w of batch) {
        if (!DEFERRABLE.has(w.op)) this.writeDeferred();
        values.push(this.run(w));
      }
      this.writeDeferred();
      this.s.commit.run();
    } catch {
      this.rollback();
      return this.runOneByOne(batch);
    }
    return { outcomes: values.map((value) => ({ ok: true, value })), balances: [...this.written] };
  }

  private runOneByOne(batch: readonly WriteRequest[]): BatchOutcome {
    this.written = new Map();
    const outcomes: WriteOutcome[] = [];
    for (const w of batch) {
      const committed = new Map(this.written);
      try {
        this.s.begin.run();
        const value = this.run(w);
        this.writeDeferred();
        this.s.commit.run();
        outcomes.push({ ok: true, value });
      } catch (error) {
        this.rollback();
        this.written = committed;
        outcomes.push({ ok: false, error });
      }
    }
    return { outcomes, balances: [...this.written] };
  }

  private rollback(): void {
    if (this.db.inTransaction) this.db.exec('ROLLBACK');
    this.deferred = emptyDeferred();
  }

  private run(w: WriteRequest): unknown {
    const s = this.s;
    switch (w.op) {
      case 'createAccount':
        return this.createAccount(...w.args);
      case 'setSubscription': {
        const r = s.setSubscription.get(flag(w.args[1]), w.args[0]);
        return r ? toAccount(r) : null;
      }
      case 'addCredits':
        return this.addCredits(...w.args);
      case 'settle':
        return w.args[0].map((settlement) => this.applySettlement(settlement));
      case 'insertApiKey': {
        const [k] = w.args;
        s.upsertApiKey.run(k.id, k.account_id, k.name, k.hash, k.last4, k.created_at);
        return undefined;
      }
      case 'deleteApiKey':
        return s.deleteApiKey.run(w.args[1], w.args[0]).changes > 0;
      case 'touchApiKey':
        s.touchApiKey.run(w.args[1], w.args[0], w.args[1]);
        return undefined;
      case 'putConsoleSession': {
        const [r] = w.args;
        s.putConsoleSession.run(r.id_hash, r.account_id, r.key_hash, r.key_id, r.expires_at, r.ended);
        return undefined;
      }
      case 'deleteExpiredConsoleSessions':
        return s.deleteExpiredConsoleSessions.run(w.args[0]).changes;
      case 'insertAgents':
        return this.insertAgents(...w.args);
      case 'changeStatus':
        return this.changeStatus(...w.args);
      case 'deleteAgentTree':
        return this.deleteAgentTree(...w.args);
      case 'purgeAgentData':
        return this.purgeAgentData(...w.args);
      case 'putToolCalls': {
        const [calls, onlyWhile] = w.args;
        if (onlyWhile !== undefined && calls.some((c) => s.agentStatus.get(c.agent_id) !== onlyWhile)) return false;
        for (const c of calls) s.upsertToolCallOfLiveAgent.run(...toolCallParams(c), c.agent_id);
        return true;
      }
      case 'commitStep':
        return this.commitStep(...w.args);
      case 'putToolState': {
        const [agentId, toolUseId, state] = w.args;
        s.upsertToolStateOfLiveAgent.run(agentId, toolUseId, state, agentId);
        return undefined;
      }
      case 'putArtifact':
        return this.putArtifact(...w.args);
      case 'recordPageRead': {
        const [r, text] = w.args;
        if (s.agentExists.get(r.agent_id) === undefined) return undefined;
        s.insertPage.run(r.content_sha256, text);
        s.insertPageRead.run(r.agent_id, r.tool_use_id, r.url, r.final_url, r.title, r.content_sha256, r.retrieved_at);
        return undefined;
      }
      case 'putIdempotency': {
        const [r] = w.args;
        s.putIdempotency.run(r.account_id, r.key, r.request_hash, r.response, r.status, r.created_at);
        return undefined;
      }
      // outbox (message_person)
      case 'queueOutbox':
        return queueOutbox(this.outbox, ...w.args);
      case 'finishOutbox':
        return finishOutbox(this.outbox, ...w.args);
      case 'markQueuedOutboxUnknown':
        return this.outbox.markQueuedUnknown.all(...w.args);
      case 'putOptOut':
        putOptOut(this.outbox, ...w.args);
        return undefined;
      // monitors and durable timers
      case 'putTimer':
        putTimer(this.monitors, ...w.args);
        return undefined;
      case 'deleteTimer': {
        const [timerId, dueAt] = w.args;
        const m = this.monitors;
        return (dueAt === undefined ? m.deleteTimer.run(timerId) : m.deleteTimerIfDue.run(timerId, dueAt)).changes > 0;
      }
      case 'insertMonitor':
        return insertMonitor(this.monitors, ...w.args);
      case 'updateMonitor':
        return updateMonitor(this.monitors, ...w.args);
      case 'deleteMonitorChange':
        this.monitors.deleteChange.run(w.args[0]);
        return undefined;
    }
  }

  private writeDeferred(): void {
    const d = this.deferred;
    if (d.balances.size === 0 && d.treeSpent.size === 0) return;
    for (const [id, b] of d.balances) {
      if (b.debit > 0) this.s.debit.run(b.debit, id);
      this.written.set(id, b.balance);
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

  private createAccount(a: AccountRow): void {
    if (this.s.accountExists.get(a.id) !== undefined) throw new Error(`account ${a.id} exists`);
    this.s.insertAccount.run(a.id, a.name, flag(a.subscription_active), a.balance, a.created_at);
    if (a.balance > 0) this.s.insertLedger.run(a.id, null, 'topup', null, 0, 0, a.balance, a.created_at, 0, 0, null);
  }

  private addCredits(e: LedgerRow): AccountRow | null {
    const r = this.s.addBalance.get(e.amount, e.account_id);
    if (!r) return null;
    this.written.set(e.account_id, r.balance);
    this.s.insertLedger.run(
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
    );
    return toAccount(r);
  }

  /**
   * Debits min(cost, balance) and writes the ledger row. The agent's own `credits_spent` is left to the caller when
   * it is `ownAgentId` (a step commit writes its agent once); the account and tree sums are deferred to the end of
   * the batch. (The hold is dropped by the storage when the batch's outcome arrives.)
   */
  private applySettlement(s: Settlement, ownAgentId?: string): number {
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
      entry.tokens_cache_write ?? 0,
      entry.tokens_cache_read ?? 0,
      entry.latency_ms ?? null,
    );
    this.deferred.treeSpent.set(s.root_id, (this.deferred.treeSpent.get(s.root_id) ?? 0) + charge);
    if (entry.agent_id && entry.agent_id !== ownAgentId) this.s.addCreditsSpent.run(charge, entry.agent_id);
    return charge;
  }

  private insertAgents(agents: AgentRow[], messages: MessageRow[], turns: TurnRow[]): void {
    const s = this.s;
    // Whether an agent exists by now: inserted in this batch, or found in the table (memoized: 10,000 children of one
    // parent cost one lookup of it, and one UPDATE of its sub_agent_count).
    const known = new Map<string, boolean>();
    const exists = (id: string): boolean => {
      let e = known.get(id);
      if (e === undefined) known.set(id, (e = s.agentExists.get(id) !== undefined));
      return e;
    };
    // As in memoryStorage: a parent is counted only if it exists when its child is inserted, so one inserted later
    // in this batch is not. Parents from outside the batch are looked up before the rows go in.
    const inBatch = new Set(agents.map((a) => a.agent_id));
    for (const a of agents) if (a.parent_id !== null && !inBatch.has(a.parent_id)) exists(a.parent_id);
    this.agentInserts.insert(agents);
    const newChildren = new Map<string, number>();
    for (const a of agents) {
      known.set(a.agent_id, true);
      if (a.parent_id !== null && known.get(a.parent_id) === true) {
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

  /** The row after the change, or null when the agent is missing or not in one of `from`. `updatedAt` null keeps it. */
  private changeStatus(agentId: string, change: StatusChange, updatedAt: string | null): AgentRow | null {
    const tuple = this.s.changeAgentStatus.get(...changeStatusParams(agentId, change, updatedAt));
    if (!tuple) return null;
    const row = toAgent(tuple);
    // A marked change keeps its mark in the same transaction (the batch's), and the agent's oldest marks past the
    // bound go.
    if (change.mark && change.from[0] !== undefined) {
      const s = this.s;
      s.insertStatusMark.run(agentId, row.updated_at, change.to, change.from[0], row.status_message);
      s.trimStatusMarks.run(agentId, agentId, MAX_STATUS_MARKS);
    }
    return row;
  }

  private deleteAgentTree(agentId: string): string[] {
    const s = this.s;
    const head = s.agentHead.get(agentId);
    if (!head) return [];
    const ids = [agentId, ...s.descendants.all(agentId)];
    const idSet = JSON.stringify(ids);
    if (head.parent_id !== null) s.addSubAgents.run(-1, head.parent_id);
    s.deleteMessagesOf.run(idSet);
    s.deleteTurnsOf.run(idSet);
    s.deleteToolCallsOf.run(idSet);
    s.deleteToolStatesOf.run(idSet);
    s.deleteArtifactDataOf.run(idSet);
    s.deleteArtifactsOf.run(idSet);
    s.deletePageReadsOf.run(idSet);
    s.deleteStatusMarksOf.run(idSet);
    deleteMonitorsOf(this.monitors, idSet);
    s.deleteAgents.run(idSet);
    return ids;
  }

  /** Retention: the agents' work goes, their rows and the ledger stay. */
  private purgeAgentData(agentIds: readonly string[]): number {
    const s = this.s;
    const idSet = JSON.stringify(agentIds);
    // An artifact's bytes are part of its row: counted once, with the artifacts.
    s.deleteArtifactDataOf.run(idSet);
    return (
      s.deleteMessagesOf.run(idSet).changes +
      s.deleteTurnsOf.run(idSet).changes +
      s.deleteToolCallsOf.run(idSet).changes +
      s.deleteToolStatesOf.run(idSet).changes +
      s.deleteArtifactsOf.run(idSet).changes +
      s.deletePageReadsOf.run(idSet).changes
    );
  }

  /** Checks what needs the data (the storage checked the rest), then writes the row and its bytes. */
  private putArtifact(row: ArtifactRow, data: Uint8Array, limits: ArtifactLimits): ArtifactRefusal | null {
    const s = this.s;
    if (s.agentExists.get(row.agent_id) === undefined) return { reason: 'no_agent' };
    if (s.artifactExists.get(row.agent_id, row.artifact_id) !== undefined) return { reason: 'exists' };
    const stored = s.artifactBytesOf.get(row.agent_id) ?? 0;
    if (stored + row.size > limits.maxBytesPerAgent) return { reason: 'agent_total', stored };
    const seq = s.insertArtifact.get(
      row.artifact_id,
      row.agent_id,
      row.account_id,
      row.name,
      row.mime_type,
      row.size,
      row.created_at,
    )!;
    s.insertArtifactData.run(seq, data);
    return null;
  }

  private commitStep(c: StepCommit): StepCommitResult {
    const s = this.s;
    const turns = c.turns ?? [];
    const first = turns.length > 0 ? turns[0]!.idx : null;
    turns.forEach((t, i) => {
      if (t.idx !== first! + i) throw new Error(`turn ${t.idx} out of order for agent ${t.agent_id}`);
    });
    const settlements = c.settlements ?? [];
    const charged = settlements.map((settlement) => this.applySettlement(settlement, c.agent_id));
    let ownCharges = 0;
    let ownTreeCharges = 0;
    settlements.forEach((settlement, i) => {
      if (settlement.ledger.agent_id === c.agent_id) ownCharges += charged[i]!;
      if (settlement.root_id === c.agent_id) ownTreeCharges += charged[i]!;
    });
    const messages = c.messages ?? [];
    const p = c.patch;
    const status = c.status;
    const from = status?.from.length === 1 ? status.from[0] : undefined;
    // One status to move from: patch and change in one statement (see patchAgentWithStatus), which answers no row
    // when that is not the whole story. Then, as always otherwise, the patch and after it the change, so that the
    // change's own fields win.
    const mergedTuple =
      status !== undefined && from !== undefined && from !== status.to
        ? s.patchAgentWithStatus.get(...patchWithStatusParams(c, status, from, messages.length, ownCharges, first))
        : undefined;
    const tuple =
      mergedTuple ??
      s.patchAgent.get(
        p.progress ?? null,
        p.status_message ?? null,
        p.plan === undefined ? 0 : 1,
        p.plan ?? null,
        p.token_count_delta ?? 0,
        messages.length,
        p.step_count_delta ?? 0,
        ownCharges,
        p.updated_at,
        c.agent_id,
        first,
        first,
      );
    if (!tuple) {
      // Throwing rolls the settlements back too: a commit whose turns do not continue the log writes nothing.
      if (s.agentExists.get(c.agent_id) !== undefined) {
        throw new Error(`turn ${first} out of order for agent ${c.agent_id}`);
      }
      return { agent: null, statusChanged: false, charged };
    }
    for (const t of turns) s.insertTurn.run(t.agent_id, t.idx, t.role, t.content, t.created_at);
    for (const m of messages) s.insertMessage.run(m.agent_id, m.message_id, m.role, m.text, m.timestamp);
    for (const call of c.tool_calls ?? []) s.upsertToolCall.run(...toolCallParams(call));

    let row: AgentRow;
    let changed: boolean;
    if (mergedTuple) {
      row = toAgent(mergedTuple);
      changed = row.status === status!.to;
    } else {
      const after = status === undefined ? null : this.changeStatus(c.agent_id, status, null);
      row = after ?? toAgent(tuple);
      changed = after !== null;
    }
    row.tree_spent += ownTreeCharges; // the file gets it with the batch's tree sums
    return { agent: row, statusChanged: changed, charged };
  }
}
