/**
 * Status marks: the core keeps the status changes an operator or the credits cause (pause, resume, the start of a
 * wait for credits) with the change, and none for the routine moves every agent makes, so that a fan-out of
 * thousands of children pays no extra row per child.
 */
import { describe, expect, it } from 'vitest';
import { memoryStorage, type ModelRequest, type StorageAdapter } from 'agentry-runtime';
import { deferred, eventually, openTestRuntime } from '../support/runtime.js';

const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;

/** Memory storage that counts the status changes asked to be kept as marks. */
function countingMarks(): { storage: StorageAdapter; marked: string[] } {
  const inner = memoryStorage();
  const marked: string[] = [];
  const storage: StorageAdapter = Object.create(inner) as StorageAdapter;
  storage.changeStatus = async (id, change, at) => {
    if (change.mark) marked.push(`${id} ${change.to}`);
    return inner.changeStatus(id, change, at);
  };
  return { storage, marked };
}

describe('status marks', () => {
  it('a fan-out of 2,000 children writes none; a pause and a resume write one each', async () => {
    const { storage, marked } = countingMarks();
    const holding = deferred();
    const { runtime } = await openTestRuntime(
      async (req, { turnIndex }) => {
        const goal = goalOf(req);
        if (goal === 'hold') {
          await holding.promise;
          return { text: 'held' };
        }
        if (goal === 'fan out' && turnIndex === 0) {
          const tasks = Array.from({ length: 2_000 }, (_, i) => ({ goal: `child ${i}` }));
          return { toolCalls: [{ name: 'spawn_sub_agents', input: { tasks } }] };
        }
        return { text: 'done' };
      },
      { storage, builtinTools: false },
    );
    try {
      // Credits enough for every child at once: none waits for credits (a wait is marked, see below).
      await runtime.accounts.addCredits('local', 1_000_000);
      const parent = await runtime.create({ goal: 'fan out' });
      expect((await runtime.waitFor(parent.agent_id)).status).toBe('COMPLETED');
      const children = await storage.listDescendantIds(parent.agent_id);
      expect(children).toHaveLength(2_000);
      expect(marked).toEqual([]);
      for (const id of [parent.agent_id, ...children.slice(0, 50)]) {
        expect(await storage.listStatusMarks(id)).toEqual([]);
      }

      const held = await runtime.create({ goal: 'hold' });
      await eventually(async () => (await storage.getAgent(held.agent_id))?.status === 'ACTIVE');
      await runtime.pause(held.agent_id);
      await runtime.resume(held.agent_id);
      expect(marked).toEqual([`${held.agent_id} PAUSED`, `${held.agent_id} ACTIVE`]);
      const { statusMarks } = await runtime.activity(held.agent_id);
      expect(statusMarks.map((m) => [m.status, m.previous, m.message])).toEqual([
        ['PAUSED', 'ACTIVE', 'Paused'],
        ['ACTIVE', 'PAUSED', 'Resuming'],
      ]);
    } finally {
      holding.resolve();
      await runtime.close();
    }
  });

  it("marks the start of an agent's wait for credits", async () => {
    const { storage } = countingMarks();
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
      // The balance covers the next agent's worst case, but not beside the holder's hold: it waits.
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
      await eventually(async () => (await storage.listStatusMarks(waiter.agent_id)).length === 1);
      holding.resolve();
      expect((await runtime.waitFor(waiter.agent_id)).status).toBe('COMPLETED');
      const marks = await storage.listStatusMarks(waiter.agent_id);
      expect(marks.map((m) => [m.status, m.previous, m.message])).toEqual([
        ['ACTIVE', 'ACTIVE', 'Waiting for credits held by 1 running call'],
      ]);
      // The holder never waited: nothing kept of its run.
      await runtime.waitFor(holder.agent_id);
      expect(await storage.listStatusMarks(holder.agent_id)).toEqual([]);
    } finally {
      holding.resolve();
      await runtime.close();
    }
  });
});
