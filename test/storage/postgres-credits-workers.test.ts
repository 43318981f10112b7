/**
 * Credits across workers: three PostgreSQL adapters on one schema are three workers, each with its own
 * credit gate, as three runtime processes would have. Under contention for one account with a tight balance the
 * balance never goes below zero, no hold is ever short (every charge is its full cost), the ledger adds up, `reserved`
 * returns to 0, and every reservation ends (granted or refused because the settled balance cannot pay it). A
 * reservation held back by another worker's holds is granted when they end, by the bus's word or, with a bus that
 * loses everything, by the poll. A gone worker's holds and float are dropped by `releaseHoldsOfWorkers` and a live
 * worker's are never touched.
 * Needs PostgreSQL like postgres.test.ts (AGENTRY_TEST_POSTGRES_URL; fails instead of skipping under AGENTRY_CI_STRICT=1).
 */
import { afterEach, describe, expect, it } from 'vitest';
import pg from 'pg';
import { CreditGate, type Reservation } from '../../src/core/credit-gate.js';
import type { AgentRow, ReservationRequest, Settlement, StorageAdapter } from '../../src/storage/adapter.js';
import { releaseHoldsOfGoneWorkersIn, releaseHoldsOfWorkers } from '../../src/storage/postgres/accounts.js';
import type { Query } from '../../src/storage/postgres/db.js';
import { postgresStorage } from '../../src/storage/postgres/index.js';
import type { WorkerBus, WorkerTopic } from '../../src/storage/workers.js';
import { dropSchemas, newSchemaName, POSTGRES_TEST_URL, postgresUnreachable } from '../support/postgres.js';
import { eventually } from '../support/runtime.js';
import { skippable } from '../support/skip.js';

const url = POSTGRES_TEST_URL;
const strict = process.env.AGENTRY_CI_STRICT === '1';
const unreachable = await postgresUnreachable();
const reachable = unreachable === null;
const at = '2026-01-01T00:00:00.000Z';

const schemas: string[] = [];
const cleanups: Array<() => Promise<unknown>> = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
  await dropSchemas(schemas.splice(0));
});

/**
 * The workers' bus within one test process: every publish reaches every subscriber (the publisher's too) in a batch
 * on a later turn, as the PostgreSQL bus does. `lossy` drops every word: what is left is the gates' poll.
 */
function localBus(lossy: boolean): WorkerBus & { said: string[] } {
  const listeners = new Map<WorkerTopic, Set<(payloads: string[] | null) => void>>();
  const said: string[] = [];
  return {
    said,
    publish(topic, payload) {
      said.push(payload);
      if (lossy) return;
      setImmediate(() => {
        for (const listener of listeners.get(topic) ?? []) listener([payload]);
      });
    },
    subscribe(topic, listener) {
      let set = listeners.get(topic);
      if (!set) listeners.set(topic, (set = new Set()));
      set.add(listener);
      return () => set.delete(listener);
    },
  };
}

interface Worker {
  storage: StorageAdapter;
  gate: CreditGate;
  /** How many times this worker asked the database (or its float) for a hold. */
  asked: number;
}

async function openWorkers(schema: string, n: number, bus: WorkerBus): Promise<Worker[]> {
  const workers: Worker[] = [];
  for (let i = 0; i < n; i++) {
    const storage = postgresStorage({ connectionString: url, schema });
    await storage.init();
    const worker: Worker = { storage, gate: new CreditGate(storage, { bus, pollMs: 40 }), asked: 0 };
    const reserve = storage.reserve.bind(storage);
    storage.reserve = (r) => {
      worker.asked++;
      return reserve(r);
    };
    cleanups.push(async () => {
      worker.gate.close();
      await storage.close();
    });
    workers.push(worker);
  }
  return workers;
}

/** A client on the schema, for what a test reads behind the adapters' backs and for the sweeper's functions. */
async function sql(schema: string): Promise<{ q: Query; client: pg.Client }> {
  const client = new pg.Client({ connectionString: url, options: `-c search_path=${schema}` });
  await client.connect();
  cleanups.push(() => client.end());
  const q: Query = async (text, params) => (await client.query(text, params)).rows as never;
  return { q, client };
}

function agent(id: string, root: string, extra: Partial<AgentRow> = {}): AgentRow {
  return {
    agent_id: id,
    account_id: 'acct',
    parent_id: id === root ? null : root,
    root_id: root,
    spawn_key: id === root ? null : `k:${id}`,
    goal: `goal of ${id}`,
    model: 'm',
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
    started: false,
    active_ms: 0,
    active_since: null,
    plan: null,
    spec: null,
    created_at: at,
    updated_at: at,
    ...extra,
  };
}

