/**
 * @module storage/adapter
 * The storage extension point. Every method is one atomic unit: an adapter runs it in one transaction (or under one
 * lock), so a crash leaves all of it or none of it. The interface is async even where the driver is synchronous
 * (better-sqlite3) so that PostgreSQL fits behind it too. Money is integer micro-credits everywhere here.
 *
 * The one contract suite in `test/storage/contract.ts` defines the behaviour every adapter must have.
 */
import type { AgentStatus } from '../base/status.js';
import type { WorkerCoordination } from './workers.js';

export interface AccountRow {
  id: string;
  name: string;
  subscription_active: boolean;
  /** Settled balance, micro-credits. Never below zero. */
  balance: number;
  /**
   * Sum of open reservations, micro-credits. Available = balance - reserved. Holds belong to the runtime process that
   * took them; an adapter may keep them only in that process (SQLite) — recovery releases them anyway.
   */
  reserved: number;
  created_at: string;
}

export interface ApiKeyRow {
  id: string;
  account_id: string;
  name: string;
  /** SHA-256 of the full key, hex. The key itself is never stored. */
  hash: string;
  last4: string;
  created_at: string;
}

export interface AgentRow {
  agent_id: string;
  account_id: string;
  parent_id: string | null;
  /** The root of this agent's tree (itself for a root agent). */
  root_id: string;
  /** For a spawned child: the key that makes spawning idempotent (parent tool call id + index). */
  spawn_key: string | null;
  goal: string;
  model: string;
  status: AgentStatus;
  progress: number;
  status_message: string;
  token_count: number;
  message_count: number;
  /** Micro-credits settled by this agent alone. */
  credits_spent: number;
  sub_agent_count: number;
  /** Cap on the whole tree's spend, micro-credits (kept on the root). */
  max_credits: number | null;
  /** Micro-credits settled by the whole tree (kept on the root). */
  tree_spent: number;
  /** Micro-credits held by the whole tree's open reservations (on the root). Derived from the holds, not stored. */
  tree_reserved: number;
  /** Model turns taken. */
  step_count: number;
  /** True once the agent has had a run slot. */
  started: boolean;
  /** Milliseconds spent ACTIVE before `active_since`. */
  active_ms: number;
  /** When the agent last became ACTIVE (ISO), or null while it is not. */
  active_since: string | null;
  /** The agent's plan, as set by its `update_plan` tool (JSON text), or null. */
  plan: string | null;
  /**
   * For a child a tool spawned with a spec of its own (JSON text of {@link ChildSpec}): its instructions, tools and
   * result schema. Null for ordinary agents, which use the runtime's prompt and tools.
   */
  spec: string | null;
  created_at: string;
  updated_at: string;
  /**
   * The W3C `traceparent` its spans continue (the root's creation, or the parent's `execute_tool` call that spawned
   * it), so that its work joins the same trace after a restart; null or absent when tracing was off.
   */
  trace_context?: string | null;
}

/** See {@link StorageAdapter.listFinishedRoots}. */
export interface FinishedRootsQuery {
  statuses: readonly AgentStatus[];
  /** ISO 8601 UTC. */
  updatedBefore: string;
  limit: number;
  withTranscript: boolean;
}

export interface MessageRow {
  message_id: string;
  agent_id: string;
  role: 'USER' | 'ASSISTANT';
  text: string;
  timestamp: string;
}

/** One entry of the internal conversation log the model sees (not public). */
export interface TurnRow {
  agent_id: string;
  /** 0-based position in the agent's log. */
  idx: number;
  role: 'user' | 'assistant';
  /** JSON text of the content blocks. */
  content: string;
  created_at: string;
}

export type ToolCallStatus = 'pending' | 'started' | 'finished';

export interface ToolCallRow {
  agent_id: string;
  tool_use_id: string;
  /** The assistant turn that asked for this call. */
  turn_idx: number;
  name: string;
  /** JSON text of the input. */
  input: string;
  status: ToolCallStatus;
  idempotent: boolean;
  /** JSON text of the result content, once finished. */
  result: string | null;
  is_error: boolean;
  updated_at: string;
}

export type LedgerKind = 'model' | 'tool' | 'topup' | 'refund';

