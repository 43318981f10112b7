/**
 * @module tools/platform
 * What tools need from outside the core: the guarded fetch, page reading, and the built-in tools themselves with
 * their readiness. Core imports no concrete tool or backend, so the package's entry point (`src/builtins.ts`, wired
 * in `src/index.ts`) provides them through {@link provideToolPlatform}; a runtime opened without it has no built-in
 * tools, and `ctx.fetch` / `ctx.readPage` fail with a message that says so.
 */
import type { Clock } from '../base/clock.js';
import type { RuntimeEvents } from '../core/events.js';
import type { ModelRequest, ModelResponse } from '../models/provider.js';
import type { StorageAdapter, TimerRow } from '../storage/adapter.js';
import type { MessagingOptions } from '../messaging/message-transport.js';
import type { SearchProvider } from '../web/search-provider.js';
import type { PageContent, Tool, ToolContext } from './define-tool.js';

/**
 * Fires a due timer. A handler that moved its own timer (same `timer_id`, a new time) may say so by resolving `true`,
 * which saves a write; otherwise the timer is deleted when this resolves, unless it was moved meanwhile.
 */
export type TimerHandler = (timer: TimerRow, signal: AbortSignal) => Promise<boolean | void>;

/** What a tool or the runtime schedules (`payload` is any JSON value). */
export interface TimerSpec {
  timer_id: string;
  agent_id: string;
  kind: string;
  /** Milliseconds since the epoch. */
  due_at: number;
  payload?: unknown;
}

/** The part of the timer service lent to the built-in tools (`PlatformServices.timers`); core/timers.ts has it. */
export interface Timers {
  /** Registers the handler of a kind (one per kind). */
  register(kind: string, handler: TimerHandler): void;
  /** Schedules a timer, or moves it when its id exists. On disk when it resolves. */
  schedule(timer: TimerSpec): Promise<void>;
  cancel(timerId: string): Promise<void>;
  /**
   * Tells the loop that a timer due at `dueAt` was written to storage directly (inside a tool's own transaction, with
   * the row it belongs to), so that it does not sleep past it.
   */
  noteScheduled(dueAt: number): void;
}

/** Whether a tool can work, and if not, what to set. `agentry tools` and `runtime.toolStatus()` show it. */
export interface ToolStatus {
  name: string;
  /**
   * `builtin`, `custom` (passed to the runtime), `runtime` (update_plan, spawn_sub_agents, …), or `mcp`: an MCP
   * server (named `mcp__<server>`, its state in `detail`) or one of its tools (`mcp__<server>__<tool>`).
   */
  source: 'builtin' | 'custom' | 'runtime' | 'mcp';
  ready: boolean;
  /** What backs it when ready (`brave`), or what to set when not. */
  detail: string;
  /** Offered to agents (false: only children of another tool use it, or `builtinTools.only` left it out). */
  offered: boolean;
}

/** Options of the built-in tools (`AgentRuntime.open({ builtinTools })`); environment variables are the fallback. */
export interface BuiltinToolsOptions {
  /**
   * The built-in tools agents are offered, by name. @default every built-in tool (one whose backend is missing is
   * still offered, and its calls fail with a message naming what to set)
   */
  only?: string[];
  /** The web_search backend. @default the first of BRAVE_API_KEY, TAVILY_API_KEY, EXA_API_KEY, SEARXNG_URL set */
  search?: SearchProvider;
  /** The guarded fetch every built-in tool reaches the network through. */
  fetch?: {
    /** Hosts or CIDRs opened although private (e.g. `127.0.0.1/32` in tests). Added to `AGENTRY_FETCH_ALLOW`. */
    allow?: string[];
    /** Largest body, decompressed. @default 5 MB */
    maxBytes?: number;
    /** Whole request, body included. @default 30 s */
    timeoutMs?: number;
    /** Name resolution (tests make a name resolve to a chosen address). @default dns.lookup */
    lookup?: (hostname: string) => Promise<Array<{ address: string; family: 4 | 6 }>>;
  };
  /** Where coding agents' workspaces live (spawn_claude_code_agent). @default `/var/lib/agentry` for root, else `~/.local/state/agentry` (`defaultDataDir()`) */
  dataDir?: string;
  /**
   * spawn_claude_code_agent: who codes. `runtime` is a child agent of the runtime's model with Claude Code's
   * six tools; `claude-agent-sdk` is Claude Code itself in the same sandbox, thinking with the runtime's model through
   * a billed model bridge (install the optional `@anthropic-ai/claude-agent-sdk`).
   * @default { backend: AGENTRY_CODE_AGENT_BACKEND ?? 'runtime', maxTurns: 100, maxOutputTokens: 8192 }
   */
  codeAgent?: {
    backend?: 'runtime' | 'claude-agent-sdk';
    /** Claude Code's model turns per call at most. */
    maxTurns?: number;
    /** Output tokens of one of Claude Code's model turns at most. */
    maxOutputTokens?: number;
    /**
     * Sandboxes running at once across all the coding tools, and how many one account may hold (SECURITY.md,
     * "Resource bounds"). @default { slots: 2, perAccount: 1 }
     */
    sandboxSlots?: { slots?: number; perAccount?: number };
  };
  /**
   * spawn_browser_agent: the Chromium to drive, how long an idle browser stays up, and how many contexts
   * (browser agents) are open at once. @example { executablePath: '/usr/bin/chromium', idleMs: 60_000 }
   */
  browser?: {
    /** @default AGENTRY_CHROMIUM_PATH, then chromium / chromium-browser / google-chrome on PATH */
    executablePath?: string;
    /** The browser process is closed after this long without an open context. @default 30_000 */
    idleMs?: number;
    /** Browser agents with an open context at once (the browser lane); more wait their turn. @default 4 */
    maxContexts?: number;
  };
  /**
   * message_person: the SMTP server and Twilio account (or transports of your own), the recipients it may
   * write to (nobody until set), its rate limits and body caps. @default from SMTP_URL, AGENTRY_EMAIL_FROM, TWILIO_*,
   * AGENTRY_TWILIO_BASE_URL and AGENTRY_MESSAGE_ALLOW
   */
  messaging?: MessagingOptions;
  /** Where configuration falls back to. @default process.env */
  env?: NodeJS.ProcessEnv;
}

