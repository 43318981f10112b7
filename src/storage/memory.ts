/**
 * @module storage/memory
 * The reference {@link StorageAdapter}: plain maps, no persistence. Each method runs synchronously to completion,
 * so every method is trivially atomic. Good for tests and throw-away runs; `sqliteStorage()` is the default.
 */
import type {
  AccountRow,
  AgentLedger,
  AgentPage,
  AgentToolCalls,
  AgentQuery,
  AgentSearch,
  AgentSearchPage,
  AgentRow,
  FinishedRootsQuery,
  ApiKeyRow,
  ArtifactLimits,
  ArtifactRow,
  IdempotencyRecord,
  ConsoleSessionRow,
  LedgerPage,
  LedgerPageRow,
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
  Settlement,
  SpawnPage,
  StatusChange,
  StatusMarkRow,
  StepCommit,
  StepCommitResult,
  StorageAdapter,
  TimerRow,
  ToolCallRow,
  TurnRow,
  TreeTotalsRow,
} from './adapter.js';
import type { AgentStatus } from '../base/status.js';
import { MAX_STATUS_MARKS } from './adapter.js';
import { notFound } from '../errors.js';
import {
  asciiLower,
  MAX_SEARCH_MATCHES,
  SEARCH_PREFIX_CHARS,
  SEARCH_SLICE_ROWS,
  SearchQueue,
  searchDeadline,
  searchNeedle,
  yieldToOthers,
} from './search.js';
import { agentArtifactsTooLarge, artifactExists, checkArtifact, checkPageRead, checkStatusChange } from './validate.js';

interface StoredAgent {
  seq: number;
  row: AgentRow;
  messages: MessageRow[];
  turns: TurnRow[];
  toolCalls: Map<string, ToolCallRow>;
  /** JSON state by tool_use_id. */
  toolStates: Map<string, string>;
  /** By artifact_id, in insertion order (a Map keeps it): oldest first. */
  artifacts: Map<string, { row: ArtifactRow; data: Uint8Array }>;
  /** `seq` orders the reads of several agents. */
  pageReads: Array<{ seq: number; read: PageReadRow }>;
  /** The newest status marks, oldest first. */
  statusMarks: StatusMarkRow[];
  children: Set<string>;
}

const clone = <T>(value: T): T => ({ ...value });
/** The fields of a status patch that are set: one given as `undefined` leaves the row's value alone. */
const definedFields = (patch: object = {}): object =>
  Object.fromEntries(Object.entries(patch).filter(([, v]) => v !== undefined));

class MemoryStorage implements StorageAdapter {
  readonly kind = 'memory';
  private readonly accounts = new Map<string, AccountRow>();
  private readonly ledger: LedgerRow[] = [];
  /** The same rows by agent, as the databases' `(agent_id, seq)` index: an agent's page never walks the whole ledger. */
  private readonly ledgerByAgent = new Map<string, LedgerRow[]>();
  /** The same rows by account with their `seq`, as the databases' `(account_id, seq)` index: pages by keyset. */
  private readonly ledgerByAccount = new Map<string, Array<{ seq: number; row: LedgerRow }>>();
  private readonly keys = new Map<string, ApiKeyRow>();
  /** Last use of each key, by key id (gone with the key). */
  private readonly keysLastUsed = new Map<string, string>();
  private readonly agents = new Map<string, StoredAgent>();
  /** One goal search at a time per account (storage/search.ts). */
  private readonly searchQueue = new SearchQueue();
  private readonly reservations = new Map<string, ReservationRequest>();
  private readonly idempotency = new Map<string, IdempotencyRecord>();
  private readonly consoleSessions = new Map<string, ConsoleSessionRow>();
  /** Page texts by SHA-256; they outlive the agents that read them. */
  private readonly pages = new Map<string, string>();
  private seq = 0;
  private pageReadSeq = 0;
  // monitors and durable timers
  private readonly timers = new Map<string, TimerRow>();
  private readonly monitors = new Map<string, MonitorRow>();
  private monitorChanges: MonitorChangeRow[] = [];
  private monitorChangeSeq = 0;
  /** message_person's attempts, oldest first, by message_id; they outlive their agents. */
  private readonly outbox = new Map<string, OutboxRow>();
  /** Opt-outs by account, channel and recipient (joined by NUL). */
  private readonly optOuts = new Map<string, OptOutRow>();

  async init(): Promise<void> {}
  async close(): Promise<void> {}

