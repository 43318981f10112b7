/**
 * @module core/toolbox
 * What an agent works with: its system prompt, the tools it is offered and its step limit. An ordinary agent gets
 * the runtime's; a child that a tool spawned with a spec of its own (README.md#tools, "What a tool can use") gets the
 * tools of its spec plus `submit_result`, whose input schema is its result schema. The spec is stored on the child
 * (JSON, with the result schema as JSON Schema and its tools by name), so a child resumed after a restart rebuilds
 * the same toolbox from the runtime's tool catalog.
 */
import { z } from 'zod';
import { AgentryError } from '../errors.js';
import type { ModelToolSpec } from '../models/provider.js';
import type { AgentRow, ChildSpec } from '../storage/adapter.js';
import { defineTool, ToolCompletion, type ChildTask, type Tool } from '../tools/define-tool.js';
import type { ToolRegistry } from '../tools/registry.js';

export const SUBMIT_RESULT_TOOL_NAME = 'submit_result';

/** Told to a child that answered in plain text: only a submitted result finishes it. */
export const SUBMIT_REMINDER = `Your task is not finished: call ${SUBMIT_RESULT_TOOL_NAME} with your result. A plain reply does not finish it.`;

export interface Toolbox {
  system: string;
  specs: ModelToolSpec[];
  get(name: string): Tool | undefined;
  maxSteps: number;
  /** Whether the agent finishes only through submit_result (a child with a spec). */
  needsResult: boolean;
}

const ChildSpecSchema = z.object({
  instructions: z.string().min(1),
  tools: z.array(z.string()),
  result_schema: z.record(z.string(), z.unknown()),
  max_steps: z.number().int().positive().optional(),
});

/** Distinct specs, tool lists and result schemas remembered; specs come from tool code, so a few in practice. */
const MAX_REMEMBERED = 1_000;

/** Tools of a child's spec found in the catalog, and their definitions as the model sees them (frozen, shared). */
interface ToolListPart {
  byName: ReadonlyMap<string, Tool>;
  specs: readonly ModelToolSpec[];
}

/**
 * Toolboxes by agent kind: the runtime's, and one per distinct child spec (thousands of children share a few). Specs
 * that differ only in their instructions or result schema share what is the same: the definitions of the same tool
 * list are built once and shared, frozen, by every toolbox that offers that list, and `submit_result` once per result
 * schema.
 */
export class Toolboxes {
  private readonly bySpec = new Map<string, Toolbox>();
  /** By the JSON of the tool names, in order. */
  private readonly byToolList = new Map<string, ToolListPart>();
  /** `submit_result` and its definition, by the JSON of the result schema. */
  private readonly submitByResult = new Map<string, { tool: Tool; spec: ModelToolSpec }>();

  constructor(
    private readonly standard: Toolbox,
    /** Every tool a child may name: agents' tools and the tools' `childTools`. */
    private readonly catalog: ToolRegistry,
  ) {}

  of(agent: AgentRow): Toolbox {
    if (agent.spec === null) return this.standard;
    return remembered(this.bySpec, agent.spec, () => this.build(agent.spec!));
  }
  /** The spec to store on a child, checked against the catalog now rather than when the child runs. */
  specOf(task: ChildTask): ChildSpec {
    const tools = task.tools.map((t) => (typeof t === 'string' ? t : t.name));
    for (const [i, t] of task.tools.entries()) {
      const name = tools[i]!;
      const known = this.catalog.get(name);
      if (!known || (typeof t !== 'string' && known !== t)) {
        throw new AgentryError(
          'invalid_request',
          `A child's tool ${JSON.stringify(name)} is not known to the runtime: pass it to AgentRuntime.open({ tools }) ` +
            "or list it in the spawning tool's childTools",
        );
      }
    }
    const { $schema: _ignored, ...resultSchema } = z.toJSONSchema(task.result, {
      io: 'input',
      // A plain z.object strips unknown keys; as JSON Schema it would let them through into `data`.
      override: (ctx) => {
        if (ctx.zodSchema._zod.def.type === 'object' && ctx.jsonSchema.additionalProperties === undefined) {
          ctx.jsonSchema.additionalProperties = false;
        }
      },
    }) as Record<string, unknown>;
    if (resultSchema.type !== 'object') {
      throw new AgentryError('invalid_request', "A child's result schema must be a z.object(...)");
    }
    return {
      instructions: task.instructions,
      tools,
      result_schema: resultSchema,
      ...(task.maxSteps !== undefined ? { max_steps: task.maxSteps } : {}),
    };
  }

  private build(specText: string): Toolbox {
    const spec = ChildSpecSchema.parse(JSON.parse(specText));
    const listed = remembered(this.byToolList, JSON.stringify(spec.tools), () => this.toolList(spec.tools));
    const submit = remembered(this.submitByResult, JSON.stringify(spec.result_schema), () => {
      const tool = submitResultTool(spec.result_schema);
      return { tool, spec: Object.freeze(specOf(tool)) };
    });
    return {
      system: spec.instructions,
      specs: [...listed.specs, submit.spec],
      get: (name) => (name === SUBMIT_RESULT_TOOL_NAME ? submit.tool : listed.byName.get(name)),
      maxSteps: Math.min(spec.max_steps ?? this.standard.maxSteps, this.standard.maxSteps),
      needsResult: true,
    };
  }

  private toolList(names: readonly string[]): ToolListPart {
    const byName = new Map<string, Tool>();
    for (const name of names) {
      const tool = this.catalog.get(name);
      // A tool that was removed from the runtime since the child was spawned is left out; the model cannot call it.
      if (!tool) continue;
      if (byName.has(name) || name === SUBMIT_RESULT_TOOL_NAME) {
        throw new AgentryError('invalid_request', `Two tools are named ${JSON.stringify(name)}`);
      }
      byName.set(name, tool);
    }
    return { byName, specs: Object.freeze([...byName.values()].map((t) => Object.freeze(specOf(t)))) };
  }
}

/** The value remembered under `key`, made by `make` the first time (all forgotten at once past the bound). */
function remembered<V>(map: Map<string, V>, key: string, make: () => V): V {
  let value = map.get(key);
  if (value === undefined) {
    value = make();
    if (map.size >= MAX_REMEMBERED) map.clear();
    map.set(key, value);
  }
  return value;
}

/** A tool's definition as the model sees it (as ToolRegistry.specs() gives it). */
function specOf(tool: Tool): ModelToolSpec {
  return { name: tool.name, description: tool.description, input_schema: tool.jsonSchema };
}

function submitResultTool(resultSchema: Record<string, unknown>): Tool {
  const input = z.fromJSONSchema(resultSchema) as z.ZodType<Record<string, unknown>>;
  return defineTool({
    name: SUBMIT_RESULT_TOOL_NAME,
    description:
      'Submit the result of your task. This finishes your work: call it once, when the result is complete. ' +
      'If the result is rejected, the error says why; fix it and submit again.',
    input,
    price: 0,
    // Submitting twice finishes the same child with the same result.
    idempotent: true,
    describe: () => 'Submitting the result',
    run: (result) => new ToolCompletion(result),
  }) as Tool;
}
