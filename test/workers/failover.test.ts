/**
 * Failover (issue 27, Done means 2): three worker processes drive 1,000 scripted agents on one PostgreSQL schema, each
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
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { StorageAdapter, ToolCallRow } from 'agentry-runtime';
import { dropSchemas, newSchemaName, urlWithSchema } from '../support/postgres.js';
import { agentGoal, readLog, type LogLine } from './script.js';
import {
  allAgents,
  createAgents,
  expectLedgerSettled,
  expectNotesAtMostOnce,
  expectScripted,
  forEachConcurrently,
  killLiveWorkers,
  openObserver,
  pollUntil,
  postgresGate,
  removeScratch,
  scratchDir,
  startWorker,
  waitForLog,
  type WorkerProcess,
} from './harness.js';

const AGENTS = Number(process.env.AGENTRY_FAILOVER_AGENTS ?? 1_000);
/** 3 to 5 note steps each, then the answer. */
const stepsOf = (i: number) => 3 + (i % 3);
const TOTAL_NOTES = Array.from({ length: AGENTS }, (_, i) => stepsOf(i)).reduce((a, b) => a + b, 0);
const CREDITS = 1_000;
const LEASE_MS = 2_000;
const RUN_DEADLINE_MS = 300_000;

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

/** The model calls and hold-free note calls the worker had started and not finished when it died. */
function inFlight(log: LogLine[], worker: string): { models: string[]; notes: number } {
  const open = new Map<string, number>();
  for (const l of log) {
    if (l.worker !== worker || (l.event !== 'M+' && l.event !== 'M-')) continue;
    const key = `${l.fields[0]} ${l.fields[1]}`;
    open.set(key, (open.get(key) ?? 0) + (l.event === 'M+' ? 1 : -1));
  }
  return {
    models: [...open].filter(([, n]) => n > 0).map(([k]) => k),
    notes: log.filter((l) => l.worker === worker && l.event === 'N').length,
  };
}

