/**
 * @module core/agent-runtime
 * The `AgentRuntime` facade: the one object an embedding application holds. It validates every call, asks the status
 * table for every move, and leaves stepping to the scheduler.
 */
import { randomUUID } from 'node:crypto';
import { newAgentId } from './ids.js';
import { z } from 'zod';
import { AgentryError, notFound } from '../errors.js';
import type { ModelProvider } from '../models/provider.js';
import type { AgentRow, LedgerRow, StorageAdapter, ToolCallRow, TurnRow } from '../storage/adapter.js';
import type { Tool } from '../tools/define-tool.js';
import { ToolRegistry } from '../tools/registry.js';
import {
  createToolPlatform,
  type BuiltinToolsOptions,
  type PlatformServices,
  type ToolPlatform,
  type ToolStatus,
} from '../tools/platform.js';
import { createMcpToolSource, type McpElicitationHandler, type ToolSource } from '../tools/tool-source.js';
import { Toolboxes } from './toolbox.js';
import { Accounts } from './accounts.js';
import { isoTime, systemClock, type Clock } from './clock.js';
import { CreditGate } from './credit-gate.js';
import { mergePrices, PriceTableSchema, type PriceTable } from './credits.js';
import { RuntimeEvents, type AgentEvents, type AgentEventName } from './events.js';
import { changeStatus, type StepDeps } from './loop.js';
import { SubscriptionCheck } from './subscription-check.js';
import { createPlanTool } from './plan.js';
import {
  statusExtras,
  toAgentWithMessages,
  toArtifactInfo,
  toCreatedForm,
  toMonitorInfo,
  toOutboxEntry,
  toListItem,
  toStatusForm,
  toSubAgentCounts,
  toTreeTotals,
} from './records.js';
import { Lanes, Scheduler } from './scheduler.js';
import { RemoteAgents } from './remote-agents.js';
import { SubAgentCoordinator } from './sub-agents.js';
import { monitorTimerId, TimerService } from './timers.js';
import { backgroundServices } from './background.js';
import { modelInfoOf, TelemetryHub, type Telemetry } from './telemetry.js';
import type * as OtelModuleNs from '../observability/otel.js';
import { RetentionOptionsSchema, RetentionSweeper, sweepFinished, type SweepResult } from './retention.js';
import {
  AgentStatusSchema,
  CreateAgentOptionsSchema,
  creditsToMicros,
  ListAgentsOptionsSchema,
  type Agent,
  type AgentCreated,
  type AgentList,
  type ArtifactInfo,
  type AgentWithMessages,
  type CreateAgentOptions,
  type ListAgentsOptions,
  type TreeTotals,
  type MonitorInfo,
  type OutboxEntry,
} from './schemas.js';
import { assertTransition, isTerminal, RUNNABLE_STATUSES, type AgentStatus } from './status.js';
import { parseArgs } from './validate.js';

export const DEFAULT_SYSTEM_PROMPT = [
  'You are an autonomous agent working on the goal the user gives you.',
  'Work step by step with the tools you have. Start by recording a short plan with update_plan, and update it as',
  'steps get done. Be efficient: every model turn and tool call costs credits.',
  'When the goal is achieved, reply with your final answer as plain text and call no tools.',
].join(' ');

const isObjectWith =
  (...methods: string[]) =>
  (v: unknown) =>
    typeof v === 'object' &&
    v !== null &&
    methods.every((m) => typeof (v as Record<string, unknown>)[m] === 'function');

