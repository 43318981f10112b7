/**
 * Sub-agents: spawning, durable waiting, STARTING_UP rows of the status table, and tree semantics.
 */
import { describe, expect, it } from 'vitest';
import { AgentRuntime, memoryStorage, type ModelRequest, type StorageAdapter } from 'agentry-runtime';
import { scriptedModel } from 'agentry-runtime/testing';
import type { ScriptedTurn } from 'agentry-runtime/testing';
import { eventually, openTestRuntime } from '../support/runtime.js';
import { SPAWN_CHUNK } from '../../src/core/sub-agents.js';

const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;

/** Parent goal "fan out N" spawns N children "child i"; each child answers "answer i" after one tool call. */
function fanOutScript(childTurns: 'one' | 'two' = 'two', delayMs = 0) {
  return (req: ModelRequest, { turnIndex }: { turnIndex: number }): ScriptedTurn => {
    const goal = goalOf(req);
    const fan = /^fan out (\d+)$/.exec(goal);
    if (fan) {
      if (turnIndex === 0) {
        const n = Number(fan[1]);
        return {
          toolCalls: [
            {
              name: 'spawn_sub_agents',
              input: { tasks: Array.from({ length: n }, (_, i) => ({ goal: `child ${i}` })) },
            },
          ],
        };
      }
      return { text: `parent done after ${turnIndex} turns` };
    }
    const i = goal.replace('child ', '');
    if (childTurns === 'two' && turnIndex === 0) {
      return {
        toolCalls: [{ name: 'update_plan', input: { steps: [{ title: `work ${i}`, status: 'in_progress' }] } }],
        delayMs,
      };
    }
    return { text: `answer ${i}`, delayMs };
  };
}

