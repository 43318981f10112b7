/**
 * Credits under contention: siblings on one account never starve each other. A reservation that other
 * calls' holds block waits its turn; only a balance that cannot pay stops an agent; an agent with little left gets a
 * lowered max_tokens; a waiting parent's progress counts only children that finished for good.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  AgentRuntime,
  defineTool,
  memoryStorage,
  sqliteStorage,
  type ModelRequest,
  type StorageAdapter,
} from 'agentry-runtime';
import { fakeClock, scriptedModel, scriptedTokenizer, type ScriptedTurn } from 'agentry-runtime/testing';
import { eventually, openTestRuntime } from '../support/runtime.js';

const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
const LEAD = 'lead';

/** A lead agent that spawns `n` children, then answers; each child answers at once with `childUsage`. */
function fanOutModel(n: number, childUsage: ScriptedTurn['usage']) {
  return scriptedModel({
    record: false,
    turns: (req, { turnIndex }): ScriptedTurn => {
      if (goalOf(req) === LEAD) {
        if (turnIndex === 0) {
          const tasks = Array.from({ length: n }, (_, i) => ({ goal: `child ${i}` }));
          return {
            toolCalls: [{ name: 'spawn_sub_agents', input: { tasks } }],
            usage: { inputTokens: 10, outputTokens: 10 },
          };
        }
        return { text: 'all done', usage: { inputTokens: 10, outputTokens: 10 } };
      }
      return { text: `answer to ${goalOf(req)}`, usage: childUsage };
    },
  });
}

/** Records every balance the account passes through (after each settlement), to check it never went below zero. */
function watchBalance(runtime: AgentRuntime, storage: StorageAdapter): { lowest: () => number } {
  let lowest = Infinity;
  runtime.on('credits.charged', () => {
    void storage.getAccount('local').then((a) => {
      if (a) lowest = Math.min(lowest, a.balance, a.balance - a.reserved);
    });
  });
  return { lowest: () => lowest };
}

async function expectLedgerExact(storage: StorageAdapter): Promise<void> {
  const account = (await storage.getAccount('local'))!;
  const ledger = await storage.listLedger('local');
  expect(account.balance).toBeGreaterThanOrEqual(0);
  expect(account.reserved).toBe(0);
  expect(ledger.reduce((s, l) => s + l.amount, 0)).toBe(account.balance);
}