/** The account, the uncapped tree `root` (its holds come from floats) and the capped tree `capped` (hold rows). */
async function setUp(s: StorageAdapter, balance: number, cap: number, children: string[]): Promise<void> {
  await s.createAccount({ id: 'acct', name: 'A', subscription_active: true, balance, reserved: 0, created_at: at });
  await s.insertAgents(
    [
      agent('root', 'root'),
      agent('capped', 'capped', { max_credits: cap }),
      ...children.map((id) => agent(id, id.startsWith('k') ? 'capped' : 'root')),
    ],
    [],
    [],
  );
}

const request = (id: string, agentId: string, amount: number): ReservationRequest => ({
  id,
  account_id: 'acct',
  agent_id: agentId,
  root_id: agentId.startsWith('k') ? 'capped' : 'root',
  amount,
});

function settlement(r: ReservationRequest, cost: number): Settlement {
  return {
    reservation_id: r.id,
    root_id: r.root_id,
    ledger: {
      account_id: 'acct',
      agent_id: r.agent_id,
      kind: 'model',
      item: 'm',
      tokens_in: 1,
      tokens_out: 1,
      cost,
      created_at: at,
    },
  };
}

/** Balance, the account's `reserved` and the sum of its hold rows, read in one snapshot. */
async function sums(q: Query): Promise<{ balance: number; reserved: number; rows: number; ledger: number }> {
  const [row] = await q<{ balance: string; reserved: string; rows: string; ledger: string }>(
    `SELECT balance, reserved,
       (SELECT coalesce(sum(amount), 0) FROM reservations WHERE account_id = 'acct') AS rows,
       (SELECT coalesce(sum(amount), 0) FROM ledger WHERE account_id = 'acct') AS ledger
     FROM accounts WHERE id = 'acct'`,
  );
  return {
    balance: Number(row!.balance),
    reserved: Number(row!.reserved),
    rows: Number(row!.rows),
    ledger: Number(row!.ledger),
  };
}

async function treeSums(q: Query, root: string): Promise<{ spent: number; reserved: number; cap: number | null }> {
  const [row] = await q<{ tree_spent: string; tree_reserved: string; max_credits: string | null }>(
    'SELECT tree_spent, tree_reserved, max_credits FROM agents WHERE agent_id = $1',
    [root],
  );
  return {
    spent: Number(row!.tree_spent),
    reserved: Number(row!.tree_reserved),
    cap: row!.max_credits === null ? null : Number(row!.max_credits),
  };
}

/** Registers a worker's row as the lead's coordination does: live (heartbeat now) or gone (an hour old). */
async function registerWorker(q: Query, workerId: string, live: boolean): Promise<void> {
  await q(
    `INSERT INTO workers (worker_id, host, pid, heartbeat_at) VALUES ($1, 'test', 1, now() - $2::bigint * interval '1 second')
     ON CONFLICT (worker_id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at`,
    [workerId, live ? 0 : 3_600],
  );
}

const holderOf = async (q: Query, reservationId: string) =>
  (await q<{ worker_id: string }>('SELECT worker_id FROM reservations WHERE id = $1', [reservationId]))[0]!.worker_id;

