/**
 * Control from any process, with three worker processes on one PostgreSQL schema:
 * - pause, through process A, of an agent stepping in process B: no model call of that agent starts anywhere after the
 *   pause answered (A logs the moment `pause()` returned in the shared log, where every model call logs its start);
 *   resume through C, and the agent finishes its script exactly;
 * - delete, through A, of a tree (a parent and its children) stepping in B and C: no model call of any of its agents
 *   starts after the delete answered, and the agents are gone.
 * "After" is a window of the workers' own time: each writes a beat to the log every 100 ms, and the checks wait until
 * every worker has beaten 20 times past the answer (several heartbeats, so a missed notification is covered by the
 * polling backstop too).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { dropSchemas, newSchemaName, urlWithSchema } from '../support/postgres.js';
import { agentGoal, readLog, treeGoal, type LogLine } from './script.js';
import {
  createAgents,
  expectScripted,
  killLiveWorkers,
  modelStarts,
  openObserver,
  pollUntil,
  postgresGate,
  removeScratch,
  scratchDir,
  startWorker,
  tail,
  waitForLog,
  type WorkerProcess,
} from './harness.js';

const LEASE_MS = 2_000;
const BEAT_MS = 100;
/** Beats every worker must write past a control call's answer before the checks read the log. */
const BEATS_AFTER = 20;
/** More than a worker claims ahead (twice its run slots), so the children cannot all be held by the spawning worker. */
const CHILDREN = 40;

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

/** Waits until each of `workers` wrote `BEATS_AFTER` beats below line `after`. */
function beatsPast(file: string, workers: readonly WorkerProcess[], after: number, what: string) {
  return waitForLog(
    file,
    (log) =>
      workers.every(
        (w) => log.filter((l) => l.worker === w.name && l.event === 'B' && l.seq > after).length >= BEATS_AFTER,
      ) && log,
    30_000,
    `${BEATS_AFTER} beats of every worker after ${what}`,
  );
}

/** The line a worker wrote when its control call returned. */
function answered(log: LogLine[], command: string, agentId: string): LogLine | undefined {
  return log.find((l) => l.event === 'X' && l.fields[0] === command && l.fields[1] === agentId);
}