describe('credits under contention', () => {
  const dirs: string[] = [];
  const tempDb = () => {
    const dir = mkdtempSync(join(tmpdir(), 'agentry-contention-'));
    dirs.push(dir);
    return join(dir, 'a.db');
  };
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  it('1,000 children on 100 credits all complete when the whole run costs about 2 credits', async () => {
    const storage = sqliteStorage({ path: tempDb() });
    // Each child: 10 input + 2 output tokens on svc-1-lite = 2,000 micro-credits; its worst case is about 2.3 credits,
    // so only ~40 of the 128 running children can hold theirs at once: the rest wait their turn.
    const runtime = await AgentRuntime.open({
      storage,
      model: fanOutModel(1_000, { inputTokens: 10, outputTokens: 2 }),
    });
    const balance = watchBalance(runtime, storage);
    try {
      const { agent_id } = await runtime.create({ goal: LEAD });
      const parent = await runtime.waitFor(agent_id);
      expect(parent.status).toBe('COMPLETED');
      const children = await storage.countChildrenByStatus(agent_id, '');
      expect(children).toEqual({ COMPLETED: 1_000 });
      await runtime.whenIdle();
      await expectLedgerExact(storage);
      const account = (await storage.getAccount('local'))!;
      expect(100_000_000 - account.balance).toBeLessThan(3_000_000); // about 2 credits spent in all
      expect(balance.lowest()).toBeGreaterThanOrEqual(0);
    } finally {
      await runtime.close();
    }
  });

  it('an account that pays for ~300 of 1,000 children completes >= 290; top-up and resume complete the rest', async () => {
    const storage = sqliteStorage({ path: tempDb() });
    // Each child's real cost: 2,000 * 100 + 200 * 500 = 300,000 micro-credits (0.3 credits); 90.2 credits pay ~300.
    const runtime = await AgentRuntime.open({
      storage,
      model: fanOutModel(1_000, { inputTokens: 2_000, outputTokens: 200 }),
      defaultAccount: { id: 'local', credits: 90.2 },
    });
    const balance = watchBalance(runtime, storage);
    try {
      const { agent_id } = await runtime.create({ goal: LEAD });
      const stopped = await runtime.waitFor(agent_id);
      expect(stopped.status).toBe('OUT_OF_CREDITS');
      await runtime.whenIdle();
      const counts = await storage.countChildrenByStatus(agent_id, '');
      expect(counts.COMPLETED).toBeGreaterThanOrEqual(290);
      expect((counts.COMPLETED ?? 0) + (counts.OUT_OF_CREDITS ?? 0)).toBe(1_000);
      expect(stopped.status_message).toBe(
        `Out of credits: 1,000 sub-agents: ${counts.COMPLETED} completed, ${counts.OUT_OF_CREDITS} out of credits`,
      );
      await expectLedgerExact(storage);
      expect(balance.lowest()).toBeGreaterThanOrEqual(0);

      // No child stopped while the balance could still pay its floor (the least it may ask for).
      const left = (await storage.getAccount('local'))!.balance;
      const stoppedChildren = await storage.listAgents({ parent_id: agent_id, status: 'OUT_OF_CREDITS', limit: 1_000 });
      for (const child of stoppedChildren.rows) {
        const needed = Number(/needs up to ([\d.]+) credits/.exec(child.status_message)?.[1]);
        expect(needed * 1e6).toBeGreaterThan(left);
      }

      await runtime.accounts.addCredits('local', 300);
      await runtime.resume(agent_id);
      expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
      expect(await storage.countChildrenByStatus(agent_id, '')).toEqual({ COMPLETED: 1_000 });
      await runtime.whenIdle();
      await expectLedgerExact(storage);
    } finally {
      await runtime.close();
    }
  });

  it('an agent with 0.5 credits left on svc-1-lite still completes a short answer (lowered max_tokens)', async () => {
    // Every built-in tool is offered: the byte bound of their definitions alone (~0.9 credits) is more than the 0.5
    // left, and nothing is learned yet; the provider's exact count (count_tokens) makes the call affordable.
    const model = scriptedModel({
      turns: [{ text: 'Short answer.', usage: { inputTokens: 300, outputTokens: 40 } }],
      tokenizer: scriptedTokenizer(4),
    });
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model,
      clock: fakeClock(),
      defaultAccount: { id: 'local', credits: 0.5 },
    });
    const { agent_id } = await runtime.create({ goal: 'Answer briefly' });
    const agent = await runtime.waitFor(agent_id);
    expect(agent.status).toBe('COMPLETED');
    const asked = model.calls[0]!.maxTokens;
    expect(asked).toBeLessThan(4_096); // the worst case of 4,096 output tokens (2.05 credits) was more than it had
    expect(asked).toBeGreaterThanOrEqual(256);
    expect((await runtime.accounts.get('local')).balance).toBeCloseTo(0.5 - (300 * 100 + 40 * 500) / 1e6, 6);
    await runtime.close();
  });

  it('an agent whose balance cannot pay even the floor stops OUT_OF_CREDITS without a model call', async () => {
    const { runtime, model } = await openTestRuntime([{ text: 'never' }], {
      defaultAccount: { id: 'local', credits: 0.01 },
    });
    const { agent_id } = await runtime.create({ goal: 'Answer briefly' });
    const agent = await runtime.waitFor(agent_id);
    expect(agent.status).toBe('OUT_OF_CREDITS');
    expect(model.calls).toHaveLength(0);
    expect((await runtime.accounts.get('local')).balance).toBe(0.01);
    await runtime.close();
  });

  it('a waiting parent counts completed, failed, out-of-credits and paused children apart', async () => {
    const expensive = defineTool({
      name: 'expensive',
      description: 'costs more than any balance here',
      input: z.object({}),
      price: 1_000,
      idempotent: true,
      run: () => 'never runs',
    });
    // Children 0-5 complete, 6-7 fail (a model error that is not retryable), 8-9 need a tool the account cannot pay.
    const script = (req: ModelRequest, { turnIndex }: { turnIndex: number }): ScriptedTurn => {
      const goal = goalOf(req);
      if (goal === LEAD) {
        if (turnIndex > 0) return { text: 'done' };
        const tasks = Array.from({ length: 10 }, (_, i) => ({ goal: `child ${i}` }));
        return { toolCalls: [{ name: 'spawn_sub_agents', input: { tasks } }] };
      }
      const i = Number(goal.slice(6));
      if (i >= 8) return turnIndex === 0 ? { toolCalls: [{ name: 'expensive', input: {} }] } : { text: 'x' };
      if (i >= 6) return { error: { message: 'the model refused', retryable: false, status: 400 } };
      return { text: `answer ${i}` };
    };
    const { runtime } = await openTestRuntime(script, { tools: [expensive] });
    const progress: Array<{ progress: number; message: string }> = [];
    const { agent_id } = await runtime.create({ goal: LEAD });
    runtime.on('agent.progress', ({ agent }) => {
      if (agent.agent_id === agent_id) progress.push({ progress: agent.progress, message: agent.status_message });
    });
    const parent = await runtime.waitFor(agent_id);
    expect(parent.status).toBe('OUT_OF_CREDITS');
    expect(parent.status_message).toBe('Out of credits: 10 sub-agents: 6 completed, 2 failed, 2 out of credits');
    // Progress follows only children that finished for good: 8 of 10, never the 2 that ran out.
    expect(parent.progress).toBeLessThanOrEqual(0.8 * 0.99 + 1e-9);
    for (const p of progress) expect(p.progress).toBeLessThanOrEqual(0.8 * 0.99 + 1e-9);

    const { agent } = await runtime.get(agent_id);
    expect(agent.sub_agents).toEqual({ total: 10, by_status: { COMPLETED: 6, FAILED: 2, OUT_OF_CREDITS: 2 } });
    const children = await runtime.list({ parentId: agent_id, limit: 10 });
    const indexes = await Promise.all(
      children.data.map(async (c) => (await runtime.get(c.agent_id)).agent.spawn_index),
    );
    expect(indexes.sort((a, b) => a! - b!)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    await runtime.close();
  });

  it('the waiting message names paused children apart from running ones', async () => {
    const script = (req: ModelRequest, { turnIndex }: { turnIndex: number }): ScriptedTurn => {
      if (goalOf(req) === LEAD) {
        if (turnIndex > 0) return { text: 'done' };
        return { toolCalls: [{ name: 'spawn_sub_agents', input: { tasks: [{ goal: 'quick' }, { goal: 'slow' }] } }] };
      }
      return goalOf(req) === 'slow' ? { text: 'late', delayMs: 60_000 } : { text: 'fast' };
    };
    const { runtime } = await openTestRuntime(script);
    const { agent_id } = await runtime.create({ goal: LEAD });
    const slow = await new Promise<string>((resolve) => {
      runtime.on('agent.status', ({ agent }) => {
        if (agent.parent_id === agent_id && agent.status === 'COMPLETED') {
          void runtime
            .list({ parentId: agent_id, status: 'ACTIVE', limit: 1 })
            .then((l) => resolve(l.data[0]!.agent_id));
        }
      });
    });
    await runtime.pause(slow);
    let message = '';
    await eventually(
      async () => (message = (await runtime.get(agent_id)).agent.status_message).startsWith('Waiting: '),
      5_000,
      () => `the parent to see its paused child (last: ${message})`,
    );
    expect(message).toBe('Waiting: 2 sub-agents: 1 completed, 1 paused');
    await runtime.close();
  });
});