describe.skipIf(!reachable && !strict)(
  skippable('Credits across workers on PostgreSQL', !strict && unreachable),
  () => {
    it.each([
      ['a bus', false],
      ['a bus that loses every word (the poll alone)', true],
    ])(
      'keeps three workers exact under contention for one account with %s',
      async (_name, lossy) => {
        const schema = newSchemaName('agentry_credits');
        schemas.push(schema);
        const bus = localBus(lossy);
        const workers = await openWorkers(schema, 3, bus);
        const callers = 6;
        const agents = workers.flatMap((_, w) =>
          Array.from({ length: callers }, (_, c) => (c % 3 === 0 ? `k${w}_${c}` : `c${w}_${c}`)),
        );
        const balance = 60_000;
        const cap = 15_000;
        await setUp(workers[0]!.storage, balance, cap, agents);
        const { q } = await sql(schema);

        // A watcher checks the invariants while the workers run: never below zero, holds never above the balance,
        // the account's `reserved` always the sum of its hold rows.
        let running = true;
        const violations: string[] = [];
        const watcher = (async () => {
          while (running) {
            const s = await sums(q);
            if (s.balance < 0) violations.push(`balance ${s.balance}`);
            if (s.reserved > s.balance) violations.push(`reserved ${s.reserved} > balance ${s.balance}`);
            if (s.reserved !== s.rows) violations.push(`reserved ${s.reserved} but rows ${s.rows}`);
            if (s.ledger !== s.balance) violations.push(`ledger ${s.ledger} but balance ${s.balance}`);
          }
        })();

        let seed = lossy ? 7 : 3;
        const random = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31; // reproducible
        const shortCharges: string[] = [];
        const badRefusals: string[] = [];
        let granted = 0;
        let refused = 0;
        let remoteWaits = 0;
        let waits = 0;
        const runCaller = async (worker: Worker, agentId: string) => {
          for (let call = 0; call < 40; call++) {
            const amount = 1_000 + Math.floor(random() * 3_000);
            const r = request(`${agentId}-${call}`, agentId, amount);
            const result: Reservation = await worker.gate.reserve(r, {
              onWait: (heldBy) => {
                waits++;
                if (heldBy === 0) remoteWaits++;
              },
            });
            if (!result.granted) {
              refused++;
              // Refused only when the settled balance (or the tree's cap less its spend) cannot pay it.
              if (result.payable >= amount) badRefusals.push(`${r.id}: ${amount} refused with ${result.payable}`);
              return;
            }
            granted++;
            await new Promise((resolve) => setImmediate(resolve)); // the call runs; others interleave
            if (random() < 0.2) {
              await worker.gate.release(r.id);
              continue;
            }
            const cost = Math.ceil(amount * (0.3 + 0.7 * random()));
            const s = settlement(r, cost);
            const [charged] = await worker.storage.settle([s]);
            worker.gate.settled([s]);
            // A hold made sure of its credits: the charge is never cut short by the balance.
            if (charged !== cost) shortCharges.push(`${r.id}: charged ${charged} of ${cost}`);
          }
        };
        await Promise.all(
          workers.flatMap((worker, w) =>
            agents.filter((id) => id.includes(`${w}_`)).map((id) => runCaller(worker, id)),
          ),
        );
        running = false;
        await watcher;

        expect(violations).toEqual([]);
        expect(shortCharges).toEqual([]);
        expect(badRefusals).toEqual([]);
        // Every reservation ended: none is left waiting while credits are there.
        for (const w of workers) expect(w.gate.waitingCount).toBe(0);
        // The workers did contend (waits for each other's holds) and the balance ran out (refusals).
        expect(waits).toBeGreaterThan(0);
        expect(remoteWaits).toBeGreaterThan(0);
        expect(refused).toBeGreaterThan(0);
        expect(granted).toBeGreaterThan(10);

        // Floats nobody draws on go back: `reserved` returns to 0, and the ledger adds up to the balance.
        await eventually(async () => (await sums(q)).reserved === 0, 10_000, 'reserved back to 0');
        const end = await sums(q);
        expect(end.balance).toBeGreaterThanOrEqual(0);
        expect(end.ledger).toBe(end.balance);
        expect(end.balance).toBeLessThan(4_000); // drained: an uncapped caller was refused for want of balance
        expect(await treeSums(q, 'root')).toMatchObject({ reserved: 0 });
        const capped = await treeSums(q, 'capped');
        expect(capped.reserved).toBe(0);
        expect(capped.spent).toBeLessThanOrEqual(cap);
        expect(await q('SELECT id FROM reservations')).toEqual([]);
        if (!lossy) expect(bus.said.some((p) => p.startsWith('free:'))).toBe(true);
      },
      120_000,
    );

    it.each([
      ['a bus', false],
      ['a bus that loses every word (the poll alone)', true],
    ])(
      "grants a reservation held back by another worker's holds when they end, with %s",
      async (_name, lossy) => {
        const schema = newSchemaName('agentry_credits');
        schemas.push(schema);
        const bus = localBus(lossy);
        const [a, b] = await openWorkers(schema, 2, bus);
        await setUp(a!.storage, 1_000, 1_000, ['c0', 'c1']);
        const { q } = await sql(schema);

        expect(await a!.gate.reserve(request('a1', 'c0', 900))).toEqual({ granted: true });
        let told: number | undefined;
        let outcome: Reservation | undefined;
        const waiting = b!.gate
          .reserve(request('b1', 'c1', 500), { onWait: (heldBy) => (told = heldBy) })
          .then((r) => (outcome = r));
        // B's gate knows no hold of its own in the way, yet waits: A's hold is in the database's `reserved`.
        await eventually(() => told !== undefined, 5_000, 'B waits');
        expect(told).toBe(0);
        expect(bus.said).toContain('wait:acct');
        // B keeps asking (the poll) and keeps waiting while A holds the credits.
        const asked = b!.asked;
        await eventually(() => b!.asked >= asked + 3, 5_000, 'B asks again');
        expect(outcome).toBeUndefined();
        expect(b!.gate.waitingCount).toBe(1);

        await a!.gate.release('a1');
        await waiting;
        expect(outcome).toEqual({ granted: true });
        expect((await sums(q)).reserved).toBeLessThanOrEqual(1_000);
        await b!.gate.release('b1');
        await eventually(async () => (await sums(q)).reserved === 0, 10_000, 'reserved back to 0');
      },
      60_000,
    );

    it("drops a gone worker's holds and float, never a live worker's, and a waiter gets the credits", async () => {
      const schema = newSchemaName('agentry_credits');
      schemas.push(schema);
      const bus = localBus(false);
      const [a, b, c] = await openWorkers(schema, 3, bus);
      await setUp(a!.storage, 1_000, 600, ['c0', 'c1', 'c2', 'k0', 'k1', 'k2']);
      const { q } = await sql(schema);

      // A: a float-carved hold (its float takes a quarter of the balance: 250) and a capped tree's hold row.
      expect(await a!.gate.reserve(request('a-c0', 'c0', 200))).toEqual({ granted: true });
      expect(await a!.gate.reserve(request('a-k1', 'k1', 100))).toEqual({ granted: true });
      // C: two hold rows of the capped tree and a float that its hold takes whole (a quarter would be less).
      expect(await c!.gate.reserve(request('c-k0', 'k0', 300))).toEqual({ granted: true });
      expect(await c!.gate.reserve(request('c-k2', 'k2', 100))).toEqual({ granted: true });
      expect(await c!.gate.reserve(request('c-c1', 'c1', 100))).toEqual({ granted: true });
      const workerA = await holderOf(q, 'a-k1');
      const workerC = await holderOf(q, 'c-k0');
      expect(await holderOf(q, `float:${workerA}:acct`)).toBe(workerA);
      expect(await holderOf(q, `float:${workerC}:acct`)).toBe(workerC);
      expect(await sums(q)).toMatchObject({ reserved: 850, rows: 850 });
      expect(await treeSums(q, 'capped')).toMatchObject({ reserved: 500 });
      await registerWorker(q, workerA, true);
      await registerWorker(q, workerC, true);

      // A hold of no worker (an exclusive runner's, or from before migration 5): what a starting worker drops; every
      // live worker's hold stays.
      await q(
        `INSERT INTO reservations (id, account_id, agent_id, root_id, amount) VALUES ('old', 'acct', 'c2', 'root', 50)`,
      );
      await q(`UPDATE accounts SET reserved = reserved + 50 WHERE id = 'acct'`);
      expect(await releaseHoldsOfGoneWorkersIn(q, workerA, 15_000)).toBe(1);
      expect(await sums(q)).toMatchObject({ reserved: 850, rows: 850 });

      // B waits for 650: only 150 are available, the rest held by A and C.
      let outcome: Reservation | undefined;
      let told: number | undefined;
      const waiting = b!.gate
        .reserve(request('b-c2', 'c2', 650), { onWait: (heldBy) => (told = heldBy) })
        .then((r) => (outcome = r));
      await eventually(() => told !== undefined, 5_000, 'B waits');
      // A and C heard that B waits: their floats' unused parts (A's 50) went back.
      await eventually(async () => (await sums(q)).reserved === 800, 5_000, "A's unused float back");

      // C is gone (its heartbeat is an hour old). B, recovering agents, drops C's hold of k0 but not A's of k1 (A is
      // live: its calls are its own to settle or release).
      await registerWorker(q, workerC, false);
      expect(await b!.storage.releaseAgentReservations(['k0', 'k1'])).toBe(1);
      expect(await q('SELECT id FROM reservations WHERE agent_id IN ($1, $2) ORDER BY id', ['k0', 'k1'])).toEqual([
        { id: 'a-k1' },
      ]);
      expect(await sums(q)).toMatchObject({ reserved: 500, rows: 500 });
      expect(await treeSums(q, 'capped')).toMatchObject({ reserved: 200 });
      const asked = b!.asked;
      await eventually(() => b!.asked >= asked + 2, 5_000, 'B asks again');
      expect(outcome).toBeUndefined(); // 500 available: still short

      // The sweeper drops the rest of C: its float and its other hold row, sums and all. B's poll sees the credits.
      await q('BEGIN');
      expect(await releaseHoldsOfWorkers(q, [workerC])).toBe(2);
      await q('COMMIT');
      expect(await q('SELECT id FROM reservations WHERE worker_id = $1', [workerC])).toEqual([]);
      expect(await treeSums(q, 'capped')).toMatchObject({ reserved: 100 });
      await waiting;
      expect(outcome).toEqual({ granted: true });
      const s = await sums(q);
      expect(s.reserved).toBe(s.rows);
      expect(s.reserved).toBeLessThanOrEqual(1_000);

      for (const id of ['a-c0', 'a-k1']) await a!.gate.release(id);
      await b!.gate.release('b-c2');
      await eventually(async () => (await sums(q)).reserved === 0, 10_000, 'reserved back to 0');
      expect(await treeSums(q, 'capped')).toMatchObject({ reserved: 0 });
      expect((await sums(q)).balance).toBe(1_000);
    }, 60_000);
  },
);
