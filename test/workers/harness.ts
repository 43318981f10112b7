/**
 * The test side of the worker tests: start `worker.ts` processes on one PostgreSQL schema,
 * send them commands, signal them (SIGKILL, SIGSTOP, SIGCONT), wait on the shared log they all write, and check what
 * they left in the database: transcripts against the script, the note tool's at-most-once record, the ledger.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import { AgentRuntime, type AgentRow, type StorageAdapter, type ToolCallRow } from 'agentry-runtime';
import { scriptedModel } from 'agentry-runtime/testing';
import { postgresStorage } from 'agentry-runtime/storage/postgres';
import { NOTE_TOOL, UNKNOWN_OUTCOME_RE, readLog, scriptOf, splitTag, usageOf, type LogLine } from './script.js';
import type { WorkerConfig } from './worker.js';
import { postgresUnreachable } from '../support/postgres.js';
import { skippable } from '../support/skip.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export interface WorkerProcess {
  readonly name: string;
  readonly pid: number;
  lines: string[];
  stderr(): string;
  /** The first stdout line (printed or to come) that matches; rejects if the worker exits first or the time is up. */
  waitForLine(re: RegExp, timeoutMs?: number): Promise<string>;
  /** Sends `<command> <arg>` on stdin and resolves with the answer (rejects with an `err` answer). */
  command(command: 'create' | 'pause' | 'resume' | 'delete', arg: string, timeoutMs?: number): Promise<unknown>;
  signal(signal: NodeJS.Signals): void;
  /** Whether the process has exited (a wait on the log fails at once, with its stderr, when a watched worker died). */
  hasExited(): boolean;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const live = new Set<WorkerProcess>();

/** SIGKILLs every worker still running (after each test: a failed test leaves no process behind, none frozen). */
export async function killLiveWorkers(): Promise<void> {
  const all = [...live];
  for (const w of all) {
    w.signal('SIGKILL');
    w.signal('SIGCONT');
  }
  await Promise.all(all.map((w) => w.exited));
}

/** Starts `worker.ts` with `config` from source (tsx), and waits for its `ready` line. */
export async function startWorker(config: WorkerConfig, readyTimeoutMs = 60_000): Promise<WorkerProcess> {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', fileURLToPath(new URL('./worker.ts', import.meta.url)), JSON.stringify(config)],
    {
      cwd: ROOT,
      env: { ...process.env, TSX_TSCONFIG_PATH: join(ROOT, 'tsconfig.json') },
      stdio: ['pipe', 'pipe', 'pipe'],
    },
  );
  const lines: string[] = [];
  let partial = '';
  let stderr = '';
  let done = false;
  let listeners: Array<() => void> = [];
  const notify = () => listeners.forEach((l) => l());
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    const parts = (partial + chunk).split('\n');
    partial = parts.pop()!;
    lines.push(...parts);
    notify();
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  child.stdin.on('error', () => undefined); // a dead worker's stdin: the command's wait reports it
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('close', (code, signal) => {
      if (partial) lines.push(partial);
      done = true;
      live.delete(worker);
      resolve({ code, signal });
      notify();
    });
  });
  let next = 0;
  const waitForLine = (re: RegExp, timeoutMs = 30_000) =>
    new Promise<string>((resolve, reject) => {
      const timer = setTimeout(
        () =>
          finish(
            new Error(`worker ${config.name} printed no line matching ${re} in ${timeoutMs} ms; stderr:\n${stderr}`),
          ),
        timeoutMs,
      );
      const finish = (err: Error | null, line?: string) => {
        clearTimeout(timer);
        listeners = listeners.filter((l) => l !== check);
        if (err) reject(err);
        else resolve(line!);
      };
      const check = () => {
        const line = lines.find((l) => re.test(l));
        if (line !== undefined) return finish(null, line);
        if (done) finish(new Error(`worker ${config.name} exited before printing ${re}; stderr:\n${stderr}`));
      };
      listeners.push(check);
      check();
    });
  const worker: WorkerProcess = {
    name: config.name,
    pid: child.pid!,
    lines,
    stderr: () => stderr,
    exited,
    hasExited: () => done,
    signal: (signal) => {
      if (!done) child.kill(signal);
    },
    waitForLine,
    async command(command, arg, timeoutMs = 30_000) {
      const n = String(next++);
      child.stdin.write(`${n} ${command} ${arg}\n`);
      const line = await waitForLine(new RegExp(`^reply ${n} `), timeoutMs);
      const [, , status, ...rest] = line.split(' ');
      if (status !== 'ok') throw new Error(`${config.name}: ${command} ${arg} failed: ${rest.join(' ')}`);
      return JSON.parse(rest.join(' ')) as unknown;
    },
  };
  live.add(worker);
  await waitForLine(/^ready /, readyTimeoutMs);
  return worker;
}

