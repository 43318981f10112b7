/**
 * @module core/runtime-wiring
 * How a runtime is put together and brought up: opening its parts in an order that leaves nothing open or locked
 * when one fails ({@link openBase}), building the credit gate, timers, sub-agent coordinator, tool registry, lanes,
 * scheduler and the relay of other workers' agents from them ({@link wireRuntime}), and what runs once before the
 * runtime is handed out: the default account, the tools' services, the recovery of agents a stopped process left
 * ({@link startWiring}). `AgentRuntime` (core/agent-runtime.ts) only holds what this builds.
 */
import { isoTime } from '../base/clock.js';
import type { Tool } from '../tools/define-tool.js';
import { ToolRegistry } from '../tools/registry.js';
import { createToolPlatform, type PlatformServices, type ToolPlatform, type ToolStatus } from '../tools/platform.js';
import { createMcpToolSource, type ToolSource } from '../tools/tool-source.js';
import { Accounts } from './accounts.js';
import { backgroundServices } from './background.js';
import { CreditGate } from './credit-gate.js';
import { RuntimeEvents } from './events.js';
import type { StepDeps } from './step-types.js';
import { createPlanTool } from './plan.js';
import { RemoteAgents } from './remote-agents.js';
import { RetentionSweeper } from './retention.js';
import { resolveParts, runSlotsOf, type ResolvedParts, type ResolvedRuntimeOptions } from './runtime-options.js';
import { errorReporter, observeStatusChanges, type ErrorReporter } from './runtime-telemetry.js';
import { Lanes, Scheduler } from './scheduler.js';
import { creditsToMicros } from './schemas.js';
import { RUNNABLE_STATUSES } from '../base/status.js';
import { StatusWaiters } from './status-waiters.js';
import { SubAgentCoordinator } from './sub-agents.js';
import { SubscriptionCheck } from './subscription-check.js';
import { TelemetryHub } from './telemetry.js';
import { TimerService } from './timers.js';
import { Toolboxes } from './toolbox.js';

/** The kind of the timer that wakes an agent whose call waits until a time (`ctx.waitUntil`). */
export const AGENT_WAKE_TIMER = 'agent.wake';

/** What a runtime is built from: its checked options and the parts they name or the defaults gave, opened. */
export interface RuntimeBase extends ResolvedParts {
  options: ResolvedRuntimeOptions;
  /** The built-in tools and their backends (null when the entry point provided none). */
  platform: ToolPlatform | null;
  /** The MCP servers' tools (null without `mcpServers`); asked at every step, as they come and go. */
  mcp: ToolSource | null;
}

/** What a runtime is made of: its base, and the services {@link wireRuntime} built from it. */
export interface RuntimeWiring extends RuntimeBase {
  events: RuntimeEvents;
  /** Tracing and metrics observers (core/telemetry.ts). */
  telemetry: TelemetryHub;
  /** `waitFor` callers by agent id. */
  waiters: StatusWaiters;
  credits: CreditGate;
  /** Durable timers: waits that end at a time, monitors' checks (core/timers.ts). */
  timers: TimerService;
  /** Whether an account may run agents: asked before every step and every billed turn asked for from outside one. */
  subscriptions: SubscriptionCheck;
  accounts: Accounts;
  retention: RetentionSweeper | null;
  subAgents: SubAgentCoordinator;
  registry: ToolRegistry;
  /** The runtime's own tools, the built-ins and the custom tools, ready or not (MCP servers' are asked live). */
  toolStatuses: ToolStatus[];
  lanes: Lanes;
  scheduler: Scheduler;
  /** Relays changes of agents stepping in other processes to watchers here (core/remote-agents.ts); null alone. */
  remote: RemoteAgents | null;
  reportError: ErrorReporter;
}

/**
 * Resolves the parts the options name (or the defaults), checks the tool options, then opens the storage and, for a
 * runtime that steps agents, takes its runner lock. Whatever fails, what was opened before is closed again: a bad
 * option leaves no storage open or locked.
 */
export async function openBase(o: ResolvedRuntimeOptions): Promise<RuntimeBase> {
  const parts = await resolveParts(o);
  // With `builtinTools: false` custom tools still get the guarded fetch; only the built-in tools are left out.
  const platform = createToolPlatform(o.builtinTools === false ? { only: [] } : (o.builtinTools ?? {}));
  // MCP servers start on first use: nothing is spawned here, only the configuration is checked.
  let mcp: ToolSource | null;
  try {
    mcp = createMcpToolSource(o.mcpServers, { prices: parts.prices, onElicitation: o.onMcpElicitation });
  } catch (err) {
    await platform?.close();
    throw err;
  }
  try {
    await parts.storage.init();
    if (o.scheduler === 'auto') {
      try {
        await parts.storage.acquireRunnerLock?.();
      } catch (err) {
        await parts.storage.close();
        throw err;
      }
    }
  } catch (err) {
    await platform?.close();
    await mcp?.close();
    throw err;
  }
  return { ...parts, options: o, platform, mcp };
}

