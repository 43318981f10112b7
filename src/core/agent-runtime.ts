/**
 * @module core/agent-runtime
 * The `AgentRuntime` facade: the one object an embedding application holds. It validates every call, asks the status
 * table for every move, and leaves stepping to the scheduler.
 */
import type { z } from 'zod';
import { AgentryError, notFound } from '../errors.js';
import type { AgentRow, IdempotencyRecord, SharedLocation, StorageAdapter } from '../storage/adapter.js';
import type { ToolPlatform, ToolStatus } from '../tools/platform.js';
import type { Accounts } from './accounts.js';
import { cancelMonitor, deleteTree, pauseTree, resumeTree } from './agent-control.js';
import { createRootAgent } from './agent-create.js';
import { AgentPageQuerySchema, agentPage, listAgents, type AgentPositionPage } from './agent-list.js';
import * as views from './agent-views.js';
import type { PriceTable } from './credits.js';
import type { AgentEvents, AgentEventName, RuntimeEvents } from './events.js';
import {
  statusExtras,
  toAgentWithMessages,
  toCreatedForm,
  toMonitorInfo,
  toOutboxEntry,
  toStatusForm,
} from './records.js';
import { RetentionOptionsSchema, sweepFinished, type SweepResult } from './retention.js';
import { parseRuntimeOptions, type RuntimeOptions } from './runtime-options.js';
import { installTracing } from './runtime-telemetry.js';
import {
  closeBase,
  closeWiring,
  openBase,
  startWiring,
  wireRuntime,
  type RuntimeBase,
  type RuntimeWiring,
} from './runtime-wiring.js';
import {
  CreateAgentOptionsSchema,
  ListAgentsOptionsSchema,
  type Agent,
  type AgentCreated,
  type AgentList,
  type ArtifactInfo,
  type AgentWithMessages,
  type CreateAgentOptions,
  type ListAgentsOptions,
  type MonitorInfo,
  type TreeTotals,
  type OutboxEntry,
} from './schemas.js';
import type { Scheduler } from './scheduler.js';
import type { AgentStatus } from '../base/status.js';
import type { Telemetry } from './telemetry.js';
import type { TimerService } from './timers.js';
import {
  AgentIdSchema,
  IdempotencyKey,
  IdempotencyRecordSchema,
  ScopeId,
  ScopeSchema,
  WaitForOptionsSchema,
} from './runtime-arguments.js';
import { parseArgs } from '../base/validate.js';

export { DEFAULT_SYSTEM_PROMPT } from './runtime-options.js';
export type { RuntimeLogger, RuntimeOptions } from './runtime-options.js';

/** Scopes a call to one account (the HTTP layer passes the caller's): another account's agent is `not_found`. */
export interface AccountScope {
  accountId?: string;
}

/**
 * An in-process agent runtime. Open one per process (or per database), create agents, poll or subscribe.
 *
 * @example
 * import { AgentRuntime, defineTool, memoryStorage } from 'agentry-runtime';
 * import { scriptedModel } from 'agentry-runtime/testing';
 *
 * const runtime = await AgentRuntime.open({ storage: memoryStorage(), model: scriptedModel({ turns: [{ text: 'Done.' }] }) });
 * const { agent_id } = await runtime.create({ goal: 'Say done' });
 * const agent = await runtime.waitFor(agent_id);
 * console.log(agent.status); // COMPLETED
 * await runtime.close();
 */
export class AgentRuntime {
  /** Accounts, subscriptions, API keys and credits. */
  readonly accounts: Accounts;
  /** The account `create()` uses when none is given. */
  readonly defaultAccountId: string;
  /** The runtime's storage, for its own extras (the CLI's `gc`); records have methods here, which HTTP uses. */
  readonly storage: StorageAdapter;
  /** The prices the runtime bills by: the defaults merged with the `prices` option. */
  readonly prices: PriceTable;
  /** What the runtime is made of: its options and parts, and the services built from them (core/runtime-wiring.ts). */
  private readonly parts: RuntimeWiring;
  // The parts the methods here use most, by name (some tests and benchmarks look at them too).
  private readonly events: RuntimeEvents;
  private readonly scheduler: Scheduler;
  private readonly timers: TimerService;
  private readonly platform: ToolPlatform | null;
  private closed = false;

