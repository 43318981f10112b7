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
import { ToolRegistry } from '../tools/registry.js';

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

/** Toolboxes by agent kind: the runtime's, and one per distinct child spec (thousands of children share a few). */
export class Toolboxes {
  private readonly bySpec = new Map<string, Toolbox>();

  constructor(
    private readonly standard: Toolbox,
    /** Every tool a child may name: agents' tools and the tools' `childTools`. */
    private readonly catalog: ToolRegistry,
  ) {}

  of(agent: AgentRow): Toolbox {
    if (agent.spec === null) return this.standard;
    let box = this.bySpec.get(agent.spec);
    if (!box) {
      box = this.build(agent.spec);
      if (this.bySpec.size >= 1_000) this.bySpec.clear(); // specs come from tool code: a few in practice
      this.bySpec.set(agent.spec, box);
    }
    return box;
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
    const tools: Tool[] = [];
    for (const name of spec.tools) {
      const tool = this.catalog.get(name);
      // A tool that was removed from the runtime since the child was spawned is left out; the model cannot call it.
      if (tool) tools.push(tool);
    }
    tools.push(submitResultTool(spec.result_schema));
    const registry = new ToolRegistry(tools);
    return {
      system: spec.instructions,
      specs: registry.specs(),
      get: (name) => registry.get(name),
      maxSteps: Math.min(spec.max_steps ?? this.standard.maxSteps, this.standard.maxSteps),
      needsResult: true,
    };
  }
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
