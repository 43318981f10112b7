/**
 * @module tools/define-tool
 * The tool extension point: `defineTool()` and the context a tool runs with.
 */
import { z } from 'zod';
import { AgentryError } from '../errors.js';
import type { Agent, AgentStatus } from '../core/schemas.js';

/** What a running tool call can see and do. */
export interface ToolContext {
  /** The agent that called the tool (status form, as of the step). */
  agent: Agent;
  /**
   * The account the agent's credits come from: what resources shared between tenants (sandbox slots, workspace
   * disk) are shared fairly by.
   */
  accountId: string;
  /** The model's id for this call; stable across a crash and restart. */
  toolCallId: string;
  /**
   * The W3C `traceparent` of this call's `execute_tool` span when tracing is on, for passing the trace on to another
   * service (agentry's MCP client sends it as `_meta.traceparent`).
   */
  traceparent?: string;
  /** Aborted when the agent is deleted or the runtime is shut down hard. Pause does not abort a running tool. */
  signal: AbortSignal;
  /**
   * Aborted as soon as the agent is paused (or deleted, or the runtime shuts down). A tool whose work can be stopped
   * and done again (a command in a sandbox, a browser step) stops at it and returns what happened; most tools
   * ignore it and finish, as pause promises.
   */
  pauseSignal: AbortSignal;
  /**
   * Reports units a metered tool used (see `ToolDefinition.meter`), added up over the call and charged when its
   * result is saved. A tool without `meter` is charged its price per call and may ignore this.
   */
  meter(units: number): void;
  /** Sets the agent's `status_message` (and optionally `progress`, 0..1) when the step commits. */
  reportProgress(update: ProgressReport): void;
  /**
   * Starts sub-agents for this call, one per task, in one transaction — or, when this call already started them
   * (a re-run after a wake-up or a crash), returns those: children are keyed by the tool call, never spawned twice.
   * A task with `tools`, `instructions` and `result` starts a child that works only with those tools and finishes
   * only by submitting a result that matches `result` (see {@link ChildTask}).
   */
  spawn(tasks: Array<SubAgentTask | ChildTask>, options?: SpawnOptions): Promise<SpawnedSubAgents>;
  /**
   * Returns a value that suspends this call: the agent gives up its run slot and the call runs again when the
   * sub-agents it spawned (in the group `spawnId`, by default the call's own) are all done. Only meaningful after
   * `spawn()`.
   */
  suspend(statusMessage: string, spawnId?: string): ToolSuspension;
  /**
   * Returns a value that suspends this call until `until` passes or the agent is woken (`PlatformServices.wake`, e.g.
   * by a monitor that saw a change), whichever comes first; then the call runs again (and may wait again). The agent
   * stays ACTIVE with `statusMessage` and holds no run slot meanwhile. The time is a durable timer: it survives a
   * restart. Without `until`, only a wake-up ends the wait.
   *
   * @example
   * const change = await queue.next(ctx.agent.agent_id);
   * if (!change && Date.now() < deadline) return ctx.waitUntil('Watching example.com', { until: deadline });
   */
  waitUntil(statusMessage: string, options?: { until?: Date | number }): ToolSuspension;
  /**
   * Results of the sub-agents spawned by the call `spawnId`, a page at a time: each child's last answer, and for a
   * child with a result schema the validated object it submitted (`data`).
   */
  subAgentResults(
    spawnId: string,
    page: { offset: number; limit: number },
  ): Promise<{
    total: number;
    results: Array<{ index: number; agent_id: string; status: string; result: string | null; data?: unknown }>;
  }>;
  /**
   * fetch() through the runtime's guard: http(s) only, no private, loopback or metadata addresses (unless allowed),
   * redirects re-checked, size and time caps. The only way a built-in tool reaches the network.
   */
  fetch(input: string | URL, init?: RequestInit & { maxBytes?: number; timeoutMs?: number }): Promise<Response>;
  /**
   * Reads a web page through the guarded fetch: its title, main content as Markdown and links. The page is recorded
   * for this call, so citations can be checked against its text.
   */
  readPage(url: string, options?: { maxChars?: number }): Promise<PageContent>;
  /**
   * Pages read (with `read_page` / `ctx.readPage`) by this call and by every child it spawned, with their texts: what
   * the citation check (tools/citations.ts) accepts citations from. With `urls`, only the reads of those pages (the
   * ones cited), so checking a few citations does not load every page a thousand children read.
   */
  pagesRead(options?: { urls?: readonly string[] }): Promise<PageRead[]>;
  /** This call's durable JSON state: set() is on disk when it resolves, so a re-run after a crash resumes there. */
  state: {
    get<T = unknown>(): Promise<T | undefined>;
    set(value: unknown): Promise<void>;
  };
  /** Bytes kept with the agent (listed in its status form, served over HTTP), deleted with it. */
  artifacts: {
    put(artifact: { name: string; mime_type: string; data: Uint8Array | string }): Promise<{
      artifact_id: string;
      size: number;
    }>;
  };
}