const RuntimeOptionsSchema = z
  .object({
    storage: z.custom<StorageAdapter>(isObjectWith('init', 'commitStep'), 'must be a StorageAdapter').optional(),
    model: z.custom<ModelProvider>(isObjectWith('generate'), 'must be a ModelProvider').optional(),
    tools: z
      .array(
        z.custom<Tool>(
          (v) => isObjectWith('run')(v) && typeof (v as Tool).jsonSchema === 'object',
          'must come from defineTool()',
        ),
      )
      .default([]),
    prices: PriceTableSchema.optional(),
    clock: z.custom<Clock>(isObjectWith('now', 'sleep'), 'must be a Clock').optional(),
    defaultModel: z.string().min(1).default('svc-1-lite'),
    defaultAccount: z
      .object({ id: z.string().min(1).max(200).default('local'), credits: z.number().finite().min(0).default(100) })
      .strict()
      .default({ id: 'local', credits: 100 }),
    limits: z
      .object({
        maxSteps: z.number().int().positive().default(100),
        maxWallClockMs: z
          .number()
          .positive()
          .default(60 * 60 * 1000),
        maxOutputTokens: z.number().int().positive().max(1_000_000).default(4096),
        /** The least `max_tokens` a call is lowered to when the balance cannot cover `maxOutputTokens`. */
        minOutputTokens: z.number().int().positive().max(1_000_000).default(256),
        maxToolResultChars: z.number().int().positive().default(50_000),
        maxModelRetries: z.number().int().min(0).default(5),
        /** Bytes of one artifact at most. */
        maxArtifactBytes: z
          .number()
          .int()
          .positive()
          .default(10 * 1024 * 1024),
        /** Bytes of all the artifacts of one agent at most. */
        maxArtifactBytesPerAgent: z
          .number()
          .int()
          .positive()
          .default(100 * 1024 * 1024),
      })
      .strict()
      .prefault({}),
    concurrency: z
      .object({
        /**
         * Agents stepping at once. By default the model lane plus the tools lane: an agent beyond what the lanes can
         * serve would only wait in one with its step's state in memory, where a waiting agent costs a row.
         */
        runSlots: z.number().int().positive().optional(),
        /**
         * Several workers on one database (PostgreSQL): the most agents a worker claims beyond what its free run slots
         * can start now. What it claims ahead follows how fast its slots free up (none while they stay busy), so the
         * work it cannot start soon stays claimable by idle workers. @default 32
         * @example { runSlots: 50, claimAhead: 8 }
         */
        claimAhead: z.number().int().min(0).max(10_000).optional(),
        models: z.number().int().positive().default(64),
        modelRequestsPerInterval: z.number().int().min(0).default(0),
        modelIntervalMs: z.number().int().positive().default(1000),
        tools: z.number().int().positive().default(64),
        lanes: z.record(z.string(), z.number().int().positive()).default({}),
      })
      .strict()
      .prefault({}),
    scheduler: z.enum(['auto', 'manual']).default('auto'),
    /**
     * The built-in tools (web_search, read_page, …): which ones agents are offered and their backends, or `false` for
     * none. Environment variables (DESIGN §7) fill in what is not given.
     */
    builtinTools: z
      .union([
        z.literal(false),
        z.custom<BuiltinToolsOptions>((v) => typeof v === 'object' && v !== null, 'must be an object or false'),
      ])
      .optional(),
    /**
     * MCP servers whose tools agents are offered as `mcp__<server>__<tool>`, in the format of Claude Code and Claude
     * Desktop's `mcpServers` (`{"<name>": {"command", "args", "env"} | {"type": "http", "url", "headers"}}`), plus
     * per server `allowed_tools`, `disallowed_tools` and timeouts. Checked by the MCP client (`src/mcp/config.ts`);
     * a server starts when an agent first needs its tools. @default the file `AGENTRY_MCP_CONFIG` names, if set
     */
    mcpServers: z.record(z.string(), z.unknown()).optional(),
    /**
     * Answers MCP servers that ask a person for input (`elicitation/create`). Without it the capability is not
     * declared and such a request is declined with a message that says no person is at hand.
     */
    onMcpElicitation: z.custom<McpElicitationHandler>((v) => typeof v === 'function', 'must be a function').optional(),
    /** How deep sub-agents may nest (a root agent is depth 0); 0 turns spawning off. */
    maxSpawnDepth: z.number().int().min(0).max(10).default(2),
    systemPrompt: z.string().min(1).default(DEFAULT_SYSTEM_PROMPT),
    closeTimeoutMs: z.number().int().min(0).default(10_000),
    /**
     * Traces through `@opentelemetry/api` (GenAI semantic conventions), recorded once an OpenTelemetry SDK is
     * registered; `false` turns them off. `captureMessageContent` adds prompts, answers and tool arguments and results
     * to the spans (opt-in: they hold whatever users and pages wrote). @default on when `@opentelemetry/api` is installed
     */
    tracing: z
      .union([
        z.literal(false),
        z
          .object({
            captureMessageContent: z.boolean().optional(),
            tracerProvider: z
              .custom<object>((v) => isObjectWith('getTracer')(v), 'must be a TracerProvider')
              .optional(),
          })
          .strict(),
      ])
      .optional(),
    /**
     * Forgets finished trees after an age (their turns, messages, tool calls and artifacts, or with `deleteTrees` the
     * agents too); ledger rows stay. Durations in ms or as text: `completedAfter: '30d'`. @default off
     */
    retention: RetentionOptionsSchema.optional(),
    /**
     * A logger of pino's shape (`info`, `warn`, `error`, `debug`, each `(object, message)`): status changes at info,
     * model provider failures (an error the provider's and the runtime's retries did not get past) at warn, internal
     * errors at error with their stack. @default silent (errors without a listener still go to console.error)
     */
    logger: z
      .custom<RuntimeLogger>(
        (v) => isObjectWith('info', 'warn', 'error', 'debug')(v),
        "must have pino's shape (info, warn, error, debug)",
      )
      .optional(),
  })
  .strict();

/** The part of a pino logger the runtime uses. */
export interface RuntimeLogger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

/** Options of {@link AgentRuntime.open}. */
export type RuntimeOptions = z.input<typeof RuntimeOptionsSchema>;

const WaitForOptionsSchema = z
  .object({
    until: z.array(AgentStatusSchema).min(1).optional(),
    signal: z.custom<AbortSignal>((v) => v instanceof AbortSignal, 'must be an AbortSignal').optional(),
    accountId: z.string().optional(),
  })
  .strict();

/** Scopes a call to one account (the HTTP layer passes the caller's): another account's agent is `not_found`. */
export interface AccountScope {
  accountId?: string;
}