  async createAccount(account: AccountRow): Promise<void> {
    if (this.accounts.has(account.id)) throw new Error(`account ${account.id} exists`);
    this.accounts.set(account.id, { ...account, reserved: 0 });
    if (account.balance > 0) {
      this.writeLedger({
        account_id: account.id,
        agent_id: null,
        kind: 'topup',
        item: null,
        tokens_in: 0,
        tokens_out: 0,
        amount: account.balance,
        created_at: account.created_at,
      });
    }
  }

  async getAccount(id: string): Promise<AccountRow | null> {
    const a = this.accounts.get(id);
    return a ? clone(a) : null;
  }

  async listAccounts(): Promise<AccountRow[]> {
    return [...this.accounts.values()].map(clone);
  }

  async setSubscription(id: string, active: boolean): Promise<AccountRow | null> {
    const a = this.accounts.get(id);
    if (!a) return null;
    a.subscription_active = active;
    return clone(a);
  }

  async addCredits(entry: LedgerRow): Promise<AccountRow | null> {
    const a = this.accounts.get(entry.account_id);
    if (!a) return null;
    a.balance += entry.amount;
    this.writeLedger({ ...entry });
    return clone(a);
  }

  async listLedger(accountId: string): Promise<LedgerRow[]> {
    return this.ledger.filter((l) => l.account_id === accountId).map(clone);
  }

  private writeLedger(row: LedgerRow): void {
    this.ledger.push(row);
    const entry = { seq: this.ledger.length, row };
    const ofAccount = this.ledgerByAccount.get(row.account_id);
    if (ofAccount) ofAccount.push(entry);
    else this.ledgerByAccount.set(row.account_id, [entry]);
    if (row.agent_id === null) return;
    const own = this.ledgerByAgent.get(row.agent_id);
    if (own) own.push(row);
    else this.ledgerByAgent.set(row.agent_id, [row]);
  }

  async listAgentLedger(agentId: string, limit: number): Promise<AgentLedger> {
    const own = this.ledgerByAgent.get(agentId) ?? [];
    const rows = own.slice(Math.max(0, own.length - limit)).map(clone);
    return { rows, truncated: own.length > rows.length };
  }