  /** Built by {@link open} from what it opened. */
  private constructor(base: RuntimeBase) {
    this.parts = wireRuntime(base, (id) => this.delete(id).then(() => undefined));
    ({ accounts: this.accounts, events: this.events, scheduler: this.scheduler, timers: this.timers } = this.parts);
    ({ platform: this.platform, storage: this.storage, prices: this.prices } = base);
    this.defaultAccountId = base.options.defaultAccount.id;
  }

  /**
   * Opens a runtime: validates options, migrates storage, makes sure the default account exists, and resumes every
   * agent that was ACTIVE when the last process stopped (from its last saved step). Options are checked before
   * anything is opened: a bad one leaves no storage open or locked.
   *
   * Defaults (chosen by the package's entry point, `src/defaults.ts`): `$AGENTRY_DB` (a SQLite path, or a
   * `postgres://` URL for PostgreSQL) else `./agentry.db`, and the Anthropic provider configured from the environment.
   *
   * @example
   * const runtime = await AgentRuntime.open({ storage: sqliteStorage({ path: './agents.db' }), defaultModel: 'svc-1-ultra' });
   */
  static async open(options: RuntimeOptions = {}): Promise<AgentRuntime> {
    const o = parseRuntimeOptions(options);
    const base = await openBase(o);
    let runtime: AgentRuntime;
    try {
      runtime = new AgentRuntime(base);
    } catch (err) {
      await closeBase(base);
      throw err;
    }
    const { parts } = runtime;
    await installTracing(parts.telemetry, o.tracing);
    await startWiring(parts);
    // Timers fire only in a runtime that drives agents (the CLI's admin commands open one with 'manual').
    if (o.scheduler === 'auto') runtime.timers.start();
    if (o.scheduler === 'auto') parts.retention?.start();
    return runtime;
  }

  /**
   * Adds an observer of every agent's work (see `Telemetry` in core/telemetry.ts): tracing is one, the Prometheus
   * metrics of `agentry-runtime/http` another. Returns a function that removes it.
   */
  instrument(observer: Telemetry): () => void {
    return this.parts.telemetry.add(observer);
  }

  /**
   * What is running in this process now, for metrics: agents holding a run slot and waiting for one, and each lane's
   * calls in flight and waiting.
   */
  load(): views.RuntimeLoad {
    return views.loadOf(this.parts);
  }

  /**
   * Whether this runtime can take work: open and not shutting down, and its storage answers. `GET /readyz` asks it.
   * (The storage's migrations ran in `open()`.)
   */
  async ready(): Promise<boolean> {
    if (this.closed) return false;
    try {
      await this.storage.getAccount(this.defaultAccountId);
      return !this.closed;
    } catch {
      return false;
    }
  }

  /**
   * Runs the retention sweep once now, with these settings (or the runtime's `retention` option): `agentry gc`
   * calls it. Returns what it removed.
   *
   * @example await runtime.sweep({ completedAfter: '30d', failedAfter: '30d' })
   */
  async sweep(options?: z.input<typeof RetentionOptionsSchema>): Promise<SweepResult> {
    this.assertOpen();
    const settings = options
      ? parseArgs(RetentionOptionsSchema, options, 'retention options')
      : this.parts.options.retention;
    if (!settings) throw new AgentryError('invalid_request', 'sweep: no retention settings given or configured');
    return sweepFinished(
      { storage: this.storage, clock: this.parts.clock, deleteTree: (id) => this.delete(id).then(() => undefined) },
      settings,
    );
  }

  /** Public model ids that `create()` accepts. */
  get models(): string[] {
    return this.parts.model.models.filter((m) => this.prices.models[m] !== undefined);
  }

  /**
   * Creates an agent and starts it. The agent's first message is the goal.
   * Throws `invalid_request` (bad goal or unknown model), `not_found` (unknown account), `subscription_inactive`,
   * or `insufficient_credits` (no available balance).
   *
   * @example
   * const { agent_id } = await runtime.create({ goal: 'Compare the three cheapest flights to Lisbon', maxCredits: 5 });
   */
  async create(options: CreateAgentOptions): Promise<AgentCreated> {
    this.assertOpen();
    const o = parseArgs(CreateAgentOptionsSchema, options, 'create options');
    return toCreatedForm(await createRootAgent(this.parts, o, this.models));
  }