export interface LedgerRow {
  account_id: string;
  agent_id: string | null;
  kind: LedgerKind;
  /** Model id or tool name; null for top-ups. */
  item: string | null;
  /** Every input token of a model call, whatever its price (the cache's two kinds below included). */
  tokens_in: number;
  tokens_out: number;
  /** Of `tokens_in`, those written to the prompt cache (billed at the cache-write price). Absent when 0. */
  tokens_cache_write?: number;
  /** Of `tokens_in`, those read from the prompt cache (billed at the cache-read price). Absent when 0. */
  tokens_cache_read?: number;
  /** Signed micro-credits: negative for spend, positive for top-ups and refunds. */
  amount: number;
  created_at: string;
  /**
   * A model call's latency, ms: from the request sent to the provider to its answer complete, measured on the
   * runtime's clock (waits for a model slot or for credits and retries' back-off excluded; a retried call's is its
   * successful attempt's). Absent when not measured: other kinds, and model rows written before it was stored.
   */
  latency_ms?: number;
}

/** One agent's ledger rows, oldest first, as {@link StorageAdapter.listAgentLedger} returns them. */
export interface AgentLedger {
  /** The newest rows up to the limit asked, oldest first. */
  rows: LedgerRow[];
  /** True when the agent has more rows than the limit: the oldest ones are not in `rows`. */
  truncated: boolean;
}

/** A ledger row with its position in the ledger: the key of {@link StorageAdapter.listLedgerPage}'s pages. */
export interface LedgerPageRow extends LedgerRow {
  /** Ledger order (increasing, never reused): pass the last row's as `before` for the next older page. */
  seq: number;
}

/** One page of an account's ledger, newest first, as {@link StorageAdapter.listLedgerPage} returns it. */
export interface LedgerPage {
  /** At most the limit asked, newest first. */
  rows: LedgerPageRow[];
  /** The `before` of the next older page, or null when these rows reach the account's oldest. */
  next_before: number | null;
}

/** An account's spend on one model or tool, summed by the storage over the account's whole ledger. */
export interface LedgerSpendRow {
  kind: 'model' | 'tool';
  /** The model id or tool name. */
  item: string;
  /** Signed micro-credits summed (negative for spend; refunds of the item included). */
  amount: number;
  tokens_in: number;
  tokens_out: number;
  /** Ledger rows summed. */
  count: number;
}

/** One agent's tool calls, as {@link StorageAdapter.listAgentToolCalls} returns them. */
export interface AgentToolCalls {
  /** The newest calls up to the limit asked, by turn and, within a turn, in first-recorded order. */
  rows: ToolCallRow[];
  /** True when the agent has more calls than the limit: the oldest ones are not in `rows`. */
  truncated: boolean;
}

export interface ReservationRequest {
  id: string;
  account_id: string;
  agent_id: string;
  root_id: string;
  amount: number;
}

export type ReservationRefusal = 'account' | 'tree_cap';

/** A reservation turned into spend: its hold is released and `charge` (at most the balance) is debited. */
export interface Settlement {
  /** The hold to release; may already be gone (released by recovery), the cost is debited all the same. */
  reservation_id: string;
  /** The tree whose `tree_spent` grows. */
  root_id: string;
  ledger: Omit<LedgerRow, 'amount'> & { /** Real cost, micro-credits, positive. */ cost: number };
}

/** What a child spawned with its own spec works with (stored as JSON on the child: it survives restarts). */
export interface ChildSpec {
  /** The child's system prompt. */
  instructions: string;
  /** Names of the tools it is offered (besides `submit_result`); each must be in the runtime's tool catalog. */
  tools: string[];
  /** JSON Schema of `submit_result`'s input: the child finishes only by submitting a valid result. */
  result_schema: Record<string, unknown>;
  /** Model turns it may take (a call's `max_steps`), below the runtime's step limit. */
  max_steps?: number;
}

/** Bytes a tool kept with its agent (a screenshot, a file a code agent wrote). */
export interface ArtifactRow {
  artifact_id: string;
  agent_id: string;
  account_id: string;
  name: string;
  mime_type: string;
  /** Bytes. */
  size: number;
  created_at: string;
}

/** Limits on artifacts, checked inside the write that stores one. */
export interface ArtifactLimits {
  /** Bytes of one artifact at most. */
  maxBytes: number;
  /** Bytes of all the artifacts of one agent at most. */
  maxBytesPerAgent: number;
}

/** A page a tool call read (read_page), kept so that citations can be checked against its text later. */
export interface PageReadRow {
  agent_id: string;
  tool_use_id: string;
  url: string;
  final_url: string;
  title: string;
  /** SHA-256 (hex) of `text`: the key of the stored page text. */
  content_sha256: string;
  retrieved_at: string;
}

// --- outbox (message_person): every attempt to message a person, and the recipients who opted out

/** Where a message goes: an e-mail address or a phone number (E.164). */
export type OutboxChannel = 'email' | 'sms';