  async listLedgerPage(accountId: string, query: { limit: number; before?: number }): Promise<LedgerPage> {
    const own = this.ledgerByAccount.get(accountId) ?? [];
    // The first entry at or past `before`, by binary search (seq increases along the array).
    let end = own.length;
    if (query.before !== undefined) {
      let [lo, hi] = [0, own.length];
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        if (own[mid]!.seq < query.before) lo = mid + 1;
        else hi = mid;
      }
      end = lo;
    }
    const start = Math.max(0, end - query.limit);
    const rows: LedgerPageRow[] = own
      .slice(start, end)
      .reverse()
      .map(({ seq, row }) => ({ ...row, seq }));
    return { rows, next_before: start > 0 && rows.length > 0 ? rows[rows.length - 1]!.seq : null };
  }

  async sumLedgerSpend(accountId: string): Promise<LedgerSpendRow[]> {
    const sums = new Map<string, LedgerSpendRow>();
    for (const { row } of this.ledgerByAccount.get(accountId) ?? []) {
      if ((row.kind !== 'model' && row.kind !== 'tool') || row.item === null) continue;
      const key = `${row.kind}\0${row.item}`;
      const sum = sums.get(key) ?? { kind: row.kind, item: row.item, amount: 0, tokens_in: 0, tokens_out: 0, count: 0 };
      sum.amount += row.amount;
      sum.tokens_in += row.tokens_in;
      sum.tokens_out += row.tokens_out;
      sum.count += 1;
      sums.set(key, sum);
    }
    return [...sums.values()];
  }

  async reserve(request: ReservationRequest): Promise<ReservationRefusal | null> {
    return this.reserveNow(request);
  }

  reserveNow(request: ReservationRequest): ReservationRefusal | null {
    const account = this.accounts.get(request.account_id);
    if (!account || account.balance - account.reserved < request.amount) return 'account';
    const root = this.agents.get(request.root_id)?.row;
    if (root && root.max_credits !== null && root.tree_spent + root.tree_reserved + request.amount > root.max_credits) {
      return 'tree_cap';
    }
    account.reserved += request.amount;
    if (root) root.tree_reserved += request.amount;
    this.reservations.set(request.id, { ...request });
    return null;
  }

  async release(reservationId: string): Promise<void> {
    this.dropReservation(reservationId);
  }

  async releaseAgentReservations(agentIds: readonly string[]): Promise<number> {
    const ids = new Set(agentIds);
    let n = 0;
    for (const [id, r] of this.reservations) {
      if (ids.has(r.agent_id)) {
        this.dropReservation(id);
        n++;
      }
    }
    return n;
  }

  async settle(settlements: Settlement[]): Promise<number[]> {
    return settlements.map((s) => this.applySettlement(s));
  }

  private dropReservation(id: string): ReservationRequest | undefined {
    const r = this.reservations.get(id);
    if (!r) return undefined;
    this.reservations.delete(id);
    const account = this.accounts.get(r.account_id);
    if (account) account.reserved -= r.amount;
    const root = this.agents.get(r.root_id)?.row;
    if (root) root.tree_reserved -= r.amount;
    return r;
  }

  private applySettlement(s: Settlement): number {
    this.dropReservation(s.reservation_id);
    const account = this.accounts.get(s.ledger.account_id);
    if (!account) return 0;
    const charge = Math.max(0, Math.min(s.ledger.cost, account.balance));
    account.balance -= charge;
    const { cost: _cost, ...entry } = s.ledger;
    this.writeLedger({ ...entry, amount: 0 - charge }); // not -charge: a zero charge must not be written as -0
    const root = this.agents.get(s.root_id)?.row;
    if (root) root.tree_spent += charge;
    const agent = s.ledger.agent_id ? this.agents.get(s.ledger.agent_id)?.row : undefined;
    if (agent) agent.credits_spent += charge;
    return charge;
  }

  async insertApiKey(key: ApiKeyRow): Promise<void> {
    this.keys.set(key.id, { ...key });
  }

  async listApiKeys(accountId: string): Promise<ApiKeyRow[]> {
    return [...this.keys.values()].filter((k) => k.account_id === accountId).map(clone);
  }

  async deleteApiKey(accountId: string, keyId: string): Promise<boolean> {
    const k = this.keys.get(keyId);
    if (!k || k.account_id !== accountId) return false;
    this.keys.delete(keyId);
    this.keysLastUsed.delete(keyId);
    return true;
  }

  async findApiKeyByHash(hash: string): Promise<ApiKeyRow | null> {
    for (const k of this.keys.values()) if (k.hash === hash) return clone(k);
    return null;
  }

  async touchApiKey(hash: string, at: string): Promise<void> {
    for (const k of this.keys.values()) {
      if (k.hash !== hash) continue;
      const last = this.keysLastUsed.get(k.id);
      if (last === undefined || last < at) this.keysLastUsed.set(k.id, at);
    }
  }

  async apiKeysLastUsed(accountId: string): Promise<Record<string, string>> {
    const out: Record<string, string> = {};
    for (const k of this.keys.values()) {
      const at = this.keysLastUsed.get(k.id);
      if (k.account_id === accountId && at !== undefined) out[k.id] = at;
    }
    return out;
  }

  async findAccountByKeyHash(hash: string): Promise<AccountRow | null> {
    const key = await this.findApiKeyByHash(hash);
    return key ? this.getAccount(key.account_id) : null;
  }

  async insertAgents(agents: AgentRow[], messages: MessageRow[], turns: TurnRow[]): Promise<void> {
    for (const a of agents) {
      if (this.agents.has(a.agent_id)) throw new Error(`agent ${a.agent_id} exists`);
    }
    for (const a of agents) {
      this.agents.set(a.agent_id, {
        seq: ++this.seq,
        row: { ...a, tree_reserved: 0 },
        messages: [],
        turns: [],
        toolCalls: new Map(),
        toolStates: new Map(),
        artifacts: new Map(),
        pageReads: [],
        statusMarks: [],
        children: new Set(),
      });
      if (a.parent_id) {
        const parent = this.agents.get(a.parent_id);
        if (parent) {
          parent.children.add(a.agent_id);
          parent.row.sub_agent_count++;
        }
      }
    }
    for (const m of messages) this.agents.get(m.agent_id)?.messages.push({ ...m });
    for (const t of turns) this.agents.get(t.agent_id)?.turns.push({ ...t });
  }

  async getAgent(id: string): Promise<AgentRow | null> {
    const a = this.agents.get(id);
    return a ? clone(a.row) : null;
  }

  async findAgentsBySpawnKey(parentId: string, spawnKeyPrefix: string, page?: SpawnPage): Promise<AgentRow[]> {
    const parent = this.agents.get(parentId);
    if (!parent) return [];
    const out: StoredAgent[] = [];
    for (const id of parent.children) {
      const c = this.agents.get(id);
      if (c?.row.spawn_key?.startsWith(spawnKeyPrefix)) out.push(c);
    }
    const sorted = out.sort((a, b) => a.seq - b.seq);
    const slice = page ? sorted.slice(page.offset, page.offset + page.limit) : sorted;
    return slice.map((c) => clone(c.row));
  }

  async listAgents(query: AgentQuery): Promise<AgentPage> {
    const after = query.after === undefined ? Infinity : Number(query.after);
    const matches: StoredAgent[] = [];
    for (const a of this.agents.values()) {
      if (a.seq >= after) continue;
      if (query.account_id !== undefined && a.row.account_id !== query.account_id) continue;
      if (query.status !== undefined && a.row.status !== query.status) continue;
      if (query.parent_id !== undefined && a.row.parent_id !== query.parent_id) continue;
      matches.push(a);
    }
    matches.sort((a, b) => b.seq - a.seq);
    const page = matches.slice(0, query.limit);
    const last = page.at(-1);
    return { rows: page.map((a) => clone(a.row)), last: last ? String(last.seq) : null };
  }

  async searchAgents(query: AgentSearch): Promise<AgentSearchPage> {
    const needle = query.goal_contains === undefined ? null : searchNeedle(query.goal_contains);
    const candidates: StoredAgent[] = [];
    for (const a of this.agents.values()) {
      if (a.row.account_id !== query.account_id) continue;
      if (query.parent_id !== undefined && a.row.parent_id !== query.parent_id) continue;
      if (query.status !== undefined && a.row.status !== query.status) continue;
      candidates.push(a);
    }
    candidates.sort((a, b) => (query.order === 'newest' ? b.seq - a.seq : a.seq - b.seq));
    if (needle === null) {
      const page = candidates.slice(query.offset, query.offset + query.limit);
      return { rows: page.map((a) => clone(a.row)), total: candidates.length };
    }
    return this.searchQueue.run(query.account_id, () => this.searchGoals(query, needle, candidates));
  }

  /** The memory adapter has no index: it looks at the goals' prefixes, a slice at a time, within the budget. */
  private async searchGoals(query: AgentSearch, needle: string, candidates: StoredAgent[]): Promise<AgentSearchPage> {
    const expired = searchDeadline(query.budget_ms);
    const matches: StoredAgent[] = [];
    let truncated = false;
    for (let i = 0; i < candidates.length; i++) {
      if (i > 0 && i % SEARCH_SLICE_ROWS === 0) {
        if (expired()) {
          truncated = true;
          break;
        }
        await yieldToOthers();
      }
      const a = candidates[i]!;
      if (!asciiLower(a.row.goal.slice(0, SEARCH_PREFIX_CHARS)).includes(needle)) continue;
      if (matches.length === MAX_SEARCH_MATCHES) {
        truncated = true;
        break;
      }
      matches.push(a);
    }
    const page = matches.slice(query.offset, query.offset + query.limit);
    return {
      rows: page.map((a) => clone(a.row)),
      total: matches.length,
      ...(truncated ? { truncated: true as const } : {}),
    };
  }

  async listAgentIdsByStatus(statuses: readonly AgentStatus[]): Promise<string[]> {
    return [...this.agents.values()]
      .filter((a) => statuses.includes(a.row.status))
      .sort((a, b) => a.seq - b.seq)
      .map((a) => a.row.agent_id);
  }

  async changeStatus(agentId: string, change: StatusChange, updatedAt: string): Promise<AgentRow | null> {
    checkStatusChange(change);
    const a = this.agents.get(agentId);
    if (!a || !change.from.includes(a.row.status)) return null;
    const previous = a.row.status;
    Object.assign(a.row, definedFields(change.patch), { status: change.to, updated_at: updatedAt });
    if (change.mark) {
      const marks = a.statusMarks;
      marks.push({ agent_id: agentId, at: updatedAt, status: change.to, previous, message: a.row.status_message });
      if (marks.length > MAX_STATUS_MARKS) marks.splice(0, marks.length - MAX_STATUS_MARKS);
    }
    return clone(a.row);
  }

  async listStatusMarks(agentId: string): Promise<StatusMarkRow[]> {
    return (this.agents.get(agentId)?.statusMarks ?? []).map(clone);
  }

  async deleteAgentTree(agentId: string): Promise<string[]> {
    const root = this.agents.get(agentId);
    if (!root) return [];
    const ids = [agentId, ...this.descendants(agentId)];
    const idSet = new Set(ids);
    for (const [rid, r] of this.reservations) if (idSet.has(r.agent_id)) this.dropReservation(rid);
    if (root.row.parent_id) {
      const parent = this.agents.get(root.row.parent_id);
      if (parent) {
        parent.children.delete(agentId);
        parent.row.sub_agent_count--;
      }
    }
    this.forgetTimersAndMonitors(idSet);
    for (const id of ids) this.agents.delete(id);
    return ids;
  }

  async countChildrenByStatus(parentId: string, spawnKeyPrefix: string): Promise<Partial<Record<AgentStatus, number>>> {
    const counts: Partial<Record<AgentStatus, number>> = {};
    for (const id of this.agents.get(parentId)?.children ?? []) {
      const c = this.agents.get(id)?.row;
      if (c?.spawn_key?.startsWith(spawnKeyPrefix)) counts[c.status] = (counts[c.status] ?? 0) + 1;
    }
    return counts;
  }

  async listDescendantIds(agentId: string): Promise<string[]> {
    return this.descendants(agentId);
  }

  async treeTotals(agentIds: readonly string[]): Promise<TreeTotalsRow[]> {
    const out: TreeTotalsRow[] = [];
    for (const id of new Set(agentIds)) {
      const top = this.agents.get(id)?.row;
      if (!top) continue;
      const totals: TreeTotalsRow = {
        agent_id: id,
        account_id: top.account_id,
        agents: 0,
        credits_spent: 0,
        tokens: 0,
        by_status: {},
        first_created_at: top.created_at,
        last_updated_at: top.updated_at,
      };
      for (const member of [id, ...this.descendants(id)]) {
        const r = this.agents.get(member)?.row;
        if (!r) continue;
        totals.agents += 1;
        totals.credits_spent += r.credits_spent;
        totals.tokens += r.token_count;
        totals.by_status[r.status] = (totals.by_status[r.status] ?? 0) + 1;
        if (r.created_at < totals.first_created_at) totals.first_created_at = r.created_at;
        if (r.updated_at > totals.last_updated_at) totals.last_updated_at = r.updated_at;
      }
      out.push(totals);
    }
    return out;
  }

  async countAgentsByStatus(): Promise<Partial<Record<AgentStatus, number>>> {
    const counts: Partial<Record<AgentStatus, number>> = {};
    for (const { row } of this.agents.values()) counts[row.status] = (counts[row.status] ?? 0) + 1;
    return counts;
  }

  async listFinishedRoots(query: FinishedRootsQuery): Promise<string[]> {
    const found: StoredAgent[] = [];
    for (const a of this.agents.values()) {
      const r = a.row;
      if (r.parent_id !== null || !query.statuses.includes(r.status) || r.updated_at >= query.updatedBefore) continue;
      if (query.withTranscript && a.turns.length === 0) continue;
      found.push(a);
    }
    found.sort((x, y) =>
      x.row.updated_at < y.row.updated_at ? -1 : x.row.updated_at > y.row.updated_at ? 1 : x.seq - y.seq,
    );
    return found.slice(0, query.limit).map((a) => a.row.agent_id);
  }

  async purgeAgentData(agentIds: readonly string[]): Promise<number> {
    let removed = 0;
    for (const id of agentIds) {
      const a = this.agents.get(id);
      if (!a) continue;
      removed +=
        a.turns.length +
        a.messages.length +
        a.toolCalls.size +
        a.toolStates.size +
        a.artifacts.size +
        a.pageReads.length;
      a.turns = [];
      a.messages = [];
      a.toolCalls.clear();
      a.toolStates.clear();
      a.artifacts.clear();
      a.pageReads = [];
    }
    return removed;
  }

  private descendants(agentId: string): string[] {
    const out: string[] = [];
    const stack = [agentId];
    while (stack.length) {
      const a = this.agents.get(stack.pop()!);
      if (!a) continue;
      for (const c of a.children) {
        out.push(c);
        stack.push(c);
      }
    }
    return out;
  }

  async listMessages(agentId: string): Promise<MessageRow[]> {
    return (this.agents.get(agentId)?.messages ?? []).map(clone);
  }

  async listTurns(agentId: string): Promise<TurnRow[]> {
    return (this.agents.get(agentId)?.turns ?? []).map(clone);
  }

  async listToolCalls(agentId: string, turnIdx: number): Promise<ToolCallRow[]> {
    const a = this.agents.get(agentId);
    if (!a) return [];
    return [...a.toolCalls.values()].filter((c) => c.turn_idx === turnIdx).map(clone);
  }

  async listAgentToolCalls(agentId: string, limit: number): Promise<AgentToolCalls> {
    const a = this.agents.get(agentId);
    if (!a) return { rows: [], truncated: false };
    // By turn; a stable sort keeps first-recorded order within one (the map keeps insertion order through upserts).
    const all = [...a.toolCalls.values()].sort((x, y) => x.turn_idx - y.turn_idx);
    return { rows: all.slice(Math.max(0, all.length - limit)).map(clone), truncated: all.length > limit };
  }

  async putToolCalls(calls: ToolCallRow[], onlyWhile?: AgentStatus): Promise<boolean> {
    if (onlyWhile !== undefined && calls.some((c) => this.agents.get(c.agent_id)?.row.status !== onlyWhile)) {
      return false;
    }
    for (const c of calls) this.agents.get(c.agent_id)?.toolCalls.set(c.tool_use_id, { ...c });
    return true;
  }

  async commitStep(commit: StepCommit): Promise<StepCommitResult> {
    const a = this.agents.get(commit.agent_id);
    if (a) {
      (commit.turns ?? []).forEach((t, i) => {
        if (t.idx !== a.turns.length + i) throw new Error(`turn ${t.idx} out of order for agent ${t.agent_id}`);
      });
    }
    const charged = (commit.settlements ?? []).map((s) => this.applySettlement(s));
    if (!a) return { agent: null, statusChanged: false, charged };
    for (const t of commit.turns ?? []) a.turns.push({ ...t });
    for (const m of commit.messages ?? []) a.messages.push({ ...m });
    for (const c of commit.tool_calls ?? []) a.toolCalls.set(c.tool_use_id, { ...c });
    const p = commit.patch;
    const row = a.row;
    if (p.progress !== undefined) row.progress = p.progress;
    if (p.status_message !== undefined) row.status_message = p.status_message;
    if (p.plan !== undefined) row.plan = p.plan;
    row.token_count += p.token_count_delta ?? 0;
    row.message_count += commit.messages?.length ?? 0;
    row.step_count += p.step_count_delta ?? 0;
    row.updated_at = p.updated_at;
    let statusChanged = false;
    if (commit.status && commit.status.from.includes(row.status)) {
      Object.assign(row, definedFields(commit.status.patch), { status: commit.status.to });
      statusChanged = true;
    }
    return { agent: clone(row), statusChanged, charged };
  }

  async putToolState(agentId: string, toolUseId: string, state: string): Promise<void> {
    this.agents.get(agentId)?.toolStates.set(toolUseId, state);
  }

  async getToolState(agentId: string, toolUseId: string): Promise<string | null> {
    return this.agents.get(agentId)?.toolStates.get(toolUseId) ?? null;
  }

  async putArtifact(row: ArtifactRow, data: Uint8Array, limits: ArtifactLimits): Promise<void> {
    checkArtifact(row, data, limits);
    const a = this.agents.get(row.agent_id);
    if (!a) throw notFound('Agent', row.agent_id);
    if (a.artifacts.has(row.artifact_id)) throw artifactExists(row);
    let stored = 0;
    for (const { row: r } of a.artifacts.values()) stored += r.size;
    if (stored + row.size > limits.maxBytesPerAgent) throw agentArtifactsTooLarge(row, stored, limits.maxBytesPerAgent);
    a.artifacts.set(row.artifact_id, { row: { ...row }, data: new Uint8Array(data) });
  }

  async listArtifacts(agentId: string): Promise<ArtifactRow[]> {
    return [...(this.agents.get(agentId)?.artifacts.values() ?? [])].map((x) => clone(x.row));
  }

  async getArtifact(agentId: string, artifactId: string): Promise<{ row: ArtifactRow; data: Uint8Array } | null> {
    const x = this.agents.get(agentId)?.artifacts.get(artifactId);
    return x ? { row: clone(x.row), data: new Uint8Array(x.data) } : null;
  }

  async recordPageRead(read: PageReadRow, text: string): Promise<void> {
    checkPageRead(read, text);
    const a = this.agents.get(read.agent_id);
    if (!a) return;
    if (!this.pages.has(read.content_sha256)) this.pages.set(read.content_sha256, text);
    a.pageReads.push({ seq: ++this.pageReadSeq, read: { ...read } });
  }

  async listPageReads(agentIds: readonly string[]): Promise<PageReadRow[]> {
    const reads: Array<{ seq: number; read: PageReadRow }> = [];
    for (const id of new Set(agentIds)) reads.push(...(this.agents.get(id)?.pageReads ?? []));
    return reads.sort((x, y) => x.seq - y.seq).map((x) => clone(x.read));
  }

  async getPageText(contentSha256: string): Promise<string | null> {
    return this.pages.get(contentSha256) ?? null;
  }

  // outbox (message_person)

  async queueOutbox(row: OutboxRow, limits: OutboxRateLimits): Promise<OutboxRefusal | null> {
    let agentCount = 0;
    let accountCount = 0;
    for (const r of this.outbox.values()) {
      if (r.agent_id === row.agent_id && r.tool_use_id === row.tool_use_id)
        return { reason: 'exists', existing: clone(r) };
      if (r.agent_id === row.agent_id && r.created_at >= limits.agent.since) agentCount++;
      if (r.account_id === row.account_id && r.created_at >= limits.account.since) accountCount++;
    }
    const optOut = this.optOuts.get(optOutKey(row.account_id, row.channel, row.to));
    if (optOut) return { reason: 'opted_out', opt_out: clone(optOut) };
    if (agentCount >= limits.agent.max) return { reason: 'agent_rate', count: agentCount };
    if (accountCount >= limits.account.max) return { reason: 'account_rate', count: accountCount };
    if (this.outbox.has(row.message_id)) throw new Error(`outbox message ${row.message_id} exists`);
    this.outbox.set(row.message_id, { ...row });
    return null;
  }

  async finishOutbox(messageId: string, outcome: OutboxOutcome): Promise<OutboxRow | null> {
    const r = this.outbox.get(messageId);
    if (!r) return null;
    if (r.status === 'queued') Object.assign(r, outcome);
    return clone(r);
  }

  async listOutbox(agentId: string): Promise<OutboxRow[]> {
    return [...this.outbox.values()].filter((r) => r.agent_id === agentId).map(clone);
  }

  async countOutbox(agentId: string): Promise<Partial<Record<OutboxStatus, number>>> {
    const counts: Partial<Record<OutboxStatus, number>> = {};
    for (const r of this.outbox.values()) if (r.agent_id === agentId) counts[r.status] = (counts[r.status] ?? 0) + 1;
    return counts;
  }

  async markQueuedOutboxUnknown(error: string): Promise<OutboxRow[]> {
    const marked: OutboxRow[] = [];
    for (const r of this.outbox.values()) {
      if (r.status !== 'queued') continue;
      Object.assign(r, { status: 'unknown', error });
      marked.push(clone(r));
    }
    return marked;
  }

  async putOptOut(row: OptOutRow): Promise<void> {
    this.optOuts.set(optOutKey(row.account_id, row.channel, row.recipient), { ...row });
  }

  async getOptOut(accountId: string, channel: OutboxChannel, recipient: string): Promise<OptOutRow | null> {
    const r = this.optOuts.get(optOutKey(accountId, channel, recipient));
    return r ? clone(r) : null;
  }

  // monitors and durable timers

  async putTimer(timer: TimerRow): Promise<void> {
    if (this.agents.has(timer.agent_id)) this.timers.set(timer.timer_id, { ...timer });
  }

  async deleteTimer(timerId: string, dueAt?: number): Promise<boolean> {
    const t = this.timers.get(timerId);
    if (!t || (dueAt !== undefined && t.due_at !== dueAt)) return false;
    return this.timers.delete(timerId);
  }

  async listDueTimers(dueBy: number, limit: number): Promise<TimerRow[]> {
    return [...this.timers.values()]
      .filter((t) => t.due_at <= dueBy)
      .sort((a, b) => a.due_at - b.due_at || (a.timer_id < b.timer_id ? -1 : 1))
      .slice(0, limit)
      .map(clone);
  }

  async nextTimerDue(): Promise<number | null> {
    let next: number | null = null;
    for (const t of this.timers.values()) if (next === null || t.due_at < next) next = t.due_at;
    return next;
  }

  async insertMonitor(monitor: MonitorRow, timer: TimerRow | null): Promise<MonitorRow> {
    const existing = this.monitors.get(monitor.monitor_id);
    if (existing) return clone(existing);
    if (!this.agents.has(monitor.agent_id)) throw notFound('Agent', monitor.agent_id);
    this.monitors.set(monitor.monitor_id, { ...monitor });
    if (timer) this.timers.set(timer.timer_id, { ...timer });
    return clone(monitor);
  }

  async getMonitor(monitorId: string): Promise<MonitorRow | null> {
    const m = this.monitors.get(monitorId);
    return m ? clone(m) : null;
  }

  async listMonitors(agentId: string): Promise<MonitorRow[]> {
    return [...this.monitors.values()].filter((m) => m.agent_id === agentId).map(clone);
  }

  async updateMonitor(
    monitor: MonitorRow,
    also: { change?: Omit<MonitorChangeRow, 'seq'>; timer?: TimerRow; dropTimer?: string } = {},
  ): Promise<boolean> {
    if (this.monitors.get(monitor.monitor_id)?.status !== 'active') return false;
    this.monitors.set(monitor.monitor_id, { ...monitor });
    if (also.change) this.monitorChanges.push({ ...also.change, seq: ++this.monitorChangeSeq });
    if (also.dropTimer !== undefined) this.timers.delete(also.dropTimer);
    if (also.timer) this.timers.set(also.timer.timer_id, { ...also.timer });
    return true;
  }

  async nextMonitorChange(agentId: string, monitorId?: string): Promise<MonitorChangeRow | null> {
    const c = this.monitorChanges.find(
      (x) => x.agent_id === agentId && (monitorId === undefined || x.monitor_id === monitorId),
    );
    return c ? clone(c) : null;
  }

  async deleteMonitorChange(seq: number): Promise<void> {
    this.monitorChanges = this.monitorChanges.filter((c) => c.seq !== seq);
  }

  private forgetTimersAndMonitors(agentIds: ReadonlySet<string>): void {
    for (const [id, t] of this.timers) if (agentIds.has(t.agent_id)) this.timers.delete(id);
    for (const [id, m] of this.monitors) if (agentIds.has(m.agent_id)) this.monitors.delete(id);
    this.monitorChanges = this.monitorChanges.filter((c) => !agentIds.has(c.agent_id));
  }

  async putConsoleSession(row: ConsoleSessionRow): Promise<void> {
    this.consoleSessions.set(row.id_hash, { ...row });
  }

  async getConsoleSession(idHash: string): Promise<ConsoleSessionRow | null> {
    const row = this.consoleSessions.get(idHash);
    return row ? { ...row } : null;
  }

  async listLiveConsoleSessions(accountId: string, now: string): Promise<ConsoleSessionRow[]> {
    return [...this.consoleSessions.values()]
      .filter((r) => r.account_id === accountId && r.ended === null && r.expires_at > now)
      .sort((a, b) => (a.expires_at < b.expires_at ? -1 : a.expires_at > b.expires_at ? 1 : 0))
      .map((r) => ({ ...r }));
  }

  async deleteExpiredConsoleSessions(now: string): Promise<number> {
    let n = 0;
    for (const [id, row] of this.consoleSessions) {
      if (row.expires_at < now) {
        this.consoleSessions.delete(id);
        n += 1;
      }
    }
    return n;
  }

  async getIdempotency(accountId: string, key: string): Promise<IdempotencyRecord | null> {
    const r = this.idempotency.get(`${accountId}\u0000${key}`);
    return r ? clone(r) : null;
  }

  async putIdempotency(record: IdempotencyRecord): Promise<void> {
    const k = `${record.account_id}\u0000${record.key}`;
    if (!this.idempotency.has(k)) this.idempotency.set(k, { ...record });
  }
}

const optOutKey = (accountId: string, channel: OutboxChannel, recipient: string) =>
  `${accountId}\u0000${channel}\u0000${recipient}`;

/**
 * In-memory storage: fast, nothing survives the process.
 *
 * @example
 * const runtime = await AgentRuntime.open({ storage: memoryStorage(), model: scriptedModel({ turns }) });
 */
export function memoryStorage(): StorageAdapter {
  return new MemoryStorage();
}
