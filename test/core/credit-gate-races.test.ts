/**
 * The credit gate where storage is slow or fails: a hold that storage has made but the gate has not counted yet must
 * not make another request "out of credits", and a storage error must end the wait it happens in, not the process.
 */
import { describe, expect, it } from 'vitest';
import type { StorageAdapter } from 'agentry-runtime';
import { CreditGate } from '../../src/core/credit-gate.js';
import { accountWith, agentRow, tick } from './gate-fixtures.js';

function request(id: string, agent: string, amount: number, root = agent) {
  return { id, account_id: 'acc', agent_id: agent, root_id: root, amount };
}

/** A promise to resolve by hand. */
function latch(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((r) => (open = r));
  return { promise, open };
}

describe('CreditGate with slow or failing storage', () => {
  it('a hold storage made but whose answer is still on its way makes others wait, not run out of credits', async () => {
    const inner = await accountWith(100);
    await inner.insertAgents([agentRow('T', { max_credits: 50 })], [], []);
    // Storage applies the hold at once but answers late (a database round trip): the gate learns of it later.
    const slow = latch();
    const storage: StorageAdapter = Object.create(inner) as StorageAdapter;
    storage.reserveNow = undefined; // every reservation takes the asynchronous path this test slows down
    storage.reserve = async (r) => {
      const refusal = await inner.reserve(r);
      if (r.id === 'y' && refusal === null) await slow.promise;
      return refusal;
    };
    const gate = new CreditGate(storage);
    // X holds 40 of tree T's cap of 50: Y's 20 waits for the tree.
    expect(await gate.reserve(request('x', 'X', 40, 'T'))).toEqual({ granted: true });
    const y = gate.reserve(request('y', 'Y', 20, 'T'));
    await tick();
    expect(gate.waitingCount).toBe(1);
    // X's hold ends: Y's reservation is made in storage, its answer delayed.
    await gate.release('x');
    await tick();
    // Z (another tree) asks for 90 of the settled 100: only Y's hold is in the way, and it ends.
    let outcome: unknown = 'pending';
    const z = gate.reserve(request('z', 'Z', 90));
    void z.then((o) => (outcome = o));
    await tick();
    await tick();
    expect(outcome).toBe('pending');
    slow.open();
    expect(await y).toEqual({ granted: true });
    await gate.release('y');
    expect(await z).toEqual({ granted: true });
  });

  it('a refusal whose blocking hold ended while it was on its way is asked again, not final', async () => {
    const inner = await accountWith(100);
    await inner.insertAgents([agentRow('T', { max_credits: 50 })], [], []);
    // Storage refuses Y while X holds, but the answer arrives after X's hold is gone.
    const slow = latch();
    const storage: StorageAdapter = Object.create(inner) as StorageAdapter;
    storage.reserveNow = undefined; // every reservation takes the asynchronous path this test slows down
    storage.reserve = async (r) => {
      const refusal = await inner.reserve(r);
      if (r.id === 'y') await slow.promise;
      return refusal;
    };
    const gate = new CreditGate(storage);
    expect(await gate.reserve(request('x', 'X', 40, 'T'))).toEqual({ granted: true });
    const y = gate.reserve(request('y', 'Y', 20, 'T'));
    await tick();
    await gate.release('x');
    slow.open();
    expect(await y).toEqual({ granted: true });
  });

  it('a hold that cannot be released after an abort rejects that request and the queue goes on', async () => {
    const inner = await accountWith(100);
    const slow = latch();
    const storage: StorageAdapter = Object.create(inner) as StorageAdapter;
    storage.reserveNow = undefined; // every reservation takes the asynchronous path this test slows down
    storage.reserve = async (r) => {
      const refusal = await inner.reserve(r);
      if (r.id === 'a') await slow.promise;
      return refusal;
    };
    storage.release = async () => {
      throw new Error('storage is down');
    };
    const unhandled: unknown[] = [];
    const onUnhandled = (e: unknown) => unhandled.push(e);
    process.on('unhandledRejection', onUnhandled);
    try {
      const gate = new CreditGate(storage);
      const controller = new AbortController();
      const a = gate.reserve(request('a', 'A', 30), { signal: controller.signal });
      const b = gate.reserve(request('b', 'B', 30));
      await tick();
      controller.abort(new Error('paused'));
      slow.open();
      await expect(a).rejects.toThrow();
      expect(await b).toEqual({ granted: true });
      await tick();
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});
