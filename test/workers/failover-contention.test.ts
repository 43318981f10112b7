/**
 * The failover scenario (failover-run.ts) under CPU contention: a busy loop per core, as `stress --cpu N`
 * does, runs in child processes for the whole suite, so the workers' heartbeats, renewals and sweeps come late and
 * out of step, as on a loaded machine. Under that, leases may move between live workers before the kill (a worker
 * that looked gone for a moment): the scenario's checks hold whatever the order of owners, as long as the victim
 * commits nothing after a survivor stepped its agent, every note takes effect at most once, and no hold outlives the
 * sweep of its worker.
 *
 * `AGENTRY_FAILOVER_RUNS=<n>` repeats it n times in a row (default 1); `AGENTRY_FAILOVER_AGENTS=<n>` sets the agents
 * per run (default 300).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { afterAll, afterEach, beforeAll, describe, it } from 'vitest';
import { dropSchemas } from '../support/postgres.js';
import { killLiveWorkers, postgresGate, removeScratch, scratchDir } from './harness.js';
import { runFailover } from './failover-run.js';

const AGENTS = Number(process.env.AGENTRY_FAILOVER_AGENTS ?? 300);
const RUNS = Number(process.env.AGENTRY_FAILOVER_RUNS ?? 1);
/** A busy loop that ends itself when the test process that started it is gone (its parent changes). */
const HOG =
  'const p = process.ppid; for (;;) { for (let i = 0; i < 1e7; i++); if (process.ppid !== p) process.exit(0); }';

const gate = await postgresGate();
const schemas: string[] = [];
const hogs: ChildProcess[] = [];
let dir: string;

beforeAll(() => {
  dir = scratchDir();
  for (let i = 0; i < availableParallelism(); i++) {
    hogs.push(spawn(process.execPath, ['-e', HOG], { stdio: 'ignore' }));
  }
});
afterEach(killLiveWorkers);
afterAll(async () => {
  for (const hog of hogs) hog.kill('SIGKILL');
  await dropSchemas(schemas);
  removeScratch(dir);
});

describe.skipIf(gate.skip)(gate.name('failover across worker processes under CPU contention'), () => {
  for (let run = 1; run <= RUNS; run++) {
    it(`run ${run} of ${RUNS}: ${AGENTS} agents on 3 workers beside a busy loop per core, one SIGKILLed`, async () => {
      await runFailover({ agents: AGENTS, dir, schemas, label: `hog${run}` });
    }, 900_000);
  }
});
