/**
 * Fencing: a worker frozen with SIGSTOP past its leases, whose agents another worker took
 * over, is continued with SIGCONT. It must commit no step for those agents (each agent's turns are the frozen worker's
 * up to the takeover and the other's after it, none repeated, none out of order; in the log no model call of the
 * frozen worker goes back behind the taker's steps, and it starts no hold after the takeover — it may only claim an
 * agent anew, under a new lease, and go on from where the taker was), and its in-flight calls are aborted (the `hold` calls it was
 * running log their abort, and the taker reports them as unknown outcomes instead of running them again).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { AgentRow } from 'agentry-runtime';
import { dropSchemas, newSchemaName, urlWithSchema } from '../support/postgres.js';
import { HOLD_TOOL, UNKNOWN_OUTCOME_RE, agentGoal, readLog } from './script.js';
import {
  allAgents,
  createAgents,
  expectLedgerSettled,
  expectNotesAtMostOnce,
  expectScripted,
  killLiveWorkers,
  openObserver,
  pollUntil,
  postgresGate,
  removeScratch,
  scratchDir,
  startWorker,
  tail,
  waitForLog,
} from './harness.js';

const AGENTS = 12;
/** Agents whose turn 1 calls `hold`: those calls are in flight in the frozen worker. */
const HOLDING = 4;
/** Long enough that every agent is still mid-run when the taker has started and the frozen worker is continued. */
const STEPS = 400;
/**
 * The lease, and the gone-worker grace. With a long lease the takeover comes after the grace, not the lease:
 * a worker frozen as long as a long GC pause finds its leases taken, and the epoch fences it out.
 */
const VARIANTS = [
  { leaseMs: 2_000, goneAfterMs: undefined },
  { leaseMs: 120_000, goneAfterMs: 1_000 },
] as const;

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