describe.skipIf(gate.skip)(gate.name('failover across worker processes on PostgreSQL'), () => {
  it(`${AGENTS} agents on 3 workers, one SIGKILLed mid-run: all complete, notes at most once, exact ledger`, async () => {
    const started = Date.now();
    const schema = newSchemaName('agentry_failover');
    schemas.push(schema);
    const db = urlWithSchema(schema);
    const logFile = `${dir}/failover.log`;
    const goals = Array.from({ length: AGENTS }, (_, i) => agentGoal(`a${i}`, stepsOf(i)));
    await createAgents(db, goals, CREDITS);
    const created = Date.now();

    const config = (name: string) => ({
      name,
      db,
      log: logFile,
      leaseMs: LEASE_MS,
      heartbeatMs: 300,
      modelDelayMs: 10,
      noteDelayMs: 5,
      credits: CREDITS,
    });
    const workers: WorkerProcess[] = await Promise.all(['w1', 'w2', 'w3'].map((n) => startWorker(config(n))));
    const [survivor1, victim, survivor2] = workers as [WorkerProcess, WorkerProcess, WorkerProcess];
    const ready = Date.now();

    const observer: StorageAdapter = await openObserver(db);
    // The balance, sampled while the workers run: it must never be seen below zero.
    let lowest = Infinity;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const account = await observer.getAccount('local');
        lowest = Math.min(lowest, account!.balance);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    sampler.catch(() => undefined); // awaited (and its failure reported) at the end

    try {
      // Kill once a fifth of the work is done and the victim is in the middle of model calls of its own.
      await waitForLog(
        logFile,
        (log) =>
          log.filter((l) => l.event === 'N').length >= TOTAL_NOTES / 5 &&
          log.some((l) => l.worker === victim.name && l.event === 'N') &&
          inFlight(log, victim.name).models.length > 0,
        120_000,
        'a fifth of the notes, and the victim mid-call',
      );
      victim.signal('SIGKILL');
      expect((await victim.exited).signal, victim.stderr()).toBe('SIGKILL');
      const killedAt = Date.now();
      const atDeath = readLog(logFile);
      const lastVictimLine = atDeath.filter((l) => l.worker === victim.name).at(-1)!.seq;
      const victimInFlight = inFlight(atDeath, victim.name);
      const doneAtDeath = atDeath.filter((l) => l.event === 'N').length;

      // The survivors finish everything (the victim's agents once its leases run out).
      await pollUntil(
        async () => {
          const failed = await observer.listAgentIdsByStatus(['FAILED', 'OUT_OF_CREDITS', 'PAUSED']);
          if (failed.length > 0) {
            const rows = await Promise.all(failed.slice(0, 5).map((id) => observer.getAgent(id)));
            throw new Error(
              `agents stopped: ${rows.map((r) => `${r?.goal}: ${r?.status} ${r?.status_message}`).join('; ')}`,
            );
          }
          return (await observer.listAgentIdsByStatus(['COMPLETED'])).length;
        },
        (n) => n === AGENTS,
        RUN_DEADLINE_MS,
        `all ${AGENTS} agents COMPLETED`,
      );
      const completed = Date.now();
      const log = readLog(logFile);
      // The first model call a survivor made for an agent the victim was the last to step before it died.
      const lastStepper = new Map<string, string>();
      for (const l of atDeath) if (l.event === 'M+') lastStepper.set(l.fields[0]!, l.worker);
      const takeover = log.find(
        (l) =>
          l.seq > lastVictimLine &&
          l.event === 'M+' &&
          lastStepper.get(l.fields[0]!) === victim.name &&
          l.worker !== victim.name,
      );
      expect(takeover, 'a survivor took over an agent the victim was stepping').toBeDefined();

      for (const w of [survivor1, survivor2]) {
        w.signal('SIGTERM');
        expect((await w.exited).code, w.stderr()).toBe(0);
      }
      sampling = false;
      await sampler;
      expect(
        log.filter((l) => l.event === 'E'),
        'runtime errors',
      ).toEqual([]);

      // The database, after the survivors closed.
      const agents = await allAgents(observer);
      expect(agents).toHaveLength(AGENTS);
      expect(new Set(agents.map((a) => a.goal))).toEqual(new Set(goals));
      const callsByAgent = new Map<string, ToolCallRow[]>();
      let takenOver = 0;
      const byWorker = new Map<string, number>();
      await forEachConcurrently(agents, 4, async (agent) => {
        const { authors, calls } = await expectScripted(observer, agent);
        callsByAgent.set(agent.agent_id, calls);
        for (const a of authors) byWorker.set(a, (byWorker.get(a) ?? 0) + 1);
        if (authors.includes(victim.name) && authors.some((a) => a !== victim.name)) {
          takenOver++;
          // Once a survivor stepped the agent, the victim never committed a turn of it again.
          const first = authors.findIndex((a) => a !== victim.name);
          expect(authors.slice(first), agent.goal).not.toContain(victim.name);
        }
      });
      expect(takenOver).toBeGreaterThan(0);
      const notes = expectNotesAtMostOnce(log, callsByAgent);
      const { account, ledger } = await expectLedgerSettled(observer);
      expect(lowest).toBeGreaterThanOrEqual(0);
      expect(agents.reduce((s, a) => s + a.credits_spent, 0)).toBe(
        -ledger.filter((l) => l.amount < 0).reduce((s, l) => s + l.amount, 0),
      );

      console.log(
        [
          `failover: ${AGENTS} agents, ${TOTAL_NOTES} note steps, 3 workers (lease ${LEASE_MS} ms)`,
          `  create ${((created - started) / 1000).toFixed(1)} s, workers ready ${((ready - created) / 1000).toFixed(1)} s, ` +
            `kill after ${((killedAt - ready) / 1000).toFixed(1)} s (${doneAtDeath} notes done), all completed ` +
            `${((completed - killedAt) / 1000).toFixed(1)} s after the kill; first takeover ` +
            `${takeover ? takeover.at - killedAt : '-'} ms after it`,
          `  in flight in the victim at its death: ${victimInFlight.models.length} model calls; agents taken over: ${takenOver}`,
          `  turns committed by worker: ${JSON.stringify(Object.fromEntries(byWorker))}`,
          `  notes: ${notes.notes} effects; unknown outcomes: ${notes.unknownRan} had taken effect, ${notes.unknownNotRun} had not`,
          `  balance ${account.balance / 1e6} credits (lowest seen ${lowest / 1e6}), ${ledger.length} ledger rows`,
        ].join('\n'),
      );
    } finally {
      sampling = false;
      await sampler.catch(() => undefined);
      await observer.close();
    }
  }, 600_000);
});