/**
 * What the runtime lends the built-in tools whose work goes on between calls (monitors' checks, the outbox): given
 * once, through {@link ToolPlatform.attach}, when the runtime has opened its storage and before it recovers agents.
 */
export interface PlatformServices {
  storage: StorageAdapter;
  clock: Clock;
  /**
   * The runtime's events: `statusHooks` tell of every status change (a paused browser agent's context is closed at
   * once), and tools emit their own events on it.
   */
  events: RuntimeEvents;
  /** Makes an agent runnable again: a call of it that suspended runs again (and may suspend again). */
  wake(agentId: string): void;
  /** Reports an error of background work the way the runtime reports its own (the `error` event). */
  reportError(error: unknown, agentId: string): void;
  /**
   * True when this runtime steps agents (`scheduler: 'auto'`); false for an admin runtime (the CLI's commands) that
   * may run beside a live one: it must not repair work in flight there (message_person's queued outbox entries).
   */
  drivesAgents: boolean;
  // background work of agents (monitor)
  /** Durable timers: register a handler per kind, schedule and cancel. */
  timers: Timers;
  /**
   * Charges an agent for a tool's work done outside a call (a monitor's check) at the tool's price (the price table's
   * entry, else `ownPrice` credits), through the credit gate and the ledger. When the balance (or the tree's cap)
   * cannot pay it, nothing is charged, the agent stops as OUT_OF_CREDITS, and the answer is false. With `units`, the
   * price of that many units of a metered tool (CPU-seconds of a sandbox). @default units 1
   */
  chargeTool(agentId: string, toolName: string, ownPrice: number, units?: number): Promise<boolean>;
  /**
   * A short model call on the agent's model and account, billed like its own model use (reserved before, settled
   * after). Rejects with `insufficient_credits` (the agent stopped as OUT_OF_CREDITS) when it cannot be paid.
   */
  askModel(agentId: string, request: { system: string; prompt: string; maxTokens?: number }): Promise<string>;
  /**
   * One model turn on the agent's model and account, billed like its own model use (reserved with the strict bound
   * before, settled at the real usage after): a coding agent of its own (Claude Code through the model bridge) thinks
   * with the runtime's model and budget. With `signal` (a call in flight), a balance that cannot pay rejects with
   * `insufficient_credits` and leaves the agent's status alone; without it, the agent stops as OUT_OF_CREDITS first.
   */
  generate(
    agentId: string,
    turn: Pick<ModelRequest, 'system' | 'messages' | 'tools' | 'maxTokens'>,
    options?: { signal?: AbortSignal },
  ): Promise<ModelResponse>;
  /** Adds an ASSISTANT message to the agent's transcript (and the `agent.message` event); false if it is gone. */
  appendMessage(agentId: string, text: string): Promise<boolean>;
  /**
   * Sets the status message of an ACTIVE agent whose message starts with `ifStartsWith` (or one of them: one that is
   * waiting and says so), leaving any other message alone (an agent at work, paused, done).
   */
  setStatusMessage(agentId: string, message: string, ifStartsWith: string | readonly string[]): Promise<void>;
}

/** The built-in tools and the services of `ToolContext` that reach outside the process. */
export interface ToolPlatform {
  fetch: ToolContext['fetch'];
  readPage(url: string, options: { maxChars?: number; signal?: AbortSignal }): Promise<PageContent>;
  /**
   * The key under which a page read matches a cited URL in `ctx.pagesRead({ urls })`: the citation check's rule of
   * when two URLs are one page (`normaliseUrlForMatch` of tools/citations.ts), or null for a URL that cannot be
   * cited. The tools layer owns that rule; core only asks it. @default the URL as written
   */
  pageUrlKey?(url: string): string | null;
  /** The built-in tools, in the order they are offered. */
  tools: Tool[];
  /** Names of built-in tools agents are offered (the rest stay in the catalog for children). */
  offered: ReadonlySet<string>;
  /** Readiness of each built-in tool. */
  status(): ToolStatus[];
  /**
   * Called once when the runtime has opened its storage, before it recovers agents: tools that work between calls
   * keep the services, and repair what a crash left (an outbox entry that may have been sent).
   */
  attach?(services: PlatformServices): Promise<void>;
  /** Told of agents deleted with their trees, so the tools drop what they keep on disk for them (workspaces). */
  agentsDeleted?(agentIds: readonly string[]): Promise<void>;
  close(): Promise<void>;
}

export type ToolPlatformFactory = (options: BuiltinToolsOptions) => ToolPlatform;

let factory: ToolPlatformFactory | undefined;

/** Called once by the package's entry point. */
export function provideToolPlatform(f: ToolPlatformFactory): void {
  factory = f;
}

/** The platform for a runtime, or null when the entry point did not provide one (core used on its own). */
export function createToolPlatform(options: BuiltinToolsOptions): ToolPlatform | null {
  return factory ? factory(options) : null;
}
