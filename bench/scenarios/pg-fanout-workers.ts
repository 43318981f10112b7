/**
 * pg-fanout-workers (`pg-fanout-10k-3w`): the pg-fanout task — one parent spawns `--n` children through
 * spawn_sub_agents; each child calls one tool, then answers; zero-latency scripted model — on one PostgreSQL schema
 * driven by `--workers` processes (this one plus `--workers - 1` children of this same file, each a runtime with its own
 * postgresStorage(): a worker), and the same run on one worker, in the same invocation so the two walls meet the same
 * machine load. The parent is created in this process; the children are stepped by whichever worker claims them.
 *
 * Reports both walls and their ratio, how many child steps each worker ran, and the PostgreSQL server's CPU time
 * spent by each run's backends (utime + stime from /proc of the connections named by `application_name`, read before
 * the pools close; the server's background writers are not in it), as pg-fanout.ts does.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { serverCpuMs } from '../lib/postgres-cpu.js';
import { z } from '../lib/library-zod.js';
import { AgentRuntime, defineTool, type ModelRequest } from 'agentry-runtime';
import { postgresStorage } from 'agentry-runtime/storage/postgres';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { childAnswer, childGoal, peakRssMb, report } from '../lib/measure.js';

const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '10000' },
    workers: { type: 'string', default: '3' },
    lane: { type: 'string', default: '64' },
    connections: { type: 'string', default: '10' },
    // internal: this process is one of the extra workers of a run
    role: { type: 'string', default: 'main' },
    schema: { type: 'string' },
  },
  strict: false,
});
const n = Number(values.n);
const lane = Number(values.lane);
const baseUrl = process.env.AGENTRY_BENCH_POSTGRES_URL ?? 'postgres://root@127.0.0.1:5432/test';
const appNameOf = (schema: string) => `agentry_${schema}`;
const urlOf = (schema: string) => `${baseUrl}${baseUrl.includes('?') ? '&' : '?'}application_name=${appNameOf(schema)}`;
const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;

/** A worker: the fanout's model and tool (as in agentry-fanout.ts) on its own postgresStorage() of the schema. */
async function openWorker(schema: string, steps: { count: number }, account: boolean): Promise<AgentRuntime> {
  const lookup = defineTool({
    name: 'lookup',
    description: 'Looks an item up',
    input: z.object({ item: z.number() }),
    idempotent: true,
    run: ({ item }) => childAnswer(item),
  });
  const model = scriptedModel({
    record: false,
    turns: (req, { turnIndex }): ScriptedTurn => {
      const goal = goalOf(req);
      if (goal.startsWith('fan out')) {
        return turnIndex === 0
          ? {
              toolCalls: [
                {
                  name: 'spawn_sub_agents',
                  input: { tasks: Array.from({ length: n }, (_, i) => ({ goal: childGoal(i) })) },
                },
              ],
            }
          : { text: 'all children reported' };
      }
      steps.count++;
      const i = Number(/^child (\d+):/.exec(goal)![1]);
      return turnIndex === 0 ? { toolCalls: [{ name: 'lookup', input: { item: i } }] } : { text: childAnswer(i) };
    },
  });
  return AgentRuntime.open({
    storage: postgresStorage({ connectionString: urlOf(schema), schema, maxConnections: Number(values.connections) }),
    model,
    tools: [lookup],
    ...(account ? { defaultAccount: { id: 'local', credits: 1e9 } } : {}),
    concurrency: { models: lane, tools: lane },
    tracing: false,
  });
}

/** An extra worker: ready line, then steps until SIGTERM, then prints its step count and exits. */
async function runExtraWorker(schema: string): Promise<void> {
  const steps = { count: 0 };
  const runtime = await openWorker(schema, steps, false);
  process.stdout.write('ready\n');
  await new Promise<void>((resolve) => process.once('SIGTERM', () => resolve()));
  await runtime.close();
  process.stdout.write(`${JSON.stringify({ steps: steps.count })}\n`);
}

interface Extra {
  child: ChildProcess;
  ready: Promise<void>;
  /** SIGTERM, then its step count. */
  stop(): Promise<number>;
}

