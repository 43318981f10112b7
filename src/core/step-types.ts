/**
 * @module core/step-types
 * What one agent step is made of, shared by the step's phases and by what drives them: the runtime's dependencies a
 * step uses (`StepDeps`), its limits, the abort handles and per-driver memory of one running agent (`RunControl`),
 * and what a step comes to (`StepOutcome`). It imports nothing of the step itself, so that the phases, the tool
 * context and the sub-agent machinery can all name these without an import circle through the loop.
 */
import type { Clock } from '../base/clock.js';
import type { CreditGate } from './credit-gate.js';
import type { CreditHold } from './credit-hold.js';
import type { PriceTable } from './credits.js';
import type { RuntimeEvents } from './events.js';
import type { SubAgentHost } from './sub-agents.js';
import type { RunTelemetry, Telemetry } from './telemetry.js';
import type { Toolboxes } from './toolbox.js';
import type { ModelProvider, ToolUseBlock } from '../models/provider.js';
import type { AgentRow, ArtifactLimits, StorageAdapter, ToolCallRow, TurnRow } from '../storage/adapter.js';
import type { ToolPlatform } from '../tools/platform.js';

export interface StepLimits {
  /** Model turns an agent may take before it FAILs. */
  maxSteps: number;
  /** Milliseconds an agent may spend ACTIVE before it FAILs. */
  maxWallClockMs: number;
  /** `max_tokens` of every model call. */
  maxOutputTokens: number;
  /**
   * The least `max_tokens` a call may be lowered to when the balance cannot cover `maxOutputTokens`; below it the
   * agent is OUT_OF_CREDITS.
   */
  minOutputTokens: number;
  /** Longer tool results are cut to this many characters before the model sees them. */
  maxToolResultChars: number;
  /** Retries of a retryable model error (after the provider's own) before the agent FAILs. */
  maxModelRetries: number;
}

/** What a step needs from the runtime. */
export interface StepDeps {
  storage: StorageAdapter;
  /** Every credit reservation goes through it: a reservation that other calls' holds block waits its turn. */
  credits: CreditGate;
  model: ModelProvider;
  /** The system prompt, tools and step limit of each agent. */
  toolboxes: Toolboxes;
  /** The guarded fetch and page reading behind `ctx.fetch` / `ctx.readPage`; null when no entry point provided them. */
  platform: ToolPlatform | null;
  artifactLimits: ArtifactLimits;
  prices: PriceTable;
  clock: Clock;
  events: RuntimeEvents;
  limits: StepLimits;
  subAgents: SubAgentHost;
  /** Runs a model call in the models lane. */
  inModelLane<T>(fn: () => Promise<T>): Promise<T>;
  /** Holds every model call of the runtime back for `ms` (the provider said it is rate limited or overloaded). */
  backOffModels(ms: number): void;
  /** Runs a tool call in its lane. */
  inToolLane<T>(lane: string, fn: () => Promise<T>): Promise<T>;
  /**
   * Starts the tools that start on first use (MCP servers) before a step reads the agent's tools; undefined when
   * there is nothing to wait for. Absent when the runtime has no such tools.
   */
  prepareTools?(): Promise<void> | undefined;
  /**
   * Wakes the agent at `at` (ms since the epoch) with a durable timer: a call that waits until then
   * (`ctx.waitUntil`) runs again. Without it, such a call waits for a wake-up only.
   */
  wakeAt?(agentId: string, at: number): Promise<void>;
  /**
   * Several workers on one database (storage/workers.ts): asked right before a model call starts, true while this
   * worker holds the agent's lease and the agent is runnable. Absent: one process drives the agents.
   */
  mayProceed?(agentId: string): Promise<boolean>;
  /** Whether an agent's account may run it (subscription-check.ts); absent: always. */
  subscriptions?: { isActive(accountId: string): Promise<boolean> };
  /** Traces and metrics (core/telemetry.ts); absent: nothing is observed. */
  telemetry?: Telemetry & { wasRecovered?(agentId: string): boolean };
  /**
   * The runtime's logger: a provider failure that fails an agent is a warning (the provider's, not ours); anything
   * else a model call throws is an internal error.
   */
  logger?: { warn(obj: object, msg?: string): void; error(obj: object, msg?: string): void };
}

/**
 * Abort handles of one running agent: pause aborts `model`; delete and forced shutdown abort both. The tools handle is
 * made on first use: most tool calls never look at their signal, and 10,000 agents need not each carry one.
 */
export class RunControl {
  readonly model = new AbortController();
  private toolsController: AbortController | undefined;
  private toolsAbortReason: unknown;
  /** The observed stretch of work (an `invoke_agent` span) this driver runs, from its first step to its exit. */
  trace: RunTelemetry | undefined;
  /** Retryable model failures in a row, for backoff. */
  modelFailures = 0;
  /** Rate-limit answers in a row (they back off the whole model lane, and do not count as failures). */
  rateLimited = 0;
  /**
   * The tool calls the last model turn of this driver saved, and the turn log as it left it, so the next step need not
   * read them back. Only the driver that wrote them uses it (one driver per agent, one runner per database); any other
   * path (resume, recovery) reads storage.
   */
  savedToolCalls: { turnIdx: number; rows: ToolCallRow[]; uses: ToolUseBlock[]; turns: TurnRow[] } | undefined;
  /**
   * The agent's row as this driver's last commit returned it, for the step that follows at once. It is as fresh as a
   * read would be (the commit's own transaction read it back), so the next step need not read it again. Not used
   * once the model signal aborted: a pause or delete in this process changed the row after that commit.
   */
  committedRow: AgentRow | undefined;
  /**
   * The credit holds the current step made (core/step-credits.ts). Each ends on the step's ordinary paths; whatever a
   * step that threw leaves open is released when it ends, so that no hold outlives its step.
   */
  readonly holds = new Set<CreditHold>();

  /** The row of the last commit, once; undefined when it must be read again. */
  takeCommittedRow(): AgentRow | undefined {
    const row = this.committedRow;
    this.committedRow = undefined;
    return this.model.signal.aborted || this.toolsAborted ? undefined : row;
  }

  /** Aborted when the agent is deleted or the runtime shuts down hard; tool calls see it as `ctx.signal`. */
  get toolsSignal(): AbortSignal {
    if (!this.toolsController) {
      this.toolsController = new AbortController();
      if (this.toolsAbortReason !== undefined) this.toolsController.abort(this.toolsAbortReason);
    }
    return this.toolsController.signal;
  }

  get toolsAborted(): boolean {
    return this.toolsAbortReason !== undefined;
  }

  abortTools(reason: unknown): void {
    this.toolsAbortReason ??= reason;
    this.toolsController?.abort(reason);
  }

  /** Stops everything: the model request and the tool calls. */
  abortAll(reason: unknown): void {
    this.model.abort(reason);
    this.abortTools(reason);
  }
}

export type StepOutcome =
  /** More to do right away. */
  | { kind: 'continue' }
  /** Not runnable any more (done, paused, out of credits, failed, deleted). */
  | { kind: 'stop' }
  /** A transient failure: run again after a while. */
  | { kind: 'retry'; afterMs: number };

/** The outcome of a step that has more to do right away. */
export const CONTINUE: StepOutcome = { kind: 'continue' };
/** The outcome of a step after which the agent is not runnable any more (or not by this driver). */
export const STOP: StepOutcome = { kind: 'stop' };

/** Abort handles and memory for a driver that starts stepping an agent. */
export function newRunControl(): RunControl {
  return new RunControl();
}