describe('sub-agents', () => {
  it('a parent spawns children, waits without a run slot, and gets counts and first results', async () => {
    const { runtime, model } = await openTestRuntime(fanOutScript(), { concurrency: { runSlots: 2 } });
    const { agent_id } = await runtime.create({ goal: 'fan out 25' });
    const parent = await runtime.waitFor(agent_id);
    expect(parent.status).toBe('COMPLETED');
    expect(parent.sub_agent_count).toBe(25);
    const children = await runtime.list({ parentId: agent_id, limit: 100 });
    expect(children.data).toHaveLength(25);
    expect(children.data.every((c) => c.status === 'COMPLETED')).toBe(true);
    // with 2 run slots, 25 children could only finish because the waiting parent gave its slot up
    const toolResult = model.calls.find((c) => goalOf(c) === 'fan out 25' && c.messages.length === 3)!;
    const result = JSON.parse((toolResult.messages[2]!.content[0] as { content: string }).content);
    expect(result.total).toBe(25);
    expect(result.counts).toEqual({ COMPLETED: 25 });
    expect(result.results).toHaveLength(10);
    expect(result.results[0]).toMatchObject({ index: 0, status: 'COMPLETED', result: 'answer 0' });
    expect(result.more).toContain('read_sub_agent_results');
    await runtime.close();
  });

  it('read_sub_agent_results pages through the rest', async () => {
    let page: unknown;
    const { runtime } = await openTestRuntime((req, ctx) => {
      if (goalOf(req) === 'fan out 15' && ctx.turnIndex === 1) {
        const spawnId = (req.messages[1]!.content[0] as { id: string }).id;
        return { toolCalls: [{ name: 'read_sub_agent_results', input: { spawn_id: spawnId, offset: 10, limit: 10 } }] };
      }
      if (goalOf(req) === 'fan out 15' && ctx.turnIndex === 2) {
        page = JSON.parse((req.messages[4]!.content[0] as { content: string }).content);
        return { text: 'done' };
      }
      return fanOutScript('one')(req, ctx);
    });
    const { agent_id } = await runtime.create({ goal: 'fan out 15' });
    expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
    expect(page).toMatchObject({ total: 15, offset: 10 });
    expect((page as { results: Array<{ result: string }> }).results.map((r) => r.result)).toEqual([
      'answer 10',
      'answer 11',
      'answer 12',
      'answer 13',
      'answer 14',
    ]);
    await runtime.close();
  });

  it('status table rows of spawned agents: STARTING_UP -> ACTIVE with a run slot; pause and resume of a STARTING_UP child', async () => {
    const { runtime } = await openTestRuntime(fanOutScript('one'), { scheduler: 'manual' });
    const { agent_id } = await runtime.create({ goal: 'fan out 2' });
    await runtime.step(agent_id); // spawn turn
    await runtime.step(agent_id); // runs the spawn tool: children STARTING_UP, parent suspends
    const kids = (await runtime.list({ parentId: agent_id })).data;
    expect(kids.map((k) => k.status)).toEqual(['STARTING_UP', 'STARTING_UP']);
    const [a, b] = kids.map((k) => k.agent_id).reverse() as [string, string];
    // STARTING_UP + pause -> PAUSED; resume of one that never had a slot -> STARTING_UP
    expect((await runtime.pause(a)).status).toBe('PAUSED');
    expect((await runtime.resume(a)).status).toBe('STARTING_UP');
    // STARTING_UP + resume -> unchanged
    expect((await runtime.resume(a)).status).toBe('STARTING_UP');
    // gets a run slot -> ACTIVE (and here completes in the same step)
    const stepped = await runtime.step(a);
    expect(stepped.status).toBe('COMPLETED');
    // an ACTIVE child that is paused resumes to ACTIVE
    expect((await runtime.get(b)).agent.status).toBe('STARTING_UP');
    await runtime.close();
  });

  it('STARTING_UP -> OUT_OF_CREDITS when nothing is left when it would get a run slot', async () => {
    const { runtime, storage } = await openTestRuntime(fanOutScript('one'), {
      scheduler: 'manual',
      limits: { maxOutputTokens: 100 },
      // 1 credit covers the byte bound of the runtime's own tools, not of every built-in tool's definition: this
      // scripted model cannot count tokens, and nothing is learned before the first call
      builtinTools: false,
    });
    const { agent_id } = await runtime.create({ goal: 'fan out 1', maxCredits: 1 });
    await runtime.step(agent_id);
    await runtime.step(agent_id);
    const [child] = (await runtime.list({ parentId: agent_id })).data;
    expect(child!.status).toBe('STARTING_UP');
    // spend what is left of the tree's cap, then let the child try to start
    const root = (await storage.getAgent(agent_id))!;
    const left = 1_000_000 - root.tree_spent;
    expect(
      await storage.reserve({ id: 'r', account_id: 'local', agent_id, root_id: agent_id, amount: left }),
    ).toBeNull();
    await storage.settle([
      {
        reservation_id: 'r',
        root_id: agent_id,
        ledger: {
          account_id: 'local',
          agent_id,
          kind: 'tool',
          item: 'test',
          tokens_in: 0,
          tokens_out: 0,
          cost: left,
          created_at: root.updated_at,
        },
      },
    ]);
    expect((await runtime.step(child!.agent_id)).status).toBe('OUT_OF_CREDITS');
    await runtime.close();
  });

  it('pausing the parent mid fan-out pauses the tree: no child starts another step; resume finishes all', async () => {
    const { runtime, model } = await openTestRuntime(fanOutScript('two', 2), { concurrency: { runSlots: 8 } });
    const { agent_id } = await runtime.create({ goal: 'fan out 200' });
    await eventually(
      async () => (await runtime.list({ parentId: agent_id, status: 'COMPLETED', limit: 1 })).data.length > 0,
      10_000,
      'first child',
    );
    await runtime.pause(agent_id);
    await runtime.whenIdle();
    const callsAtPause = model.callCount;
    const counts = async () => {
      const all = (await runtime.list({ parentId: agent_id, limit: 1000 })).data;
      return all.reduce<Record<string, number>>((c, a) => ({ ...c, [a.status]: (c[a.status] ?? 0) + 1 }), {});
    };
    const paused = await counts();
    expect(paused.PAUSED).toBeGreaterThan(0);
    expect(paused.ACTIVE ?? 0).toBe(0);
    expect(paused.STARTING_UP ?? 0).toBe(0);
    expect((await runtime.get(agent_id)).agent.status).toBe('PAUSED');
    await runtime.whenIdle();
    expect(model.callCount).toBe(callsAtPause); // nothing stepped while paused

    await runtime.resume(agent_id);
    expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
    expect(await counts()).toEqual({ COMPLETED: 200 });
    await runtime.close();
  });

  it('deleting the parent deletes the whole tree', async () => {
    const { runtime } = await openTestRuntime(fanOutScript('two', 5), { concurrency: { runSlots: 4 } });
    const { agent_id } = await runtime.create({ goal: 'fan out 50' });
    await eventually(async () => (await runtime.get(agent_id)).agent.sub_agent_count === 50, 10_000, 'spawn');
    const childIds = (await runtime.list({ parentId: agent_id, limit: 100 })).data.map((c) => c.agent_id);
    await runtime.delete(agent_id);
    await runtime.whenIdle();
    expect((await runtime.list({ limit: 1000 })).data).toEqual([]);
    for (const id of childIds) {
      expect(await runtime.storage.getAgent(id)).toBeNull();
      expect(await runtime.storage.listMessages(id)).toEqual([]);
      expect(await runtime.storage.listTurns(id)).toEqual([]);
    }
    expect((await runtime.accounts.get('local')).reserved).toBe(0);
    await runtime.close();
  });

  it('credits running out mid fan-out stop the tree without overspend; a top-up and resume finish everything', async () => {
    const { runtime, storage } = await openTestRuntime(fanOutScript('two'), {
      defaultAccount: { id: 'local', credits: 2 },
      limits: { maxOutputTokens: 200 },
      concurrency: { runSlots: 16 },
    });
    const { agent_id } = await runtime.create({ goal: 'fan out 100' });
    const stopped = await runtime.waitFor(agent_id);
    expect(stopped.status).toBe('OUT_OF_CREDITS');
    await runtime.whenIdle();
    const account = (await storage.getAccount('local'))!;
    expect(account.balance).toBeGreaterThanOrEqual(0);
    expect(account.reserved).toBe(0);
    const kids = (await runtime.list({ parentId: agent_id, limit: 1000 })).data;
    const unfinished = kids.filter((k) => k.status !== 'COMPLETED');
    expect(unfinished.length).toBeGreaterThan(0);
    expect(unfinished.every((k) => k.status === 'OUT_OF_CREDITS')).toBe(true);
    const ledger = await storage.listLedger('local');
    expect(ledger.reduce((s, l) => s + l.amount, 0)).toBe(account.balance);

    await runtime.accounts.addCredits('local', 100);
    await runtime.resume(agent_id);
    expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
    const after = (await runtime.list({ parentId: agent_id, limit: 1000 })).data;
    expect(after.every((k) => k.status === 'COMPLETED')).toBe(true);
    await runtime.close();
  });

  it('a spawn cut short by a crash is completed by the recovered parent, never spawning a child twice', async () => {
    const storage = memoryStorage();
    let inserts = 0;
    let hang = true;
    // The first runtime "dies" while writing its second chunk of children: that write never returns.
    const dying: StorageAdapter = new Proxy(storage, {
      get(target, key, receiver) {
        if (key === 'insertAgents') {
          return (...args: Parameters<StorageAdapter['insertAgents']>) =>
            ++inserts === 3 && hang ? new Promise<void>(() => {}) : target.insertAgents(...args); // 1: the root, 2: chunk one
        }
        const value = Reflect.get(target, key, receiver) as unknown;
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    const model = scriptedModel({ turns: fanOutScript('one'), record: false });
    const first = await AgentRuntime.open({
      storage: dying,
      model,
      scheduler: 'manual',
      defaultAccount: { id: 'local', credits: 100_000 },
    });
    const { agent_id } = await first.create({ goal: 'fan out 1500' });
    await first.step(agent_id); // the model asks for 1,500 sub-agents
    void first.step(agent_id); // the spawn writes its first chunk, then the process dies mid-write
    await eventually(
      async () => (await storage.countChildrenByStatus(agent_id, '')).STARTING_UP === SPAWN_CHUNK,
      5_000,
      'first chunk',
    );
    hang = false;

    const second = await AgentRuntime.open({ storage, model });
    expect((await second.waitFor(agent_id)).status).toBe('COMPLETED');
    const children = await storage.findAgentsBySpawnKey(agent_id, '');
    expect(children).toHaveLength(1500);
    const indexes = children.map((c) => Number(c.spawn_key!.split('#')[1])).sort((a, b) => a - b);
    expect(indexes).toEqual(Array.from({ length: 1500 }, (_, i) => i));
    expect(children.every((c) => c.status === 'COMPLETED')).toBe(true);
    await second.close();
  });
});
