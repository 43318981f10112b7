/**
 * The PostgreSQL adapter's fast writes: step commits issued together go to the server as one batch, where a
 * bad commit fails alone; a fan-out of 1,000 children is a handful of statements, not thousands; and holds carved from
 * a process's credit float are exact as callers see them, shrink the float when they settle, and leave nothing held
 * once the storage closes. Needs PostgreSQL like postgres.test.ts (fails instead of skipping under AGENTRY_CI_STRICT=1).
 */
import { afterEach, describe, expect, it } from 'vitest';
import pg from 'pg';
import { postgresStorage } from '../../src/storage/postgres/index.js';
import type { AgentRow, StepCommit, StorageAdapter } from '../../src/storage/adapter.js';
import { dropSchemas, newSchemaName, POSTGRES_TEST_URL, postgresUnreachable } from '../support/postgres.js';

const url = POSTGRES_TEST_URL;
const strict = process.env.AGENTRY_CI_STRICT === '1';
const reachable = (await postgresUnreachable()) === null;
const at = '2026-01-01T00:00:00.000Z';
const schemas: string[] = [];
const open: StorageAdapter[] = [];

afterEach(async () => {
  for (const s of open.splice(0)) await s.close().catch(() => undefined);
  await dropSchemas(schemas.splice(0));
});

async function storage(schema = newSchemaName('agentry_batch')): Promise<{ s: StorageAdapter; schema: string }> {
  if (!schemas.includes(schema)) schemas.push(schema);
  const s = postgresStorage({ connectionString: url, schema });
  open.push(s);
  await s.init();
  return { s, schema };
}