/**
 * `queued`: recorded, about to be handed to the provider (or handed over when the process died); `sent`: the provider
 * accepted it; `failed`: it did not leave (or the provider refused it); `unknown`: it may have left, and is never
 * tried again (a crash between the record and the answer, or a connection lost mid-send).
 */
export type OutboxStatus = 'queued' | 'sent' | 'failed' | 'unknown';

/** One attempt of `message_person`, recorded before anything is sent. The body is kept only as its SHA-256. */
export interface OutboxRow {
  message_id: string;
  agent_id: string;
  account_id: string;
  /** The tool call that made the attempt: one attempt per call, ever. */
  tool_use_id: string;
  channel: OutboxChannel;
  /** The normalised recipient (lower-case e-mail address, E.164 number). */
  to: string;
  subject: string | null;
  /** SHA-256 (hex) of the body's UTF-8 bytes. */
  body_hash: string;
  status: OutboxStatus;
  /** The provider's id of the message (SMTP Message-ID, Twilio SID), once known. */
  provider_id: string | null;
  error: string | null;
  created_at: string;
  /** When the provider accepted it. */
  sent_at: string | null;
}

/** The end of an attempt: what the provider answered (or that nobody knows). */
export interface OutboxOutcome {
  status: Exclude<OutboxStatus, 'queued'>;
  provider_id: string | null;
  error: string | null;
  sent_at: string | null;
}

/** How many attempts (any status) may start in a window, counted inside the write that records one. */
export interface OutboxRateLimits {
  /** A new attempt is refused when the agent already has `max` attempts created at or after `since` (ISO). */
  agent: { max: number; since: string };
  /** The same for all the account's agents together. */
  account: { max: number; since: string };
}

/** A recipient who asked not to be messaged (or whom the provider refused for good), per account and channel. */
export interface OptOutRow {
  account_id: string;
  channel: OutboxChannel;
  recipient: string;
  reason: string;
  at: string;
}

/**
 * Why an attempt was not recorded (nothing was written). Returned rather than thrown, like an artifact's refusal:
 * an ordinary answer the tool turns into its message.
 */
export type OutboxRefusal =
  | { reason: 'opted_out'; opt_out: OptOutRow }
  | { reason: 'agent_rate' | 'account_rate'; count: number }
  | { reason: 'exists'; existing: OutboxRow };

// monitors and durable timers

/**
 * A durable timer: work the runtime does at `due_at` for an agent (wake it, check a monitored page). One row per timer,
 * keyed by `timer_id` (scheduling an existing id moves it); only due rows are ever read, so idle timers cost rows, not
 * memory. A timer missed while no process ran fires once when one starts: the row holds one time.
 */
export interface TimerRow {
  timer_id: string;
  agent_id: string;
  /** When it is due, milliseconds since the epoch. */
  due_at: number;
  /** Which handler fires it (`agent.wake`, `monitor.check`). */
  kind: string;
  /** JSON text the handler gets. */
  payload: string;
}

/**
 * Claims on due timers, where several workers read the same timers (PostgreSQL in workers mode): `listDueTimers`
 * claims what it returns for this worker until `leaseMs` has passed (database time), and another worker reads a
 * claimed timer only once its claim has expired, so a due timer fires once across workers. Rescheduling a timer
 * (`putTimer`, a monitor's `updateMonitor` with a timer) clears its claim. Absent where one process reads the timers.
 */
export interface TimerClaims {
  /** How long a claim lasts unless renewed, in ms (the time a worker's death costs its claimed timers). */
  readonly leaseMs: number;
  /**
   * Extends this worker's claims on these timers (each as it was read: id and due time). Returns those another worker
   * has claimed since, due at the same time: their claim was lost (it expired before this renewal), and the other
   * worker fires them. A timer rescheduled or deleted meanwhile is neither renewed nor lost.
   */
  renew(timers: ReadonlyArray<Pick<TimerRow, 'timer_id' | 'due_at'>>): Promise<string[]>;
  /** Gives up every claim of this worker (it stops): the timers are at once due for the other workers. */
  releaseAll(): Promise<void>;
}

export type MonitorStatus = 'active' | 'cancelled' | 'ended';