  /**
   * The agent (status form) and its public transcript.
   *
   * @example
   * const { status, progress, messages } = await runtime.get(agentId);
   */
  async get(agentId: string, scope: AccountScope = {}): Promise<AgentWithMessages> {
    const row = await this.row(agentId, scope);
    return toAgentWithMessages(
      row,
      await this.storage.listMessages(row.agent_id),
      await statusExtras(this.storage, row),
    );
  }

  /** The agent with its children counted by status and its tree summed, without its transcript: for dashboards. */
  async treeStatus(agentId: string, scope: AccountScope = {}): Promise<Agent> {
    return views.treeStatusOf(this.storage, await this.row(agentId, scope));
  }

  /** The calls of the agent's tree that wait for credits in this process now (see `CreditWaits` in agent-views.ts). */
  async creditWaits(agentId: string, scope: AccountScope = {}): Promise<views.CreditWaits> {
    return views.creditWaitsOf(this.parts.credits, await this.row(agentId, scope));
  }

  /** What an agent did (turns, tool calls, own ledger rows, status marks), oldest first: for a timeline (the console's). */
  async activity(agentId: string, scope: AccountScope = {}): Promise<views.AgentActivity> {
    return views.activityOf(this.storage, await this.row(agentId, scope));
  }

  /** Each agent's tree summed, by agent id, in one query; unknown ids (and, scoped, other accounts') left out. */
  async treeTotals(agentIds: readonly string[], scope: AccountScope = {}): Promise<Record<string, TreeTotals>> {
    this.assertOpen();
    return views.treeTotalsOf(this.storage, agentIds, parseArgs(ScopeSchema, scope, 'scope').accountId);
  }

  /**
   * Agents, newest first, in reduced form with the start of their goal and their parent. Pass `next_cursor` back as
   * `cursor` for the next page. Filters: `status`, `parentId` (an id for its children, `null` for roots only) and `q`
   * (goal text, through the storage's goal index, bounded: see `storage/search.ts`).
   *
   * @example
   * const roots = await runtime.list({ parentId: null, limit: 20 });
   * const found = await runtime.list({ q: 'quarterly report' });
   */
  async list(options: ListAgentsOptions & AccountScope = {}): Promise<AgentList> {
    const o = parseArgs(ListAgentsOptionsSchema, options, 'list options');
    return listAgents(this.storage, o, this.defaultAccountId);
  }

  /**
   * A page of one account's agents by position (`offset`, `limit` up to 200) with how many match: roots or one
   * parent's children, by status and goal text. For tables with page numbers, such as the console's.
   *
   * @example
   * const { data, total } = await runtime.agentPage({ accountId, parentId: null, order: 'newest', q: 'report' });
   */
  async agentPage(query: z.input<typeof AgentPageQuerySchema>): Promise<AgentPositionPage> {
    this.assertOpen();
    return agentPage(this.storage, parseArgs(AgentPageQuerySchema, query, 'agentPage query'));
  }

  /**
   * Pauses an agent and its sub-agents at once: an in-flight model request is aborted (and redone on resume), a
   * running tool call finishes and its result is saved. Pausing a PAUSED agent is a no-op; a finished one is
   * `invalid_state`.
   *
   * @example
   * await runtime.pause(agentId); // later: await runtime.resume(agentId)
   */
  async pause(agentId: string, scope: AccountScope = {}): Promise<Agent> {
    return toStatusForm(await pauseTree(this.parts, () => this.row(agentId, scope)));
  }

  /**
   * Resumes a PAUSED or OUT_OF_CREDITS agent (and its paused or stopped sub-agents) from its last saved step.
   * Throws `insufficient_credits` when the account has nothing available, `invalid_state` for a finished agent.
   *
   * @example
   * await runtime.accounts.addCredits(accountId, 10);
   * await runtime.resume(agentId); // an OUT_OF_CREDITS agent continues from its last saved step
   */
  async resume(agentId: string, scope: AccountScope = {}): Promise<Agent> {
    return toStatusForm(await resumeTree(this.parts, () => this.row(agentId, scope)));
  }

