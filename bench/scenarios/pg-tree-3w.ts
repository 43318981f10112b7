/**
 * pg-tree-workers (`pg-tree-3w`): one root spawns `--n` children (200) through spawn_sub_agents; each child
 * makes `--calls` model calls (3 plan updates, then the answer) of `--latency-ms` (300) each, on one PostgreSQL schema
 * driven by `--workers` processes (this one plus `--workers - 1` children of this same file, each a runtime with its
 * own postgresStorage() and `--slots` run slots: a worker), then by this process alone, in the same invocation so the
 * two walls meet the same machine load. The root is created in this process, as a tree created through one `serve`.
 *
 * Latency, not CPU, bounds it: the ratio of the walls says whether the tree spread (≈ 0.5 for 200 children on 3 × 50
 * slots against 1 × 50, with the root's own calls), and each process's share of the children's model calls says how.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { AgentRuntime, type ModelRequest } from 'agentry-runtime';
import { postgresStorage } from 'agentry-runtime/storage/postgres';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { childGoal, peakRssMb, report } from '../lib/measure.js';

const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '200' },
    workers: { type: 'string', default: '3' },
    calls: { type: 'string', default: '4' },
    'latency-ms': { type: 'string', default: '300' },
    slots: { type: 'string', default: '50' },
    // internal: this process is one of the extra workers of a run
    role: { type: 'string', default: 'main' },
    schema: { type: 'string' },
  },
  strict: false,
});
const n = Number(values.n);
const calls = Number(values.calls);
const latencyMs = Number(values['latency-ms']);
const slots = Number(values.slots);
const baseUrl = process.env.AGENTRY_BENCH_POSTGRES_URL ?? 'postgres://root@127.0.0.1:5432/test';
const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;

/** A worker: the tree's model on its own postgresStorage() of the schema; counts the children's model calls. */
async function openWorker(schema: string, childCalls: { count: number }, account: boolean): Promise<AgentRuntime> {
  const model = scriptedModel({
    record: false,
    turns: (req, { turnIndex }): ScriptedTurn => {
      if (goalOf(req).startsWith('tree of')) {
        return turnIndex === 0
          ? {
              toolCalls: [
                {
                  name: 'spawn_sub_agents',
                  input: { tasks: Array.from({ length: n }, (_, i) => ({ goal: childGoal(i) })) },
                },
              ],
              delayMs: latencyMs,
            }
          : { text: 'all children reported', delayMs: latencyMs };
      }
      childCalls.count++;
      return turnIndex < calls - 1
        ? {
            toolCalls: [
              { name: 'update_plan', input: { steps: [{ title: `call ${turnIndex + 1}`, status: 'in_progress' }] } },
            ],
            delayMs: latencyMs,
          }
        : { text: 'done', delayMs: latencyMs };
    },
  });
  return AgentRuntime.open({
    storage: postgresStorage({ connectionString: baseUrl, schema }),
    model,
    builtinTools: false,
    ...(account ? { defaultAccount: { id: 'local', credits: 1e9 } } : {}),
    concurrency: { runSlots: slots },
    tracing: false,
  });
}

/** An extra worker: ready line, then steps until SIGTERM, then prints its count of children's calls and exits. */
async function runExtraWorker(schema: string): Promise<void> {
  const childCalls = { count: 0 };
  const runtime = await openWorker(schema, childCalls, false);
  process.stdout.write('ready\n');
  await new Promise<void>((resolve) => process.once('SIGTERM', () => resolve()));
  await runtime.close();
  process.stdout.write(`${JSON.stringify({ calls: childCalls.count })}\n`);
}

interface Extra {
  child: ChildProcess;
  ready: Promise<void>;
  /** SIGTERM, then its count of children's model calls. */
  stop(): Promise<number>;
}

function startExtraWorker(schema: string): Extra {
  const args = ['--role', 'worker', '--schema', schema, '--n', String(n), '--calls', String(calls)];
  args.push('--latency-ms', String(latencyMs), '--slots', String(slots));
  const child = spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url), ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
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
      const line = /^\{"calls":\d+\}$/m.exec(out)?.[0];
      if (code !== 0 || line === undefined) throw new Error(`a worker ended with ${code}: ${out}`);
      return (JSON.parse(line) as { calls: number }).calls;
    },
  };
}

/** One run on a fresh schema with `workers` processes; checks the tree completed. */
async function runOnWorkers(admin: pg.Client, workers: number): Promise<{ wall_ms: number; shares: number[] }> {
  const schema = `bench_${randomBytes(5).toString('hex')}`;
  const childCalls = { count: 0 };
  let main: AgentRuntime | undefined;
  const extras: Extra[] = [];
  try {
    main = await openWorker(schema, childCalls, true); // migrates the schema before the others open it
    for (let w = 1; w < workers; w++) extras.push(startExtraWorker(schema));
    await Promise.all(extras.map((e) => e.ready));
    const t0 = performance.now();
    const { agent_id: root } = await main.create({ goal: `tree of ${n}` });
    const deadline = t0 + 600_000;
    for (;;) {
      const row = await main.storage.getAgent(root);
      if (row && ['COMPLETED', 'FAILED', 'PAUSED', 'OUT_OF_CREDITS'].includes(row.status)) {
        if (row.status !== 'COMPLETED') throw new Error(`the root ended ${row.status}`);
        break;
      }
      if (performance.now() > deadline) throw new Error(`${workers} process(es): the tree did not finish in 600 s`);
      await new Promise((r) => setTimeout(r, 10));
    }
    const wallMs = performance.now() - t0;
    const completed = (await main.storage.listAgentIdsByStatus(['COMPLETED'])).length;
    if (completed !== n + 1) throw new Error(`${workers} process(es): ${completed} of ${n + 1} agents COMPLETED`);
    const perProcess = [childCalls.count, ...(await Promise.all(extras.splice(0).map((e) => e.stop())))];
    const total = perProcess.reduce((a, b) => a + b, 0);
    return { wall_ms: Math.round(wallMs), shares: perProcess.map((c) => Math.round((c / total) * 100) / 100) };
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
      name: 'pg-tree-workers',
      n,
      workers,
      calls_per_child: calls,
      latency_ms: latencyMs,
      run_slots: slots,
      wall_ms: several.wall_ms,
      one_process_wall_ms: one.wall_ms,
      wall_over_one_process: Math.round((several.wall_ms / one.wall_ms) * 100) / 100,
      child_call_shares: several.shares,
      min_child_call_share: Math.min(...several.shares),
      peak_rss_mb: peakRssMb(),
    });
  } finally {
    await admin.end();
  }
}