/** Closes what {@link openBase} opened, when the runtime could not be built from it. */
export async function closeBase(base: RuntimeBase): Promise<void> {
  await base.storage.close();
  await base.platform?.close();
  await base.mcp?.close();
}

/**
 * Builds a runtime's services from its base. `deleteTree` deletes an agent with its sub-agents the way
 * `runtime.delete()` does (the retention sweep forgets trees through it).
 */
export function wireRuntime(base: RuntimeBase, deleteTree: (agentId: string) => Promise<void>): RuntimeWiring {
  const { storage, model, clock, options, prices, platform, mcp } = base;
  const events = new RuntimeEvents();
  const telemetry = new TelemetryHub();
  const waiters = new StatusWaiters();
  const reportError = errorReporter(events, options.logger);
  // Built below; the callbacks that use them run only once the runtime is built.
  const later = { remote: null } as { scheduler: Scheduler; toolboxes: Toolboxes; remote: RemoteAgents | null };

  const credits = new CreditGate(storage);
  const timers = new TimerService(storage, clock, {
    onError: (error, agentId) => reportError(error, agentId ?? '(timers)'),
  });
  // A call waiting until a time (ctx.waitUntil) runs again: the agent is made runnable, and its call decides.
  timers.register(AGENT_WAKE_TIMER, async (timer) => later.scheduler.kick(timer.agent_id));
  const subscriptions = new SubscriptionCheck(storage, clock);
  const accounts = new Accounts(
    storage,
    clock,
    (accountId) => credits.toppedUp(accountId),
    (accountId) => subscriptions.forget(accountId),
  );
  observeStatusChanges(events, { waiters, telemetry, logger: options.logger });
  const retention = options.retention
    ? new RetentionSweeper({ storage, clock, deleteTree }, options.retention, (error) =>
        reportError(error, '(retention)'),
      )
    : null;
  const subAgents = new SubAgentCoordinator(storage, clock, events, {
    models: model.models.filter((m) => prices.models[m] !== undefined),
    maxDepth: options.maxSpawnDepth,
    specOf: (task) => later.toolboxes.specOf(task),
    kick: (id) => later.scheduler.kick(id),
    onError: reportError,
    ...(storage.workers ? { shared: { bus: storage.workers.bus, recountMs: 2_000 } } : {}),
  });
  const { registry, catalog, toolStatuses } = buildTools(base, subAgents);
  const lanes = new Lanes({
    modelConcurrency: options.concurrency.models,
    modelRequestsPerInterval: options.concurrency.modelRequestsPerInterval,
    modelIntervalMs: options.concurrency.modelIntervalMs,
    toolConcurrency: options.concurrency.tools,
    // A browser context holds ~50 MB: its lane is narrow unless set. Sandboxes are bounded by their own slots
    // (sandbox/sandbox-slots.ts), shared fairly between accounts, not by a lane.
    laneConcurrency: { browser: 4, ...options.concurrency.lanes },
  });
  const toolboxes = new Toolboxes(
    {
      system: options.systemPrompt,
      // Read at every step: MCP servers' tools come and go.
      get specs() {
        return registry.specs();
      },
      get: (name) => registry.get(name),
      maxSteps: options.limits.maxSteps,
      needsResult: false,
    },
    catalog,
  );
  const drives = options.scheduler === 'auto';
  const deps: StepDeps = {
    storage,
    credits,
    model,
    toolboxes,
    platform,
    artifactLimits: {
      maxBytes: options.limits.maxArtifactBytes,
      maxBytesPerAgent: options.limits.maxArtifactBytesPerAgent,
    },
    prices,
    clock,
    events,
    limits: options.limits,
    subAgents,
    inModelLane: (fn) => lanes.inModelLane(fn),
    backOffModels: (ms) => lanes.backOffModels(ms, clock),
    inToolLane: (lane, fn) => lanes.inToolLane(lane, fn),
    wakeAt: (agentId, at) =>
      timers.schedule({
        timer_id: `${AGENT_WAKE_TIMER}:${agentId}`,
        agent_id: agentId,
        kind: AGENT_WAKE_TIMER,
        due_at: at,
      }),
    ...(mcp ? { prepareTools: () => registry.prepare() } : {}),
    subscriptions,
    telemetry,
    ...(options.logger ? { logger: options.logger } : {}),
    ...(storage.workers && drives ? { mayProceed: (agentId: string) => storage.workers!.mayProceed(agentId) } : {}),
  };
  const scheduler = new Scheduler(deps, {
    runSlots: runSlotsOf(options),
    ...(options.concurrency.claimAhead !== undefined ? { claimAhead: options.concurrency.claimAhead } : {}),
    auto: drives,
    onError: reportError,
    beforeSteps: (agentId) => later.remote?.catchUp(agentId),
    ...(storage.workers && drives ? { leases: storage.workers } : {}),
  });
  const remote = storage.workers
    ? new RemoteAgents({
        storage,
        bus: storage.workers.bus,
        events,
        stepping: (id) => scheduler.controlOf(id) !== undefined,
        onStatus: (id, row) => waiters.notify(id, row),
        onError: reportError,
      })
    : null;
  later.scheduler = scheduler;
  later.toolboxes = toolboxes;
  later.remote = remote;
  return {
    ...base,
    events,
    telemetry,
    waiters,
    credits,
    timers,
    subscriptions,
    accounts,
    retention,
    subAgents,
    registry,
    toolStatuses,
    lanes,
    scheduler,
    remote,
    reportError,
  };
}

