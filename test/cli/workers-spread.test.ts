/**
 * Workers share the load, from the CLI: two `agentry serve` and one `agentry worker` on one PostgreSQL
 * schema, a 200-child tree created through one serve. Each process talks to a fake Messages API of its own, so the
 * test sees which process made which model call and when it started and ended; every call takes 2 s (abortable).
 *
 * - Spread: every process makes at least 15 % of the children's model calls, and with 50 run slots per process the
 *   tree's wall on three processes is at most 0.6 × its wall on one. The ratio is structural: with 2 s of latency per
 *   call, 200 children of 8 calls on 50 slots take four rounds of 16 s on one process and two on three (0.53 with
 *   the root's own calls, 0.5 at best); CPU is not what bounds it, though each step's own work adds to each call.
 * - Takeover: the busiest process is SIGKILLed mid-tree; another process starts a model call for one of the agents
 *   it was calling for within 5 s (the default gone-worker grace, 3 s, plus a sweep and a claim), and the tree
 *   completes with every child's steps exactly once, the ledger settled and nothing left reserved.
 *
 * Needs a PostgreSQL server (AGENTRY_TEST_POSTGRES_URL; fails instead of skipping under AGENTRY_CI_STRICT=1).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { StorageAdapter } from 'agentry-runtime';
import { startFakeAnthropic, type FakeAnthropic, type FakeMessagesRequest } from 'agentry-runtime/testing';
import { CLI, cliEnv, eventually, ROOT, runCli, startServe, tempDir, type ServeProcess } from '../http/helpers.js';
import { dropSchemas, newSchemaName, postgresUnreachable, urlWithSchema } from '../support/postgres.js';
import { skippable } from '../support/skip.js';
import { allAgents, openObserver } from '../workers/harness.js';

const strict = process.env.AGENTRY_CI_STRICT === '1';
const unreachable = await postgresUnreachable();

const CHILDREN = 200;
/** Model calls per child: seven plan updates, then the answer. */
const CALLS = 8;
const LATENCY_MS = 2_000;
const RUN_SLOTS = 50;

/** One model call as a process's fake API saw it. */
interface Call {
  process: string;
  goal: string;
  turn: number;
  startedAt: number;
  endedAt: number | null;
}

const treeGoal = (label: string) => `tree ${label}: spawn ${CHILDREN} children of ${CALLS} calls`;
const childGoal = (label: string, j: number) => `child ${label}.${j}: ${CALLS} calls`;

function goalOf(body: FakeMessagesRequest): string {
  const first = body.messages[0]?.content;
  if (typeof first === 'string') return first;
  return (first ?? []).map((b) => (typeof b.text === 'string' ? b.text : '')).join(' ');
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
  });
}

/**
 * The model of one process: a tree goal spawns the children then answers; a child updates its plan `CALLS - 1` times
 * then answers. Every call waits `LATENCY_MS` and is recorded in `calls`.
 */
function startTreeModel(process: string, calls: Call[]): Promise<FakeAnthropic> {
  return startFakeAnthropic({
    handler: async (body, info) => {
      const goal = goalOf(body);
      const turn = body.messages.filter((m) => m.role === 'assistant').length;
      const call: Call = { process, goal, turn, startedAt: Date.now(), endedAt: null };
      calls.push(call);
      await sleep(LATENCY_MS, info.signal);
      call.endedAt = Date.now();
      const usage = { input_tokens: 50, output_tokens: 5 };
      const tree = /^tree (\S+):/.exec(goal);
      if (tree) {
        if (turn > 0) return { text: 'All children done.', usage };
        const tasks = Array.from({ length: CHILDREN }, (_, j) => ({ goal: childGoal(tree[1]!, j) }));
        return { content: [{ type: 'tool_use', name: 'spawn_sub_agents', input: { tasks } }], usage };
      }
      if (turn < CALLS - 1) {
        const steps = [{ title: `call ${turn + 1} of ${CALLS}`, status: 'in_progress' }];
        return { content: [{ type: 'tool_use', name: 'update_plan', input: { steps } }], usage };
      }
      return { text: 'Done.', usage };
    },
  });
}