/** Options of {@link ToolContext.spawn}. */
export interface SpawnOptions {
  /**
   * Children of one call in separate waves (a planner, then researchers, then a writer) each need a group of their
   * own: the group names them durably, so a re-run after a crash re-attaches to each wave. @default the call's own
   */
  group?: string;
}

/** A page a call or its children read, with its text. */
export interface PageRead {
  url: string;
  final_url: string;
  title: string;
  content_sha256: string;
  retrieved_at: string;
  text: string;
}

/** A plain sub-agent: the runtime's own prompt and tools. */
export interface SubAgentTask {
  goal: string;
  model?: string | undefined;
}

/** A child with a job of its own: its prompt, its tools, and the result it must submit. */
export interface ChildTask {
  /** The child's first USER message. */
  goal: string;
  model?: string | undefined;
  /** Its system prompt. */
  instructions: string;
  /**
   * The tools it may use, by value or by name. Each must be known to the runtime: passed to `AgentRuntime.open({
   * tools })`, built in, or listed in the spawning tool's `childTools` (a child resumed after a restart finds its tools
   * by name). `submit_result` is added.
   */
  tools: Array<Tool | string>;
  /** The input schema of its `submit_result`: a z.object(...) of plain data (it is stored as JSON Schema). */
  result: z.ZodType;
  /** Model turns it may take at most (below the runtime's limit). */
  maxSteps?: number;
}

/** A page as `ctx.readPage` answers it (the `read_page` tool's output, plus the text citations are checked against). */
export interface PageContent {
  url: string;
  final_url: string;
  title: string;
  /** Main content as Markdown, cut at `max_chars`. */
  content: string;
  links: Array<{ text: string; url: string }>;
  truncated: boolean;
  content_type: string;
  /** Plain text of the whole main content. */
  text: string;
}

export interface ProgressReport {
  message?: string;
  /** 0..1; kept below 1 until the agent completes. */
  progress?: number;
  /** Steps of the agent's plan (set by `update_plan`); sub-agent progress fills the step in progress. */
  plan?: { done: number; total: number };
}

/** What `ctx.spawn()` reports: the call's children counted by status (not 10,000 records). */
export interface SpawnedSubAgents {
  /** The tool call that owns the children; pass it to `subAgentResults()`. */
  spawn_id: string;
  total: number;
  counts: Partial<Record<AgentStatus, number>>;
  /** True when this call had spawned them before (a re-run after a wake-up or a crash). */
  reattached: boolean;
}

/**
 * Returned by a call that finishes its agent with a result: a child's `submit_result`. The agent COMPLETES with the
 * result as its answer once the step commits.
 */
export class ToolCompletion {
  constructor(readonly result: unknown) {}
}

/** Marks a tool call as waiting for its sub-agents, a time or a wake-up; see {@link ToolContext.suspend}. */
export class ToolSuspension {
  constructor(
    readonly statusMessage: string,
    /** The spawn group whose children it waits for; the call's own when undefined. */
    readonly spawnId?: string,
    /**
     * Set for a call that waits for a time or a wake-up instead of sub-agents ({@link ToolContext.waitUntil}): when to
     * wake it at the latest (milliseconds since the epoch), or null for a wake-up only.
     */
    readonly wakeAt?: number | null,
  ) {}
}

/** Whatever a tool returns is shown to the model: strings as they are, anything else as JSON. */
export type ToolOutput = string | number | boolean | null | Record<string, unknown> | unknown[];

