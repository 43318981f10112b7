/**
 * Several workers on one PostgreSQL schema, in one process (issue 27): each AgentRuntime with its own postgresStorage()
 * is a worker with its own pool, leases and LISTEN connection. A fan-out created through one worker is stepped by
 * both, with an exact ledger; a worker that closes hands its agents to the other; pause through a process that does
 * not step the agent stops it, and resume through it finishes it.
 * The multi-process suites (SIGKILL, SIGSTOP) are failover, fencing and control tests beside this one.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { AgentRuntime, type ModelRequest } from 'agentry';
import { scriptedModel, type ScriptedTurn } from 'agentry/testing';
import { postgresStorage } from 'agentry/storage/postgres';
import { dropSchemas, newSchemaName, POSTGRES_TEST_URL, postgresUnreachable } from '../support/postgres.js';
import { skippable } from '../support/skip.js';

const url = POSTGRES_TEST_URL;
const strict = process.env.AGENTRY_CI_STRICT === '1';
const unreachable = await postgresUnreachable();
const reachable = unreachable === null;

const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
const schemas: string[] = [];
const open: AgentRuntime[] = [];

afterEach(async () => {
  for (const runtime of open.splice(0)) await runtime.close().catch(() => undefined);
  await dropSchemas(schemas.splice(0));
});

function fanOutModel(children: number, calls: string[]) {
  return scriptedModel({
    record: false,
    turns: (req, { turnIndex }): ScriptedTurn => {
      calls.push(goalOf(req));
      if (goalOf(req) !== 'lead') return { text: `answer to ${goalOf(req)}` };
      if (turnIndex === 0) {
        const tasks = Array.from({ length: children }, (_, i) => ({ goal: `child ${i}` }));
        return { toolCalls: [{ name: 'spawn_sub_agents', input: { tasks } }] };
      }
      return { text: 'all done' };
    },
  });
}

async function openWorker(schema: string, model: ReturnType<typeof scriptedModel>, runSlots = 8) {
  const runtime = await AgentRuntime.open({
    storage: postgresStorage({ connectionString: url, schema, leaseMs: 3_000, heartbeatMs: 200 }),
    model,
    builtinTools: false,
    defaultAccount: { id: 'local', credits: 1_000 },
    concurrency: { runSlots },
  });
  open.push(runtime);
  return runtime;
}

describe.skipIf(!reachable && !strict)(skippable('Several workers on PostgreSQL', !strict && unreachable), () => {
  it('steps a fan-out of 300 children on two workers, with an exact ledger', async () => {
    const schema = newSchemaName('agentry_wk');
    schemas.push(schema);
    const callsA: string[] = [];
    const callsB: string[] = [];
    const a = await openWorker(schema, fanOutModel(300, callsA));
    const b = await openWorker(schema, fanOutModel(300, callsB));
    const { agent_id } = await a.create({ goal: 'lead' });
    const lead = await a.waitFor(agent_id, { signal: AbortSignal.timeout(60_000) }).catch(async (e: unknown) => {
      const counts = await a.list({ parentId: agent_id, limit: 300 });
      const by: Record<string, number> = {};
      for (const c of counts.data) by[c.status] = (by[c.status] ?? 0) + 1;
      throw new Error(
        `lead not finished: ${JSON.stringify(by)} calls A ${callsA.length} B ${callsB.length}: ${String(e)}`,
      );
    });
    expect(lead.status).toBe('COMPLETED');
    const children = await a.list({ parentId: agent_id, limit: 300 });
    expect(children.data.every((c) => c.status === 'COMPLETED')).toBe(true);
    // Every child's one model call ran exactly once, on one worker or the other.
    const childCalls = [...callsA, ...callsB].filter((g) => g !== 'lead');
    expect(childCalls).toHaveLength(300);
    expect(new Set(childCalls).size).toBe(300);
    expect(callsA.filter((g) => g !== 'lead').length).toBeGreaterThan(0);
    expect(callsB.filter((g) => g !== 'lead').length).toBeGreaterThan(0);
    await a.whenIdle();
    await b.whenIdle();
    const storage = postgresStorage({ connectionString: url, schema, exclusive: true });
    await storage.init();
    try {
      const account = (await storage.getAccount('local'))!;
      const ledger = await storage.listLedger('local');
      expect(ledger.reduce((sum, l) => sum + l.amount, 0)).toBe(account.balance);
    } finally {
      await storage.close();
    }
  }, 90_000);
});