/** A page watched for an agent by the `monitor` tool. */
export interface MonitorRow {
  monitor_id: string;
  agent_id: string;
  url: string;
  /** CSS selector whose text is watched; null for the page's main text. */
  selector: string | null;
  /** JSON text of a string array: parts of the page left out before comparing. */
  ignore_selectors: string;
  /** A change matters only when a short model call says it meets this; null: every change matters. */
  condition: string | null;
  interval_s: number;
  /** When the monitor ends (ISO), or null. */
  until: string | null;
  status: MonitorStatus;
  created_at: string;
  last_checked_at: string | null;
  /** Null while no check is planned (paused agent, ended monitor). */
  next_check_at: string | null;
  /** Changes that mattered so far. */
  changes: number;
  last_error: string | null;
  /** Checks that failed in a row (the back-off and the report count them). */
  failures: number;
  etag: string | null;
  last_modified: string | null;
  /** SHA-256 (hex) of the normalised text of the last successful check, or null before the first. */
  content_sha256: string | null;
  /** That text, which the next change is diffed against. */
  content: string | null;
  /** Checked through the browser (the page as its scripts render it) instead of the served HTML. */
  render: boolean;
}

/** A change that mattered, queued for the agent's next `monitor` wait. */
export interface MonitorChangeRow {
  /** Queue order. */
  seq: number;
  agent_id: string;
  monitor_id: string;
  /** JSON text of what `wait` returns. */
  change: string;
  created_at: string;
}

export interface AgentPatch {
  progress?: number;
  status_message?: string;
  plan?: string | null;
  token_count_delta?: number;
  step_count_delta?: number;
  updated_at: string;
}

/** A conditional status change: applied only while the agent's status is one of `from`. */
export interface StatusChange {
  from: readonly AgentStatus[];
  to: AgentStatus;
  /** Extra fields written only when the change applies. */
  patch?: Partial<Pick<AgentRow, 'progress' | 'status_message' | 'started' | 'active_ms' | 'active_since'>>;
  /**
   * Also keep the change as one of the agent's {@link StatusMarkRow}s, in the same write, when it applies: `at` is the
   * change's time, `previous` is `from[0]` (a marked change has one `from`), `message` the status message after it.
   * Only {@link StorageAdapter.changeStatus} writes marks; a step commit's status change is never marked.
   */
  mark?: boolean;
}

/**
 * A change of an agent's status that an operator or the credits caused (pause, resume, out of credits, a wait for
 * credits beginning and ending; `status` equals `previous` for the waits), kept for its timeline. The routine moves
 * of every agent (STARTING_UP, ACTIVE, COMPLETED, FAILED) are not kept. The newest {@link MAX_STATUS_MARKS} per
 * agent are kept; they are deleted with the agent.
 */
export interface StatusMarkRow {
  agent_id: string;
  at: string;
  status: AgentStatus;
  previous: AgentStatus;
  message: string;
}

/** Status marks kept per agent (the newest). */
export const MAX_STATUS_MARKS = 100;

/** Everything one step writes, in one transaction. */
export interface StepCommit {
  agent_id: string;
  /** Appended; `idx` must continue the agent's log. */
  turns?: TurnRow[];
  /** Appended; the agent's `message_count` grows by their number. */
  messages?: MessageRow[];
  /** Upserted by (agent_id, tool_use_id). */
  tool_calls?: ToolCallRow[];
  settlements?: Settlement[];
  patch: AgentPatch;
  status?: StatusChange;
}

export interface StepCommitResult {
  /** The agent after the commit, or null if it was deleted (settlements still apply). */
  agent: AgentRow | null;
  /** Whether `status` applied. */
  statusChanged: boolean;
  /** Micro-credits debited per settlement, in order. */
  charged: number[];
}

export interface AgentQuery {
  account_id?: string;
  status?: AgentStatus;
  /** `null` lists root agents only. */
  parent_id?: string | null;
  limit: number;
  /** Opaque position from a previous page (the adapter's own ordering key). */
  after?: string;
}

/**
 * An agent and all its descendants summed (see {@link StorageAdapter.treeTotals}): what the tree cost and where its
 * agents are, without reading every row into the process.
 */
export interface TreeTotalsRow {
  /** The agent the tree hangs from. */
  agent_id: string;
  /** Its account (a tree never spans two). */
  account_id: string;
  /** Agents in the tree, the agent itself included. */
  agents: number;
  /** Micro-credits settled by all of them (each agent's own `credits_spent`, summed). */
  credits_spent: number;
  /** Tokens of all of them (each agent's own `token_count`, summed). */
  tokens: number;
  /** The tree's agents counted by status, the agent itself included. */
  by_status: Partial<Record<AgentStatus, number>>;
  /** The earliest `created_at` in the tree (ISO): with `last_updated_at`, the tree's wall time. */
  first_created_at: string;
  /** The latest `updated_at` in the tree (ISO). */
  last_updated_at: string;
}

export interface AgentPage {
  rows: AgentRow[];
  /** Position of the last row, for the next page. */
  last: string | null;
}

