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
  /** The model's id for this call; stable across a crash and restart. */
  toolCallId: string;
  /** Aborted when the agent is deleted or the runtime is shut down hard. Pause does not abort a running tool. */
  signal: AbortSignal;
  /** Sets the agent's `status_message` (and optionally `progress`, 0..1) when the step commits. */
  reportProgress(update: ProgressReport): void;
  /**
   * Starts sub-agents for this call, one per task, in one transaction — or, when this call already started them
   * (a re-run after a wake-up or a crash), returns those: children are keyed by the tool call, never spawned twice.
   */
  spawn(tasks: Array<{ goal: string; model?: string | undefined }>): Promise<SpawnedSubAgents>;
  /**
   * Returns a value that suspends this call: the agent gives up its run slot and the call runs again when the
   * sub-agents it spawned are all done. Only meaningful after `spawn()`.
   */
  suspend(statusMessage: string): ToolSuspension;
  /** Results (last answers) of the sub-agents spawned by the call `spawnId`, a page at a time. */
  subAgentResults(
    spawnId: string,
    page: { offset: number; limit: number },
  ): Promise<{
    total: number;
    results: Array<{ index: number; agent_id: string; status: string; result: string | null }>;
  }>;
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

/** Marks a tool call as waiting for its sub-agents; see {@link ToolContext.suspend}. */
export class ToolSuspension {
  constructor(readonly statusMessage: string) {}
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
  /** Credits charged per call (reserved before it runs). @default 0 */
  price?: number;
  /**
   * True if running the call twice is harmless (a search, a read). After a crash, a started call of an idempotent
   * tool runs again; any other is never repeated and the model is told its outcome is unknown.
   */
  idempotent: boolean;
  /** Scheduler lane; calls of one lane share its concurrency cap. @default 'tools' */
  lane?: string;
  /** The `status_message` while the call runs, e.g. `Searching: ${input.query}`. */
  describe?(input: Input): string;
  run(input: Input, ctx: ToolContext): Promise<ToolOutput | ToolSuspension> | ToolOutput | ToolSuspension;
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
  price: z.number().min(0).finite().optional(),
  idempotent: z.boolean(),
  lane: z.string().min(1).max(64).optional(),
  describe: z.function().optional(),
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
  const { $schema: _ignored, ...jsonSchema } = z.toJSONSchema(definition.input, {
    io: 'input',
    unrepresentable: 'any',
  }) as Record<string, unknown>;
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
