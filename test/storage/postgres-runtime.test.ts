/**
 * The runtime on PostgreSQL, end to end: a lead fans out to 200 sub-agents that all complete with an exact ledger; a
 * paused agent stays paused across a close and a reopen of the runtime (a new pool on the same schema) and completes
 * after the resume; and, opened `exclusive`, a second runtime driving the same database is refused by the runner lock
 * (several workers on one database: test/workers/).
 * Needs PostgreSQL like postgres.test.ts (AGENTRY_TEST_POSTGRES_URL; fails instead of skipping under AGENTRY_CI_STRICT=1).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { AgentRuntime, type ModelRequest } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { postgresStorage } from 'agentry-runtime/storage/postgres';
import { dropSchemas, newSchemaName, POSTGRES_TEST_URL, postgresUnreachable } from '../support/postgres.js';
import { deferred } from '../support/runtime.js';
import { skippable } from '../support/skip.js';

const url = POSTGRES_TEST_URL;
const strict = process.env.AGENTRY_CI_STRICT === '1';
const unreachable = await postgresUnreachable();
const reachable = unreachable === null;

const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
const schemas: string[] = [];
const open: AgentRuntime[] = [];

function newSchema(): string {
  const schema = newSchemaName('agentry_rt');
  schemas.push(schema);
  return schema;
}

afterEach(async () => {
  for (const runtime of open.splice(0)) await runtime.close().catch(() => undefined);
  await dropSchemas(schemas.splice(0));
});

describe.skipIf(!reachable && !strict)(skippable('AgentRuntime on PostgreSQL', !strict && unreachable), () => {
  it('runs a lead and 200 sub-agents to COMPLETED with an exact ledger', async () => {
    const model = scriptedModel({
      record: false,
      turns: (req, { turnIndex }): ScriptedTurn => {
        if (goalOf(req) !== 'lead') return { text: `answer to ${goalOf(req)}` };
        if (turnIndex === 0) {
          const tasks = Array.from({ length: 200 }, (_, i) => ({ goal: `child ${i}` }));
          return { toolCalls: [{ name: 'spawn_sub_agents', input: { tasks } }] };
        }
        return { text: 'all done' };
      },
    });
    const storage = postgresStorage({ connectionString: url, schema: newSchema() });
    const runtime = await AgentRuntime.open({
      storage,
      model,
      builtinTools: false,
      defaultAccount: { id: 'local', credits: 1_000 },
    });
    open.push(runtime);
    const { agent_id } = await runtime.create({ goal: 'lead' });
    const lead = await runtime.waitFor(agent_id, { signal: AbortSignal.timeout(60_000) });
    expect(lead.status).toBe('COMPLETED');
    const children = await runtime.list({ parentId: agent_id, limit: 200 });
    expect(children.data).toHaveLength(200);
    expect(children.data.every((c) => c.status === 'COMPLETED')).toBe(true);
    await runtime.whenIdle();
    const account = (await storage.getAccount('local'))!;
    expect(account.reserved).toBe(0);
    const ledger = await storage.listLedger('local');
    expect(ledger.reduce((sum, l) => sum + l.amount, 0)).toBe(account.balance);
  });

  it('keeps a paused agent paused across a restart, then completes it after the resume; one runner per database when exclusive', async () => {
    const schema = newSchema();
    const release = deferred();
    const model = () =>
      scriptedModel({
        record: false,
        turns: async (_req, { turnIndex }): Promise<ScriptedTurn> => {
          if (turnIndex === 0) {
            await release.promise;
            return { toolCalls: [{ name: 'update_plan', input: { steps: [{ title: 'wait', status: 'done' }] } }] };
          }
          return { text: 'finished' };
        },
      });
    const first = await AgentRuntime.open({
      storage: postgresStorage({ connectionString: url, schema, exclusive: true }),
      model: model(),
      builtinTools: false,
      defaultAccount: { id: 'local', credits: 100 },
    });
    open.push(first);
    const { agent_id } = await first.create({ goal: 'pause me' });
    await first.pause(agent_id);
    // opened exclusive, a second runtime on the same database may not drive its agents while the first one does
    await expect(
      AgentRuntime.open({
        storage: postgresStorage({ connectionString: url, schema, exclusive: true }),
        model: model(),
        builtinTools: false,
      }),
    ).rejects.toMatchObject({ code: 'invalid_state' });
    release.resolve();
    await first.whenIdle();
    await first.close();

    const second = await AgentRuntime.open({
      storage: postgresStorage({ connectionString: url, schema, exclusive: true }),
      model: model(),
      builtinTools: false,
    });
    open.push(second);
    expect((await second.get(agent_id)).agent.status).toBe('PAUSED');
    await second.resume(agent_id);
    const done = await second.waitFor(agent_id, { signal: AbortSignal.timeout(30_000) });
    expect(done.status).toBe('COMPLETED');
  });
});
