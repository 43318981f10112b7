/**
 * Due timers fire once across PostgreSQL workers: 1,000 monitor-check timers on 3 workers
 * (3 TimerService instances, each with its own postgresStorage() on one schema, so 3 worker ids) and a fake clock.
 * Each due check runs exactly once; then one worker dies mid-run (its handlers never finish and its pool ends, so it
 * renews no claim) and the timers it had claimed are run once by the others after the claim's lease. Also: a claim
 * lost while a handler runs is reported and the handler aborted, and only a gone worker's queued messages become
 * `unknown`. Needs PostgreSQL like postgres.test.ts (AGENTRY_TEST_POSTGRES_URL; fails instead of skipping under
 * AGENTRY_CI_STRICT=1).
 */
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { fakeClock } from 'agentry-runtime/testing';
import { TimerService, monitorTimerId } from '../../src/core/timers.js';
import type { AgentRow, MonitorRow, OutboxRow, StorageAdapter, TimerRow } from '../../src/storage/adapter.js';
import type { Query } from '../../src/storage/postgres/db.js';
import { markOutboxOfWorkersUnknown } from '../../src/storage/postgres/extras.js';
import { postgresStorage } from '../../src/storage/postgres/index.js';
import { dropSchemas, newSchemaName, POSTGRES_TEST_URL, postgresUnreachable } from '../support/postgres.js';
import { deferred, eventually } from '../support/runtime.js';
import { skippable } from '../support/skip.js';

const url = POSTGRES_TEST_URL;
const strict = process.env.AGENTRY_CI_STRICT === '1';
const unreachable = await postgresUnreachable();
const reachable = unreachable === null;

const T0 = Date.parse('2026-01-01T00:00:00.000Z');
const INTERVAL_MS = 60_000;
const ACCT = 'acct';
const iso = (ms: number) => new Date(ms).toISOString();

const schemas: string[] = [];
const cleanups: Array<() => Promise<unknown>> = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
  await dropSchemas(schemas.splice(0));
});

function agentRow(id: string): AgentRow {
  return {
    agent_id: id,
    account_id: ACCT,
    parent_id: null,
    root_id: id,
    spawn_key: null,
    goal: `goal of ${id}`,
    model: 'svc-1-lite',
    status: 'ACTIVE',
    progress: 0,
    status_message: '',
    token_count: 0,
    message_count: 0,
    credits_spent: 0,
    sub_agent_count: 0,
    max_credits: null,
    tree_spent: 0,
    tree_reserved: 0,
    step_count: 0,
    started: true,
    active_ms: 0,
    active_since: iso(T0),
    plan: null,
    spec: null,
    created_at: iso(T0),
    updated_at: iso(T0),
    trace_context: null,
  };
}

function monitorRow(id: string, agentId: string): MonitorRow {
  return {
    monitor_id: id,
    agent_id: agentId,
    url: `https://example.com/${id}`,
    selector: null,
    ignore_selectors: '[]',
    condition: null,
    interval_s: INTERVAL_MS / 1000,
    until: null,
    status: 'active',
    created_at: iso(T0),
    last_checked_at: iso(T0),
    next_check_at: iso(T0 + INTERVAL_MS),
    changes: 0,
    last_error: null,
    failures: 0,
    etag: null,
    last_modified: null,
    content_sha256: null,
    content: null,
    render: false,
  };
}

const checkTimer = (monitorId: string, agentId: string, dueAt: number): TimerRow => ({
  timer_id: monitorTimerId(monitorId),
  agent_id: agentId,
  due_at: dueAt,
  kind: 'monitor.check',
  payload: JSON.stringify({ monitor_id: monitorId }),
});

/** A schema and `n` adapters (workers) on it, the first one having created the tables. */
async function workersOn(n: number, leaseMs = 1_000): Promise<{ schema: string; storages: StorageAdapter[] }> {
  const schema = newSchemaName('agentry_tw');
  schemas.push(schema);
  const storages: StorageAdapter[] = [];
  for (let i = 0; i < n; i++) {
    const storage = postgresStorage({ connectionString: url, schema, leaseMs });
    await storage.init();
    cleanups.push(() => storage.close());
    storages.push(storage);
  }
  return { schema, storages };
}