function startExtraWorker(schema: string): Extra {
  const child = spawn(
    process.execPath,
    [
      ...process.execArgv,
      fileURLToPath(import.meta.url),
      '--role',
      'worker',
      '--schema',
      schema,
      '--n',
      String(n),
      '--lane',
      String(lane),
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let out = '';
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const ready = new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('ready\n')) resolve();
    });
    void exited.then((code) => reject(new Error(`a worker exited with ${code} before it was ready`)));
  });
  return {
    child,
    ready,
    async stop() {
      child.kill('SIGTERM');
      const code = await exited;
      const line = /^\{"steps":\d+\}$/m.exec(out)?.[0];
      if (code !== 0 || line === undefined) throw new Error(`a worker ended with ${code}: ${out}`);
      return (JSON.parse(line) as { steps: number }).steps;
    },
  };
}

/** One run on a fresh schema with `workers` processes; checks the work happened. */
async function runOnWorkers(admin: pg.Client, workers: number): Promise<Record<string, unknown>> {
  const schema = `bench_${randomBytes(5).toString('hex')}`;
  const steps = { count: 0 };
  let main: AgentRuntime | undefined;
  const extras: Extra[] = [];
  try {
    main = await openWorker(schema, steps, true); // migrates the schema before the others open it
    for (let w = 1; w < workers; w++) extras.push(startExtraWorker(schema));
    await Promise.all(extras.map((e) => e.ready));
    const t0 = performance.now();
    const { agent_id: root } = await main.create({ goal: `fan out ${n}` });
    // The root's last step may run in another worker: its row is read (no notification in the measured path). A run
    // that stalls fails with where it stood rather than hanging the bench.
    const deadline = t0 + 600_000;
    for (;;) {
      const row = await main.storage.getAgent(root);
      if (row && ['COMPLETED', 'FAILED', 'PAUSED', 'OUT_OF_CREDITS'].includes(row.status)) {
        if (row.status !== 'COMPLETED') throw new Error(`the root ended ${row.status}`);
        break;
      }
      if (performance.now() > deadline) {
        const { rows } = await admin.query(`SELECT status, count(*)::int AS n FROM "${schema}".agents GROUP BY 1`);
        throw new Error(`${workers} worker(s): the root did not finish in 600 s; agents: ${JSON.stringify(rows)}`);
      }
      await new Promise((r) => setTimeout(r, 10));
    }
    const wallMs = performance.now() - t0;
    const cpuMs = await serverCpuMs(admin, appNameOf(schema));
    const completed = (await main.storage.listAgentIdsByStatus(['COMPLETED'])).length;
    if (completed !== n + 1) {
      const { rows } = await admin.query(`SELECT status, count(*)::int AS n FROM "${schema}".agents GROUP BY 1`);
      throw new Error(`${workers} worker(s): expected ${n + 1} COMPLETED agents, got ${JSON.stringify(rows)}`);
    }
    const account = (await main.storage.getAccount('local'))!;
    const ledger = await main.storage.listLedger('local');
    if (ledger.reduce((s, l) => s + l.amount, 0) !== account.balance) throw new Error('ledger invariant broken');
    const extraSteps = await Promise.all(extras.splice(0).map((e) => e.stop()));
    return {
      wall_ms: Math.round(wallMs),
      us_per_child: Math.round((wallMs * 1000) / n),
      server_cpu_ms: cpuMs,
      child_steps_by_worker: [steps.count, ...extraSteps],
    };
  } finally {
    for (const e of extras) e.child.kill('SIGKILL');
    await main?.close();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
  }
}

if (values.role === 'worker') {
  await runExtraWorker(String(values.schema));
} else {
  const workers = Number(values.workers);
  const admin = new pg.Client({ connectionString: baseUrl });
  await admin.connect();
  try {
    const one = await runOnWorkers(admin, 1);
    const several = await runOnWorkers(admin, workers);
    report({
      name: 'pg-fanout-workers',
      n,
      workers,
      wall_ms: Number(several.wall_ms),
      us_per_child: several.us_per_child,
      server_cpu_ms: several.server_cpu_ms,
      child_steps_by_worker: several.child_steps_by_worker,
      one_worker_wall_ms: one.wall_ms,
      one_worker_server_cpu_ms: one.server_cpu_ms,
      wall_over_one_worker: Math.round((Number(several.wall_ms) / Number(one.wall_ms)) * 100) / 100,
      peak_rss_mb: peakRssMb(),
    });
  } finally {
    await admin.end();
  }
}