describe.skipIf(gate.skip)(gate.name('fencing of a frozen worker on PostgreSQL'), () => {
  it.each(VARIANTS)(
    'lease $leaseMs ms, gone after $goneAfterMs ms: a worker frozen past its grace commits nothing for the agents taken over, and its calls are aborted',
    async ({ leaseMs: LEASE_MS, goneAfterMs }) => {
      const started = Date.now();
      const schema = newSchemaName('agentry_fencing');
      schemas.push(schema);
      const db = urlWithSchema(schema);
      const logFile = `${dir}/fencing-${LEASE_MS}.log`;
      const goals = Array.from({ length: AGENTS }, (_, i) =>
        i < HOLDING ? agentGoal(`f${i}`, STEPS, 1) : agentGoal(`f${i}`, STEPS),
      );
      const ids = await createAgents(db, goals, 1_000);
      const holding = new Set(ids.slice(0, HOLDING));
      const base = {
        db,
        log: logFile,
        leaseMs: LEASE_MS,
        heartbeatMs: 300,
        noteDelayMs: 2,
        ...(goneAfterMs !== undefined ? { goneAfterMs } : {}),
      };

      // The frozen-to-be worker starts alone, so it holds every agent; it is slow, the taker fast.
      const frozen = await startWorker({ ...base, name: 'frozen', modelDelayMs: 40 });
      await waitForLog(
        logFile,
        (log) =>
          ids.every((id) => log.some((l) => l.worker === 'frozen' && l.event === 'M+' && l.fields[0] === id)) &&
          [...holding].every((id) => log.some((l) => l.worker === 'frozen' && l.event === 'H+' && l.fields[0] === id)),
        60_000,
        'the frozen-to-be worker stepping every agent, its hold calls running',
      );
      const taker = await startWorker({ ...base, name: 'taker', modelDelayMs: 2 });

      frozen.signal('SIGSTOP');
      const stoppedAt = Date.now();
      const stopSeq = readLog(logFile).length;
      const progressAtStop = new Map<string, number>();
      for (const l of readLog(logFile)) if (l.event === 'M+') progressAtStop.set(l.fields[0]!, Number(l.fields[1]));
      // The taker has every agent once the frozen worker's leases ran out: it calls the model for each.
      const firstTakerCall = await waitForLog(
        logFile,
        (log) => {
          const first = new Map<string, number>();
          for (const l of log) {
            if (l.worker === 'taker' && l.event === 'M+' && !first.has(l.fields[0]!)) first.set(l.fields[0]!, l.seq);
          }
          return ids.every((id) => first.has(id)) && first;
        },
        60_000,
        'the taker stepping every agent',
      );
      const tookOverAt = Date.now();
      frozen.signal('SIGCONT');
      const continuedAt = readLog(logFile).length;

      // The frozen worker, continued, aborts the hold calls it was running.
      await waitForLog(
        logFile,
        (log) =>
          [...holding].every((id) =>
            log.some((l) => l.worker === 'frozen' && l.event === 'H!' && l.fields[0] === id && l.seq >= continuedAt),
          ),
        30_000,
        'the continued worker aborting its hold calls',
      );
      const abortedAt = Date.now();

      const observer = await openObserver(db);
      try {
        await pollUntil(
          async () => {
            const rows = await allAgents(observer);
            const stopped = rows.filter((r: AgentRow) => ['FAILED', 'PAUSED', 'OUT_OF_CREDITS'].includes(r.status));
            if (stopped.length)
              throw new Error(`agents stopped: ${stopped.map((r) => `${r.goal}: ${r.status_message}`).join('; ')}`);
            return rows.filter((r) => r.status === 'COMPLETED').length;
          },
          (n) => n === AGENTS,
          120_000,
          'every agent COMPLETED',
        );
        const completedAt = Date.now();
        for (const w of [frozen, taker]) {
          w.signal('SIGTERM');
          expect((await w.exited).code, w.stderr()).toBe(0);
        }
        const log = readLog(logFile);

        // In the log: once the taker had an agent, the frozen worker started nothing of it on its old lease. It may
        // claim the agent again later, under a new lease (the taker, slowed down, let a lease run out): then it goes on
        // from where the taker was. So, per agent from the takeover on, the steps whose model calls start never go
        // back (a step redone after an abort starts again at the same number), and the frozen worker starts no hold.
        for (const id of ids) {
          const after = log.filter((l) => l.fields[0] === id && l.seq > firstTakerCall.get(id)!);
          const steps = after.filter((l) => l.event === 'M+').map((l) => Number(l.fields[1]));
          const back = steps.findIndex((step, k) => k > 0 && step < steps[k - 1]!);
          expect(back, `the frozen worker went on with ${id} on its old lease:\n${tail(log)}`).toBe(-1);
          expect(
            after.filter((l) => l.worker === 'frozen' && l.event === 'H+'),
            `the frozen worker started a hold of ${id} after the takeover`,
          ).toEqual([]);
        }
        expect(
          log.filter((l) => l.worker === 'taker' && l.event === 'H+'),
          'the taker ran a hold call again',
        ).toEqual([]);
        expect(
          log.filter((l) => l.worker === 'taker' && l.event === 'E'),
          'runtime errors in the taker',
        ).toEqual([]);
        // While the frozen worker was alive, its leases kept the taker off its agents.
        expect(
          log.filter((l) => l.worker === 'taker' && l.event === 'M+' && l.seq < stopSeq),
          'the taker stepped an agent a live worker held',
        ).toEqual([]);

        // In the database: each agent's turns are the script (none repeated or lost), the frozen worker's first and then
        // the taker's. After the handover the frozen worker may commit turns again only under a lease it claimed anew
        // (the taker, slowed down, let one run out): the log check above refuses any step on its old lease.
        const callsByAgent = new Map<string, Awaited<ReturnType<typeof expectScripted>>['calls']>();
        let frozenTurns = 0;
        for (const agent of await allAgents(observer)) {
          const { authors, calls } = await expectScripted(observer, agent);
          callsByAgent.set(agent.agent_id, calls);
          const handover = authors.indexOf('taker');
          expect(handover, `${agent.goal}: the taker committed no turn`).toBeGreaterThan(0);
          expect(
            authors.slice(0, handover).every((a) => a === 'frozen'),
            agent.goal,
          ).toBe(true);
          frozenTurns += handover;
          if (holding.has(agent.agent_id)) {
            const hold = calls.find((c) => c.name === HOLD_TOOL)!;
            expect(hold.result, `${agent.goal}: the hold call the frozen worker ran`).toMatch(UNKNOWN_OUTCOME_RE);
          }
        }
        const notes = expectNotesAtMostOnce(log, callsByAgent);
        await expectLedgerSettled(observer);

        const frozenErrors = log.filter((l) => l.worker === 'frozen' && l.event === 'E' && l.seq >= continuedAt);
        console.log(
          [
            `fencing: ${AGENTS} agents (${HOLDING} holding a call), lease ${LEASE_MS} ms, gone after ${goneAfterMs ?? 'default'} ms`,
            `  frozen after ${((stoppedAt - started) / 1000).toFixed(1)} s at model turns ` +
              `${Math.min(...progressAtStop.values())}-${Math.max(...progressAtStop.values())}; the taker had every agent ` +
              `${tookOverAt - stoppedAt} ms later; holds aborted ${abortedAt - tookOverAt} ms after SIGCONT; all completed ` +
              `${((completedAt - tookOverAt) / 1000).toFixed(1)} s after SIGCONT`,
            `  turns committed by the frozen worker ${frozenTurns}; notes ${notes.notes}, unknown outcomes ` +
              `${notes.unknownRan} taken effect / ${notes.unknownNotRun} not`,
            `  errors the continued worker reported: ${frozenErrors.length}${frozenErrors.length ? ` (first: ${frozenErrors[0]!.fields.join(' ')})` : ''}`,
          ].join('\n'),
        );
      } finally {
        await observer.close();
      }
    },
    300_000,
  );
});