/** A client on the schema, as a {@link Query} (what the sweeper's transaction gives). */
async function sqlOn(schema: string): Promise<Query> {
  const client = new pg.Client({ connectionString: url, options: `-c search_path=${schema}` });
  await client.connect();
  cleanups.push(() => client.end());
  return (async (sql: string, params?: unknown[]) => (await client.query(sql, params)).rows) as Query;
}

describe.skipIf(!reachable && !strict)(skippable('PostgreSQL timers across workers', !strict && unreachable), () => {
  it('fires each due check of 1,000 monitors once across 3 workers, also after a worker dies mid-run', async () => {
    const { schema, storages } = await workersOn(3);
    const [s1] = storages as [StorageAdapter, StorageAdapter, StorageAdapter];
    await s1.createAccount({
      id: ACCT,
      name: 'Account',
      subscription_active: true,
      balance: 0,
      reserved: 0,
      created_at: iso(T0),
    });
    const N = 1_000;
    const ids = Array.from({ length: N }, (_, i) => `m${String(i).padStart(4, '0')}`);
    await s1.insertAgents(
      ids.map((id) => agentRow(`a-${id}`)),
      [],
      [],
    );
    for (let i = 0; i < N; i += 50) {
      await Promise.all(
        ids
          .slice(i, i + 50)
          .map((id) => s1.insertMonitor(monitorRow(id, `a-${id}`), checkTimer(id, `a-${id}`, T0 + INTERVAL_MS))),
      );
    }

    const clock = fakeClock(T0);
    /** Checks started and finished by the live workers, per `timer@due`; started per worker. */
    const started = new Map<string, number>();
    const finished = new Map<string, number>();
    const startedBy = [0, 0, 0];
    /** Checks the dying worker started and never finished. */
    const hung = new Set<string>();
    const never = deferred<boolean>();
    const gate = deferred();
    const errors: unknown[][] = [[], [], []];
    let dying = false;

    const services = storages.map((storage, w) => {
      // A small lane per worker, so that two workers blocked on the gate hold at most 2 × 120 claims: the third
      // one then surely claims some of the 1,000 checks of round 2 (and dies with them).
      const timers = new TimerService(storage, clock, {
        concurrency: 20,
        batchSize: 50,
        sharedPollMs: 100,
        onError: (error) => errors[w]!.push(error),
      });
      timers.register('monitor.check', async (timer) => {
        const key = `${timer.timer_id}@${timer.due_at}`;
        const round = (timer.due_at - T0) / INTERVAL_MS;
        if (w === 2 && dying) {
          hung.add(key);
          return never.promise; // a dead process's handler: never ends
        }
        if (round === 2) await gate.promise;
        started.set(key, (started.get(key) ?? 0) + 1);
        startedBy[w]!++;
        // What the monitor service does: read the row, plan the next check from now, in one write with its timer.
        const { monitor_id } = JSON.parse(timer.payload) as { monitor_id: string };
        const monitor = (await storage.getMonitor(monitor_id))!;
        const now = clock.now();
        const next = now + INTERVAL_MS;
        const moved = await storage.updateMonitor(
          { ...monitor, last_checked_at: iso(now), next_check_at: iso(next) },
          { timer: { ...timer, due_at: next } },
        );
        finished.set(key, (finished.get(key) ?? 0) + 1);
        return moved;
      });
      timers.start();
      return timers;
    });
    cleanups.push(async () => {
      never.resolve(true);
      gate.resolve();
      await Promise.all(services.map((t) => t.close()));
    });

    const keysOf = (round: number) => ids.map((id) => `${monitorTimerId(id)}@${T0 + round * INTERVAL_MS}`);
    const doneIn = (round: number) => keysOf(round).filter((k) => finished.has(k)).length;
    const once = (round: number) => keysOf(round).filter((k) => started.get(k) === 1 && finished.get(k) === 1);

    // Round 1: three workers.
    let t = performance.now();
    clock.advance(INTERVAL_MS);
    await eventually(
      () => doneIn(1) === N,
      60_000,
      () => `round 1: ${doneIn(1)} of ${N} checks`,
    );
    const round1Ms = performance.now() - t;
    expect(once(1)).toHaveLength(N);
    expect(startedBy.every((n) => n > 0)).toBe(true);

    // Round 2: worker 3 dies with the checks it claimed (its handlers never end, its pool goes away). Workers 1 and
    // 2 wait on the gate until it holds some, so it surely does.
    dying = true;
    t = performance.now();
    clock.advance(INTERVAL_MS);
    await eventually(() => hung.size > 0, 30_000, 'the dying worker to claim a check');
    await storages[2]!.close(); // no renewal any more: its claims expire after the lease (1 s)
    gate.resolve();
    await eventually(
      () => doneIn(2) === N,
      60_000,
      () => `round 2: ${doneIn(2)} of ${N} checks`,
    );
    const round2Ms = performance.now() - t;
    expect(hung.size).toBeGreaterThan(0);
    expect(once(2)).toHaveLength(N); // the dead worker's checks included, each run once by the others
    expect([...hung].every((k) => finished.get(k) === 1)).toBe(true);

    // Round 3: the two workers left.
    t = performance.now();
    clock.advance(INTERVAL_MS);
    await eventually(
      () => doneIn(3) === N,
      60_000,
      () => `round 3: ${doneIn(3)} of ${N} checks`,
    );
    const round3Ms = performance.now() - t;
    expect(once(3)).toHaveLength(N);
    // Nothing else ran: 3 rounds of 1,000, and every timer waits for round 4, claimed by nobody.
    expect([...started.values()].reduce((a, b) => a + b, 0)).toBe(3 * N);
    const q = await sqlOn(schema);
    // (A plain client reads BIGINT as text.)
    const rows = await q('SELECT due_at, claimed_by IS NOT NULL AS claimed, count(*) AS n FROM timers GROUP BY 1, 2');
    expect(rows).toEqual([{ due_at: String(T0 + 4 * INTERVAL_MS), claimed: false, n: String(N) }]);
    expect(errors[0]).toEqual([]);
    expect(errors[1]).toEqual([]);
    console.info(
      `1,000 monitor checks: round 1 (3 workers) ${round1Ms.toFixed(0)} ms; round 2 (a worker dies holding ` +
        `${hung.size} checks; lease 1 s) ${round2Ms.toFixed(0)} ms; round 3 (2 workers) ${round3Ms.toFixed(0)} ms`,
    );
  }, 180_000);

  it('reports a claim lost while its handler runs and aborts the handler; the other worker fires the timer', async () => {
    // A lease of 3 s: A's renewals (every second) find the loss well before B's claim would expire in turn.
    const { schema, storages } = await workersOn(2, 3_000);
    const [a, b] = storages as [StorageAdapter, StorageAdapter];
    await a.createAccount({
      id: ACCT,
      name: 'Account',
      subscription_active: true,
      balance: 0,
      reserved: 0,
      created_at: iso(T0),
    });
    await a.insertAgents([agentRow('a1')], [], []);
    await a.putTimer(checkTimer('m1', 'a1', T0));
    const clock = fakeClock(T0);
    const errors: unknown[] = [];
    const aborted = deferred<unknown>();
    const timersA = new TimerService(a, clock, { sharedPollMs: 100, onError: (e) => errors.push(e) });
    timersA.register('monitor.check', async (_timer, signal) => {
      await new Promise((resolve) => signal.addEventListener('abort', resolve));
      aborted.resolve(signal.reason);
      return false;
    });
    timersA.start();
    cleanups.push(() => timersA.close());
    const q = await sqlOn(schema);
    await eventually(async () => {
      const [row] = await q<{ claimed_by: string | null }>('SELECT claimed_by FROM timers');
      return row?.claimed_by != null;
    }, 10_000);
    // As if worker A had been frozen past its lease: its claim expires, and worker B claims the timer.
    // A's renewal of its running handler's claim may land between the expiry and B's claim (under load): expire again
    // until B has it.
    let claimedByB: Awaited<ReturnType<typeof b.listDueTimers>> = [];
    await eventually(async () => {
      await q(`UPDATE timers SET claim_expires_at = now() - interval '1 second'`);
      claimedByB = await b.listDueTimers(T0, 10);
      return claimedByB.length > 0;
    }, 10_000);
    expect(claimedByB.map((t) => t.timer_id)).toEqual([monitorTimerId('m1')]);
    expect(String(await aborted.promise)).toMatch(/claimed by another worker/);
    await eventually(() => errors.length > 0, 10_000, 'the lost claim to be reported');
    expect(String(errors[0])).toMatch(/claimed by another worker while its handler ran here/);
    // A left the row to B: still there, still B's.
    const rows = await q<{ n: string }>('SELECT count(*) AS n FROM timers');
    expect(rows[0]!.n).toBe('1');
    expect(await b.timerClaims!.renew(claimedByB)).toEqual([]);
    expect(await a.timerClaims!.renew(claimedByB)).toEqual([monitorTimerId('m1')]);
    // Rescheduled, the timer is claimed by nobody: its new time is any worker's.
    await b.putTimer(checkTimer('m1', 'a1', T0 + INTERVAL_MS));
    expect(await a.timerClaims!.renew(claimedByB)).toEqual([]);
    expect(await q('SELECT claimed_by FROM timers')).toEqual([{ claimed_by: null }]);
  }, 30_000);

  it('marks unknown only the queued messages of gone workers (and untagged ones), never a live worker’s', async () => {
    const { schema, storages } = await workersOn(3);
    const [live, gone, starting] = storages as [StorageAdapter, StorageAdapter, StorageAdapter];
    await live.createAccount({
      id: ACCT,
      name: 'Account',
      subscription_active: true,
      balance: 0,
      reserved: 0,
      created_at: iso(T0),
    });
    await live.insertAgents([agentRow('a1')], [], []);
    const attempt = (call: string): OutboxRow => ({
      message_id: `msg-${call}`,
      agent_id: 'a1',
      account_id: ACCT,
      tool_use_id: call,
      channel: 'email',
      to: 'ada@example.com',
      subject: 'Price alert',
      body_hash: `hash-${call}`,
      status: 'queued',
      provider_id: null,
      error: null,
      created_at: iso(T0),
      sent_at: null,
    });
    const limits = { agent: { max: 100, since: iso(0) }, account: { max: 100, since: iso(0) } };
    expect(await live.queueOutbox(attempt('live'), limits)).toBeNull();
    expect(await gone.queueOutbox(attempt('gone'), limits)).toBeNull();
    expect(await gone.queueOutbox(attempt('untagged'), limits)).toBeNull();
    expect(await live.queueOutbox(attempt('swept'), limits)).toBeNull();
    const q = await sqlOn(schema);
    await q(`UPDATE outbox SET worker_id = NULL WHERE tool_use_id = 'untagged'`);
    const workerOf = async (call: string) =>
      (await q<{ worker_id: string }>('SELECT worker_id FROM outbox WHERE tool_use_id = $1', [call]))[0]!.worker_id;
    const liveId = await workerOf('live');
    const goneId = await workerOf('gone');
    expect(liveId).not.toBe(goneId);
    // The live worker heart-beats now; the gone one stopped two leases ago.
    await q(`INSERT INTO workers (worker_id, host, pid) VALUES ($1, 'h', 1)`, [liveId]);
    await q(
      `INSERT INTO workers (worker_id, host, pid, heartbeat_at) VALUES ($1, 'h', 2, now() - interval '2 seconds')`,
      [goneId],
    );

    // A runtime that starts driving agents (Messenger.attach) on a third worker.
    const marked = await starting.markQueuedOutboxUnknown('crashed');
    expect(marked.map((r) => r.tool_use_id)).toEqual(['gone', 'untagged']);
    expect(marked.every((r) => r.status === 'unknown' && r.error === 'crashed')).toBe(true);
    const status = async () => Object.fromEntries((await live.listOutbox('a1')).map((r) => [r.tool_use_id, r.status]));
    expect(await status()).toEqual({ live: 'queued', gone: 'unknown', untagged: 'unknown', swept: 'queued' });

    // The sweeper, once the live worker is gone too.
    expect(await markOutboxOfWorkersUnknown(q, [], 'gone')).toEqual([]);
    const swept = await markOutboxOfWorkersUnknown(q, [liveId, goneId], 'worker gone');
    expect(swept.map((r) => [r.tool_use_id, r.status, r.error])).toEqual([
      ['live', 'unknown', 'worker gone'],
      ['swept', 'unknown', 'worker gone'],
    ]);
    expect(await status()).toEqual({ live: 'unknown', gone: 'unknown', untagged: 'unknown', swept: 'unknown' });
  }, 30_000);
});
