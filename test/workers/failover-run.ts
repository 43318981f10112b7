/**
 * The failover scenario: three worker processes drive scripted agents on one
 * PostgreSQL schema, each agent taking several steps that call the non-idempotent `note` tool. One worker is SIGKILLed
 * mid-run. The other two take its agents over once it is declared gone, and then:
 * - every agent completes, and its transcript is exactly its script (no public message duplicated or lost, the
 *   model's log contiguous, tokens exact);
 * - no turn of an agent that a survivor stepped after the victim's death was committed by the victim (fencing);
 * - every note call took effect at most once (by call and by step), a call the dead worker had started is reported to
 *   the model as an unknown outcome and never run again, and every other call took effect exactly once;
 * - as of the sweep that declared the victim gone, none of its holds is left (the account's `reserved` is what live
 *   workers hold); at the end the ledger adds up to the balance with nothing reserved, and the balance, sampled all
 *   along, never went below zero.
 * `failover.test.ts` runs it on a quiet machine, `failover-contention.test.ts` under busy loops on every core.
 */
import pg from 'pg';
import { expect } from 'vitest';
import type { StorageAdapter, ToolCallRow } from 'agentry-runtime';
import { newSchemaName, urlWithSchema } from '../support/postgres.js';
import { agentGoal, readLog, type LogLine } from './script.js';
import {
  allAgents,
  createAgents,
  expectLedgerSettled,
  expectNotesAtMostOnce,
  expectScripted,
  forEachConcurrently,
  openObserver,
  pollUntil,
  startWorker,
  waitForLog,
  type WorkerProcess,
} from './harness.js';

/** 3 to 5 note steps each, then the answer. */
const stepsOf = (i: number) => 3 + (i % 3);
const CREDITS = 1_000;
const LEASE_MS = 2_000;
const RUN_DEADLINE_MS = 300_000;

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

/** What the database says of the victim's holds and of the account's `reserved`, in one snapshot. */
async function holdsSnapshot(
  db: string,
  schema: string,
  victimId: string,
): Promise<{ victimRow: boolean; victimHolds: number; reserved: number; rowsHeld: number; rows: string }> {
  const client = new pg.Client({ connectionString: db.replace(/[?&]schema=[^&]*/, '') });
  await client.connect();
  try {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    const q = (sql: string, params: unknown[] = []) => client.query(sql.replaceAll('$S', `"${schema}"`), params);
    const victimRow = (await q('SELECT 1 FROM $S.workers WHERE worker_id = $1', [victimId])).rowCount! > 0;
    const holds = (await q('SELECT id, worker_id, agent_id, amount::bigint AS amount FROM $S.reservations'))
      .rows as Array<{
      id: string;
      worker_id: string | null;
      agent_id: string;
      amount: string;
    }>;
    const reserved = Number((await q("SELECT reserved FROM $S.accounts WHERE id = 'local'")).rows[0]?.reserved ?? 0);
    await client.query('COMMIT');
    return {
      victimRow,
      victimHolds: holds.filter((h) => h.worker_id === victimId).length,
      reserved,
      rowsHeld: holds.reduce((s, h) => s + Number(h.amount), 0),
      rows: JSON.stringify(holds),
    };
  } finally {
    await client.end();
  }
}

export interface FailoverRun {
  agents: number;
  /** Scratch directory for the shared log. */
  dir: string;
  /** Schemas created, for the caller to drop. */
  schemas: string[];
  /** A word for the log lines and the schema's name. */
  label: string;
}

export async function runFailover({ agents: AGENTS, dir, schemas, label }: FailoverRun): Promise<void> {
  const TOTAL_NOTES = Array.from({ length: AGENTS }, (_, i) => stepsOf(i)).reduce((a, b) => a + b, 0);
  const started = Date.now();
  const schema = newSchemaName(`agentry_failover_${label}`);
  schemas.push(schema);
  const db = urlWithSchema(schema);
  const logFile = `${dir}/failover-${schema}.log`;
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
    const victimId = /^ready \S+ (\S+)$/.exec(victim.lines.find((l) => l.startsWith('ready ')) ?? '')?.[1];
    expect(victimId, 'the victim printed its worker id').toBeDefined();

    // The sweep that declares the victim gone (its row deleted) drops its holds and float in the same transaction: in
    // the first snapshot without its row, none of its holds is left, and `reserved` is what the holds of live workers
    // sum to (a reservation that outlives its worker would strand budget).
    const swept = await pollUntil(
      () => holdsSnapshot(db, schema, victimId!),
      (h) => !h.victimRow,
      RUN_DEADLINE_MS,
      'the victim declared gone (its workers row swept)',
    );
    const sweptAt = Date.now();
    expect(swept.victimHolds, swept.rows).toBe(0);
    expect(swept.reserved, swept.rows).toBe(swept.rowsHeld);

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
    // Per agent, the first turn a survivor started after the victim's last line: from that turn on, no turn may be the
    // victim's (a commit of it still on its way when it died is fenced out by the survivor's newer lease epoch). Turns
    // before it may be anyone's: under load a live worker can lose a lease to another and get the agent back later.
    const survivorFrom = new Map<string, number>();
    for (const l of log) {
      if (l.event === 'M+' && l.seq > lastVictimLine && l.worker !== victim.name && !survivorFrom.has(l.fields[0]!)) {
        survivorFrom.set(l.fields[0]!, Number(l.fields[1]));
      }
    }
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
      if (authors.includes(victim.name) && authors.some((a) => a !== victim.name)) takenOver++;
      const from = survivorFrom.get(agent.agent_id);
      if (from !== undefined) {
        expect(authors.slice(from), `${agent.goal}: the victim committed after a survivor stepped`).not.toContain(
          victim.name,
        );
      }
    });
    expect(takenOver).toBeGreaterThan(0);
    const notes = expectNotesAtMostOnce(log, callsByAgent);
    const end = await holdsSnapshot(db, schema, victimId!);
    expect(end.reserved, `holds left after the survivors closed: ${end.rows}`).toBe(0);
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
        `  in flight in the victim at its death: ${victimInFlight.models.length} model calls; agents taken over: ` +
          `${takenOver}; the victim swept (its holds with it) ${sweptAt - killedAt} ms after the kill`,
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
}