interface Proc {
  name: string;
  child: ChildProcess;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Starts `agentry worker ...` and waits for its ready line. */
function startCliWorker(name: string, args: string[], env: NodeJS.ProcessEnv): Promise<Proc> {
  return new Promise((resolveStart, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CLI, 'worker', ...args], {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    const timer = setTimeout(() => reject(new Error(`worker not ready in 30 s\n${out}`)), 30_000);
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (!/^agentry worker ready /m.test(out)) return;
      clearTimeout(timer);
      resolveStart({
        name,
        child,
        async stop(signal = 'SIGTERM') {
          if (child.exitCode === null && child.signalCode === null) child.kill(signal);
          return exited;
        },
      });
    });
    child.stderr.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.once('exit', (code) => reject(new Error(`worker exited with ${code} before it was ready\n${out}`)));
  });
}

function asProc(name: string, serve: ServeProcess): Proc {
  return { name, child: serve.child, stop: (signal) => serve.stop(signal) };
}

const running = new Set<Proc>();
const fakes: FakeAnthropic[] = [];

interface Cluster {
  db: string;
  procs: Proc[];
  /** The serves' base URLs, by process name. */
  urls: Map<string, string>;
  apiKey: string;
  calls: Call[];
}

/** `serves` serve processes (the first prints the key) and `workers` worker processes on a fresh schema. */
async function startCluster(
  prefix: string,
  serves: number,
  workers: number,
  schemas: string[],
  runSlots = RUN_SLOTS,
): Promise<Cluster> {
  const schema = newSchemaName(prefix);
  schemas.push(schema);
  const db = urlWithSchema(schema);
  const calls: Call[] = [];
  const envOf = async (name: string) => {
    const fake = await startTreeModel(name, calls);
    fakes.push(fake);
    return cliEnv({ ANTHROPIC_BASE_URL: fake.url, ANTHROPIC_API_KEY: 'test-key' });
  };
  const args = ['--db', db, '--run-slots', String(runSlots), '--log-level', 'warn'];
  const first = await startServe(args, await envOf('serve-1'));
  const procs: Proc[] = [asProc('serve-1', first)];
  const urls = new Map([['serve-1', first.url]]);
  running.add(procs[0]!);
  // Enough credits that no reservation waits for another's (50 calls in flight per process, 4,096 tokens each).
  const topUp = await runCli(['credits', 'add', '100000', '--db', db]);
  expect(topUp.code, topUp.stderr).toBe(0);
  const more = await Promise.all([
    ...Array.from({ length: serves - 1 }, async (_, i) => {
      const name = `serve-${i + 2}`;
      const serve = await startServe(args, await envOf(name));
      urls.set(name, serve.url);
      return asProc(name, serve);
    }),
    ...Array.from({ length: workers }, async (_, i) => {
      const name = `worker-${i + 1}`;
      return startCliWorker(name, args.slice(0, 4), await envOf(name));
    }),
  ]);
  for (const p of more) running.add(p);
  procs.push(...more);
  return { db, procs, urls, apiKey: first.apiKey!, calls };
}

async function createTree(cluster: Cluster, via: string, label: string): Promise<string> {
  const response = await fetch(`${cluster.urls.get(via)}/api/agents`, {
    method: 'POST',
    headers: { 'x-api-key': cluster.apiKey, 'content-type': 'application/json' },
    body: JSON.stringify({ goal: treeGoal(label) }),
  });
  expect(response.status).toBe(201);
  return ((await response.json()) as { agent_id: string }).agent_id;
}

/** Polls the tree's root through a serve until it is COMPLETED (any other end fails). */
async function untilCompleted(cluster: Cluster, via: string, rootId: string, timeoutMs: number): Promise<number> {
  return eventually(
    async () => {
      const response = await fetch(`${cluster.urls.get(via)}/api/agents/${rootId}`, {
        headers: { 'x-api-key': cluster.apiKey },
      });
      const { agent } = (await response.json()) as { agent: { status: string; status_message: string | null } };
      if (agent.status === 'FAILED' || agent.status === 'OUT_OF_CREDITS') {
        throw new Error(`the tree ended ${agent.status}: ${agent.status_message}`);
      }
      return agent.status === 'COMPLETED' ? Date.now() : undefined;
    },
    'the tree to complete',
    timeoutMs,
  );
}

