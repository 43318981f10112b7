/**
 * @module core/retention
 * Forgets the work of finished agents after an age, so that a database that runs for months does not only grow. A
 * finished tree is judged by its root (a child's results belong to its parent until the root is done): once the root
 * is COMPLETED or FAILED and was last updated long enough ago, its tree's turns, messages, tool calls, tool states,
 * artifacts and page reads go — or, with `deleteTrees`, the agents themselves. Ledger rows always stay: money is never
 * forgotten. Sweeps work in small batches with a yield between them, off the agents' hot path.
 *
 * A root stopped OUT_OF_CREDITS is not finished (credits added later resume it), so its work cannot be forgotten
 * without breaking that resume; but it holds what its tools keep outside the database (a coding child's workspace,
 * up to the sandbox's disk quota) for as long as it exists. `outOfCreditsAfter` deletes such a tree once untouched
 * that long, as `runtime.delete()` does, which removes those workspaces too.
 */
import { z } from 'zod';
import type { StorageAdapter } from '../storage/adapter.js';
import { isoTime, type Clock } from '../base/clock.js';
import { RUNNABLE_STATUSES, type AgentStatus } from '../base/status.js';

const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)$/;
const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 } as const;

/**
 * A duration as milliseconds: a number of milliseconds, or text such as `0s`, `90m`, `36h`, `30d`, `2w`.
 * @example parseDuration('36h') // 129_600_000
 */
export function parseDuration(value: number | string): number {
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value < 0) throw new Error(`Expected a duration ≥ 0, got ${value}`);
    return value;
  }
  const m = DURATION.exec(value.trim());
  if (!m) throw new Error(`Expected a duration like 0s, 90m, 36h, 30d or 2w, got ${JSON.stringify(value)}`);
  return Number(m[1]) * UNIT_MS[m[2] as keyof typeof UNIT_MS];
}

const DurationSchema = z.union([z.number(), z.string()]).transform((v, ctx) => {
  try {
    return parseDuration(v);
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: (err as Error).message });
    return z.NEVER;
  }
});

export const RetentionOptionsSchema = z
  .object({
    /** Age (since its last update) after which a COMPLETED root's tree is forgotten; absent: never. */
    completedAfter: DurationSchema.optional(),
    /** The same for a FAILED root. */
    failedAfter: DurationSchema.optional(),
    /**
     * Age after which an OUT_OF_CREDITS root's tree is DELETED (always deleted, whatever `deleteTrees` says: its
     * transcript is what a resume continues from), with its workspaces; absent: never.
     */
    outOfCreditsAfter: DurationSchema.optional(),
    /** Delete the agents too (they are then 404), not only their work. @default false */
    deleteTrees: z.boolean().default(false),
    /** Time between sweeps. @default 60_000 */
    intervalMs: z.number().int().positive().default(60_000),
    /** Roots per batch; a yield to the event loop follows each. @default 50 */
    batchSize: z.number().int().positive().max(10_000).default(50),
  })
  .strict();

/** Options of the runtime's `retention`. Durations are milliseconds or text (`36h`, `30d`). */
export type RetentionOptions = z.input<typeof RetentionOptionsSchema>;
export type RetentionSettings = z.output<typeof RetentionOptionsSchema>;

export interface SweepResult {
  /** Roots whose trees were forgotten (or deleted). */
  trees: number;
  /** Agents in those trees. */
  agents: number;
  /** Rows removed (turns, messages, tool calls, …); with deleteTrees, not counted. */
  rows: number;
}

export interface RetentionHost {
  storage: StorageAdapter;
  clock: Clock;
  /** Deletes a tree as `runtime.delete()` does (aborting its work, telling listeners). */
  deleteTree(rootId: string): Promise<void>;
}

/** One sweep: every tree old enough, batch after batch, then the space is given back. */
export async function sweepFinished(
  host: RetentionHost,
  settings: RetentionSettings,
  signal?: AbortSignal,
): Promise<SweepResult> {
  const result: SweepResult = { trees: 0, agents: 0, rows: 0 };
  const rules: Array<[AgentStatus, number | undefined, boolean]> = [
    ['COMPLETED', settings.completedAfter, settings.deleteTrees],
    ['FAILED', settings.failedAfter, settings.deleteTrees],
    ['OUT_OF_CREDITS', settings.outOfCreditsAfter, true],
  ];
  for (const [status, age, deleteTrees] of rules) {
    if (age === undefined) continue;
    const before = isoTime(host.clock.now() - age);
    const treesBefore = result.trees;
    for (;;) {
      if (signal?.aborted) return result;
      const roots = await host.storage.listFinishedRoots({
        statuses: [status],
        updatedBefore: before,
        limit: settings.batchSize,
        withTranscript: !deleteTrees,
      });
      if (roots.length === 0) break;
      const trees = await Promise.all(
        roots.map(async (root) => ({ root, descendants: await host.storage.listDescendantIds(root) })),
      );
      if (deleteTrees) {
        // A tree with a part still running (a child a pause left behind, then resumed) waits for a later sweep. The
        // batch's deletes go out together: SQLite commits them as one group.
        const done = await Promise.all(
          trees.map(async ({ root, descendants }) => {
            if (await anyRunnable(host.storage, descendants)) return null;
            await host.deleteTree(root);
            return descendants.length;
          }),
        );
        for (const d of done) {
          if (d === null) continue;
          result.trees++;
          result.agents += 1 + d;
        }
      } else {
        // One write for the whole batch.
        result.rows += await host.storage.purgeAgentData(trees.flatMap((t) => [t.root, ...t.descendants]));
        result.trees += trees.length;
        result.agents += trees.reduce((n, t) => n + 1 + t.descendants.length, 0);
      }
      // Off the hot path: the agents' steps get the event loop between batches.
      await new Promise<void>((resolve) => setImmediate(resolve));
      if (roots.length < settings.batchSize) break;
      if (deleteTrees && result.trees === treesBefore) break; // every candidate is still running somewhere
    }
  }
  if (result.trees > 0) await host.storage.reclaimSpace?.();
  return result;
}

async function anyRunnable(storage: StorageAdapter, ids: string[]): Promise<boolean> {
  for (const id of ids) {
    const row = await storage.getAgent(id);
    if (row && RUNNABLE_STATUSES.includes(row.status)) return true;
  }
  return false;
}

/** Sweeps every `intervalMs` until stopped. Errors go to `onError`; the next sweep tries again. */
export class RetentionSweeper {
  private readonly stop = new AbortController();
  private running: Promise<void> | undefined;

  constructor(
    private readonly host: RetentionHost,
    private readonly settings: RetentionSettings,
    private readonly onError: (error: unknown) => void,
  ) {}

  start(): void {
    this.running ??= this.loop();
  }

  private async loop(): Promise<void> {
    while (!this.stop.signal.aborted) {
      try {
        await sweepFinished(this.host, this.settings, this.stop.signal);
      } catch (error) {
        if (!this.stop.signal.aborted) this.onError(error);
      }
      try {
        await this.host.clock.sleep(this.settings.intervalMs, this.stop.signal);
      } catch {
        return; // stopped
      }
    }
  }

  async close(): Promise<void> {
    this.stop.abort();
    await this.running;
  }
}
