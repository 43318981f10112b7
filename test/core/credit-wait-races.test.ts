/**
 * Pauses that land while an agent writes something of its own (that it waits for credits, or the results of its last
 * tool calls): a paused agent keeps saying it is paused.
 */
import { describe, expect, it } from 'vitest';
import { defineTool, memoryStorage, type ModelRequest, type StorageAdapter } from 'agentry-runtime';
import { z } from 'zod';
import { deferred, eventually, openTestRuntime } from '../support/runtime.js';

const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;

describe('waiting for credits while paused', () => {
  it('a pause that lands while the agent announces its wait for credits keeps the message "Paused"', async () => {
    const inner = memoryStorage();
    const announcing = deferred();
    const announced = deferred();
    let announces = 0;
    const storage: StorageAdapter = Object.create(inner) as StorageAdapter;
    // The announcement is held back until the pause has landed (however the loop writes it).
    const holdBack = async (message: string | undefined) => {
      if (!message?.startsWith('Waiting for credits')) return;
      announces++;
      announcing.resolve();
      await announced.promise;
    };
    storage.commitStep = async (commit) => {
      await holdBack(commit.patch.status_message);
      return inner.commitStep(commit);
    };
    storage.changeStatus = async (id, change, at) => {
      await holdBack(change.patch?.status_message);
      return inner.changeStatus(id, change, at);
    };
    const holding = deferred();
    const { runtime } = await openTestRuntime(
      async (req) => {
        if (goalOf(req) === 'holder') await holding.promise;
        return { text: 'done', usage: { inputTokens: 10, outputTokens: 10 } };
      },
      { storage },
    );
    try {
      const holder = await runtime.create({ goal: 'holder' });
      await eventually(async () => ((await storage.getAccount('local'))?.reserved ?? 0) > 0);
      // Leave the balance at 1.5 times the holder's hold: the next agent's worst case fits the balance, not what the
      // hold leaves free, so it waits.
      const account = (await storage.getAccount('local'))!;
      await storage.addCredits({
        account_id: 'local',
        agent_id: null,
        kind: 'topup',
        item: null,
        tokens_in: 0,
        tokens_out: 0,
        amount: Math.floor(account.reserved * 1.5) - account.balance,
        created_at: new Date(0).toISOString(),
      });
      const waiter = await runtime.create({ goal: 'waiter' });
      await announcing.promise;
      await runtime.pause(waiter.agent_id);
      announced.resolve();
      await eventually(async () => (await storage.getAgent(waiter.agent_id))?.status === 'PAUSED');
      // Let the waiting agent's step run to its end.
      for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
      const after = (await storage.getAgent(waiter.agent_id))!;
      expect(announces).toBe(1);
      expect(after.status).toBe('PAUSED');
      expect(after.status_message).toBe('Paused');
      holding.resolve();
      await runtime.waitFor(holder.agent_id);
    } finally {
      holding.resolve();
      await runtime.close();
    }
  });

  it('a pause during the model call that follows tool calls saves their results and keeps "Paused"', async () => {
    const lookUp = defineTool({
      name: 'look_up',
      description: 'Looks something up.',
      input: z.object({ q: z.string() }),
      idempotent: true,
      run: ({ q }) => `found ${q}`,
    });
    const { runtime, storage, model } = await openTestRuntime(
      (_req, { turnIndex }) =>
        turnIndex === 0
          ? { toolCalls: [{ name: 'look_up', input: { q: 'x' } }], usage: { inputTokens: 10, outputTokens: 10 } }
          : { text: 'done', delayMs: 60_000, usage: { inputTokens: 10, outputTokens: 10 } },
      { tools: [lookUp] },
    );
    try {
      const { agent_id } = await runtime.create({ goal: 'look it up' });
      await eventually(() => model.callCount === 2);
      await runtime.pause(agent_id);
      // The results of look_up, held to commit with the next turn, are saved on their own.
      await eventually(async () => (await storage.listTurns(agent_id)).length === 3);
      for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
      const after = (await storage.getAgent(agent_id))!;
      expect(after.status).toBe('PAUSED');
      expect(after.status_message).toBe('Paused');
    } finally {
      await runtime.close();
    }
  });
});
