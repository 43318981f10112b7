/**
 * What the child-crash test's agents do, shared by the worker process (`child-crash-worker.ts`) and the test that
 * reads the database and the event file afterwards (`child-crash.test.ts`).
 *
 * A parent calls `research`, which spawns two children with a job of their own: `alpha` uses `lookup` (idempotent),
 * `beta` uses `note` (not idempotent). Each takes one step with its tool, then submits a result built from what its tool
 * returned. The worker writes one line per event to a file with synchronous appends, so a SIGKILL loses none.
 */
import { appendFileSync } from 'node:fs';
import { z } from 'zod';
import { defineTool, type ChildTask, type ModelRequest, type Tool } from 'agentry-runtime';
import type { ScriptedTurn } from 'agentry-runtime/testing';

export const CHILD_INSTRUCTIONS = 'You research one topic with your tool, then submit your answer with submit_result.';
export const PARENT_GOAL = 'Research alpha and beta';
export const PARENT_FINAL = 'Report: alpha and beta researched.';

export const ChildResult = z.object({ answer: z.string(), score: z.number().int().min(0).max(10) });
export type ChildResult = z.infer<typeof ChildResult>;

/** The children in task order: the tool each uses in its first step and the score it submits. */
export const CHILDREN = [
  { topic: 'alpha', tool: 'lookup', input: { key: 'alpha' }, score: 7 },
  { topic: 'beta', tool: 'note', input: { text: 'beta' }, score: 3 },
] as const;

/** What each child submits once its tool has answered: the tool's output, verbatim, as its answer. */
export const EXPECTED_RESULTS: ChildResult[] = [
  { answer: JSON.stringify({ key: 'alpha', value: 'ALPHA' }), score: 7 },
  { answer: 'noted beta', score: 3 },
];

/**
 * One line per event in the event file:
 * - `M <run> <agent_id> <turn>`: a model call starts (turn = assistant turns the conversation already has);
 * - `T <run> <tool> <agent_id> <tool_use_id>`: a tool call runs;
 * - `S <run> <reattached>`: the research tool's ctx.spawn() answered.
 */
export function logEvent(file: string, line: string): void {
  appendFileSync(file, `${line}\n`);
}

export function childTools(eventFile: string, run: string): Tool[] {
  const lookup = defineTool({
    name: 'lookup',
    description: 'Looks a key up. Safe to repeat.',
    input: z.object({ key: z.string() }),
    price: 0.01,
    idempotent: true,
    run: ({ key }, ctx) => {
      logEvent(eventFile, `T ${run} lookup ${ctx.agent.agent_id} ${ctx.toolCallId}`);
      return { key, value: key.toUpperCase() };
    },
  });
  const note = defineTool({
    name: 'note',
    description: 'Writes a note. Not safe to repeat.',
    input: z.object({ text: z.string() }),
    price: 0.01,
    idempotent: false,
    run: ({ text }, ctx) => {
      logEvent(eventFile, `T ${run} note ${ctx.agent.agent_id} ${ctx.toolCallId}`);
      return `noted ${text}`;
    },
  });
  return [lookup as Tool, note as Tool];
}

/** `research {}`: spawns the two children, waits for them, returns their validated results. */
export function researchTool(eventFile: string, run: string): Tool {
  const tools = childTools(eventFile, run);
  const byName = (name: string) => tools.find((t) => t.name === name)! as Tool<never>;
  return defineTool({
    name: 'research',
    description: 'Researches alpha and beta with one child agent each.',
    input: z.object({}),
    idempotent: true,
    childTools: tools as Tool<never>[],
    async run(_input, ctx) {
      const spawned = await ctx.spawn(
        CHILDREN.map((c): ChildTask => ({
          goal: `Research ${c.topic}`,
          instructions: CHILD_INSTRUCTIONS,
          tools: [byName(c.tool)],
          result: ChildResult,
        })),
      );
      logEvent(eventFile, `S ${run} ${spawned.reattached}`);
      const finished = (spawned.counts.COMPLETED ?? 0) + (spawned.counts.FAILED ?? 0);
      if (finished < spawned.total) return ctx.suspend(`Researching ${spawned.total - finished} topics`);
      const { results } = await ctx.subAgentResults(ctx.toolCallId, { offset: 0, limit: 10 });
      return { results: results.map((r) => ({ agent_id: r.agent_id, status: r.status, data: r.data ?? null })) };
    },
  }) as Tool;
}

const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;

/**
 * The scripted turns. A child's second turn submits what its tool returned (the last tool_result it sees), so a child
 * resumed without its first step's result could not submit the expected answer. `hang` makes that second turn wait
 * forever: the first process is killed there.
 */
export function playTurn(req: ModelRequest, turnIndex: number, hang: boolean): ScriptedTurn | Promise<ScriptedTurn> {
  if (req.system !== CHILD_INSTRUCTIONS) {
    return turnIndex === 0 ? { toolCalls: [{ name: 'research', input: {} }] } : { text: PARENT_FINAL };
  }
  const child = CHILDREN.find((c) => goalOf(req) === `Research ${c.topic}`);
  if (!child) throw new Error(`no script for the child "${goalOf(req)}"`);
  if (turnIndex === 0) return { toolCalls: [{ name: child.tool, input: child.input }] };
  if (hang) return new Promise<ScriptedTurn>(() => {});
  const last = req.messages.at(-1)!.content.at(-1) as { type: string; content?: string };
  if (last.type !== 'tool_result') throw new Error(`child ${child.topic} sees no tool result: ${JSON.stringify(last)}`);
  return { toolCalls: [{ name: 'submit_result', input: { answer: last.content, score: child.score } }] };
}
