/**
 * Results of idempotent tool calls commit together with the next model turn (one transaction instead of two). What
 * must still hold: a pause while that turn is in flight saves the results; a crash before it commits reruns the calls
 * and never duplicates a turn.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { AgentRuntime, defineTool, memoryStorage } from 'agentry-runtime';
import { scriptedModel } from 'agentry-runtime/testing';
import { eventually, openTestRuntime } from '../support/runtime.js';

function lookupTool() {
  let runs = 0;
  const tool = defineTool({
    name: 'lookup',
    description: 'idempotent lookup',
    input: z.object({ q: z.string() }),
    idempotent: true,
    run: ({ q }) => {
      runs++;
      return `found ${q}`;
    },
  });
  return { tool, runs: () => runs };
}

describe('tool results committed with the next model turn', () => {
  it('commits results and the next turn together; a pause while that turn is in flight saves the results', async () => {
    const { tool, runs } = lookupTool();
    let slow = true;
    const { runtime, model, storage } = await openTestRuntime(
      (_req, { turnIndex }) =>
        turnIndex === 0
          ? { toolCalls: [{ name: 'lookup', input: { q: 'x' } }] }
          : slow
            ? { text: 'too late', delayMs: 60_000 }
            : { text: 'answer' },
      { tools: [tool] },
    );
    const { agent_id } = await runtime.create({ goal: 'look it up' });
    await eventually(() => model.callCount === 2, 5_000, 'the second model call');
    expect((await storage.listTurns(agent_id)).map((t) => t.role)).toEqual(['user', 'assistant']); // results held
    await runtime.pause(agent_id);
    await runtime.whenIdle();
    const turns = await storage.listTurns(agent_id);
    expect(turns.map((t) => t.role)).toEqual(['user', 'assistant', 'user']); // saved by the pause
    expect(turns[2]!.content).toContain('found x');
    slow = false;
    await runtime.resume(agent_id);
    expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
    expect(runs()).toBe(1); // the saved result was used, not run again
    await runtime.close();
  });

  it('a crash before the next turn commits reruns the idempotent call once and duplicates nothing', async () => {
    const storage = memoryStorage();
    const { tool, runs } = lookupTool();
    let hang = true;
    const model = scriptedModel({
      turns: (_req, { turnIndex }) => {
        if (turnIndex === 0) return { toolCalls: [{ name: 'lookup', input: { q: 'y' } }] };
        if (hang) return new Promise(() => {}); // the process dies while this call is in flight
        return { text: 'answer y' };
      },
    });
    const first = await AgentRuntime.open({ storage, model, tools: [tool], scheduler: 'manual' });
    const { agent_id } = await first.create({ goal: 'look y up' });
    await first.step(agent_id);
    void first.step(agent_id); // runs the tool, then hangs in the next model call
    await eventually(() => model.callCount === 2, 5_000, 'the hanging call');
    expect(runs()).toBe(1);
    hang = false;

    const second = await AgentRuntime.open({ storage, model, tools: [tool] });
    expect((await second.waitFor(agent_id)).status).toBe('COMPLETED');
    expect(runs()).toBe(2); // idempotent: run again after the crash
    const turns = await storage.listTurns(agent_id);
    expect(turns.map((t) => t.role)).toEqual(['user', 'assistant', 'user', 'assistant']);
    expect((await second.get(agent_id)).messages.map((m) => m.text)).toEqual(['look y up', 'answer y']);
    await second.close();
  });
});