const ScopeSchema = z.object({ accountId: z.string().min(1).max(200).optional() }).strict();
const AgentIdSchema = z.string().min(1).max(200);

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
  private readonly events = new RuntimeEvents();
  private readonly scheduler: Scheduler;
  private readonly lanes: Lanes;
  private readonly registry: ToolRegistry;
  private readonly toolboxes: Toolboxes;
  private readonly toolStatuses: ToolStatus[];
  private readonly subAgents: SubAgentCoordinator;
  private readonly credits: CreditGate;
  /** Whether an account may run agents: asked before every step and every billed turn asked for from outside one. */
  private readonly subscriptions: SubscriptionCheck;
  /** Durable timers: waits that end at a time, monitors' checks (core/timers.ts). */
  private readonly timers: TimerService;
  /** `waitFor` callers by agent id: told of every status change of that agent (null when it is deleted). */
  private readonly statusWaiters = new Map<string, Set<(row: AgentRow | null) => void>>();
  private closed = false;
  /** Tracing and metrics observers (core/telemetry.ts). */
  private readonly telemetry = new TelemetryHub();
  private readonly retention: RetentionSweeper | null;
  /** Relays changes of agents stepping in other processes to watchers here (core/remote-agents.ts); null alone. */
  private readonly remote: RemoteAgents | null;

  private constructor(
    readonly storage: StorageAdapter,
    private readonly model: ModelProvider,
    private readonly clock: Clock,
    private readonly options: z.output<typeof RuntimeOptionsSchema>,
    readonly prices: PriceTable,
    private readonly platform: ToolPlatform | null,
    /** The MCP servers' tools (null without `mcpServers`); asked at every step, as they come and go. */
    private readonly mcp: ToolSource | null = null,
  ) {
    this.credits = new CreditGate(storage);
    this.timers = new TimerService(storage, clock, {
      onError: (error, agentId) => this.reportError(error, agentId ?? '(timers)'),
    });
    // A call waiting until a time (ctx.waitUntil) runs again: the agent is made runnable, and its call decides.
    this.timers.register(AGENT_WAKE_TIMER, async (timer) => this.scheduler.kick(timer.agent_id));
    const subscriptions = new SubscriptionCheck(storage, clock);
    this.subscriptions = subscriptions;
    this.accounts = new Accounts(
      storage,
      clock,
      (accountId) => this.credits.toppedUp(accountId),
      (accountId) => subscriptions.forget(accountId),
    );
    this.defaultAccountId = options.defaultAccount.id;
    this.events.statusHooks.push((row, previous) => {
      const waiters = this.statusWaiters.get(row.agent_id);
      if (waiters) for (const waiter of [...waiters]) waiter(row);
      if (!this.telemetry.empty) this.telemetry.statusChanged(row, previous);
      options.logger?.info(
        {
          agent_id: row.agent_id,
          parent_id: row.parent_id,
          status: row.status,
          previous,
          status_message: row.status_message,
          // The W3C traceparent's trace id: the line joins the agent's trace in a log search.
          ...(row.trace_context ? { trace_id: row.trace_context.slice(3, 35) } : {}),
        },
        'agent status changed',
      );
    });
    this.retention = options.retention
      ? new RetentionSweeper(
          { storage, clock, deleteTree: (id) => this.delete(id).then(() => undefined) },
          options.retention,
          (error) => this.reportError(error, '(retention)'),
        )
      : null;
    this.subAgents = new SubAgentCoordinator(storage, clock, this.events, {
      models: model.models.filter((m) => prices.models[m] !== undefined),
      maxDepth: options.maxSpawnDepth,
      specOf: (task) => this.toolboxes.specOf(task),
      kick: (id) => this.scheduler.kick(id),
      onError: (error, agentId) => this.reportError(error, agentId),
      ...(storage.workers ? { shared: { bus: storage.workers.bus, recountMs: 2_000 } } : {}),
    });
    const runtimeTools = [createPlanTool(), ...(options.maxSpawnDepth > 0 ? this.subAgents.tools() : [])];
    const builtins = options.builtinTools === false ? [] : (platform?.tools ?? []);
    this.registry = new ToolRegistry([
      ...runtimeTools,
      ...builtins.filter((t) => platform!.offered.has(t.name)),
      ...options.tools,
    ]);
    if (mcp) this.registry.addSource(mcp);
    // Every tool a child may name: the agents' tools, built-ins left out of them, and the tools' own childTools.
    const catalog = new ToolRegistry(this.registry.all());
    for (const tool of [...builtins, ...options.tools]) {
      if (!catalog.get(tool.name)) catalog.register(tool);
      for (const child of tool.childTools ?? []) if (!catalog.get(child.name)) catalog.register(child as Tool);
    }
    this.toolStatuses = [
      ...runtimeTools.map((t) => ({
        name: t.name,
        source: 'runtime' as const,
        ready: true,
        detail: '',
        offered: true,
      })),
      ...(options.builtinTools === false ? [] : (platform?.status() ?? [])),
      ...options.tools.map((t) => ({
        name: t.name,
        source: 'custom' as const,
        ready: true,
        detail: '',
        offered: true,
      })),
    ];
    this.lanes = new Lanes({
      modelConcurrency: options.concurrency.models,
      modelRequestsPerInterval: options.concurrency.modelRequestsPerInterval,
      modelIntervalMs: options.concurrency.modelIntervalMs,
      toolConcurrency: options.concurrency.tools,
      // A browser context holds ~50 MB: its lane is narrow unless set. Sandboxes are bounded by their own slots
      // (sandbox/sandbox-slots.ts), shared fairly between accounts, not by a lane.
      laneConcurrency: { browser: 4, ...options.concurrency.lanes },
    });
    const registry = this.registry;
    this.toolboxes = new Toolboxes(
      {
        system: options.systemPrompt,
        // Read at every step: MCP servers' tools come and go.
        get specs() {
          return registry.specs();
        },
        get: (name) => this.registry.get(name),
        maxSteps: options.limits.maxSteps,
        needsResult: false,
      },
      catalog,
    );
    const deps: StepDeps = {
      storage,
      credits: this.credits,
      model,
      toolboxes: this.toolboxes,
      platform,
      artifactLimits: {
        maxBytes: options.limits.maxArtifactBytes,
        maxBytesPerAgent: options.limits.maxArtifactBytesPerAgent,
      },
      prices,
      clock,
      events: this.events,
      limits: options.limits,
      subAgents: this.subAgents,
      inModelLane: (fn) => this.lanes.inModelLane(fn),
      backOffModels: (ms) => this.lanes.backOffModels(ms, clock),
      inToolLane: (lane, fn) => this.lanes.inToolLane(lane, fn),
      wakeAt: (agentId, at) =>
        this.timers.schedule({
          timer_id: `${AGENT_WAKE_TIMER}:${agentId}`,
          agent_id: agentId,
          kind: AGENT_WAKE_TIMER,
          due_at: at,
        }),
      ...(mcp ? { prepareTools: () => registry.prepare() } : {}),
      subscriptions,
      telemetry: this.telemetry,
      ...(options.logger ? { logger: options.logger } : {}),
      ...(storage.workers && options.scheduler === 'auto'
        ? { mayProceed: (agentId: string) => storage.workers!.mayProceed(agentId) }
        : {}),
    };
    this.scheduler = new Scheduler(deps, {
      runSlots: options.concurrency.runSlots ?? options.concurrency.models + options.concurrency.tools,
      ...(options.concurrency.claimAhead !== undefined ? { claimAhead: options.concurrency.claimAhead } : {}),
      auto: options.scheduler === 'auto',
      onError: (error, agentId) => this.reportError(error, agentId),
      beforeSteps: (agentId) => this.remote?.catchUp(agentId),
      ...(storage.workers && options.scheduler === 'auto' ? { leases: storage.workers } : {}),
    });
    this.remote = storage.workers
      ? new RemoteAgents({
          storage,
          bus: storage.workers.bus,
          events: this.events,
          stepping: (id) => this.scheduler.controlOf(id) !== undefined,
          onStatus: (id, row) => [...(this.statusWaiters.get(id) ?? [])].forEach((waiter) => waiter(row)),
          onError: (error, agentId) => this.reportError(error, agentId),
        })
      : null;
  }

  /**
   * Opens a runtime: validates options, migrates storage, makes sure the default account exists, and resumes every
   * agent that was ACTIVE when the last process stopped (from its last saved step).
   *
   * Defaults: `$AGENTRY_DB` (a SQLite path, or a `postgres://` URL for PostgreSQL) else `./agentry.db`, and the Anthropic provider configured from the environment.
   */
  static async open(options: RuntimeOptions = {}): Promise<AgentRuntime> {
    const o = parseArgs(RuntimeOptionsSchema, options, 'runtime options');
    const storage = o.storage ?? (await defaultStorage());
    // A manual runtime (the CLI's admin commands, tests) steps nothing by itself: no warning about a missing model.
    const model = o.model ?? (await defaultModel(o.scheduler === 'auto'));
    const prices = mergePrices(o.prices);
    const clock = o.clock ?? systemClock;
    if (!model.models.includes(o.defaultModel)) {
      throw new AgentryError(
        'invalid_request',
        `defaultModel ${JSON.stringify(o.defaultModel)} is not served by the model provider`,
      );
    }
    // Options are checked before anything is opened: a bad builtinTools option leaves no storage open or locked.
    // With `builtinTools: false` custom tools still get the guarded fetch; only the built-in tools are left out.
    const platform = createToolPlatform(o.builtinTools === false ? { only: [] } : (o.builtinTools ?? {}));
    // MCP servers start on first use: nothing is spawned here, only the configuration is checked.
    let mcp: ToolSource | null;
    try {
      mcp = createMcpToolSource(o.mcpServers, { prices, onElicitation: o.onMcpElicitation });
    } catch (err) {
      await platform?.close();
      throw err;
    }
    let runtime: AgentRuntime;
    try {
      await storage.init();
      if (o.scheduler === 'auto') {
        try {
          await storage.acquireRunnerLock?.();
        } catch (err) {
          await storage.close();
          throw err;
        }
      }
      try {
        runtime = new AgentRuntime(storage, model, clock, o, prices, platform, mcp);
      } catch (err) {
        await storage.close();
        throw err;
      }
    } catch (err) {
      await platform?.close();
      await mcp?.close();
      throw err;
    }
    if (o.tracing !== false) await runtime.installTracing(o.tracing ?? {});
    await runtime.ensureDefaultAccount();
    await runtime.attachPlatform();
    await runtime.recover();
    // Timers fire only in a runtime that drives agents (the CLI's admin commands open one with 'manual').
    if (o.scheduler === 'auto') runtime.timers.start();
    if (o.scheduler === 'auto') runtime.retention?.start();
    return runtime;
  }

  /**
   * Adds an observer of every agent's work (see `Telemetry` in core/telemetry.ts): tracing is one, the Prometheus
   * metrics of `agentry-runtime/http` another. Returns a function that removes it.
   */
  instrument(observer: Telemetry): () => void {
    return this.telemetry.add(observer);
  }

  /**
   * What is running in this process now, for metrics: agents holding a run slot and waiting for one, and each lane's
   * calls in flight and waiting.
   */
  load(): {
    runSlots: { running: number; waiting: number; size: number };
    lanes: Array<{ lane: string; active: number; waiting: number }>;
  } {
    return {
      runSlots: { running: this.scheduler.runningCount, waiting: this.scheduler.queuedCount, size: this.runSlots },
      lanes: this.lanes.load(),
    };
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
    const settings = options ? parseArgs(RetentionOptionsSchema, options, 'retention options') : this.options.retention;
    if (!settings) throw new AgentryError('invalid_request', 'sweep: no retention settings given or configured');
    return sweepFinished(
      { storage: this.storage, clock: this.clock, deleteTree: (id) => this.delete(id).then(() => undefined) },
      settings,
    );
  }

  private get runSlots(): number {
    return this.options.concurrency.runSlots ?? this.options.concurrency.models + this.options.concurrency.tools;
  }

  /** Tracing through @opentelemetry/api when it is installed; without it, none. */
  private async installTracing(o: {
    captureMessageContent?: boolean | undefined;
    tracerProvider?: object | undefined;
  }): Promise<void> {
    let otel: typeof OtelModuleNs;
    try {
      otel = await import('../observability/otel.js');
    } catch {
      return; // @opentelemetry/api is an optional peer
    }
    this.instrument(
      new otel.OtelTracing({
        ...(o.captureMessageContent !== undefined ? { captureMessageContent: o.captureMessageContent } : {}),
        ...(o.tracerProvider !== undefined ? { tracerProvider: o.tracerProvider as never } : {}),
      }),
    );
  }

  /** Public model ids that `create()` accepts. */
  get models(): string[] {
    return this.model.models.filter((m) => this.prices.models[m] !== undefined);
  }

  /**
   * Creates an agent and starts it. The agent's first message is the goal.
   * Throws `invalid_request` (bad goal or unknown model), `not_found` (unknown account), `subscription_inactive`,
   * or `insufficient_credits` (no available balance).
   */
  async create(options: CreateAgentOptions): Promise<AgentCreated> {
    this.assertOpen();
    const o = parseArgs(CreateAgentOptionsSchema, options, 'create options');
    const model = o.model ?? this.options.defaultModel;
    if (!this.models.includes(model)) {
      throw new AgentryError(
        'invalid_request',
        `Unknown model ${JSON.stringify(model)}; use one of: ${this.models.join(', ')}`,
        {
          details: [{ path: 'model', message: `must be one of ${this.models.join(', ')}` }],
        },
      );
    }
    const accountId = o.accountId ?? this.defaultAccountId;
    const account = await this.storage.getAccount(accountId);
    if (!account) throw notFound('Account', accountId);
    if (!account.subscription_active)
      throw new AgentryError('subscription_inactive', 'The subscription of this account is not active');
    // The settled balance decides, not what is free of holds this instant: holds are temporary, and a new agent
    // waits its turn for credits that other agents' calls hold.
    if (account.balance <= 0) {
      throw new AgentryError('insufficient_credits', 'The account has no credits left; add credits first');
    }
    const now = isoTime(this.clock.now());
    const id = newAgentId();
    const row: AgentRow = {
      agent_id: id,
      account_id: accountId,
      parent_id: null,
      root_id: id,
      spawn_key: null,
      goal: o.goal,
      model,
      status: 'ACTIVE',
      progress: 0,
      status_message: 'Starting',
      token_count: 0,
      message_count: 1,
      credits_spent: 0,
      sub_agent_count: 0,
      max_credits: o.maxCredits === undefined ? null : creditsToMicros(o.maxCredits),
      tree_spent: 0,
      tree_reserved: 0,
      step_count: 0,
      started: true,
      active_ms: 0,
      active_since: now,
      plan: null,
      spec: null,
      created_at: now,
      updated_at: now,
      trace_context: null,
    };
    if (!this.telemetry.empty) {
      row.trace_context = this.telemetry.agentCreated(row, {
        ...modelInfoOf(this.model, model),
        traceparent: o.traceparent ?? null,
      });
    }
    await this.storage.insertAgents(
      [row],
      [{ message_id: randomUUID(), agent_id: id, role: 'USER', text: o.goal, timestamp: now }],
      [
        {
          agent_id: id,
          idx: 0,
          role: 'user',
          content: JSON.stringify([{ type: 'text', text: o.goal }]),
          created_at: now,
        },
      ],
    );
    this.events.emit('agent.created', { agent: toStatusForm(row) });
    this.scheduler.kick(id);
    if (this.options.scheduler !== 'auto') this.storage.workers?.bus.publish('work', '');
    return toCreatedForm(row);
  }

  /** The agent (status form) and its public transcript. */
  async get(agentId: string, scope: AccountScope = {}): Promise<AgentWithMessages> {
    const row = await this.row(agentId, scope);
    return toAgentWithMessages(
      row,
      await this.storage.listMessages(row.agent_id),
      await statusExtras(this.storage, row),
    );
  }

  /**
   * The agent in status form with its direct children counted by status and its whole tree summed (`sub_agents`,
   * `tree`), without its transcript: two indexed queries, cheap enough for a dashboard to ask every second while a
   * tree runs.
   */
  async treeStatus(agentId: string, scope: AccountScope = {}): Promise<Agent> {
    const row = await this.row(agentId, scope);
    if (row.sub_agent_count === 0) return toStatusForm(row);
    const [children, tree] = await Promise.all([
      this.storage.countChildrenByStatus(row.agent_id, ''),
      this.storage.treeTotals([row.agent_id]),
    ]);
    return toStatusForm(row, {
      subAgents: toSubAgentCounts(children),
      tree: tree[0] && toTreeTotals(tree[0]),
    });
  }

  /**
   * What an agent did, as storage keeps it: its conversation turns, its tool calls (input, result, outcome) and its
   * own ledger rows (each model call's tokens, cache tokens and credits; each tool charge), oldest first. For views
   * that lay a run out on a timeline, such as the console's.
   */
  async activity(
    agentId: string,
    scope: AccountScope = {},
  ): Promise<{ agent: AgentRow; turns: TurnRow[]; toolCalls: ToolCallRow[]; ledger: LedgerRow[] }> {
    const row = await this.row(agentId, scope);
    const [turns, ledger] = await Promise.all([
      this.storage.listTurns(row.agent_id),
      this.storage.listLedger(row.account_id),
    ]);
    const toolCalls = (
      await Promise.all(
        turns.filter((t) => t.role === 'assistant').map((t) => this.storage.listToolCalls(row.agent_id, t.idx)),
      )
    ).flat();
    return { agent: row, turns, toolCalls, ledger: ledger.filter((e) => e.agent_id === row.agent_id) };
  }

  /**
   * Each agent's tree summed (the agent and all its descendants), by agent id, in one storage query: for lists that
   * show what each tree cost. Unknown ids, and with `accountId` another account's, are left out.
   */
  async treeTotals(agentIds: readonly string[], scope: AccountScope = {}): Promise<Record<string, TreeTotals>> {
    this.assertOpen();
    const ids = parseArgs(z.array(AgentIdSchema).max(1000), [...agentIds], 'agent ids');
    const { accountId } = parseArgs(ScopeSchema, scope, 'scope');
    const out: Record<string, TreeTotals> = {};
    for (const t of await this.storage.treeTotals(ids)) {
      if (accountId === undefined || t.account_id === accountId) out[t.agent_id] = toTreeTotals(t);
    }
    return out;
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
    if (o.q !== undefined) return this.searchList(o);
    const filter = {
      ...(o.accountId !== undefined ? { account_id: o.accountId } : {}),
      ...(o.status !== undefined ? { status: o.status } : {}),
      ...(o.parentId !== undefined ? { parent_id: o.parentId } : {}),
    };
    const page = await this.storage.listAgents({
      ...filter,
      limit: o.limit,
      ...(o.cursor !== undefined ? { after: decodeCursor(o.cursor) } : {}),
    });
    const rows = page.rows;
    // A full page may or may not be the last: look one row further.
    const hasMore =
      rows.length === o.limit &&
      page.last !== null &&
      (await this.storage.listAgents({ ...filter, limit: 1, after: page.last })).rows.length > 0;
    const next = hasMore && page.last !== null ? encodeCursor(page.last) : null;
    return { data: rows.map(toListItem), has_more: hasMore, next_cursor: next };
  }

  /** `list` with a goal search: pages by position among the (capped) matches; the cursor carries the position. */
  private async searchList(o: z.output<typeof ListAgentsOptionsSchema>): Promise<AgentList> {
    let offset = 0;
    if (o.cursor !== undefined) {
      const position = decodeCursor(o.cursor);
      if (!/^q\d{1,7}$/.test(position)) {
        throw new AgentryError('invalid_request', 'Invalid cursor: pass back the next_cursor of the same search');
      }
      offset = Number(position.slice(1));
    }
    const page = await this.storage.searchAgents({
      // The search index is per account: without one, the default account's agents are searched.
      account_id: o.accountId ?? this.defaultAccountId,
      ...(o.parentId !== undefined ? { parent_id: o.parentId } : {}),
      ...(o.status !== undefined ? { status: o.status } : {}),
      goal_contains: o.q!,
      order: 'newest',
      offset,
      limit: o.limit,
    });
    const end = offset + page.rows.length;
    const hasMore = page.rows.length > 0 && end < page.total;
    return {
      data: page.rows.map(toListItem),
      has_more: hasMore,
      next_cursor: hasMore ? encodeCursor(`q${end}`) : null,
      ...(page.truncated ? { truncated: true as const } : {}),
    };
  }

  /**
   * Pauses an agent and its sub-agents at once: an in-flight model request is aborted (and redone on resume), a
   * running tool call finishes and its result is saved. Pausing a PAUSED agent is a no-op; a finished one is
   * `invalid_state`.
   */
  async pause(agentId: string, scope: AccountScope = {}): Promise<Agent> {
    const row = await this.row(agentId, scope);
    const target = assertTransition(row.status, 'pause');
    let updated = row;
    if (target !== row.status) {
      updated =
        (await changeStatus(this.deps(), row, 'pause', { status_message: 'Paused' })) ??
        (await this.row(agentId, scope));
      if (updated.status !== 'PAUSED') return this.pause(agentId, scope); // moved meanwhile: decide again
      this.scheduler.controlOf(row.agent_id)?.model.abort(pauseReason());
      this.announceControl([row.agent_id]);
    }
    await this.forEachDescendant(row.agent_id, async (child) => {
      if (!RUNNABLE_STATUSES.includes(child.status)) return;
      if (await changeStatus(this.deps(), child, 'pause', { status_message: 'Paused' })) {
        this.scheduler.controlOf(child.agent_id)?.model.abort(pauseReason());
        this.announceControl([child.agent_id]);
      }
    });
    return toStatusForm(updated);
  }

  /**
   * Resumes a PAUSED or OUT_OF_CREDITS agent (and its paused or stopped sub-agents) from its last saved step.
   * Throws `insufficient_credits` when the account has nothing available, `invalid_state` for a finished agent.
   */
  async resume(agentId: string, scope: AccountScope = {}): Promise<Agent> {
    const row = await this.row(agentId, scope);
    assertTransition(row.status, 'resume');
    if (RUNNABLE_STATUSES.includes(row.status)) return toStatusForm(row);
    const account = await this.storage.getAccount(row.account_id);
    if (account && !account.subscription_active) {
      throw new AgentryError('subscription_inactive', 'The subscription of this account is not active');
    }
    if (!account || account.balance <= 0) {
      throw new AgentryError('insufficient_credits', 'The account has no credits available; add credits, then resume');
    }
    // Children first: a parent that wakes up must find its children running again, not stopped.
    await this.forEachDescendant(row.agent_id, async (child) => {
      if (child.status === 'PAUSED' || child.status === 'OUT_OF_CREDITS') await this.resumeOne(child);
    });
    const updated = await this.resumeOne(row);
    if (!updated) return this.resume(agentId, scope); // moved meanwhile: decide again
    return toStatusForm(updated);
  }

  /** Deletes an agent with its sub-agents, messages and turns, aborting their in-flight work. */
  async delete(agentId: string, scope: AccountScope = {}): Promise<{ agent_id: string; deleted: true }> {
    const row = await this.row(agentId, scope);
    const ids = [row.agent_id, ...(await this.storage.listDescendantIds(row.agent_id))];
    for (const id of ids) this.scheduler.abort(id, 'agent deleted');
    const deleted = await this.storage.deleteAgentTree(row.agent_id);
    this.announceControl(deleted);
    this.credits.agentsGone(deleted);
    // What tools keep on disk for them (coding workspaces) goes too; a failure there is reported, not thrown: the
    // agents are gone either way.
    await this.platform?.agentsDeleted?.(deleted).catch((error: unknown) => this.reportError(error, row.agent_id));
    for (const id of deleted) {
      this.events.emit('agent.deleted', { agent_id: id });
      for (const waiter of [...(this.statusWaiters.get(id) ?? [])]) waiter(null);
    }
    return { agent_id: row.agent_id, deleted: true };
  }

  /**
   * Resolves with the agent once its status is one of `until` (default: any status it will not leave on its own:
   * COMPLETED, FAILED, PAUSED, OUT_OF_CREDITS). Rejects with `not_found` if it is deleted meanwhile, or with the
   * signal's reason when `signal` aborts.
   */
  async waitFor(agentId: string, options: z.input<typeof WaitForOptionsSchema> = {}): Promise<Agent> {
    const o = parseArgs(WaitForOptionsSchema, options, 'waitFor options');
    const until: readonly AgentStatus[] = o.until ?? ['COMPLETED', 'FAILED', 'PAUSED', 'OUT_OF_CREDITS'];
    const id = parseArgs(AgentIdSchema, agentId, 'agent id');
    return new Promise<Agent>((resolve, reject) => {
      // The agent may step in another process: its changes are relayed here while someone waits.
      const watch = this.remote?.watch(id);
      const cleanup = () => {
        watch?.release();
        const set = this.statusWaiters.get(id);
        set?.delete(onChange);
        if (set?.size === 0) this.statusWaiters.delete(id);
        o.signal?.removeEventListener('abort', onAbort);
      };
      const onChange = (row: AgentRow | null) => {
        if (row === null) {
          cleanup();
          reject(notFound('Agent', id));
        } else if (until.includes(row.status)) {
          cleanup();
          resolve(toStatusForm(row));
        }
      };
      const onAbort = () => {
        cleanup();
        reject(
          o.signal?.reason instanceof Error ? o.signal.reason : new AgentryError('invalid_state', 'waitFor aborted'),
        );
      };
      if (o.signal?.aborted) return onAbort();
      let set = this.statusWaiters.get(id);
      if (!set) this.statusWaiters.set(id, (set = new Set()));
      set.add(onChange);
      o.signal?.addEventListener('abort', onAbort, { once: true });
      // Subscribed first, then read: a change between the two cannot be missed.
      Promise.resolve(watch?.ready)
        .then(() => this.row(id, o.accountId === undefined ? {} : { accountId: o.accountId }))
        .then(onChange, (err: unknown) => {
          cleanup();
          reject(err);
        });
    });
  }

  /**
   * Runs exactly one step of an agent now. Only with `scheduler: 'manual'`, where nothing steps on its own: tests and
   * callers that drive agents themselves use it.
   */
  async step(agentId: string): Promise<Agent> {
    this.assertOpen();
    if (this.options.scheduler !== 'manual') {
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
    const watch = this.remote?.watch(parseArgs(AgentIdSchema, agentId, 'agent id'));
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
    return [...this.toolStatuses.map((t) => ({ ...t })), ...(this.mcp?.status() ?? [])];
  }

  /**
   * Starts the tools that otherwise start when an agent first needs them (MCP servers) and resolves when each is
   * ready or has failed (at most its startup timeout), so {@link toolStatus} can tell. `agentry tools` calls it.
   */
  async startTools(): Promise<void> {
    this.assertOpen();
    await this.registry.prepare();
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
    const row = await this.row(agentId, scope);
    const id = parseArgs(AgentIdSchema, artifactId, 'artifact id');
    const found = await this.storage.getArtifact(row.agent_id, id);
    if (!found) throw notFound('Artifact', id);
    return { artifact: toArtifactInfo(found.row), data: found.data };
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
    const sha = parseArgs(z.string().regex(/^[0-9a-f]{64}$/, 'a SHA-256 in hex'), contentSha256, 'content_sha256');
    return this.storage.getPageText(sha);
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
    const id = parseArgs(AgentIdSchema, monitorId, 'monitor id');
    const monitor = await this.storage.getMonitor(id);
    if (!monitor) throw notFound('Monitor', id);
    try {
      await this.row(monitor.agent_id, scope);
    } catch {
      throw notFound('Monitor', id);
    }
    if (monitor.status !== 'active') return toMonitorInfo(monitor);
    const cancelled = { ...monitor, status: 'cancelled' as const, next_check_at: null };
    await this.storage.updateMonitor(cancelled, { dropTimer: monitorTimerId(id) });
    // A wait of its agent that had only this monitor left ends now (its call sees no active monitor).
    this.scheduler.kick(monitor.agent_id);
    return toMonitorInfo(cancelled);
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
    this.remote?.close();
    await this.retention?.close();
    this.subAgents.close();
    await this.timers.close();
    await this.scheduler.close(this.options.closeTimeoutMs);
    this.credits.close();
    await this.platform?.close();
    // Every MCP server process is gone when close() resolves.
    await this.mcp?.close();
    await this.storage.close();
  }

  private deps(): Pick<StepDeps, 'storage' | 'clock' | 'events'> {
    return { storage: this.storage, clock: this.clock, events: this.events };
  }

  private async resumeOne(row: AgentRow): Promise<AgentRow | null> {
    const updated = await changeStatus(this.deps(), row, row.started ? 'resume' : 'resume_unstarted', {
      status_message: 'Resuming',
    });
    if (updated) this.scheduler.kick(updated.agent_id);
    // A runtime that steps nothing (an admin command, a front end opened 'manual') leaves it to the workers.
    if (updated && this.options.scheduler !== 'auto') this.storage.workers?.bus.publish('work', '');
    return updated;
  }

  private async forEachDescendant(agentId: string, fn: (row: AgentRow) => Promise<void>): Promise<void> {
    const ids = await this.storage.listDescendantIds(agentId);
    for (const id of ids) {
      const child = await this.storage.getAgent(id);
      if (child && !isTerminal(child.status)) await fn(child);
    }
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

  private async ensureDefaultAccount(): Promise<void> {
    const { id, credits } = this.options.defaultAccount;
    if (await this.storage.getAccount(id)) return;
    try {
      await this.storage.createAccount({
        id,
        name: 'Local account',
        subscription_active: true,
        balance: creditsToMicros(credits),
        reserved: 0,
        created_at: isoTime(this.clock.now()),
      });
    } catch (error) {
      // Another process sharing the database (several workers starting at once) created it between read and insert.
      if (await this.storage.getAccount(id).catch(() => null)) return;
      throw error;
    }
  }

  /** Agents that were running when the last process stopped continue; holds that process left behind are dropped. */
  /** Lends the built-in tools what their work between calls needs (see `ToolPlatform.attach`). */
  private async attachPlatform(): Promise<void> {
    const services: PlatformServices = {
      storage: this.storage,
      clock: this.clock,
      events: this.events,
      wake: (agentId) => this.scheduler.kick(agentId),
      reportError: (error, agentId) => this.reportError(error, agentId),
      drivesAgents: this.options.scheduler === 'auto',
      timers: this.timers,
      ...backgroundServices({
        storage: this.storage,
        credits: this.credits,
        model: this.model,
        prices: this.prices,
        clock: this.clock,
        events: this.events,
        inModelLane: (fn) => this.lanes.inModelLane(fn),
        subscriptions: this.subscriptions,
      }),
    };
    await this.platform?.attach?.(services);
    this.mcp?.attach?.(services);
  }

  private async recover(): Promise<void> {
    // Several workers: what gone workers left is swept and claimed like new work (storage/workers.ts), not here.
    if (this.storage.workers) return this.scheduler.joinWorkers();
    const ids = await this.storage.listAgentIdsByStatus(RUNNABLE_STATUSES);
    // A PAUSED agent may have been paused while a priced tool call held credits: its hold is stale too.
    const stopped = await this.storage.listAgentIdsByStatus(['PAUSED', 'OUT_OF_CREDITS']);
    await this.storage.releaseAgentReservations([...ids, ...stopped]);
    this.telemetry.markRecovered(ids);
    for (const id of ids) this.scheduler.kick(id);
  }

  /** Several workers: tells the others that these agents were paused or deleted (their owner aborts their work). */
  private announceControl(agentIds: readonly string[]): void {
    for (const id of agentIds) this.storage.workers?.bus.publish('control', id);
  }

  private reportError(error: unknown, agentId: string): void {
    this.options.logger?.error({ err: error, agent_id: agentId }, 'agent error');
    if (this.events.listenerCount('error') > 0) this.events.emit('error', { error, agent_id: agentId });
    else if (!this.options.logger) console.error(`agentry: agent ${agentId}:`, error);
  }
}

/** The kind of the timer that wakes an agent whose call waits until a time (`ctx.waitUntil`). */
const AGENT_WAKE_TIMER = 'agent.wake';

function pauseReason(): Error {
  const err = new Error('agent paused');
  err.name = 'AbortError';
  return err;
}

function encodeCursor(position: string): string {
  return Buffer.from(`v1:${position}`).toString('base64url');
}

function decodeCursor(cursor: string): string {
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  if (!text.startsWith('v1:') || text.length < 4) {
    throw new AgentryError('invalid_request', 'Invalid cursor: pass back the next_cursor of a previous page');
  }
  return text.slice(3);
}

async function defaultStorage(): Promise<StorageAdapter> {
  const target = process.env.AGENTRY_DB ?? './agentry.db';
  if (/^postgres(ql)?:\/\//.test(target)) {
    const { postgresStorage } = await import('../storage/postgres/index.js');
    return postgresStorage({ connectionString: target });
  }
  const { sqliteStorage } = await import('../storage/sqlite/index.js');
  return sqliteStorage({ path: target });
}

/** Whether this process has already been told that no model is configured: once is enough. */
let warnedNoModel = false;

async function defaultModel(warnWithoutKey: boolean): Promise<ModelProvider> {
  const { anthropicProvider, hasAnthropicCredentials } = await import('../models/anthropic.js');
  if (warnWithoutKey && !hasAnthropicCredentials() && !warnedNoModel) {
    // The runtime still opens (reads, admin and a later key all work), but every agent would fail at its first step.
    warnedNoModel = true;
    process.emitWarning(
      'agentry: no model is configured. ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL) is not set and AgentRuntime.open() ' +
        'got no `model`, so every agent will fail at its first step. Set the key, or pass `model` ' +
        '(`scriptedModel` from agentry-runtime/testing runs offline).',
      { code: 'AGENTRY_NO_MODEL' },
    );
  }
  return anthropicProvider();
}
