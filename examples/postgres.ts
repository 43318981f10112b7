/**
 * agentry on PostgreSQL: a scripted agent (a stand-in for Claude, no key needed) fans out to three sub-agents on
 * `postgresStorage`; the runtime is closed and a new one, on the same database, still has the whole tree and the
 * ledger. Uses a schema of its own on AGENTRY_EXAMPLE_POSTGRES_URL (default postgres://root@127.0.0.1:5432/test)
 * and drops it at the end. Run: npx tsx examples/postgres.ts   (needs `pg` installed and a PostgreSQL server)
 *
 * In production: postgresStorage({ connectionString: process.env.DATABASE_URL! }), or AGENTRY_DB=postgres://… for
 * the default storage and the CLI (`node bin/agentry.js serve --db 'postgres://…?schema=agentry'`).
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { AgentRuntime, type ModelRequest } from 'agentry-runtime';
import { postgresStorage } from 'agentry-runtime/storage/postgres';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';

const url = process.env.AGENTRY_EXAMPLE_POSTGRES_URL ?? 'postgres://root@127.0.0.1:5432/test';
const schema = `agentry_example_${randomBytes(4).toString('hex')}`;
const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;

const model = scriptedModel({
  turns: (req, { turnIndex }): ScriptedTurn => {
    if (goalOf(req) !== 'Compare three cities') return { text: `${goalOf(req)}: done` };
    if (turnIndex === 0) {
      const tasks = ['Paris', 'Lyon', 'Nice'].map((city) => ({ goal: `Look up ${city}` }));
      return { toolCalls: [{ name: 'spawn_sub_agents', input: { tasks } }] };
    }
    return { text: 'All three looked up.' };
  },
});

try {
  const first = await AgentRuntime.open({
    storage: postgresStorage({ connectionString: url, schema }),
    model,
    builtinTools: false,
    defaultAccount: { id: 'local', credits: 10 },
  });
  const { agent_id } = await first.create({ goal: 'Compare three cities' });
  const done = await first.waitFor(agent_id);
  console.log(`first runtime: ${done.status} · ${done.sub_agent_count} sub-agents · ${done.credits_spent} credits`);
  await first.close();

  const second = await AgentRuntime.open({
    storage: postgresStorage({ connectionString: url, schema }),
    model,
    builtinTools: false,
  });
  const again = await second.get(agent_id);
  const children = await second.list({ parentId: agent_id });
  console.log(`second runtime, same database: ${again.agent.status}, ${again.messages.length} messages`);
  for (const child of children.data) {
    const { agent, messages } = await second.get(child.agent_id);
    console.log(`  ${agent.goal}: ${agent.status}, answered "${messages.at(-1)?.text}"`);
  }
  await second.close();
} finally {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await client.end();
}