/**
 * A page of agents by position, with how many match in all: the console's agents list and a parent's children (a
 * virtualised list jumps to any position, and searching 10,000 children by goal happens in the database).
 */
export interface AgentSearch {
  account_id: string;
  /** `null`: root agents only; an id: that agent's children only; absent: any agent of the account. */
  parent_id?: string | null;
  status?: AgentStatus;
  /**
   * Keeps agents whose goal contains this text; ASCII letters match either case, other characters exactly. Only the
   * first `SEARCH_PREFIX_CHARS` characters of a goal are searched, within a work budget (storage/search.ts).
   */
  goal_contains?: string;
  /** `newest` first (by creation), or `oldest` first (a parent's children in spawn order). */
  order: 'newest' | 'oldest';
  /** The work budget of a goal search, in milliseconds. @default SEARCH_BUDGET_MS (100; tests raise it) */
  budget_ms?: number;
  offset: number;
  limit: number;
}

export interface AgentSearchPage {
  rows: AgentRow[];
  /** How many agents match, on every page (with `truncated`, how many were found before a bound stopped the count). */
  total: number;
  /** Set when a goal search stopped at its match cap or work budget: `total` is a lower bound. */
  truncated?: true;
}

export interface SpawnPage {
  offset: number;
  limit: number;
}

/**
 * A sign-in of the console, kept so that it survives a restart of the server. Only the SHA-256 of the
 * session id is stored, never the id (the browser's cookie) or the API key it was traded for.
 */
export interface ConsoleSessionRow {
  /** SHA-256 (hex) of the session id. */
  id_hash: string;
  account_id: string;
  /** SHA-256 of the API key it signed in with: the session lives only as long as that key. */
  key_hash: string;
  key_id: string;
  /** ISO time after which it is refused. */
  expires_at: string;
  /** Why it ended (JSON `{code, message}`), or null while it is live. */
  ended: string | null;
}

/**
 * Where another thread finds a storage's data: plain data, so it can be sent to the thread, which opens it with
 * `openSharedReader` (storage/shared-reader.ts).
 */
export interface SharedLocation {
  kind: 'sqlite';
  path: string;
}

export interface IdempotencyRecord {
  account_id: string;
  key: string;
  request_hash: string;
  /** JSON text of the stored response. */
  response: string;
  status: number;
  created_at: string;
}

/**
 * Where agentry keeps its state. Implementations: `memoryStorage()`, `sqliteStorage()` and `postgresStorage()` (`agentry-runtime/storage/postgres`).
 *
 * @example
 * const runtime = await AgentRuntime.open({ storage: sqliteStorage({ path: './agentry.db' }), model });
 */
export interface StorageAdapter {
  /** A short name for logs: `memory`, `sqlite`, `postgres`. */
  readonly kind: string;
  /** Create or migrate the schema. Called once by `AgentRuntime.open()`. */
  init(): Promise<void>;
  /**
   * Called by a runtime that will drive agents (not by one opened with `scheduler: 'manual'`). An adapter that can
   * be driven by one process only (SQLite) refuses a second live process with `invalid_state`.
   */
  acquireRunnerLock?(): Promise<void>;
  close(): Promise<void>;
  /**
   * How another thread can open the same data (read-only), or null when it cannot (private in-memory data). The HTTP
   * server's poll thread uses it to answer polls from a connection of its own.
   */
  sharedLocation?(): SharedLocation | null;
  /**
   * Present (after `init()`) when several runtime processes may drive this storage's agents at once: PostgreSQL unless
   * opened `exclusive` (storage/workers.ts). Absent: one process drives them (`acquireRunnerLock`).
   */
  readonly workers?: WorkerCoordination;
  /** Present (after `init()`) when due timers are claimed per worker (PostgreSQL unless `exclusive`; core/timers.ts). */
  readonly timerClaims?: TimerClaims;

