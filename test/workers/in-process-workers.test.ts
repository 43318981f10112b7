/**
 * Several workers on one PostgreSQL schema, in one process: each AgentRuntime with its own postgresStorage()
 * is a worker with its own pool, leases and LISTEN connection. A fan-out created through one worker is stepped by
 * both, with an exact ledger; a worker that closes hands its agents to the other; pause through a process that does
 * not step the agent stops it, and resume through it finishes it.
 * The multi-process suites (SIGKILL, SIGSTOP) are failover, fencing and control tests beside this one.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { AgentRuntime, type ModelRequest } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { postgresStorage } from 'agentry-runtime/storage/postgres';
import { dropSchemas, newSchemaName, POSTGRES_TEST_URL, postgresUnreachable } from '../support/postgres.js';
import { skippable } from '../support/skip.js';

const url = POSTGRES_TEST_URL;
const strict = process.env.AGENTRY_CI_STRICT === '1';
const unreachable = await postgresUnreachable();
const reachable = unreachable === null;

const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
const schemas: string[] = [];
const open: AgentRuntime[] = [];

async function until(check: () => boolean | Promise<boolean>, what: string, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

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

  it('pauses through a process that does not step the agent: its model call is aborted, none starts after; resume there finishes it', async () => {
    const schema = newSchemaName('agentry_wk');
    schemas.push(schema);
    const log: string[] = [];
    let firstCall = true;
    const base = scriptedModel({ record: false, turns: () => ({ text: 'finished' }) });
    const model = {
      ...base,
      async generate(req: ModelRequest, opts: { signal: AbortSignal }) {
        log.push('call');
        if (firstCall) {
          firstCall = false;
          // Hangs until aborted: the pause must reach this worker and abort it.
          await new Promise<void>((_, reject) =>
            opts.signal.addEventListener('abort', () => reject(opts.signal.reason as Error), { once: true }),
          );
        }
        return base.generate(req, opts);
      },
    };
    const a = await openWorker(schema, model as unknown as ReturnType<typeof scriptedModel>);
    // The front end: opened 'manual', it steps nothing.
    const front = await AgentRuntime.open({
      storage: postgresStorage({ connectionString: url, schema }),
      model: base,
      builtinTools: false,
      scheduler: 'manual',
    });
    open.push(front);
    const { agent_id } = await front.create({ goal: 'slow' });
    await until(() => log.length === 1, 'the worker to start the model call');
    const paused = await front.pause(agent_id);
    expect(paused.status).toBe('PAUSED');
    log.push('paused');
    await until(async () => (await a.load()).runSlots.running === 0, 'the worker to drop the paused agent');
    expect(log).toEqual(['call', 'paused']); // aborted, and nothing started after the pause answered
    await front.resume(agent_id);
    await until(async () => (await front.get(agent_id)).agent.status === 'COMPLETED', 'the resumed agent to finish');
    expect(log).toEqual(['call', 'paused', 'call']);
  }, 60_000);

  it('deletes through another process a tree stepping in two workers: their work stops', async () => {
    const schema = newSchemaName('agentry_wk');
    schemas.push(schema);
    const calls: string[] = [];
    const hanging = (goal: string) => goal.startsWith('child');
    const base = fanOutModel(80, calls); // more than one worker claims ahead (twice its 4 run slots)
    const model = {
      ...base,
      async generate(req: ModelRequest, opts: { signal: AbortSignal }) {
        if (hanging(goalOf(req))) {
          calls.push(goalOf(req));
          await new Promise<void>((_, reject) =>
            opts.signal.addEventListener('abort', () => reject(opts.signal.reason as Error), { once: true }),
          );
        }
        return base.generate(req, opts);
      },
    };
    const a = await openWorker(schema, model as unknown as ReturnType<typeof scriptedModel>, 4);
    const b = await openWorker(schema, model as unknown as ReturnType<typeof scriptedModel>, 4);
    const front = await AgentRuntime.open({
      storage: postgresStorage({ connectionString: url, schema }),
      model: base,
      builtinTools: false,
      scheduler: 'manual',
    });
    open.push(front);
    const { agent_id } = await front.create({ goal: 'lead' });
    // Both workers are in children's model calls (4 run slots each).
    await until(() => a.load().runSlots.running > 0 && b.load().runSlots.running > 0, 'both workers to step children');
    await front.delete(agent_id);
    await until(
      () => a.load().runSlots.running === 0 && b.load().runSlots.running === 0,
      'both workers to stop the deleted tree',
    );
    await expect(front.get(agent_id)).rejects.toMatchObject({ code: 'not_found' });
  }, 60_000);
});