  /**
   * Deletes an agent with its sub-agents, messages and turns, aborting their in-flight work.
   *
   * @example
   * await runtime.delete(agentId, { accountId }); // `not_found` for another account's agent
   */
  async delete(agentId: string, scope: AccountScope = {}): Promise<{ agent_id: string; deleted: true }> {
    const row = await this.row(agentId, scope);
    await deleteTree(this.parts, row);
    return { agent_id: row.agent_id, deleted: true };
  }

  /**
   * Resolves with the agent once its status is one of `until` (default: any status it will not leave on its own:
   * COMPLETED, FAILED, PAUSED, OUT_OF_CREDITS). Rejects with `not_found` if it is deleted meanwhile, or with the
   * signal's reason when `signal` aborts.
   *
   * @example
   * const done = await runtime.waitFor(agentId, { until: ['COMPLETED', 'FAILED'], signal: AbortSignal.timeout(60_000) });
   */
  async waitFor(agentId: string, options: z.input<typeof WaitForOptionsSchema> = {}): Promise<Agent> {
    const o = parseArgs(WaitForOptionsSchema, options, 'waitFor options');
    const until: readonly AgentStatus[] = o.until ?? ['COMPLETED', 'FAILED', 'PAUSED', 'OUT_OF_CREDITS'];
    const id = parseArgs(AgentIdSchema, agentId, 'agent id');
    // The agent may step in another process: its changes are relayed here while someone waits.
    const watch = this.parts.remote?.watch(id);
    const row = await this.parts.waiters.wait(id, until, {
      read: () => this.row(id, o.accountId === undefined ? {} : { accountId: o.accountId }),
      signal: o.signal,
      ready: watch?.ready,
      release: watch?.release,
    });
    return toStatusForm(row);
  }

  /**
   * Runs exactly one step of an agent now. Only with `scheduler: 'manual'`, where nothing steps on its own: tests and
   * callers that drive agents themselves use it.
   */
  async step(agentId: string): Promise<Agent> {
    this.assertOpen();
    if (this.parts.options.scheduler !== 'manual') {
      throw new AgentryError('invalid_state', 'step() needs a runtime opened with scheduler: "manual"');
    }
    const row = await this.row(agentId, {});
    await this.scheduler.stepOnce(row.agent_id);
    return toStatusForm(await this.row(agentId, {}));
  }

  /**
   * Makes this process emit the events of an agent that steps in another process (several processes on one
   * PostgreSQL database), until the returned function is called. Resolves once no later change can be missed: subscribe
   * to the events first, then follow, then read the agent. Without worker coordination it does nothing (every agent
   * steps in this process). `GET /api/agents/{id}/events` uses it.
   */
  async follow(agentId: string): Promise<() => void> {
    this.assertOpen();
    const watch = this.parts.remote?.watch(parseArgs(AgentIdSchema, agentId, 'agent id'));
    await watch?.ready;
    return watch?.release ?? (() => {});
  }

  /** Subscribes to an event; returns a function that unsubscribes. */
  on<E extends AgentEventName>(event: E, listener: AgentEvents[E]): () => void {
    this.events.on(event, listener as never);
    return () => this.events.off(event, listener as never);
  }

  off<E extends AgentEventName>(event: E, listener: AgentEvents[E]): void {
    this.events.off(event, listener as never);
  }

  /**
   * Every tool agents can use, ready or not, and why: the runtime's own, the built-ins (with their backend, or what
   * to set), and the custom tools. `agentry tools` prints it.
   */
  toolStatus(): ToolStatus[] {
    return [...this.parts.toolStatuses.map((t) => ({ ...t })), ...(this.parts.mcp?.status() ?? [])];
  }

  /**
   * Starts the tools that otherwise start when an agent first needs them (MCP servers) and resolves when each is
   * ready or has failed (at most its startup timeout), so {@link toolStatus} can tell. `agentry tools` calls it.
   */
  async startTools(): Promise<void> {
    this.assertOpen();
    await this.parts.registry.prepare();
  }

  /**
   * An artifact a tool kept with an agent, with its bytes. `not_found` for an unknown agent or artifact, or an
   * agent of another account (with `scope`).
   */
  async getArtifact(
    agentId: string,
    artifactId: string,
    scope: AccountScope = {},
  ): Promise<{ artifact: ArtifactInfo; data: Uint8Array }> {
    return views.artifactOf(this.storage, await this.row(agentId, scope), artifactId);
  }