/** Polls the shared log (no fixed sleeps) until `check` returns a value, or fails after `timeoutMs`. */
export async function waitForLog<T>(
  file: string,
  check: (log: LogLine[]) => T | undefined | null | false,
  timeoutMs: number,
  what: string,
  watched: readonly WorkerProcess[] = [...live],
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const dead = watched.find((w) => w.hasExited());
    if (dead) throw new Error(`worker ${dead.name} exited while waiting for ${what}; stderr:\n${dead.stderr()}`);
    const log = readLog(file);
    const value = check(log);
    if (value !== undefined && value !== null && value !== false) return value;
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; log tail:\n${tail(log)}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Polls `read` until `check` holds, or fails after `timeoutMs` with the last value read. */
export async function pollUntil<T>(
  read: () => Promise<T>,
  check: (v: T) => boolean,
  timeoutMs: number,
  what: string,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await read();
    if (check(v)) return v;
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${JSON.stringify(v)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export function tail(log: LogLine[], n = 30): string {
  return log
    .slice(-n)
    .map((l) => `${l.seq} ${l.worker} ${l.event} ${l.fields.join(' ')}`)
    .join('\n');
}

/**
 * A storage adapter on the schema for reading what the workers wrote. It is never given to a runtime that drives
 * agents, so it is no worker: it holds no lease and steps nothing.
 */
export async function openObserver(db: string): Promise<StorageAdapter> {
  const storage = postgresStorage({ connectionString: db, maxConnections: 4 });
  await storage.init();
  return storage;
}

/**
 * Creates agents through a runtime of the test process that steps nothing (`scheduler: 'manual'`). Call it before
 * any worker starts: a runtime opening recovers the agents it finds (it releases their credit holds).
 */
export async function createAgents(db: string, goals: readonly string[], credits: number): Promise<string[]> {
  const runtime = await AgentRuntime.open({
    storage: postgresStorage({ connectionString: db, maxConnections: 4 }),
    scheduler: 'manual',
    model: scriptedModel({ record: false, turns: [{ text: 'never called: this runtime steps nothing' }] }),
    builtinTools: false,
    defaultAccount: { id: 'local', credits },
  });
  try {
    // A few at a time: one by one, 1,000 creations take as long as the run they prepare.
    const ids: string[] = new Array<string>(goals.length);
    let next = 0;
    const creator = async () => {
      for (let i = next++; i < goals.length; i = next++) ids[i] = (await runtime.create({ goal: goals[i]! })).agent_id;
    };
    await Promise.all(Array.from({ length: 4 }, creator));
    return ids;
  } finally {
    await runtime.close();
  }
}

/** Runs `fn` over `items`, `concurrency` at a time (reading 1,000 transcripts one by one is slow). */
export async function forEachConcurrently<T>(
  items: readonly T[],
  concurrency: number,
  fn: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const run = async () => {
    for (let i = next++; i < items.length; i = next++) await fn(items[i]!);
  };
  await Promise.all(Array.from({ length: concurrency }, run));
}

export async function allAgents(storage: StorageAdapter): Promise<AgentRow[]> {
  const rows: AgentRow[] = [];
  let after: string | undefined;
  for (;;) {
    const page = await storage.listAgents({ limit: 1_000, ...(after !== undefined ? { after } : {}) });
    rows.push(...page.rows);
    if (page.rows.length < 1_000 || page.last === null) return rows;
    after = page.last;
  }
}

export async function toolCallsOf(storage: StorageAdapter, agentId: string): Promise<ToolCallRow[]> {
  const calls: ToolCallRow[] = [];
  for (const t of await storage.listTurns(agentId)) {
    if (t.role === 'assistant') calls.push(...(await storage.listToolCalls(agentId, t.idx)));
  }
  return calls;
}

/**
 * Checks a COMPLETED agent against its goal's script: the public transcript is the goal and each scripted text once, in
 * order; the model's log alternates assistant turns and tool results with contiguous indexes; tokens add up. Returns
 * the worker that committed each assistant turn, and the agent's tool calls.
 */
export async function expectScripted(
  storage: StorageAdapter,
  agent: AgentRow,
): Promise<{ authors: string[]; calls: ToolCallRow[] }> {
  const script = scriptOf(agent.goal);
  expect(agent.status, `${agent.goal}: ${agent.status_message}`).toBe('COMPLETED');
  const messages = await storage.listMessages(agent.agent_id);
  expect(
    messages.map((m) => [m.role, m.role === 'ASSISTANT' ? splitTag(m.text).text : m.text]),
    agent.goal,
  ).toEqual([['USER', agent.goal], ...script.map((t) => ['ASSISTANT', t.text])]);
  expect(agent.step_count, agent.goal).toBe(script.length);
  expect(agent.token_count, agent.goal).toBe(
    script.reduce((s, _t, i) => s + usageOf(i).inputTokens + usageOf(i).outputTokens, 0),
  );

  const turns = await storage.listTurns(agent.agent_id);
  expect(
    turns.map((t) => [t.idx, t.role]),
    agent.goal,
  ).toEqual([
    [0, 'user'],
    ...script
      .flatMap((t) => (t.toolCalls.length ? ['assistant', 'user'] : ['assistant']))
      .map((role, i) => [i + 1, role]),
  ]);
  const authors: string[] = [];
  turns
    .filter((t) => t.role === 'assistant')
    .forEach((t, i) => {
      const blocks = JSON.parse(t.content) as Array<{ type: string; name?: string; input?: unknown; text?: string }>;
      const texts = blocks.filter((b) => b.type === 'text').map((b) => splitTag(b.text!));
      expect(
        texts.map((x) => x.text),
        agent.goal,
      ).toEqual([script[i]!.text]);
      authors.push(texts[0]!.worker ?? '?');
      expect(
        blocks.filter((b) => b.type === 'tool_use').map((b) => [b.name, b.input]),
        agent.goal,
      ).toEqual(script[i]!.toolCalls.map((c) => [c.name, c.input]));
    });
  const calls = await toolCallsOf(storage, agent.agent_id);
  for (const c of calls) {
    expect(c.status, `${agent.goal} ${c.name}`).toBe('finished');
    // A call is either done (its own result) or was running in a worker that went away (unknown outcome, never rerun).
    if (!UNKNOWN_OUTCOME_RE.test(c.result ?? ''))
      expect(c.is_error, `${agent.goal} ${c.name}: ${c.result}`).toBe(false);
    else expect(c.idempotent, `${c.name} ended unknown`).toBe(false);
  }
  return { authors, calls };
}

/**
 * The note tool's record against the database: no call took effect twice (by call id, and by agent and step: a step
 * is one call), every effect belongs to a recorded call, and every call that finished with its own result took effect
 * exactly once. Returns how many unknown outcomes had (or had not) taken effect.
 */
export function expectNotesAtMostOnce(
  log: LogLine[],
  callsByAgent: Map<string, ToolCallRow[]>,
): { unknownRan: number; unknownNotRun: number; notes: number } {
  const effects = log.filter((l) => l.event === 'N');
  const byCall = new Map<string, number>();
  const byStep = new Map<string, number>();
  for (const e of effects) {
    const [agent, call, step] = e.fields;
    byCall.set(`${agent} ${call}`, (byCall.get(`${agent} ${call}`) ?? 0) + 1);
    byStep.set(`${agent} ${step}`, (byStep.get(`${agent} ${step}`) ?? 0) + 1);
  }
  expect(
    [...byCall].filter(([, n]) => n > 1),
    'note calls that took effect twice',
  ).toEqual([]);
  expect(
    [...byStep].filter(([, n]) => n > 1),
    'steps noted twice',
  ).toEqual([]);
  const known = new Set<string>();
  let unknownRan = 0;
  let unknownNotRun = 0;
  for (const [agentId, calls] of callsByAgent) {
    for (const c of calls.filter((c) => c.name === NOTE_TOOL)) {
      const key = `${agentId} ${c.tool_use_id}`;
      known.add(key);
      if (UNKNOWN_OUTCOME_RE.test(c.result ?? '')) {
        if (byCall.has(key)) unknownRan++;
        else unknownNotRun++;
      } else expect(byCall.get(key), `${key} finished with "${c.result}" but took no effect`).toBe(1);
    }
  }
  expect(
    [...byCall.keys()].filter((k) => !known.has(k)),
    'note effects of no recorded call',
  ).toEqual([]);
  return { unknownRan, unknownNotRun, notes: effects.length };
}

/** The ledger invariant: Σ ledger = balance >= 0 and nothing reserved. */
export async function expectLedgerSettled(storage: StorageAdapter, accountId = 'local') {
  const account = (await storage.getAccount(accountId))!;
  const ledger = await storage.listLedger(accountId);
  expect(ledger.reduce((s, l) => s + l.amount, 0)).toBe(account.balance);
  expect(account.balance).toBeGreaterThanOrEqual(0);
  expect(account.reserved).toBe(0);
  return { account, ledger };
}

/** Model calls (`M+`) of `agentId` in the log, optionally only those below line `after`. */
export function modelStarts(log: LogLine[], agentId: string, after = -1): LogLine[] {
  return log.filter((l) => l.event === 'M+' && l.fields[0] === agentId && l.seq > after);
}

/**
 * Whether the PostgreSQL suites run: they skip (saying why in their name) when the server does not answer, except
 * under AGENTRY_CI_STRICT=1, where they run and fail.
 */
export async function postgresGate(): Promise<{ skip: boolean; name(title: string): string }> {
  const strict = process.env.AGENTRY_CI_STRICT === '1';
  const unreachable = await postgresUnreachable();
  return {
    skip: unreachable !== null && !strict,
    name: (title) => skippable(title, !strict && unreachable),
  };
}

/** A scratch directory for the shared log, removed by `removeScratch`. */
export function scratchDir(): string {
  return mkdtempSync(join(tmpdir(), 'agentry-workers-'));
}

/** Removes the scratch directory, unless AGENTRY_WORKERS_KEEP=1 asks to keep the logs (for a failure's post-mortem). */
export function removeScratch(dir: string): void {
  if (process.env.AGENTRY_WORKERS_KEEP === '1') console.log(`worker logs kept in ${dir}`);
  else rmSync(dir, { recursive: true, force: true });
}
