/**
 * What one agent did, for its timeline (core/agent-views.ts `activityOf`): its ledger rows are read by agent and
 * bounded, never by reading its account's whole ledger, which one busy tenant can grow to millions of rows; its tool
 * calls are one read, not one per turn.
 */
import { describe, expect, it } from 'vitest';
import { MAX_ACTIVITY_LEDGER_ROWS, activityOf } from '../../src/core/agent-views.js';
import type { LedgerRow, StorageAdapter, ToolCallRow, TurnRow } from '../../src/storage/adapter.js';
import { memoryStorage } from '../../src/storage/memory.js';
import { account, agent, at } from '../storage/contract.js';

const refund = (agentId: string | null, n: number): LedgerRow => ({
  account_id: 'acct-a',
  agent_id: agentId,
  kind: agentId === null ? 'topup' : 'refund',
  item: agentId === null ? null : 'web_search',
  tokens_in: 0,
  tokens_out: 0,
  amount: n,
  created_at: at(n),
});

/** The storage with `listLedger` refused: an activity read must not touch the account's ledger. */
function withoutAccountLedger(storage: StorageAdapter): StorageAdapter {
  return new Proxy(storage, {
    get(target, key, receiver) {
      if (key === 'listLedger') return () => Promise.reject(new Error('read the whole account ledger'));
      const value: unknown = Reflect.get(target, key, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

describe('activityOf', () => {
  it("returns the agent's own ledger rows, oldest first, without reading its account's ledger", async () => {
    const storage = memoryStorage();
    await storage.createAccount(account('acct-a', 10));
    const [one, two] = [agent('agent-1'), agent('agent-2')];
    await storage.insertAgents([one, two], [], []);
    for (const [id, n] of [
      ['agent-1', 1],
      ['agent-2', 2],
      [null, 3],
      ['agent-1', 4],
    ] as const) {
      await storage.addCredits(refund(id, n));
    }
    const activity = await activityOf(withoutAccountLedger(storage), one);
    expect(activity.ledger).toEqual([refund('agent-1', 1), refund('agent-1', 4)]);
    expect(activity.ledgerTruncated).toBe(false);
  });

  it(`keeps the newest ${MAX_ACTIVITY_LEDGER_ROWS} rows and says older ones were left out`, async () => {
    const storage = memoryStorage();
    await storage.createAccount(account('acct-a', 0));
    const one = agent('agent-1');
    await storage.insertAgents([one], [], []);
    for (let n = 1; n <= MAX_ACTIVITY_LEDGER_ROWS + 2; n++) await storage.addCredits(refund('agent-1', n));
    const activity = await activityOf(storage, one);
    expect(activity.ledger).toHaveLength(MAX_ACTIVITY_LEDGER_ROWS);
    expect(activity.ledger[0]).toEqual(refund('agent-1', 3));
    expect(activity.ledger.at(-1)).toEqual(refund('agent-1', MAX_ACTIVITY_LEDGER_ROWS + 2));
    expect(activity.ledgerTruncated).toBe(true);
  });

  it('reads the tool calls of a 100-turn run in one query, by turn, without asking turn by turn', async () => {
    const storage = memoryStorage();
    await storage.createAccount(account('acct-a', 10));
    const one = agent('agent-1');
    const turns: TurnRow[] = Array.from({ length: 200 }, (_, idx) => ({
      agent_id: 'agent-1',
      idx,
      role: idx % 2 === 0 ? 'user' : 'assistant',
      content: '[]',
      created_at: at(idx),
    }));
    await storage.insertAgents([one], [], turns);
    const call = (turn: number, n: number): ToolCallRow => ({
      agent_id: 'agent-1',
      tool_use_id: `tu_${turn}_${n}`,
      turn_idx: turn,
      name: 'web_search',
      input: '{}',
      status: 'finished',
      idempotent: true,
      result: '[]',
      is_error: false,
      updated_at: at(turn),
    });
    const calls = turns.filter((t) => t.role === 'assistant').flatMap((t) => [call(t.idx, 1), call(t.idx, 2)]);
    // Written newest turn first: the answer is in turn order all the same (within a turn, in the order recorded).
    for (let turn = 199; turn > 0; turn -= 2) await storage.putToolCalls(calls.filter((c) => c.turn_idx === turn));
    const reads = new Map<string, number>();
    const counted = new Proxy(storage, {
      get(target, key, receiver) {
        const value: unknown = Reflect.get(target, key, receiver);
        if (typeof value !== 'function') return value;
        return (...args: unknown[]) => {
          reads.set(String(key), (reads.get(String(key)) ?? 0) + 1);
          return (value as (...a: unknown[]) => unknown).apply(target, args);
        };
      },
    });
    const activity = await activityOf(counted, one);
    expect(activity.toolCalls).toEqual(calls);
    expect(reads.get('listToolCalls') ?? 0).toBe(0);
    expect([...reads.values()].reduce((a, b) => a + b, 0)).toBe(4); // turns, tool calls, ledger rows, status marks
    expect(activity.toolCallsTruncated).toBe(false);
  });
});
