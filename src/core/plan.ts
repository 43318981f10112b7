/**
 * @module core/plan
 * The internal `update_plan` tool every agent gets. Progress is done/total of the plan, kept below 1.0 until the
 * agent completes; the step in progress becomes the `status_message`.
 */
import { z } from 'zod';
import { defineTool, type Tool } from '../tools/define-tool.js';

export const PLAN_TOOL_NAME = 'update_plan';

const PlanInput = z.object({
  steps: z
    .array(
      z.object({
        title: z.string().min(1).max(500),
        status: z.enum(['pending', 'in_progress', 'done']),
      }),
    )
    .min(1)
    .max(100),
});

/** Progress is capped here until the agent is COMPLETED (only completion means 1.0). */
export const MAX_PLAN_PROGRESS = 0.99;

export function planProgress(steps: ReadonlyArray<{ status: string }>): number {
  if (steps.length === 0) return 0;
  const done = steps.filter((s) => s.status === 'done').length;
  return Math.min(MAX_PLAN_PROGRESS, done / steps.length);
}

/** Saved on the agent as `plan`: how far the plan is, so sub-agent progress can fill the step in progress. */
export interface PlanState {
  done: number;
  total: number;
}

/** Progress of a waiting parent: the plan's progress plus the finished fraction of the step it waits on. */
export function progressWhileWaiting(plan: string | null, childrenDone: number): number {
  const state = plan ? (JSON.parse(plan) as PlanState) : null;
  const base = state && state.total > 0 ? state.done / state.total : 0;
  const width = state && state.total > 0 ? 1 / state.total : MAX_PLAN_PROGRESS;
  return Math.min(MAX_PLAN_PROGRESS, base + width * childrenDone);
}

export function createPlanTool(): Tool<z.infer<typeof PlanInput>> {
  return defineTool({
    name: PLAN_TOOL_NAME,
    description:
      'Record your plan for the goal as a list of steps with their status (pending, in_progress, done). Call it at ' +
      'the start and whenever a step changes; the caller sees progress from it.',
    input: PlanInput,
    price: 0,
    idempotent: true,
    describe: () => 'Planning',
    run({ steps }, ctx) {
      const current = steps.find((s) => s.status === 'in_progress');
      const done = steps.filter((s) => s.status === 'done').length;
      ctx.reportProgress({
        progress: planProgress(steps),
        message: current ? current.title : `Plan: ${done} of ${steps.length} steps done`,
        plan: { done, total: steps.length },
      });
      return `Plan saved: ${done} of ${steps.length} steps done.`;
    },
  }) as Tool<z.infer<typeof PlanInput>>;
}