  // accounts and credits
  /** Creates the account; a positive `balance` is also written as a `topup` ledger row. */
  createAccount(account: AccountRow): Promise<void>;
  getAccount(id: string): Promise<AccountRow | null>;
  listAccounts(): Promise<AccountRow[]>;
  setSubscription(id: string, active: boolean): Promise<AccountRow | null>;
  /** Adds to the balance and writes the ledger row (kind `topup` or `refund`, positive amount). */
  addCredits(entry: LedgerRow): Promise<AccountRow | null>;
  /** Every ledger row of the account, oldest first. Unbounded: for accounting and tests, never for a page view. */
  listLedger(accountId: string): Promise<LedgerRow[]>;
  /**
   * One agent's own ledger rows (its model calls and tool charges), oldest first, read through the `(agent_id, seq)`
   * index: the cost follows the agent's rows, not the size of its account's ledger. At most the newest `limit` rows
   * (`limit` ≥ 1); `truncated` says older rows were left out.
   */
  listAgentLedger(agentId: string, limit: number): Promise<AgentLedger>;
  /**
   * A page of the account's ledger, newest first: at most `limit` rows (≥ 1) with `seq` below `before` (all rows when
   * absent). Keyset paging through the `(account_id, seq)` index: a page costs its rows, however long the ledger.
   */
  listLedgerPage(accountId: string, query: { limit: number; before?: number }): Promise<LedgerPage>;
  /**
   * The account's `model` and `tool` rows summed by kind and item in one aggregate query (rows without an item are
   * left out), in no particular order: the totals of a credits page, without reading the rows out.
   */
  sumLedgerSpend(accountId: string): Promise<LedgerSpendRow[]>;
  /**
   * Holds `amount` if the account's available balance and the tree's cap both cover it. Returns null on success or
   * what refused it.
   */
  reserve(request: ReservationRequest): Promise<ReservationRefusal | null>;
  /**
   * `reserve` without a turn of the event loop, for adapters whose holds live in this process (memory, SQLite). The
   * runtime's credit gate grants an uncontended reservation through it at once; same semantics as `reserve`.
   */
  reserveNow?(request: ReservationRequest): ReservationRefusal | null;
  /** Drops a hold without spending it. Unknown ids are ignored. */
  release(reservationId: string): Promise<void>;
  /**
   * Another worker waits for credits of this account (storage with {@link StorageAdapter.workers}): gives back what
   * this process holds of it in advance and holds nothing in advance for a while. True when credits went back.
   * Absent: the adapter holds nothing in advance.
   */
  yieldCredits?(accountId: string): Promise<boolean>;
  /** Drops every hold of these agents (recovery after a crash). Returns how many were dropped. */
  releaseAgentReservations(agentIds: readonly string[]): Promise<number>;
  /** Settles reservations outside of a step (tool calls of an agent that was deleted meanwhile, etc.). */
  settle(settlements: Settlement[]): Promise<number[]>;

  // api keys
  insertApiKey(key: ApiKeyRow): Promise<void>;
  listApiKeys(accountId: string): Promise<ApiKeyRow[]>;
  deleteApiKey(accountId: string, keyId: string): Promise<boolean>;
  findApiKeyByHash(hash: string): Promise<ApiKeyRow | null>;
  /** The account of the API key with this hash, in one lookup (every authenticated HTTP request makes it). */
  findAccountByKeyHash(hash: string): Promise<AccountRow | null>;
  /** Records that the key with this hash was used at `at` (ISO); an earlier time than the one stored is ignored. */
  touchApiKey(hash: string, at: string): Promise<void>;
  /** When each of the account's keys was last used, by key id; keys never used are absent. */
  apiKeysLastUsed(accountId: string): Promise<Record<string, string>>;

  // agents
  /** Inserts agents with their first messages and turns, all or nothing; bumps each parent's `sub_agent_count`. */
  insertAgents(agents: AgentRow[], messages: MessageRow[], turns: TurnRow[]): Promise<void>;
  getAgent(id: string): Promise<AgentRow | null>;
  /** Children of `parentId` whose spawn key starts with the prefix, in spawn order; a page of them if `page` is given. */
  findAgentsBySpawnKey(parentId: string, spawnKeyPrefix: string, page?: SpawnPage): Promise<AgentRow[]>;
  listAgents(query: AgentQuery): Promise<AgentPage>;
  /** A page of the account's agents by position, filtered by parent, status and goal text, with the total. */
  searchAgents(query: AgentSearch): Promise<AgentSearchPage>;
  /** Agents in any of these statuses, oldest first (recovery, scheduling). */
  listAgentIdsByStatus(statuses: readonly AgentStatus[]): Promise<string[]>;
  /** Compare-and-set status change. Returns the updated row, or null if the agent is missing or not in `from`. */
  changeStatus(agentId: string, change: StatusChange, updatedAt: string): Promise<AgentRow | null>;
  /**
   * The agent's status marks, oldest first: at most the newest {@link MAX_STATUS_MARKS} (see
   * {@link StatusChange.mark}).
   */
  listStatusMarks(agentId: string): Promise<StatusMarkRow[]>;
  /**
   * Deletes the agent and its whole subtree with their messages, turns, tool calls, tool states, status marks,
   * artifacts, page reads, timers, monitors, queued monitor changes and holds (not the page texts they read). Returns
   * ids deleted.
   */
  deleteAgentTree(agentId: string): Promise<string[]>;
  /** How many children of `parentId` whose spawn key starts with the prefix are in each status. */
  countChildrenByStatus(parentId: string, spawnKeyPrefix: string): Promise<Partial<Record<AgentStatus, number>>>;
  /** Ids of every descendant of `agentId` (not itself). */
  listDescendantIds(agentId: string): Promise<string[]>;
  /**
   * Each given agent's tree summed in one query (the agent and every descendant: count, credits, tokens, statuses,
   * first creation and last update). Unknown ids are left out of the answer; order is not kept.
   */
  treeTotals(agentIds: readonly string[]): Promise<TreeTotalsRow[]>;
  /** How many agents are in each status (all accounts): the `agentry_agents` gauge asks at every scrape. */
  countAgentsByStatus(): Promise<Partial<Record<AgentStatus, number>>>;