/** SIGTERMs every process of the cluster still running; each exits 0 (its floats of credits go back as it closes). */
async function stopGracefully(cluster: Cluster): Promise<void> {
  for (const p of cluster.procs.filter((p) => running.has(p))) {
    expect(await p.stop('SIGTERM'), p.name).toBe(0);
    running.delete(p);
  }
}

/** Every child ran its calls exactly once (none lost, none repeated), and the ledger is settled with nothing held. */
async function expectTreeExact(db: string, rootId: string): Promise<void> {
  const observer: StorageAdapter = await openObserver(db);
  try {
    const agents = await allAgents(observer);
    const children = agents.filter((a) => a.parent_id === rootId);
    expect(children).toHaveLength(CHILDREN);
    expect(children.filter((c) => c.status !== 'COMPLETED').map((c) => `${c.goal}: ${c.status}`)).toEqual([]);
    expect(children.filter((c) => c.step_count !== CALLS).map((c) => `${c.goal}: ${c.step_count} steps`)).toEqual([]);
    for (const c of children.slice(0, 20)) {
      const messages = await observer.listMessages(c.agent_id);
      expect(messages.map((m) => m.role)).toEqual(['USER', 'ASSISTANT']);
    }
    const root = agents.find((a) => a.agent_id === rootId)!;
    expect(root.status).toBe('COMPLETED');
    expect(root.step_count).toBe(2);
    const account = (await observer.getAccount('serve'))!;
    const ledger = await observer.listLedger('serve');
    expect(ledger.reduce((s, l) => s + l.amount, 0)).toBe(account.balance);
    expect(account.reserved).toBe(0);
  } finally {
    await observer.close();
  }
}

/** Calls in flight per process every `stepMs` from `from` (for the log: how the tree spread over time). */
function timeline(cluster: Cluster, from: number, to: number, stepMs = 2_000): string {
  const rows: string[] = [];
  for (let t = from; t <= to; t += stepMs) {
    const counts = cluster.procs.map(
      (p) =>
        cluster.calls.filter((c) => c.process === p.name && c.startedAt <= t && (c.endedAt ?? Infinity) > t).length,
    );
    rows.push(`${((t - from) / 1000).toFixed(0)}s:${counts.join('/')}`);
  }
  const children = cluster.procs.map(
    (p) =>
      new Set(cluster.calls.filter((c) => c.process === p.name && c.goal.startsWith('child ')).map((c) => c.goal)).size,
  );
  return `in flight ${rows.join(' ')}; children called for ${children.join('/')}`;
}

/** Each process's share of the children's model calls. */
function shares(cluster: Cluster): Map<string, number> {
  const childCalls = cluster.calls.filter((c) => c.goal.startsWith('child '));
  return new Map(
    cluster.procs.map((p) => [p.name, childCalls.filter((c) => c.process === p.name).length / childCalls.length]),
  );
}

async function stopAll(): Promise<void> {
  for (const p of running) await p.stop('SIGKILL');
  running.clear();
  for (const f of fakes.splice(0)) await f.close();
}

describe('run slots, claim-ahead and the gone-worker grace as settings', () => {
  it('`serve --help`, `worker --help` and the README document them', async () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    for (const command of ['serve', 'worker']) {
      const usage = await runCli([command, '--help']);
      expect(usage.code).toBe(0);
      for (const flag of ['--run-slots <n>', '--claim-ahead <n>', '--gone-after-ms <ms>']) {
        expect(usage.stdout, `${command} --help`).toContain(flag);
      }
      for (const variable of ['$AGENTRY_RUN_SLOTS', '$AGENTRY_CLAIM_AHEAD', '$AGENTRY_GONE_AFTER_MS']) {
        expect(usage.stdout, `${command} --help`).toContain(variable);
      }
    }
    for (const flag of ['--run-slots', '--claim-ahead', '--gone-after-ms']) expect(readme).toContain(`| \`${flag}\``);
  });

  it('refuses the PostgreSQL-only ones with a SQLite file, and a bad number', async () => {
    const dir = tempDir('agentry-spread-');
    try {
      const db = join(dir.dir, 'a.db');
      const grace = await runCli(['worker', '--db', db, '--gone-after-ms', '1000']);
      expect(grace.code).toBe(2);
      expect(grace.stderr).toContain('--gone-after-ms: only for a postgres:// database');
      const ahead = await runCli(['worker', '--db', db, '--claim-ahead', '4']);
      expect(ahead.code).toBe(2);
      expect(ahead.stderr).toContain('--claim-ahead: only for a postgres:// database');
      const bad = await runCli(['worker', '--db', db, '--run-slots', 'many']);
      expect(bad.code).toBe(2);
      expect(bad.stderr).toContain('--run-slots must be a whole number, got many');
    } finally {
      dir.remove();
    }
  });
});

