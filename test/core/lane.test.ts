import { describe, expect, it } from 'vitest';
import { ConcurrencyLane } from '../../src/core/lane.js';

const tick = () => new Promise((r) => setImmediate(r));

describe('ConcurrencyLane', () => {
  it('runs at most `concurrency` calls at once, in FIFO order, and runs them all', async () => {
    const lane = new ConcurrencyLane(3);
    let running = 0;
    let peak = 0;
    const order: number[] = [];
    const gates: Array<() => void> = [];
    const calls = Array.from({ length: 10 }, (_, i) =>
      lane.run(async () => {
        order.push(i);
        running++;
        peak = Math.max(peak, running);
        await new Promise<void>((r) => gates.push(r));
        running--;
        return i;
      }),
    );
    while (order.length < 10) {
      await tick();
      expect(running).toBeLessThanOrEqual(3);
      gates.shift()?.();
    }
    gates.forEach((g) => g());
    expect(await Promise.all(calls)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(order).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(peak).toBe(3);
    expect(lane.load).toEqual({ active: 0, waiting: 0 });
  });

  it('a thrown call frees its slot; pause holds new calls back until start', async () => {
    const lane = new ConcurrencyLane(1);
    await expect(lane.run(async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    lane.pause();
    let ran = false;
    const held = lane.run(async () => {
      ran = true;
    });
    await tick();
    expect(ran).toBe(false);
    expect(lane.load).toEqual({ active: 0, waiting: 1 });
    lane.start();
    await held;
    expect(ran).toBe(true);
    expect(lane.load).toEqual({ active: 0, waiting: 0 });
  });
});
