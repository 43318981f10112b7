/**
 * The drain rate that sizes a worker's claim-ahead (core/scheduler.ts): a steady flow of r ends per second
 * expects r × horizon more; a burst counts spread over the time constant and fades; nothing ended, nothing ahead.
 */
import { describe, expect, it } from 'vitest';
import { DrainRate } from '../../src/core/scheduler.js';

describe('DrainRate', () => {
  it('expects nothing ahead before any run slot freed up', () => {
    expect(new DrainRate(2_000).expectedWithin(250, 0)).toBe(0);
  });

  it('reads a steady flow of 100 ends a second as about 25 within 250 ms', () => {
    const rate = new DrainRate(2_000);
    for (let t = 0; t <= 20_000; t += 10) rate.note(t);
    expect(rate.expectedWithin(250, 20_000)).toBeGreaterThanOrEqual(24);
    expect(rate.expectedWithin(250, 20_000)).toBeLessThanOrEqual(26);
  });

  it('counts a burst of 50 ends spread over its time constant, and lets it fade', () => {
    const rate = new DrainRate(2_000);
    for (let i = 0; i < 50; i++) rate.note(1_000);
    expect(rate.expectedWithin(250, 1_000)).toBe(7); // 50 / 2 s × 0.25 s, rounded up
    expect(rate.expectedWithin(250, 3_000)).toBe(3); // e^-1 of it two seconds later
    expect(rate.expectedWithin(250, 21_000)).toBe(0); // faded
  });
});