  // retention (core/retention.ts)
  /**
   * Root agents (no parent) in one of `statuses` last updated before `updatedBefore`, oldest first, at most `limit`;
   * with `withTranscript`, only those whose transcript (turns) is still stored.
   */
  listFinishedRoots(query: FinishedRootsQuery): Promise<string[]>;
  /**
   * Forgets the work of these agents: turns, messages, tool calls, tool states, artifacts and page reads. The agent rows
   * (status, counts, credits) and the ledger stay. Returns the rows removed.
   */
  purgeAgentData(agentIds: readonly string[]): Promise<number>;
  /** Gives free pages back to the file system (SQLite's incremental vacuum); a no-op where there is nothing to do. */
  reclaimSpace?(): Promise<void>;

  // step log
  listMessages(agentId: string): Promise<MessageRow[]>;
  listTurns(agentId: string): Promise<TurnRow[]>;
  listToolCalls(agentId: string, turnIdx: number): Promise<ToolCallRow[]>;
  /**
   * Every tool call of the agent in one read, by turn and within a turn in first-recorded order: at most the newest
   * `limit` (≥ 1), through the `(agent_id, turn_idx)` index; `truncated` says older calls were left out.
   */
  listAgentToolCalls(agentId: string, limit: number): Promise<AgentToolCalls>;
  /**
   * Records tool calls (upsert) on their own, before they run; calls of an agent that does not exist are dropped.
   * With `onlyWhile`, the calls (all of one agent) are written only if their agent is in that status when the write
   * lands, and the answer says whether they were: the runtime marks a call that must never run twice as started this
   * way, so that it never starts once its agent was paused or stopped, by this process or another.
   */
  putToolCalls(calls: ToolCallRow[], onlyWhile?: AgentStatus): Promise<boolean>;
  commitStep(commit: StepCommit): Promise<StepCommitResult>;

  // durable state of a tool call (ctx.state): a multi-phase tool resumes at its phase after a crash
  /** Sets the JSON state of a call (upsert, its own transaction). Calls of agents that do not exist are ignored. */
  putToolState(agentId: string, toolUseId: string, state: string): Promise<void>;
  /** The JSON state of a call, or null when none was set. */
  getToolState(agentId: string, toolUseId: string): Promise<string | null>;

  // artifacts: bytes kept with an agent, deleted with it
  /**
   * Stores an artifact. Refused with `payload_too_large` past `limits` (the per-agent total counted inside the same
   * transaction), with `not_found` when the agent does not exist, with `invalid_request` when `row.size` is not
   * `data.byteLength`, and with `invalid_state` when the agent already has an artifact with this id.
   */
  putArtifact(row: ArtifactRow, data: Uint8Array, limits: ArtifactLimits): Promise<void>;
  /** The agent's artifacts, oldest first, without their bytes. */
  listArtifacts(agentId: string): Promise<ArtifactRow[]>;
  /** One artifact with its bytes, or null. */
  getArtifact(agentId: string, artifactId: string): Promise<{ row: ArtifactRow; data: Uint8Array } | null>;

  // pages read by tool calls, and their texts (one copy per distinct text)
  /**
   * Records a page read and keeps its text under its SHA-256 (the first text stored under a hash stays). Refused with
   * `invalid_request` when `read.content_sha256` is not the SHA-256 (hex) of `text`'s UTF-8 bytes. The read of an agent
   * that does not exist is dropped, text and all.
   */
  recordPageRead(read: PageReadRow, text: string): Promise<void>;
  /** Page reads of these agents, in the order they were recorded. */
  listPageReads(agentIds: readonly string[]): Promise<PageReadRow[]>;
  /** A stored page text by its SHA-256, or null. Texts outlive the agents that read them (citations point at them). */
  getPageText(contentSha256: string): Promise<string | null>;

