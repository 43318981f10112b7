/**
 * What every bench scenario shares: its arguments, how it measures, and the one line it prints for the runner.
 * Each scenario runs in a fresh process, so `maxRSS` is that scenario's own peak.
 */
import { parseArgs } from 'node:util';
import { GCProfiler } from 'node:v8';

export interface ScenarioResult {
  /** Scenario name, e.g. `fanout`, `floor`, `peer:langgraph`. */
  name: string;
  /** Children (sub-agents) in the run. */
  n: number;
  wall_ms: number;
  /** Peak resident set of the process, from the OS (getrusage maxrss). */
  peak_rss_mb: number;
  /** Anything else the scenario measured. */
  [key: string]: unknown;
}

export function scenarioArgs(): { n: number; [key: string]: string | number | boolean } {
  const { values } = parseArgs({
    options: {
      n: { type: 'string', default: '10000' },
      parents: { type: 'string', default: '1' },
      latency: { type: 'string', default: '0' },
      lane: { type: 'string', default: '1000' },
      credits: { type: 'string', default: '1000000000' },
      // agentry-fanout: `memory` runs on the memory storage (nothing persisted); anything else on SQLite
      storage: { type: 'string', default: 'sqlite' },
    },
    strict: false,
  });
  return {
    ...values,
    n: Number(values.n),
    parents: Number(values.parents),
    latency: Number(values.latency),
    lane: Number(values.lane),
    credits: Number(values.credits),
  } as { n: number; [key: string]: string | number | boolean };
}

export function peakRssMb(): number {
  // maxRSS is in kilobytes
  return Math.round((process.resourceUsage().maxRSS / 1024) * 10) / 10;
}

/** What the garbage collector saw over a measured window. */
export interface GcMeasure {
  /** Bytes the JavaScript heap took over the window: unlike times, it does not drift with the machine's load. */
  alloc_mb: number;
  /** Young-generation collections (scavenges) and their main-thread pauses. */
  young_gcs: number;
  young_gc_ms: number;
  /** All collections' main-thread pauses. */
  gc_ms: number;
}

/**
 * Measures the garbage collector from now until `stop()`: what was allocated (the heap before each collection less
 * after the one before) and how long collections held the main thread. Tracing's cost is mostly garbage, and wall
 * time on a shared machine hides it.
 */
export function startGcMeasure(): { stop(): GcMeasure } {
  const profiler = new GCProfiler();
  profiler.start();
  const usedAtStart = process.memoryUsage().heapUsed;
  return {
    stop() {
      const usedAtEnd = process.memoryUsage().heapUsed;
      const stats = profiler.stop()?.statistics ?? [];
      let alloc = 0;
      let last = usedAtStart;
      let young = 0;
      let youngMs = 0;
      let allMs = 0;
      for (const s of stats) {
        alloc += Math.max(0, s.beforeGC.heapStatistics.usedHeapSize - last);
        last = s.afterGC.heapStatistics.usedHeapSize;
        allMs += s.cost / 1000;
        if (s.gcType === 'Scavenge') {
          young++;
          youngMs += s.cost / 1000;
        }
      }
      alloc += Math.max(0, usedAtEnd - last);
      return {
        alloc_mb: Math.round(alloc / 1048576),
        young_gcs: young,
        young_gc_ms: Math.round(youngMs),
        gc_ms: Math.round(allMs),
      };
    },
  };
}

/** Prints the result line the runner reads. */
export function report(result: ScenarioResult): void {
  process.stdout.write(`RESULT ${JSON.stringify(result)}\n`);
}

/** The goal of child `i`, and the answer a child gives: the same task shape in every scenario. */
export const childGoal = (i: number): string => `child ${i}: look up item ${i} and report it`;
export const childAnswer = (i: number): string => `item ${i} is ${(i * 7) % 101}`;
