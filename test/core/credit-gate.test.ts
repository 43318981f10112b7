/**
 * The credit gate on its own: reservations that other holds block wait in order, and every wait ends.
 */
import { describe, expect, it } from 'vitest';
import { CreditGate } from '../../src/core/credit-gate.js';
import { accountWith, agentRow, tick } from './gate-fixtures.js';

/** A small deterministic PRNG (mulberry32), so a failing run can be replayed. */
function random(seed: number): (n: number) => number {
  let a = seed >>> 0;
  return (n) => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n);
  };
}

const NOTHING_WAITS = { calls: 0, oldestSince: null, neededMicros: 0 };

function request(id: string, agent: string, amount: number) {
  return { id, account_id: 'acc', agent_id: agent, root_id: agent, amount };
}

describe('CreditGate', () => {
  it('a request blocked by holds waits, and is granted when they are released', async () => {
    const storage = await accountWith(100);
    const gate = new CreditGate(storage);
    expect(await gate.reserve(request('a', 'A', 80))).toEqual({ granted: true });
    let told = -1;
    const waiting = gate.reserve(request('b', 'B', 50), { onWait: (n) => (told = n) });
    await tick();
    expect(told).toBe(1);
    expect(gate.waitingCount).toBe(1);
    // What waits is counted by account and by tree, for dashboards.
    expect(gate.waitingOf('acc')).toMatchObject({ calls: 1, neededMicros: 50 });
    expect(gate.waitingOf('acc').oldestSince).toBeLessThanOrEqual(Date.now());
    expect(gate.waitingOfTree('B').calls).toBe(1);
    expect(gate.waitingOfTree('A').calls).toBe(0);
    await gate.release('a');
    expect(await waiting).toEqual({ granted: true });
    expect(gate.waitingOf('acc')).toEqual(NOTHING_WAITS);
    expect((await storage.getAccount('acc'))!.reserved).toBe(50);
  });

  it('a request the settled balance cannot cover is refused at once with what could be paid', async () => {
    const storage = await accountWith(100);
    const gate = new CreditGate(storage);
    expect(await gate.reserve(request('a', 'A', 30))).toEqual({ granted: true });
    expect(await gate.reserve(request('b', 'B', 150))).toEqual({ granted: false, refusal: 'account', payable: 100 });
  });

  it('an agent never waits for its own holds', async () => {
    const storage = await accountWith(100);
    const gate = new CreditGate(storage);
    await gate.reserve(request('a', 'A', 80));
    expect(await gate.reserve(request('b', 'A', 50))).toEqual({ granted: false, refusal: 'account', payable: 100 });
  });

  it('a later, smaller request never overtakes a waiting one', async () => {
    const storage = await accountWith(100);
    const gate = new CreditGate(storage);
    await gate.reserve(request('a', 'A', 60));
    const order: string[] = [];
    const big = gate.reserve(request('big', 'B', 70)).then(() => order.push('big'));
    const small = gate.reserve(request('small', 'C', 10)).then(() => order.push('small'));
    await tick();
    expect(order).toEqual([]); // 40 are free, enough for "small", but "big" asked first
    expect(gate.waitingOf('acc')).toMatchObject({ calls: 2, neededMicros: 80 });
    await gate.release('a');
    await Promise.all([big, small]);
    expect(order).toEqual(['big', 'small']);
  });

  it('an aborted wait leaves the queue, and the requests behind it move up', async () => {
    const storage = await accountWith(100);
    const gate = new CreditGate(storage);
    await gate.reserve(request('a', 'A', 60));
    const controller = new AbortController();
    const big = gate.reserve(request('big', 'B', 90), { signal: controller.signal });
    const small = gate.reserve(request('small', 'C', 30));
    await tick();
    controller.abort(new Error('paused'));
    await expect(big).rejects.toThrow('paused');
    expect(await small).toEqual({ granted: true });
    expect(gate.waitingCount).toBe(0);
    expect(gate.waitingOf('acc')).toEqual(NOTHING_WAITS);
  });

  it('a waiter whose tree cap is what blocks it waits for its tree, not the account', async () => {
    const storage = await accountWith(1_000);
    await storage.insertAgents([agentRow('root', { max_credits: 100 })], [], []);
    const gate = new CreditGate(storage);
    const inTree = (id: string, agent: string, amount: number) => ({ ...request(id, agent, amount), root_id: 'root' });
    await gate.reserve(inTree('a', 'A', 70));
    const waiting = gate.reserve(inTree('b', 'B', 50));
    // Another tree on the same account is not held up by this tree's cap.
    expect(await gate.reserve(request('other', 'X', 500))).toEqual({ granted: true });
    expect(gate.waitingOfTree('root')).toMatchObject({ calls: 1, neededMicros: 50 });
    expect(gate.waitingOfTree('X').calls).toBe(0);
    await gate.release('a');
    expect(await waiting).toEqual({ granted: true });
    expect(gate.waitingOfTree('root')).toEqual(NOTHING_WAITS);
    expect(await gate.reserve(inTree('c', 'C', 200))).toEqual({ granted: false, refusal: 'tree_cap', payable: 100 });
  });

  it('200 agents, 10,000 reservations of random size, released in random order: every wait ends, in order', async () => {
    const rand = random(20261124);
    const BALANCE = 100_000_000;
    const storage = await accountWith(BALANCE);
    const gate = new CreditGate(storage);
    const held: Array<{ id: string; agent: string; amount: number; done: () => void }> = [];
    const requested: number[] = [];
    const granted: number[] = [];
    let refused = 0;
    let lowest = BALANCE;
    let seq = 0;
    let agentsLeft = 200;

    async function agent(name: string): Promise<void> {
      for (let k = 0; k < 50; k++) {
        const mine = seq++;
        requested.push(mine);
        const outcome = await gate.reserve(request(`${name}:${k}`, name, 1 + rand(5_000_000)));
        if (!outcome.granted) {
          refused++;
          continue;
        }
        granted.push(mine);
        await new Promise<void>((done) => held.push({ id: `${name}:${k}`, agent: name, amount: 0, done }));
      }
      agentsLeft--;
    }

    const agents = Array.from({ length: 200 }, (_, i) => agent(`agent${i}`));
    let idleTicks = 0;
    while (agentsLeft > 0) {
      if (held.length === 0) {
        // Nothing is held, so nothing may wait: a waiter now would wait forever.
        if (++idleTicks > 100) throw new Error(`stalled with ${gate.waitingCount} waiting and no holds`);
        await tick();
        continue;
      }
      idleTicks = 0;
      const [hold] = held.splice(rand(held.length), 1);
      if (rand(2) === 0) {
        await gate.release(hold!.id);
      } else {
        const settlement = {
          reservation_id: hold!.id,
          root_id: hold!.agent,
          ledger: {
            account_id: 'acc',
            agent_id: hold!.agent,
            kind: 'model' as const,
            item: 'svc-1-lite',
            tokens_in: 0,
            tokens_out: 0,
            cost: rand(20_000),
            created_at: new Date(0).toISOString(),
          },
        };
        await storage.settle([settlement]);
        gate.settled([settlement]);
      }
      const account = (await storage.getAccount('acc'))!;
      lowest = Math.min(lowest, account.balance, account.balance - account.reserved);
      hold!.done();
      await tick();
    }
    await Promise.all(agents);

    expect(requested).toHaveLength(10_000);
    expect(granted.length + refused).toBe(10_000);
    expect(granted.length).toBeGreaterThan(9_000);
    // Grants follow request order: a request is never granted before one made earlier that was also granted.
    expect(granted).toEqual([...granted].sort((a, b) => a - b));
    expect(lowest).toBeGreaterThanOrEqual(0);
    expect(gate.waitingCount).toBe(0);
    expect(gate.waitingOf('acc')).toEqual(NOTHING_WAITS);
    const account = (await storage.getAccount('acc'))!;
    expect(account.reserved).toBe(0);
    const ledger = await storage.listLedger('acc');
    expect(ledger.reduce((s, l) => s + l.amount, 0)).toBe(account.balance);
  });
});
