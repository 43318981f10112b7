/**
 * What every bench scenario shares: its arguments, how it measures, and the one line it prints for the runner.
 * Each scenario runs in a fresh process, so `maxRSS` is that scenario's own peak.
 */
import { parseArgs } from 'node:util';

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

/** Prints the result line the runner reads. */
export function report(result: ScenarioResult): void {
  process.stdout.write(`RESULT ${JSON.stringify(result)}\n`);
}

/** The goal of child `i`, and the answer a child gives: the same task shape in every scenario. */
export const childGoal = (i: number): string => `child ${i}: look up item ${i} and report it`;
export const childAnswer = (i: number): string => `item ${i} is ${(i * 7) % 101}`;
