/**
 * Scheduling: run-slot and lane caps, and a model lane that backs off on provider rate limits instead of failing agents.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool } from 'agentry-runtime';
import { deferred, eventually, openTestRuntime } from '../support/runtime.js';

describe('scheduler', () => {
  it('a 429 backs off the whole model lane (fake clock) and no agent fails', async () => {
    let rateLimitsLeft = 3;
    const { runtime, clock, model } = await openTestRuntime(() =>
      rateLimitsLeft-- > 0
        ? { error: { message: 'rate limited', retryable: true, status: 429, retryAfterMs: 5_000 } }
        : { text: 'done' },
    );
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push((await runtime.create({ goal: `agent ${i}` })).agent_id);
    await eventually(() => model.callCount >= 1 && clock.pendingSleeps > 0, 2_000, 'the first rate limit');
    const callsWhileBackingOff = model.callCount;
    // nothing else reaches the provider while the lane is paused
    for (let i = 0; i < 50; i++) await new Promise((r) => setImmediate(r));
    expect(model.callCount).toBe(callsWhileBackingOff);
    // Calls that were on their way when the first 429 came may have been answered; the rest wait, none failed.
    const statuses = await Promise.all(ids.map(async (id) => (await runtime.get(id)).agent.status));
    expect(
      statuses.every((s) => s === 'ACTIVE' || s === 'COMPLETED'),
      statuses.join(),
    ).toBe(true);
    expect(statuses).toContain('ACTIVE');
    // each back-off ends when the clock passes it; every agent completes
    const finals = Promise.all(ids.map((id) => runtime.waitFor(id)));
    let done = false;
    void finals.then(() => (done = true));
    while (!done) {
      clock.advance(5_000);
      for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
    }
    expect((await finals).map((a) => a.status)).toEqual(Array(5).fill('COMPLETED'));
    expect(model.callCount).toBe(5 + 3); // every rate-limited call was made again, none failed an agent
    await runtime.close();
  });

  it('never steps more agents at once than runSlots, nor runs more tool calls than a lane allows', async () => {
    let running = 0;
    let peakTools = 0;
    const slow = defineTool({
      name: 'slow',
      description: 'takes a moment',
      input: z.object({}),
      idempotent: true,
      lane: 'narrow',
      run: async () => {
        running++;
        peakTools = Math.max(peakTools, running);
        await new Promise((r) => setTimeout(r, 2));
        running--;
        return 'ok';
      },
    });
    const { runtime } = await openTestRuntime(
      [
        { toolCalls: [{ name: 'slow', input: {} }], delayMs: 1 },
        { text: 'done', delayMs: 1 },
      ],
      {
        tools: [slow],
        concurrency: { runSlots: 4, lanes: { narrow: 2 } },
      },
    );
    let peakActive = 0;
    runtime.on('agent.status', () => undefined);
    const ids = [];
    for (let i = 0; i < 30; i++) ids.push((await runtime.create({ goal: `agent ${i}` })).agent_id);
    const sampler = setInterval(() => {
      peakActive = Math.max(
        peakActive,
        (runtime as unknown as { scheduler: { runningCount: number } }).scheduler.runningCount,
      );
    }, 1);
    await Promise.all(ids.map((id) => runtime.waitFor(id)));
    clearInterval(sampler);
    expect(peakActive).toBeLessThanOrEqual(4);
    expect(peakActive).toBeGreaterThan(0);
    expect(peakTools).toBeLessThanOrEqual(2);
    await runtime.close();
  });
});

describe('run slots by default', () => {
  it('are the model lane plus the tools lane: no more agents step than the lanes can serve', async () => {
    const gate = deferred();
    let inModel = 0;
    const { runtime } = await openTestRuntime(
      async () => {
        inModel++;
        await gate.promise;
        return { text: 'done' };
      },
      { concurrency: { models: 2, tools: 3 } },
    );
    const scheduler = (runtime as unknown as { scheduler: { runningCount: number } }).scheduler;
    const ids = [];
    for (let i = 0; i < 12; i++) ids.push((await runtime.create({ goal: `agent ${i}` })).agent_id);
    await eventually(() => inModel === 2 && scheduler.runningCount === 5, 5_000, 'the lanes and run slots to fill');
    for (let i = 0; i < 50; i++) await new Promise((r) => setImmediate(r));
    expect(inModel).toBe(2);
    expect(scheduler.runningCount).toBe(5); // 2 + 3 slots: two in the model lane, three waiting for it
    gate.resolve();
    expect((await Promise.all(ids.map((id) => runtime.waitFor(id)))).map((a) => a.status)).toEqual(
      Array(12).fill('COMPLETED'),
    );
    await runtime.close();
  });
});

describe('shutdown', () => {
  it('close() does not wait forever for a tool that ignores its abort signal', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let started!: () => void;
    const running = new Promise<void>((r) => (started = r));
    const stubborn = defineTool({
      name: 'stubborn',
      description: 'ignores aborts',
      input: z.object({}),
      idempotent: true,
      run: async () => {
        started();
        await gate;
        return 'finally';
      },
    });
    const { runtime } = await openTestRuntime([{ toolCalls: [{ name: 'stubborn', input: {} }] }, { text: 'done' }], {
      tools: [stubborn],
      closeTimeoutMs: 20,
    });
    await runtime.create({ goal: 'x' });
    await running;
    await runtime.close(); // resolves although the tool is still running
    release();
  });
});