  // outbox (message_person); its rows outlive their agent (the account's rate limit and audit trail count them)
  /**
   * Records an attempt as `queued` (on disk when the promise resolves), unless the recipient opted out of this account
   * and channel, the agent's or the account's attempts since the limits' `since` already reach `max`, or the call
   * (`agent_id`, `tool_use_id`) has an attempt already: then nothing is written and the refusal says why. The checks
   * and the write are one transaction, so two calls racing for the last slot cannot both get it.
   */
  queueOutbox(row: OutboxRow, limits: OutboxRateLimits): Promise<OutboxRefusal | null>;
  /** Ends a `queued` attempt; a row already ended is left alone. Returns the row as it is now, or null if missing. */
  finishOutbox(messageId: string, outcome: OutboxOutcome): Promise<OutboxRow | null>;
  /** The agent's attempts, oldest first. */
  listOutbox(agentId: string): Promise<OutboxRow[]>;
  /** The agent's attempts counted by status (the status form's `messages`). */
  countOutbox(agentId: string): Promise<Partial<Record<OutboxStatus, number>>>;
  /**
   * After a crash: every `queued` attempt becomes `unknown` with `error` (it may have left). Returns those rows, as
   * they are now. Only a runtime that drives agents calls it (an admin command beside a live one must not).
   */
  markQueuedOutboxUnknown(error: string): Promise<OutboxRow[]>;
  /** Remembers an opt-out (upsert: the latest reason wins). */
  putOptOut(row: OptOutRow): Promise<void>;
  /** The opt-out of this recipient on this account and channel, or null. */
  getOptOut(accountId: string, channel: OutboxChannel, recipient: string): Promise<OptOutRow | null>;

  // monitors and durable timers
  /** Schedules a timer (upsert by `timer_id`). The timer of an agent that does not exist is dropped. */
  putTimer(timer: TimerRow): Promise<void>;
  /** Deletes a timer; with `dueAt`, only if it is still due then (a handler that rescheduled it keeps it). */
  deleteTimer(timerId: string, dueAt?: number): Promise<boolean>;
  /**
   * Timers due at or before `dueBy`, soonest first, at most `limit`. With {@link StorageAdapter.timerClaims}: only
   * those not claimed by another worker (or whose claim expired), and they are claimed for this one.
   */
  listDueTimers(dueBy: number, limit: number): Promise<TimerRow[]>;
  /** When the soonest timer is due (with `timerClaims`: of those this worker may claim), or null when there is none. */
  nextTimerDue(): Promise<number | null>;
  /**
   * Stores a new monitor with its first check's timer, in one transaction, and answers the stored row: a monitor with
   * this id that exists already wins (a re-run call finds the monitor it created). Refused with `not_found` when the
   * agent does not exist.
   */
  insertMonitor(monitor: MonitorRow, timer: TimerRow | null): Promise<MonitorRow>;
  getMonitor(monitorId: string): Promise<MonitorRow | null>;
  /** The agent's monitors, oldest first. */
  listMonitors(agentId: string): Promise<MonitorRow[]>;
  /**
   * Replaces a monitor's row and, in the same transaction, queues a change, schedules its next timer, or drops a
   * timer — only while the stored monitor is `active`: false (and nothing written) when it no longer exists or was
   * cancelled or ended meanwhile (a check that ran during a cancel must not bring it back).
   */
  updateMonitor(
    monitor: MonitorRow,
    also?: { change?: Omit<MonitorChangeRow, 'seq'>; timer?: TimerRow; dropTimer?: string },
  ): Promise<boolean>;
  /** The oldest queued change of an agent (of one of its monitors, with `monitorId`), or null. */
  nextMonitorChange(agentId: string, monitorId?: string): Promise<MonitorChangeRow | null>;
  deleteMonitorChange(seq: number): Promise<void>;

  // console sessions
  /** Stores a console session (upsert by `id_hash`: ending one writes it again with `ended`). */
  putConsoleSession(row: ConsoleSessionRow): Promise<void>;
  getConsoleSession(idHash: string): Promise<ConsoleSessionRow | null>;
  /** Deletes the sessions that expired before `now` (ISO); returns how many. */
  deleteExpiredConsoleSessions(now: string): Promise<number>;
  /** An account's sessions not ended and not expired at `now` (ISO), soonest to expire first: the sign-in cap. */
  listLiveConsoleSessions(accountId: string, now: string): Promise<ConsoleSessionRow[]>;

  // idempotency keys of the HTTP create route
  getIdempotency(accountId: string, key: string): Promise<IdempotencyRecord | null>;
  putIdempotency(record: IdempotencyRecord): Promise<void>;
}