/**
 * The tools agents are offered (the runtime's own, the built-ins the options offer, the custom tools, and the MCP
 * servers' as a source), every tool a child may name, and the status of each.
 */
function buildTools(
  { options, platform, mcp }: RuntimeBase,
  subAgents: SubAgentCoordinator,
): { registry: ToolRegistry; catalog: ToolRegistry; toolStatuses: ToolStatus[] } {
  const runtimeTools = [createPlanTool(), ...(options.maxSpawnDepth > 0 ? subAgents.tools() : [])];
  const builtins = options.builtinTools === false ? [] : (platform?.tools ?? []);
  const registry = new ToolRegistry([
    ...runtimeTools,
    ...builtins.filter((t) => platform!.offered.has(t.name)),
    ...options.tools,
  ]);
  if (mcp) registry.addSource(mcp);
  // Every tool a child may name: the agents' tools, built-ins left out of them, and the tools' own childTools.
  const catalog = new ToolRegistry(registry.all());
  for (const tool of [...builtins, ...options.tools]) {
    if (!catalog.get(tool.name)) catalog.register(tool);
    for (const child of tool.childTools ?? []) if (!catalog.get(child.name)) catalog.register(child as Tool);
  }
  const ready = { ready: true, detail: '', offered: true };
  const toolStatuses: ToolStatus[] = [
    ...runtimeTools.map((t) => ({ name: t.name, source: 'runtime' as const, ...ready })),
    ...(options.builtinTools === false ? [] : (platform?.status() ?? [])),
    ...options.tools.map((t) => ({ name: t.name, source: 'custom' as const, ...ready })),
  ];
  return { registry, catalog, toolStatuses };
}

/**
 * What runs once before an opened runtime is handed out: the default account is made sure of, the tools get their
 * services, and the agents a stopped process left are recovered.
 */
export async function startWiring(w: RuntimeWiring): Promise<void> {
  await ensureDefaultAccount(w);
  await attachPlatform(w);
  await recover(w);
}

/**
 * Stops what a runtime runs, each part after what depends on it: no new steps or timers, steps in flight get
 * `closeTimeoutMs` and are then aborted, holds end, the tools' services and MCP server processes stop (every one is
 * gone when this resolves), and the storage closes last.
 */
export async function closeWiring(w: RuntimeWiring): Promise<void> {
  w.remote?.close();
  await w.retention?.close();
  w.subAgents.close();
  await w.timers.close();
  await w.scheduler.close(w.options.closeTimeoutMs);
  w.credits.close();
  await w.platform?.close();
  await w.mcp?.close();
  await w.storage.close();
}

async function ensureDefaultAccount({ storage, clock, options }: RuntimeBase): Promise<void> {
  const { id, credits } = options.defaultAccount;
  if (await storage.getAccount(id)) return;
  try {
    await storage.createAccount({
      id,
      name: 'Local account',
      subscription_active: true,
      balance: creditsToMicros(credits),
      reserved: 0,
      created_at: isoTime(clock.now()),
    });
  } catch (error) {
    // Another process sharing the database (several workers starting at once) created it between read and insert.
    if (await storage.getAccount(id).catch(() => null)) return;
    throw error;
  }
}

/** Lends the built-in tools what their work between calls needs (see `ToolPlatform.attach`). */
async function attachPlatform(w: RuntimeWiring): Promise<void> {
  const { storage, clock, model, prices, options, platform, mcp } = w;
  const services: PlatformServices = {
    storage,
    clock,
    events: w.events,
    wake: (agentId) => w.scheduler.kick(agentId),
    reportError: w.reportError,
    drivesAgents: options.scheduler === 'auto',
    timers: w.timers,
    ...backgroundServices({
      storage,
      credits: w.credits,
      model,
      prices,
      clock,
      events: w.events,
      inModelLane: (fn) => w.lanes.inModelLane(fn),
      subscriptions: w.subscriptions,
    }),
  };
  await platform?.attach?.(services);
  mcp?.attach?.(services);
}

/** Agents that were running when the last process stopped continue; holds that process left behind are dropped. */
async function recover({ storage, scheduler, telemetry }: RuntimeWiring): Promise<void> {
  // Several workers: what gone workers left is swept and claimed like new work (storage/workers.ts), not here.
  if (storage.workers) return scheduler.joinWorkers();
  const ids = await storage.listAgentIdsByStatus(RUNNABLE_STATUSES);
  // A PAUSED agent may have been paused while a priced tool call held credits: its hold is stale too.
  const stopped = await storage.listAgentIdsByStatus(['PAUSED', 'OUT_OF_CREDITS']);
  await storage.releaseAgentReservations([...ids, ...stopped]);
  telemetry.markRecovered(ids);
  for (const id of ids) scheduler.kick(id);
}