describe.skipIf(unreachable !== null && !strict)(
  skippable('a tree spreads over every process on one PostgreSQL schema', !strict && unreachable),
  () => {
    const schemas: string[] = [];
    afterEach(stopAll);
    afterAll(() => dropSchemas(schemas));

    it(`${CHILDREN} children through one serve: every process makes ≥ 15 % of their calls; 3 processes ≤ 0.6 × 1 in wall`, async () => {
      const one = await startCluster('agentry_spread_one', 1, 0, schemas);
      const t1 = Date.now();
      const root1 = await createTree(one, 'serve-1', 'one');
      const wallOne = (await untilCompleted(one, 'serve-1', root1, 240_000)) - t1;
      await stopGracefully(one);
      await expectTreeExact(one.db, root1);
      await stopAll();

      const three = await startCluster('agentry_spread_three', 2, 1, schemas);
      const t3 = Date.now();
      const root3 = await createTree(three, 'serve-1', 'three');
      const end3 = await untilCompleted(three, 'serve-1', root3, 240_000);
      const wallThree = end3 - t3;
      console.log(timeline(three, t3, end3));
      await stopGracefully(three);
      await expectTreeExact(three.db, root3);
      const share = shares(three);
      console.log(
        `spread: wall on 1 process ${wallOne} ms, on 3 ${wallThree} ms (ratio ${(wallThree / wallOne).toFixed(2)}); ` +
          `shares of the children's calls ${JSON.stringify(Object.fromEntries([...share].map(([k, v]) => [k, v.toFixed(2)])))}`,
      );
      for (const [name, s] of share)
        expect(s, `${name}'s share of the children's model calls`).toBeGreaterThanOrEqual(0.15);
      expect(wallThree / wallOne).toBeLessThanOrEqual(0.6);
    }, 600_000);

    it('SIGKILL of the busiest process mid-tree: another starts a call for one of its agents within 5 s; nothing duplicated', async () => {
      // Room for 300 agents on three processes: when one dies, the others have free slots for its agents.
      const cluster = await startCluster('agentry_spread_kill', 2, 1, schemas, 2 * RUN_SLOTS);
      const root = await createTree(cluster, 'serve-1', 'kill');
      const inFlight = (name: string) =>
        cluster.calls.filter((c) => c.process === name && c.endedAt === null && c.goal.startsWith('child '));
      // Mid-tree: every process is calling the model for children of its own.
      await eventually(
        async () => (cluster.procs.every((p) => inFlight(p.name).length > 0) ? true : undefined),
        'every process to be calling the model for children',
        120_000,
      );
      const victim = cluster.procs.reduce((a, b) => (inFlight(b.name).length > inFlight(a.name).length ? b : a));
      const orphans = new Set(inFlight(victim.name).map((c) => c.goal));
      await victim.stop('SIGKILL');
      running.delete(victim);
      const killedAt = Date.now();
      const takeover = await eventually(
        async () =>
          cluster.calls.find((c) => c.process !== victim.name && c.startedAt >= killedAt && orphans.has(c.goal)),
        'another process to call the model for one of the victim’s agents',
        60_000,
      );
      console.log(
        `takeover: ${victim.name} killed with ${orphans.size} calls in flight; ${takeover.process} called for ` +
          `${takeover.goal} ${takeover.startedAt - killedAt} ms after the kill`,
      );
      expect(takeover.startedAt - killedAt).toBeLessThanOrEqual(5_000);
      const via = [...cluster.urls.keys()].find((name) => name !== victim.name)!;
      await untilCompleted(cluster, via, root, 240_000);
      console.log(timeline(cluster, killedAt - 10_000, Date.now()));
      await stopGracefully(cluster);
      await expectTreeExact(cluster.db, root);
    }, 600_000);
  },
);
