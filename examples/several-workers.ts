/**
 * Several workers on one PostgreSQL database: two runtimes — in production two processes (`agentry serve` or
 * `agentry worker` started twice), here two in one process, each with its own postgresStorage(), which is what makes
 * them two workers. Sixty agents are created through the first; a worker steps two at a time here
 * (`concurrency.runSlots`) and claims only a bounded number ahead of that (32), so the second claims what the first
 * has no room for, and the agents finish across both.
 * Each worker's stand-in model (no key needed) signs its answers, so the output shows who ran what.
 *
 * Uses a schema of its own on AGENTRY_EXAMPLE_POSTGRES_URL (default postgres://root@127.0.0.1:5432/test) and drops it
 * at the end. Run: npx tsx examples/several-workers.ts   (needs `pg` installed and a PostgreSQL server)
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { AgentRuntime, type ModelRequest } from 'agentry-runtime';
import { postgresStorage } from 'agentry-runtime/storage/postgres';
import { scriptedModel } from 'agentry-runtime/testing';

const url = process.env.AGENTRY_EXAMPLE_POSTGRES_URL ?? 'postgres://root@127.0.0.1:5432/test';
const schema = `agentry_example_${randomBytes(4).toString('hex')}`;
const TASKS = 60;
const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;

/** One worker: its own storage adapter (its own worker id and leases) and a model that signs with the worker's name. */
function openWorker(name: string, first: boolean): Promise<AgentRuntime> {
  return AgentRuntime.open({
    storage: postgresStorage({ connectionString: url, schema, maxConnections: 4, heartbeatMs: 500 }),
    // A fifth of a second per answer, as if a model were thinking, so that the work outlasts one worker's two slots.
    model: scriptedModel({ turns: (req) => ({ text: `${goalOf(req)}: done by worker ${name}`, delayMs: 200 }) }),
    builtinTools: false,
    concurrency: { runSlots: 2 },
    ...(first ? { defaultAccount: { id: 'local', credits: 1000 } } : {}),
  });
}

let workers: AgentRuntime[] = [];
try {
  workers = [await openWorker('A', true), await openWorker('B', false)];
  const [a, b] = workers as [AgentRuntime, AgentRuntime];
  console.log(`worker A: ${a.storage.workers?.workerId ?? 'no worker id'}`);
  console.log(`worker B: ${b.storage.workers?.workerId ?? 'no worker id'}`);

  // Every agent is created through A; any worker with room may step it.
  const ids: string[] = [];
  for (let i = 1; i <= TASKS; i++) ids.push((await a.create({ goal: `Task ${i}` })).agent_id);
  // waitFor hears of an agent's end wherever it ran (the workers announce changes to each other).
  const finished = await Promise.all(ids.map((id) => a.waitFor(id)));

  const by: Record<string, number[]> = { A: [], B: [] };
  for (const [i, agent] of finished.entries()) {
    const { messages } = await b.get(agent.agent_id); // either runtime reads any agent of the database
    const signed = /: done by worker ([AB])$/.exec(messages.at(-1)?.text ?? '');
    if (agent.status === 'COMPLETED' && signed) by[signed[1]!]!.push(i + 1);
  }
  console.log(`${finished.filter((f) => f.status === 'COMPLETED').length} of ${TASKS} COMPLETED`);
  for (const name of ['A', 'B'])
    console.log(`worker ${name} finished ${by[name]!.length}: tasks ${by[name]!.join(', ')}`);
  const account = await b.accounts.get('local');
  console.log(`credits left: ${account.balance} (one account, shared by both workers)`);
} finally {
  for (const w of workers) await w.close();
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await client.end();
}