export interface ToolDefinition<Input> {
  /** Name the model calls it by: letters, digits, `_` and `-`, at most 64. */
  name: string;
  /** Tells the model what the tool does and when to use it. */
  description: string;
  /** zod schema of the input object; it becomes the model's JSON schema and validates every call. */
  input: z.ZodType<Input>;
  /**
   * The model's JSON Schema of the input, when it comes from elsewhere (an MCP server's `inputSchema`, which the
   * server validates itself): sent as it is instead of the schema made from `input`. It must describe an object
   * (`"type": "object"`); `input` still checks each call (e.g. that it is an object). @default z.toJSONSchema(input)
   */
  jsonSchema?: Record<string, unknown>;
  /** Credits charged per call (reserved before it runs); per unit for a metered tool. @default 0 */
  price?: number;
  /**
   * Priced by use instead of per call (a browser's minutes, a sandbox's CPU seconds): `price`, or the price table's
   * entry, is then per `unit`. The call reserves the price of `maxUnits(input)` units before it runs and is charged
   * for the units it reports with `ctx.meter()`, never more than it reserved, so a budget is still never overshot.
   *
   * @example
   * meter: { unit: 'cpu_second', maxUnits: (input) => input.timeout_s }
   */
  meter?: { unit: string; maxUnits(input: Input): number };
  /**
   * True if running the call twice is harmless (a search, a read). After a crash, a started call of an idempotent
   * tool runs again; any other is never repeated and the model is told its outcome is unknown.
   */
  idempotent: boolean;
  /** Scheduler lane; calls of one lane share its concurrency cap. @default 'tools' */
  lane?: string;
  /**
   * Tools this tool's children use that agents are not offered themselves (a browser child's `browser_click`): they
   * join the runtime's catalog, so a child finds them by name, also after a restart.
   */
  childTools?: Tool[];
  /** The `status_message` while the call runs, e.g. `Searching: ${input.query}`. */
  describe?(input: Input): string;
  run(
    input: Input,
    ctx: ToolContext,
  ): Promise<ToolOutput | ToolSuspension | ToolCompletion> | ToolOutput | ToolSuspension | ToolCompletion;
}

/** A tool ready to register: the definition with its JSON schema computed once. */
export interface Tool<Input = unknown> extends ToolDefinition<Input> {
  readonly price: number;
  readonly lane: string;
  readonly jsonSchema: Record<string, unknown>;
}

const ToolDefinitionSchema = z.object({
  name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, 'must be 1-64 letters, digits, _ or -'),
  description: z.string().min(1).max(10_000),
  input: z.custom<z.ZodType>((v) => v instanceof z.ZodType, 'must be a zod schema'),
  jsonSchema: z.looseObject({ type: z.literal('object', 'must describe an object ("type": "object")') }).optional(),
  price: z.number().min(0).finite().optional(),
  idempotent: z.boolean(),
  lane: z.string().min(1).max(64).optional(),
  childTools: z.array(z.custom<Tool>((v) => typeof (v as Tool)?.run === 'function')).optional(),
  describe: z.function().optional(),
  meter: z
    .object({ unit: z.string().min(1).max(64), maxUnits: z.function() })
    .strict()
    .optional(),
  run: z.function(),
});

/**
 * Defines a tool an agent can call.
 *
 * @example
 * const weather = defineTool({
 *   name: 'get_weather',
 *   description: 'Current weather for a city',
 *   input: z.object({ city: z.string() }),
 *   price: 0.1,
 *   idempotent: true,
 *   describe: ({ city }) => `Checking the weather in ${city}`,
 *   run: async ({ city }) => ({ city, temperature_c: 21 }),
 * });
 * const runtime = await AgentRuntime.open({ tools: [weather] });
 */
export function defineTool<Input>(definition: ToolDefinition<Input>): Tool<Input> {
  const parsed = ToolDefinitionSchema.safeParse(definition);
  if (!parsed.success) {
    throw new AgentryError(
      'invalid_request',
      `Invalid tool definition ${JSON.stringify(definition?.name)}: ${z.prettifyError(parsed.error)}`,
      {
        details: parsed.error.issues,
      },
    );
  }
  const { $schema: _ignored, ...jsonSchema } =
    definition.jsonSchema ??
    (z.toJSONSchema(definition.input, {
      io: 'input',
      unrepresentable: 'any',
    }) as Record<string, unknown>);
  if (jsonSchema.type !== 'object') {
    throw new AgentryError('invalid_request', `Tool ${definition.name}: the input schema must be a z.object(...)`);
  }
  return { ...definition, price: definition.price ?? 0, lane: definition.lane ?? 'tools', jsonSchema };
}

/** Renders a tool's output as the text the model sees. */
export function renderToolOutput(output: ToolOutput): string {
  if (typeof output === 'string') return output;
  return JSON.stringify(output ?? null);
}
