/**
 * @module core/tool-call
 * One tool call: its input validated, run in its lane with a tool context, observed, and its output (or its error)
 * made into the result the model sees. A call may also suspend (to wait for sub-agents, a time or a wake-up) or
 * complete its agent with a result (`submit_result`); core/tool-calls.ts decides what that means for the step.
 */
import { z } from 'zod';
import { toolReservation } from './credits.js';
import type { RunControl, StepDeps } from './step-types.js';
import type { ToolTelemetry } from './telemetry.js';
import { createToolContext } from './tool-context.js';
import type { Toolbox } from './toolbox.js';
import type { ToolUseBlock } from '../models/provider.js';
import type { AgentRow } from '../storage/adapter.js';
import { renderToolOutput, ToolCompletion, ToolSuspension, type Tool, type ToolContext } from '../tools/define-tool.js';

/** What one tool call came to. */
export interface ToolOutcome {
  content: string;
  isError: boolean;
  /** Set when the call suspended to wait for its sub-agents: it has no result yet. */
  suspended?: string;
  /** The spawn group it waits for, when not the call's own. */
  waitsFor?: string | undefined;
  /** Set when it waits for a time or a wake-up instead of sub-agents: when to wake it at the latest, or null. */
  wakeAt?: number | null;
  /** Set when the call finished its agent with a result (submit_result). */
  completion?: ToolCompletion;
  /** Set when the tool threw rather than returned. */
  threw?: boolean;
}

/**
 * Runs one tool call in its lane: its input checked against the tool's schema, its output rendered and cut to the
 * step's limit, a throw turned into an error result the model sees.
 */
export async function runOneTool(
  deps: StepDeps,
  tool: Tool | undefined,
  use: ToolUseBlock,
  row: AgentRow,
  control: RunControl,
  report: ToolContext['reportProgress'],
  meter: ToolContext['meter'],
  /** Gets the call's telemetry, started once the call has its lane slot (or at once when it cannot run). */
  observed: { span?: ToolTelemetry } = {},
): Promise<ToolOutcome> {
  const observe = (reservedMicros: number) => {
    observed.span = control.trace?.tool(use, {
      registered: tool !== undefined,
      type: use.name.startsWith('mcp__') ? 'extension' : 'function',
      reservedMicros,
    });
    return observed.span;
  };
  if (!tool) {
    observe(0);
    return { content: `Error: there is no tool named ${JSON.stringify(use.name)}.`, isError: true };
  }
  const parsed = parseToolInput(tool, use);
  if (!parsed.success) {
    observe(0);
    return { content: `Error: invalid input for ${tool.name}: ${z.prettifyError(parsed.error)}`, isError: true };
  }
  try {
    const output = await deps.inToolLane(tool.lane, async () => {
      const span = observe(toolReservation(deps.prices, tool, use.input));
      const ctx = createToolContext(deps, row, use, control, report, meter, span?.traceparent ?? null);
      return span ? span.within(async () => tool.run(parsed.data, ctx)) : tool.run(parsed.data, ctx);
    });
    if (output instanceof ToolSuspension) {
      return {
        content: '',
        isError: false,
        suspended: output.statusMessage,
        waitsFor: output.spawnId,
        ...(output.wakeAt !== undefined ? { wakeAt: output.wakeAt } : {}),
      };
    }
    if (output instanceof ToolCompletion) return { content: 'Result submitted.', isError: false, completion: output };
    return { content: clip(renderToolOutput(output), deps.limits.maxToolResultChars), isError: false };
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    return { content: clip(`Error: ${message}`, deps.limits.maxToolResultChars), isError: true, threw: true };
  }
}

/** The status message while calls run: the first call's own description (`describe`), or its name. */
export function describeToolCalls(box: Toolbox, uses: ToolUseBlock[]): string {
  const first = uses[0]!;
  const tool = box.get(first.name);
  let text = `Calling ${first.name}`;
  if (tool?.describe) {
    const parsed = parseToolInput(tool, first);
    if (parsed.success) {
      try {
        text = tool.describe(parsed.data);
      } catch {
        // a describe() that throws only loses its wording
      }
    }
  }
  return uses.length > 1 ? `${text} (+${uses.length - 1} more)` : text;
}

/**
 * Tool inputs as checked against their tool's schema, by call. A model turn's status message describes its first call
 * from the checked input, and the step after it runs the call with the same input: the block is the same object when
 * one driver does both, so the input (10,000 tasks for a large spawn) is checked once. A call read back from storage
 * is a new object and is checked again.
 */
const parsedInputs = new WeakMap<ToolUseBlock, { tool: Tool; result: ReturnType<Tool['input']['safeParse']> }>();

function parseToolInput(tool: Tool, use: ToolUseBlock): ReturnType<Tool['input']['safeParse']> {
  const known = parsedInputs.get(use);
  if (known?.tool === tool) return known.result;
  const result = tool.input.safeParse(use.input);
  parsedInputs.set(use, { tool, result });
  return result;
}

/** Cuts a long result, saying how much was cut. */
function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}\n[... ${text.length - max} more characters cut]`;
}