  /**
   * The e-mails and SMS an agent's `message_person` calls tried, oldest first, with how each ended (`sent`, `failed`,
   * `unknown` when it may have left before a crash; `queued` while it is being sent). `not_found` for an unknown
   * agent, or an agent of another account (with `scope`).
   *
   * @example
   * for (const m of await runtime.outbox(agentId)) console.log(m.status, m.channel, m.to, m.error ?? '');
   */
  async outbox(agentId: string, scope: AccountScope = {}): Promise<OutboxEntry[]> {
    const row = await this.row(agentId, scope);
    return (await this.storage.listOutbox(row.agent_id)).map(toOutboxEntry);
  }

  /**
   * The text of a page a tool read, by the SHA-256 a checked citation carries (`content_sha256`), or null. With the
   * citation's `span`, anyone can check again, offline, that the excerpt is on the page as it was read.
   */
  async pageSnapshot(contentSha256: string): Promise<string | null> {
    this.assertOpen();
    return views.pageSnapshotOf(this.storage, contentSha256);
  }

  /**
   * The pages an agent watches with the `monitor` tool, oldest first: ended and cancelled ones too, with their
   * `status`. `not_found` for an unknown agent, or an agent of another account (with `scope`).
   */
  async monitors(agentId: string, scope: AccountScope = {}): Promise<MonitorInfo[]> {
    const row = await this.row(agentId, scope);
    return (await this.storage.listMonitors(row.agent_id)).map(toMonitorInfo);
  }

  /**
   * Cancels a monitor: no more checks, and its queued changes are no longer delivered. Cancelling a cancelled or
   * ended monitor changes nothing. `not_found` for an unknown id, or a monitor of another account's agent.
   */
  async cancelMonitor(monitorId: string, scope: AccountScope = {}): Promise<MonitorInfo> {
    this.assertOpen();
    return cancelMonitor(this.parts, parseArgs(AgentIdSchema, monitorId, 'monitor id'), (id) => this.row(id, scope));
  }

  /**
   * Where another thread can open this runtime's storage read-only, or null when it cannot (in-memory data,
   * PostgreSQL). `startServer` answers polls on a thread of its own from it, opened there with `openSharedReader`.
   *
   * @example const location = runtime.sharedStorageLocation(); // { kind: 'sqlite', path: './agentry.db' }, or null
   */
  sharedStorageLocation(): SharedLocation | null {
    return this.storage.sharedLocation?.() ?? null;
  }

  /**
   * What a create under an `Idempotency-Key` stored for an account, or null: the HTTP layer replays it for a retry of
   * `POST /api/agents`. See {@link storeIdempotentResult}.
   *
   * @example const stored = await runtime.idempotentResult(accountId, request.headers.get('idempotency-key')!);
   */
  async idempotentResult(accountId: string, key: string): Promise<IdempotencyRecord | null> {
    return this.storage.getIdempotency(
      parseArgs(ScopeId, accountId, 'account id'),
      parseArgs(IdempotencyKey, key, 'idempotency key'),
    );
  }

  /**
   * Stores what a create under an `Idempotency-Key` answered. Another process may store first: then its record
   * stays, and {@link idempotentResult} tells which one won.
   */
  async storeIdempotentResult(record: IdempotencyRecord): Promise<void> {
    await this.storage.putIdempotency(parseArgs(IdempotencyRecordSchema, record, 'idempotency record'));
  }

  /** Resolves when no agent is stepping or waiting for a run slot in this process. */
  whenIdle(): Promise<void> {
    return this.scheduler.whenIdle();
  }

  /**
   * Shuts down: no new steps start; steps in flight get `closeTimeoutMs` to finish, then are aborted. Agents stay
   * ACTIVE in storage and continue when a runtime opens the same storage again. Closes the storage.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await closeWiring(this.parts);
  }

  private async row(agentId: string, scope: AccountScope): Promise<AgentRow> {
    this.assertOpen();
    const id = parseArgs(AgentIdSchema, agentId, 'agent id');
    const { accountId } = parseArgs(ScopeSchema, scope, 'scope');
    const row = await this.storage.getAgent(id);
    if (!row || (accountId !== undefined && row.account_id !== accountId)) throw notFound('Agent', id);
    return row;
  }

  private assertOpen(): void {
    if (this.closed) throw new AgentryError('invalid_state', 'The runtime is closed');
  }
}