describe.skipIf(gate.skip)(gate.name('control of agents across worker processes on PostgreSQL'), () => {
  it('pause through A of an agent stepping in B, resume through C; delete through A of a tree stepping in B and C', async () => {
    const started = Date.now();
    const schema = newSchemaName('agentry_control');
    schemas.push(schema);
    const db = urlWithSchema(schema);
    const logFile = `${dir}/control.log`;
    const [pausedId] = await createAgents(db, [agentGoal('p', 300)], 1_000);
    // Two run slots each, so that few agents step at once on two cores.
    const config = (name: string) => ({
      name,
      db,
      log: logFile,
      leaseMs: LEASE_MS,
      heartbeatMs: 300,
      modelDelayMs: 20,
      noteDelayMs: 2,
      runSlots: 2,
      beatMs: BEAT_MS,
    });
    const workers = await Promise.all(['w1', 'w2', 'w3'].map((n) => startWorker(config(n))));
    const byName = new Map(workers.map((w) => [w.name, w]));
    const observer = await openObserver(db);
    try {
      // --- pause through A, resume through C
      const stepping = await waitForLog(
        logFile,
        (log) => {
          const starts = modelStarts(log, pausedId!);
          return starts.length >= 5 && starts.at(-1)!.worker;
        },
        60_000,
        'the agent stepping',
      );
      const b = byName.get(stepping)!;
      const [a, c] = workers.filter((w) => w !== b) as [WorkerProcess, WorkerProcess];
      await a.command('pause', pausedId!);
      const pausedLine = answered(readLog(logFile), 'pause', pausedId!)!;
      let log = await beatsPast(logFile, workers, pausedLine.seq, 'the pause');
      const lastBefore = modelStarts(log, pausedId!).filter((l) => l.seq < pausedLine.seq);
      expect(lastBefore.at(-1)?.worker, `the agent was stepping in ${b.name} (the pause went through ${a.name})`).toBe(
        b.name,
      );
      expect(
        modelStarts(log, pausedId!, pausedLine.seq),
        `model calls of the paused agent started after the pause answered:\n${tail(log)}`,
      ).toEqual([]);
      expect((await observer.getAgent(pausedId!))!.status).toBe('PAUSED');
      const turnsAtPause = (await observer.getAgent(pausedId!))!.step_count;

      await c.command('resume', pausedId!);
      const resumedLine = answered(readLog(logFile), 'resume', pausedId!)!;
      await pollUntil(
        async () => (await observer.getAgent(pausedId!))!.status,
        (s) => s === 'COMPLETED' || s === 'FAILED',
        120_000,
        'the resumed agent to finish',
      );
      const paused = (await observer.getAgent(pausedId!))!;
      await expectScripted(observer, paused);
      log = readLog(logFile);
      expect(modelStarts(log, pausedId!, resumedLine.seq).length).toBeGreaterThan(0);
      const pauseDone = Date.now();

      // --- delete through A of a tree stepping in B and C
      const parentId = (await workers[0]!.command('create', treeGoal('t', CHILDREN, 400))) as string;
      const spread = await waitForLog(
        logFile,
        (log) => {
          const children = new Set(
            log
              .filter((l) => l.event === 'M+' && l.fields[0] !== parentId && l.fields[0] !== pausedId)
              .map((l) => l.fields[0]!),
          );
          const where = new Set(log.filter((l) => l.event === 'M+' && children.has(l.fields[0]!)).map((l) => l.worker));
          return where.size >= 2 && { children: [...children], where };
        },
        60_000,
        'children of the tree stepping in at least two workers',
      );
      // A is a worker such that the tree steps in the two others.
      const deleter = workers.find((w) => workers.every((x) => x === w || spread.where.has(x.name)))!;
      const treeIds = [parentId, ...(await observer.listDescendantIds(parentId))];
      expect(treeIds).toHaveLength(CHILDREN + 1);
      for (const id of spread.children) expect(treeIds).toContain(id);
      await deleter.command('delete', parentId);
      const deletedLine = answered(readLog(logFile), 'delete', parentId)!;
      log = await beatsPast(logFile, workers, deletedLine.seq, 'the delete');
      for (const id of treeIds) {
        expect(modelStarts(log, id, deletedLine.seq), `model calls of deleted ${id} started:\n${tail(log)}`).toEqual(
          [],
        );
        expect(await observer.getAgent(id)).toBeNull();
      }
      const steppingIn = [...spread.where].filter((w) => w !== deleter.name);
      expect(steppingIn.length).toBeGreaterThanOrEqual(2);
      const notesAfter = log.filter(
        (l) => l.event === 'N' && treeIds.includes(l.fields[0]!) && l.seq > deletedLine.seq,
      ).length;

      for (const w of workers) {
        w.signal('SIGTERM');
        expect((await w.exited).code, w.stderr()).toBe(0);
      }
      expect(
        readLog(logFile).filter((l) => l.event === 'E'),
        'runtime errors',
      ).toEqual([]);
      console.log(
        [
          `control: paused through ${a.name} while stepping in ${b.name} at step ${turnsAtPause}, resumed through ` +
            `${c.name}, completed (${((pauseDone - started) / 1000).toFixed(1)} s)`,
          `  tree of ${CHILDREN} children stepping in ${[...spread.where].join(', ')}, deleted through ${deleter.name}; ` +
            `notes that landed after the delete answered (calls in flight): ${notesAfter}; total ` +
            `${((Date.now() - started) / 1000).toFixed(1)} s`,
        ].join('\n'),
      );
    } finally {
      await observer.close();
    }
  }, 300_000);
});
