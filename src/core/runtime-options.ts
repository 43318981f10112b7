/**
 * @module core/runtime-options
 * The options of `AgentRuntime.open()`: their zod schema (checked at the door, before anything is opened), their
 * documented defaults, and their resolution into the parts a runtime is built from. What is not given and has no
 * plain default (the storage, the model, the tracer) comes from the package's entry point (core/runtime-defaults.ts).
 */
import { z } from 'zod';
import { AgentryError } from '../errors.js';
import type { ModelProvider } from '../models/provider.js';
import type { StorageAdapter } from '../storage/adapter.js';
import type { Tool } from '../tools/define-tool.js';
import type { BuiltinToolsOptions } from '../tools/platform.js';
import type { McpElicitationHandler } from '../tools/tool-source.js';
import { systemClock, type Clock } from '../base/clock.js';
import { mergePrices, PriceTableSchema, type PriceTable } from './credits.js';
import { RetentionOptionsSchema } from './retention.js';
import { defaultModel, defaultStorage } from './runtime-defaults.js';
import { parseArgs } from '../base/validate.js';

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
     * none. Environment variables (a search key, a mail transport, …) fill in what is not given.
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

/** The options once checked, with their defaults filled in. */
export type ResolvedRuntimeOptions = z.output<typeof RuntimeOptionsSchema>;

/** Checks the options of `AgentRuntime.open()`: `invalid_request` naming the first bad one. Opens nothing. */
export function parseRuntimeOptions(options: RuntimeOptions): ResolvedRuntimeOptions {
  return parseArgs(RuntimeOptionsSchema, options, 'runtime options');
}

/** The parts a runtime is built from that the options name, or that the defaults provide. */
export interface ResolvedParts {
  storage: StorageAdapter;
  model: ModelProvider;
  clock: Clock;
  prices: PriceTable;
}

/**
 * The storage, model, clock and prices of a runtime: given, or the defaults. Throws `invalid_request` when the model
 * does not serve `defaultModel`. The storage is created, not yet opened (`init()`).
 */
export async function resolveParts(o: ResolvedRuntimeOptions): Promise<ResolvedParts> {
  const storage = o.storage ?? (await defaultStorage());
  // A manual runtime (the CLI's admin commands, tests) steps nothing by itself: no warning about a missing model.
  const model = o.model ?? (await defaultModel({ warnWithoutKey: o.scheduler === 'auto' }));
  if (!model.models.includes(o.defaultModel)) {
    throw new AgentryError(
      'invalid_request',
      `defaultModel ${JSON.stringify(o.defaultModel)} is not served by the model provider`,
    );
  }
  return { storage, model, clock: o.clock ?? systemClock, prices: mergePrices(o.prices) };
}

/** Agents stepping at once: `concurrency.runSlots`, else the model lane plus the tools lane. */
export function runSlotsOf(o: ResolvedRuntimeOptions): number {
  return o.concurrency.runSlots ?? o.concurrency.models + o.concurrency.tools;
}
