/**
 * The credit gate says which calls wait for credits: a tree whose children's model calls queue behind each other's
 * holds is counted by its root (and by its account), with the credits those calls ask for, and the count falls back to
 * 0 once a top-up lets them through.
 */
import { describe, expect, it } from 'vitest';
import { AgentRuntime, memoryStorage, type ModelRequest } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import type { CreditGate } from '../../src/core/credit-gate.js';
import { eventually } from '../support/runtime.js';

const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
const LEAD = 'lead';
const CHILDREN = 6;

describe('calls waiting for credits', () => {
  it('counts the children that wait for credits by tree and account, and 0 again after a top-up', async () => {
    // The children's model calls stay in flight (holding their credits) until released: with a balance that covers
    // about two worst-case holds, the others wait in the gate's queue.
    let inModel = 0;
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const model = scriptedModel({
      record: false,
      turns: async (req, { turnIndex }): Promise<ScriptedTurn> => {
        if (goalOf(req) === LEAD) {
          if (turnIndex === 0) {
            const tasks = Array.from({ length: CHILDREN }, (_, i) => ({ goal: `child ${i}` }));
            return {
              toolCalls: [{ name: 'spawn_sub_agents', input: { tasks } }],
              usage: { inputTokens: 10, outputTokens: 10 },
            };
          }
          return { text: 'all done', usage: { inputTokens: 10, outputTokens: 10 } };
        }
        inModel++;
        await released;
        return { text: `answer to ${goalOf(req)}`, usage: { inputTokens: 10, outputTokens: 2 } };
      },
    });
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model,
      builtinTools: false,
      defaultAccount: { id: 'local', credits: 5 },
    });
    const gate = (runtime as unknown as { parts: { credits: CreditGate } }).parts.credits;
    try {
      const { agent_id: root } = await runtime.create({ goal: LEAD });
      expect(await runtime.creditWaits(root)).toEqual({ calls: 0, oldest_since: null, needed_credits: 0 });

      // Every child is either in its model call (holding) or waiting for credits, and some wait.
      await eventually(
        async () => {
          const w = await runtime.creditWaits(root);
          return w.calls > 0 && w.calls + inModel === CHILDREN;
        },
        10_000,
        'the children that do not hold credits wait for them',
      );
      const waits = await runtime.creditWaits(root);
      expect(waits.calls).toBe(CHILDREN - inModel);
      expect(waits.needed_credits).toBeGreaterThan(0);
      expect(Date.parse(waits.oldest_since!)).toBeLessThanOrEqual(Date.now());
      // A child's page shows its tree's waits; the account's count is the same (it has only this tree).
      const child = (await runtime.list({ parentId: root, limit: 1 })).data[0]!;
      expect((await runtime.creditWaits(child.agent_id)).calls).toBe(waits.calls);
      expect(gate.waitingOf('local')).toMatchObject({ calls: waits.calls, neededMicros: waits.needed_credits * 1e6 });
      expect(gate.waitingOfTree(root).calls).toBe(waits.calls);
      expect(gate.waitingOf('someone-else').calls).toBe(0);

      await runtime.accounts.addCredits('local', 100);
      await eventually(
        async () => (await runtime.creditWaits(root)).calls === 0,
        10_000,
        'the top-up lets them through',
      );
      expect(inModel).toBe(CHILDREN);
      expect(gate.waitingOf('local')).toEqual({ calls: 0, oldestSince: null, neededMicros: 0 });

      release();
      expect((await runtime.waitFor(root)).status).toBe('COMPLETED');
    } finally {
      release();
      await runtime.close();
    }
  });
});
