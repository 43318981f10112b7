/**
 * 10,000 sub-agents in one process, persisted to SQLite: every child completes, the parent gets the right counts,
 * and the ledger balances.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { AgentRuntime, defineTool, sqliteStorage, type ModelRequest } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';

const N = 10_000;
const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;

describe('fan-out of 10,000 sub-agents', () => {
  it('runs every child to COMPLETED; the parent completes with the right counts; the ledger balances', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'agentry-10k-'));
    let spawnResult: { total: number; counts: Record<string, number>; results: unknown[]; more?: string } | undefined;
    const lookup = defineTool({
      name: 'lookup',
      description: 'looks an item up',
      input: z.object({ item: z.number() }),
      price: 0.01,
      idempotent: true,
      run: ({ item }) => `item ${item}`,
    });
    const model = scriptedModel({
      record: false,
      turns: (req, { turnIndex }): ScriptedTurn => {
        const goal = goalOf(req);
        if (goal === 'fan out') {
          if (turnIndex === 0) {
            return {
              toolCalls: [
                {
                  name: 'spawn_sub_agents',
                  input: { tasks: Array.from({ length: N }, (_, i) => ({ goal: `child ${i}` })) },
                },
              ],
            };
          }
          const block = req.messages[2]!.content[0] as { content: string };
          spawnResult = JSON.parse(block.content);
          return { text: 'all done' };
        }
        const i = Number(goal.slice(6));
        return turnIndex === 0
          ? { toolCalls: [{ name: 'lookup', input: { item: i } }], usage: { inputTokens: 50, outputTokens: 10 } }
          : { text: `answer ${i}`, usage: { inputTokens: 60, outputTokens: 5 } };
      },
    });
    const runtime = await AgentRuntime.open({
      storage: sqliteStorage({ path: join(dir, 'a.db') }),
      model,
      tools: [lookup],
      defaultAccount: { id: 'local', credits: 10_000 },
    });
    try {
      const { agent_id } = await runtime.create({ goal: 'fan out' });
      const parent = await runtime.waitFor(agent_id);
      expect(parent.status).toBe('COMPLETED');
      expect(parent.sub_agent_count).toBe(N);
      expect(spawnResult).toMatchObject({ total: N, counts: { COMPLETED: N } });
      expect(spawnResult!.results).toHaveLength(10);
      expect(spawnResult!.more).toContain('read_sub_agent_results');

      const completed = await runtime.storage.listAgentIdsByStatus(['COMPLETED']);
      expect(completed).toHaveLength(N + 1);
      const account = (await runtime.storage.getAccount('local'))!;
      const ledger = await runtime.storage.listLedger('local');
      expect(ledger.reduce((s, l) => s + l.amount, 0)).toBe(account.balance);
      expect(account.reserved).toBe(0);
      // every child: 2 model turns and 1 priced tool call, settled exactly (lite prices: 100 / 500 per token)
      const childSpend = 50 * 100 + 10 * 500 + 60 * 100 + 5 * 500 + 10_000;
      expect(ledger.filter((l) => l.kind === 'tool' && l.agent_id !== agent_id)).toHaveLength(N);
      const spent = -ledger.filter((l) => l.amount < 0).reduce((s, l) => s + l.amount, 0);
      const parentSpend = ledger.filter((l) => l.agent_id === agent_id).reduce((s, l) => s - l.amount, 0);
      expect(spent - parentSpend).toBe(N * childSpend);
      const page = await runtime.list({ parentId: agent_id, limit: 3 });
      expect(page.data.every((c) => c.status === 'COMPLETED' && c.message_count === 2)).toBe(true);
    } finally {
      await runtime.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
