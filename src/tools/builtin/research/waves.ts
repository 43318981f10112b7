/**
 * @module tools/builtin/research/waves
 * What the research tools (deep_research, find_all, enrich) share: running a wave of children as a spawn group of the
 * call, suspending until they are all done, and reading their validated results. A tool that runs several waves keeps
 * its phase in `ctx.state`, so a re-run after a crash re-attaches to the wave it was in instead of spawning again.
 */
import type { ChildTask, ToolContext, ToolSuspension } from '../../define-tool.js';

/** Results of a wave are read this many at a time (a wave may have thousands of children). */
const PAGE = 500;

/** Spawns (or re-attaches to) one wave of children; suspends until they are done, then gives their results. */
export async function runWave(
  ctx: ToolContext,
  group: string,
  tasks: ChildTask[],
): Promise<{ suspend: (message: string) => ToolSuspension } | { data: unknown[] }> {
  const spawned = await ctx.spawn(tasks, { group });
  const running = spawned.total - (spawned.counts.COMPLETED ?? 0) - (spawned.counts.FAILED ?? 0);
  if (running > 0) return { suspend: (message) => ctx.suspend(message, spawned.spawn_id) };
  const data: unknown[] = [];
  for (let offset = 0; offset < spawned.total; offset += PAGE) {
    const { results } = await ctx.subAgentResults(spawned.spawn_id, { offset, limit: PAGE });
    for (const r of results) data[r.index] = r.data;
  }
  return { data };
}

/**
 * Every `url` the children's results mention: what `ctx.pagesRead({ urls })` needs to load, so that checking a
 * thousand children's citations does not load every page they read.
 */
export function citedUrls(results: readonly unknown[]): string[] {
  const urls = new Set<string>();
  const walk = (value: unknown): void => {
    if (Array.isArray(value)) value.forEach(walk);
    else if (value !== null && typeof value === 'object') {
      for (const [key, v] of Object.entries(value)) {
        if (key === 'url' && typeof v === 'string') urls.add(v);
        else walk(v);
      }
    }
  };
  walk(results);
  return [...urls];
}
