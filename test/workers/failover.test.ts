/**
 * Failover: three worker processes drive 1,000 scripted agents on one PostgreSQL schema, each
 * agent taking several steps that call the non-idempotent `note` tool. One worker is SIGKILLed mid-run. The other two
 * take its agents over once its leases expire, and then:
 * - every agent completes, and its transcript is exactly its script (no public message duplicated or lost, the
 *   model's log contiguous, tokens exact);
 * - every note call took effect at most once (by call and by step), a call the dead worker had started is reported to
 *   the model as an unknown outcome and never run again, and every other call took effect exactly once;
 * - the ledger adds up to the balance with nothing reserved, and the balance, sampled all along, never went below zero.
 *
 * `AGENTRY_FAILOVER_AGENTS=<n>` runs fewer (or more) agents.
 */
import { afterAll, afterEach, beforeAll, describe, it } from 'vitest';
import { dropSchemas } from '../support/postgres.js';
import { killLiveWorkers, postgresGate, removeScratch, scratchDir } from './harness.js';
import { runFailover } from './failover-run.js';

const AGENTS = Number(process.env.AGENTRY_FAILOVER_AGENTS ?? 1_000);

const gate = await postgresGate();
const schemas: string[] = [];
let dir: string;

beforeAll(() => {
  dir = scratchDir();
});
afterEach(killLiveWorkers);
afterAll(async () => {
  await dropSchemas(schemas);
  removeScratch(dir);
});

describe.skipIf(gate.skip)(gate.name('failover across worker processes on PostgreSQL'), () => {
  it(`${AGENTS} agents on 3 workers, one SIGKILLed mid-run: all complete, notes at most once, exact ledger`, async () => {
    await runFailover({ agents: AGENTS, dir, schemas, label: 'quiet' });
  }, 600_000);
});