function agent(id: string, parent: string | null, extra: Partial<AgentRow> = {}): AgentRow {
  return {
    agent_id: id,
    account_id: 'acct',
    parent_id: parent,
    root_id: parent ? 'root' : id,
    spawn_key: parent ? `k:${id}` : null,
    goal: `goal of ${id}`,
    model: 'm',
    status: 'STARTING_UP',
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

function step(id: string, idx: number, reservation?: { id: string; cost: number }): StepCommit {
  return {
    agent_id: id,
    turns: [
      { agent_id: id, idx, role: 'assistant', content: `[{"type":"text","text":"${id} ${idx}"}]`, created_at: at },
    ],
    messages: [
      { message_id: `${id}-m${idx}`, agent_id: id, role: 'ASSISTANT', text: `${id} says ${idx}`, timestamp: at },
    ],
    settlements: reservation
      ? [
          {
            reservation_id: reservation.id,
            root_id: 'root',
            ledger: {
              account_id: 'acct',
              agent_id: id,
              kind: 'model',
              item: 'm',
              tokens_in: 1,
              tokens_out: 1,
              cost: reservation.cost,
              created_at: at,
            },
          },
        ]
      : [],
    patch: { token_count_delta: 2, step_count_delta: 1, updated_at: at },
    status: { from: ['STARTING_UP'], to: 'ACTIVE' },
  };
}

async function setUp(s: StorageAdapter, children: number, balance = 1_000_000): Promise<void> {
  await s.createAccount({
    id: 'acct',
    name: 'A',
    subscription_active: true,
    balance,
    reserved: 0,
    created_at: at,
  });
  await s.insertAgents(
    [agent('root', null), ...Array.from({ length: children }, (_, i) => agent(`c${i}`, 'root'))],
    [],
    [],
  );
}

describe.skipIf(!reachable && !strict)('PostgreSQL fast writes', () => {
  it('commits steps issued together as one batch; a turn out of order fails alone and changes nothing', async () => {
    const { s } = await storage();
    await setUp(s, 3);
    for (const i of [0, 1, 2]) {
      expect(
        await s.reserve({ id: `r${i}`, account_id: 'acct', agent_id: `c${i}`, root_id: 'root', amount: 100 }),
      ).toBe(null);
    }
    const results = await Promise.allSettled([
      s.commitStep(step('c0', 0, { id: 'r0', cost: 40 })),
      s.commitStep(step('c1', 5, { id: 'r1', cost: 50 })), // out of order: c1 has no turn yet
      s.commitStep(step('c2', 0, { id: 'r2', cost: 60 })),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(String((results[1] as PromiseRejectedResult).reason)).toMatch(/turn 5 out of order for agent c1/);
    const first = (results[0] as PromiseFulfilledResult<Awaited<ReturnType<StorageAdapter['commitStep']>>>).value;
    expect(first).toMatchObject({ statusChanged: true, charged: [40] });
    expect(first.agent).toMatchObject({ agent_id: 'c0', status: 'ACTIVE', step_count: 1, message_count: 1 });

    expect((await s.getAgent('c1'))!.status).toBe('STARTING_UP');
    expect(await s.listTurns('c1')).toEqual([]);
    expect(await s.listMessages('c2')).toHaveLength(1);
    // r1's hold stays (its commit rolled back); the others were settled.
    const account = (await s.getAccount('acct'))!;
    expect(account).toMatchObject({ balance: 1_000_000 - 100, reserved: 100 });
    expect((await s.getAgent('root'))!.tree_spent).toBe(100);
    const ledger = await s.listLedger('acct');
    expect(ledger.reduce((sum, l) => sum + l.amount, 0)).toBe(account.balance);
  });

  it('a batch writes what the same commits write one by one: status changes that apply or not, patches, spend', async () => {
    // Commits of every shape in one batch, and the same commits one at a time (each its own batch) in another schema.
    const shapes = (i: number): StepCommit => {
      const base = step(`c${i}`, 0, i % 3 === 0 ? undefined : { id: `r${i}`, cost: 10 + i });
      const kind = i % 5;
      return {
        ...base,
        // A settlement of another agent's hold (the root's own spend), outside the batch's agents.
        settlements:
          i === 7
            ? [
                ...(base.settlements ?? []),
                {
                  ...base.settlements![0]!,
                  reservation_id: 'r-root',
                  ledger: { ...base.settlements![0]!.ledger, agent_id: 'root', cost: 5 },
                },
              ]
            : base.settlements,
        patch: {
          ...base.patch,
          ...(kind === 1 || kind === 3 ? { progress: 0.25, status_message: 'from the step' } : {}),
          ...(kind === 2 ? { plan: `plan ${i}` } : {}),
        },
        status:
          kind === 0
            ? undefined
            : kind === 3
              ? { from: ['ACTIVE'], to: 'COMPLETED' } // does not apply: the agent is STARTING_UP
              : {
                  from: ['STARTING_UP'],
                  to: kind === 4 ? 'COMPLETED' : 'ACTIVE',
                  patch: { progress: 0.5 + i / 100, status_message: 'from the change', started: true, active_ms: i },
                },
      };
    };
    const N = 12;
    const run = async (together: boolean) => {
      const { s } = await storage();
      await setUp(s, N);
      for (let i = 0; i < N; i++) {
        if (i % 3 !== 0)
          await s.reserve({ id: `r${i}`, account_id: 'acct', agent_id: `c${i}`, root_id: 'root', amount: 100 });
      }
      await s.reserve({ id: 'r-root', account_id: 'acct', agent_id: 'root', root_id: 'root', amount: 50 });
      const commits = Array.from({ length: N }, (_, i) => shapes(i));
      const results = together
        ? await Promise.all(commits.map((c) => s.commitStep(c)))
        : await commits.reduce<Promise<Awaited<ReturnType<StorageAdapter['commitStep']>>[]>>(
            async (acc, c) => [...(await acc), await s.commitStep(c)],
            Promise.resolve([]),
          );
      const rows = await Promise.all(['root', ...commits.map((c) => c.agent_id)].map((id) => s.getAgent(id)));
      return { results, rows, account: await s.getAccount('acct'), ledger: (await s.listLedger('acct')).length };
    };
    const batched = await run(true);
    const single = await run(false);
    expect(batched).toEqual(single);
    // And what they are: the change's patch wins where it applies, the step's otherwise.
    expect(batched.rows[2]).toMatchObject({ status: 'ACTIVE', progress: 0.51, status_message: 'from the change' });
    expect(batched.rows[4]).toMatchObject({ status: 'STARTING_UP', progress: 0.25, status_message: 'from the step' });
    expect(batched.rows[3]).toMatchObject({ status: 'ACTIVE', plan: 'plan 2', progress: 0.52, active_ms: 2 });
    expect(batched.results[3]!.statusChanged).toBe(false);
    expect(batched.rows[5]).toMatchObject({ status: 'COMPLETED', started: true, status_message: 'from the change' });
    expect(batched.rows[0]).toMatchObject({ credits_spent: 5 });
    expect(batched.rows[8]).toMatchObject({ credits_spent: 17 });
  });

  it('inserts 1,000 children with a handful of statements, in order, and counts them on the parent', async () => {
    const { s } = await storage();
    await setUp(s, 0);
    let statements = 0;
    const query = pg.Client.prototype.query;
    const counting = function (this: pg.Client, ...args: unknown[]) {
      statements++;
      return (query as (...a: unknown[]) => unknown).apply(this, args);
    };
    pg.Client.prototype.query = counting as typeof query;
    try {
      await s.insertAgents(
        Array.from({ length: 1_000 }, (_, i) => agent(`kid${String(i).padStart(4, '0')}`, 'root')),
        Array.from({ length: 1_000 }, (_, i) => ({
          message_id: `m${i}`,
          agent_id: `kid${String(i).padStart(4, '0')}`,
          role: 'USER' as const,
          text: `task ${i}`,
          timestamp: at,
        })),
        [],
      );
    } finally {
      pg.Client.prototype.query = query;
    }
    // BEGIN, the duplicate check, agents, parents' counts, messages, COMMIT (turns: none)
    expect(statements).toBeLessThanOrEqual(8);
    expect((await s.getAgent('root'))!.sub_agent_count).toBe(1_000);
    const kids = await s.findAgentsBySpawnKey('root', 'k:');
    expect(kids.map((k) => k.agent_id)).toEqual(
      Array.from({ length: 1_000 }, (_, i) => `kid${String(i).padStart(4, '0')}`),
    );
    expect(await s.listMessages('kid0999')).toMatchObject([{ text: 'task 999' }]);
  });

  it('carves holds from a credit float: exact as callers see them, settled and released in memory, gone on close', async () => {
    const { s, schema } = await storage();
    await setUp(s, 3, 10_000);
    // The first hold takes the asynchronous path, which grows the float; later ones are carved at once.
    expect(s.reserveNow!({ id: 'h0', account_id: 'acct', agent_id: 'c0', root_id: 'root', amount: 10 })).toBe(
      'account',
    );
    expect(await s.reserve({ id: 'h0', account_id: 'acct', agent_id: 'c0', root_id: 'root', amount: 10 })).toBe(null);
    expect(s.reserveNow!({ id: 'h1', account_id: 'acct', agent_id: 'c1', root_id: 'root', amount: 20 })).toBe(null);
    expect(s.reserveNow!({ id: 'h2', account_id: 'acct', agent_id: 'c2', root_id: 'root', amount: 30 })).toBe(null);
    expect((await s.getAccount('acct'))!.reserved).toBe(60);

    // What another process sees: the whole float held, never more than the balance.
    const other = new pg.Client({ connectionString: url });
    await other.connect();
    try {
      const row = async () =>
        (await other.query<{ balance: string; reserved: string }>(`SELECT balance, reserved FROM "${schema}".accounts`))
          .rows[0]!;
      const seen = await row();
      expect(Number(seen.reserved)).toBeGreaterThanOrEqual(60);
      expect(Number(seen.reserved)).toBeLessThanOrEqual(Number(seen.balance));

      const { charged } = await s.commitStep(step('c1', 0, { id: 'h1', cost: 15 }));
      expect(charged).toEqual([15]);
      await s.release('h0');
      expect(await s.getAccount('acct')).toMatchObject({ balance: 10_000 - 15, reserved: 30 });
      expect(await s.settle([step('c2', 0, { id: 'h2', cost: 45 }).settlements![0]!])).toEqual([45]);
      expect(await s.getAccount('acct')).toMatchObject({ balance: 10_000 - 60, reserved: 0 });
      const ledger = await s.listLedger('acct');
      expect(ledger.reduce((sum, l) => sum + l.amount, 0)).toBe(10_000 - 60);

      await s.close();
      expect(await row()).toEqual({ balance: String(10_000 - 60), reserved: '0' });
      const holds = await other.query(`SELECT count(*)::int AS n FROM "${schema}".reservations`);
      expect(holds.rows[0]).toEqual({ n: 0 });
    } finally {
      await other.end();
    }
  });

  it('never lets two processes hold more than the balance; a float takes a quarter at most; an idle float goes back and the other process gets it', async () => {
    const { s: a, schema } = await storage();
    await setUp(a, 2, 1_000);
    const { s: b } = await storage(schema);
    const hold = (id: string) => ({ id, account_id: 'acct', agent_id: 'c1', root_id: 'root', amount: 100 });
    // Process A's float takes what its first hold asks for, 128 times over, but no more than a quarter of what is
    // available (workers mode): B sees 250 held, not the whole balance.
    expect(await a.reserve(hold('a1'))).toBe(null);
    expect((await b.getAccount('acct'))!.reserved).toBe(250);
    // Both ask until both are refused: never more than the balance in holds.
    const granted: Array<[StorageAdapter, string]> = [[a, 'a1']];
    for (let i = 0; i < 12; i++) {
      for (const [s, name] of [
        [a, 'a'],
        [b, 'b'],
      ] as const) {
        if ((await s.reserve(hold(`${name}${i}x`))) === null) granted.push([s, `${name}${i}x`]);
      }
    }
    expect(granted.length * 100).toBeLessThanOrEqual(1_000);
    expect(granted.length).toBeGreaterThanOrEqual(8); // floats of a quarter each leave little unused
    expect(await b.reserve(hold('late'))).toBe('account');
    // A's calls end; its float, idle, goes back to the account shortly after, and B's hold fits.
    for (const [s, id] of granted) if (s === a) await a.release(id);
    const deadline = Date.now() + 10_000;
    let refusal = await b.reserve(hold('late'));
    while (refusal !== null && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
      refusal = await b.reserve(hold('late'));
    }
    expect(refusal).toBe(null);
    expect((await a.getAccount('acct'))!.reserved).toBeLessThanOrEqual(1_000);
  });

  it('keeps holds of a capped tree as rows, checked against the cap on the server', async () => {
    const { s } = await storage();
    await s.createAccount({
      id: 'acct',
      name: 'A',
      subscription_active: true,
      balance: 1_000,
      reserved: 0,
      created_at: at,
    });
    await s.insertAgents([agent('root', null, { max_credits: 100 })], [], []);
    expect(s.reserveNow!({ id: 'x', account_id: 'acct', agent_id: 'root', root_id: 'root', amount: 60 })).toBe(
      'account',
    );
    expect(await s.reserve({ id: 'x', account_id: 'acct', agent_id: 'root', root_id: 'root', amount: 60 })).toBe(null);
    expect(await s.reserve({ id: 'y', account_id: 'acct', agent_id: 'root', root_id: 'root', amount: 60 })).toBe(
      'tree_cap',
    );
    expect((await s.getAgent('root'))!.tree_reserved).toBe(60);
  });
});
