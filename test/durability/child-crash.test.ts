/**
 * A crash between a child's steps (DESIGN §4, §7 "Child agents of tools"; tool-platform issue, "Done means" item 4).
 *
 * A worker process (`child-crash-worker.ts`) runs a parent whose `research` tool spawned two children with a job of
 * their own. Each child has taken one step (alpha called `lookup`, idempotent; beta called `note`, not idempotent) and
 * is in its second model turn when the process is SIGKILLed. A second process reopens the SQLite file. Checked from
 * the database and the worker's event file:
 * - the children are resumed, not spawned again: the same two agent_ids, and the parent's re-run of `research` finds
 *   them (`reattached`);
 * - each child's first step is not redone: one model call for its turn 0 across both processes; its second turn sees
 *   the first step's tool result and submits from it;
 * - `note` ran once (its result was saved before the kill); `lookup`, whose result commits with the next model turn,
 *   ran again with the same tool_use_id (DESIGN §4: idempotent calls are rerun);
 * - the parent completes with the children's validated data, and Σ ledger = balance with nothing left reserved.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { sqliteStorage, type AgentRow, type StorageAdapter } from 'agentry';
import { CHILDREN, CHILD_INSTRUCTIONS, EXPECTED_RESULTS, PARENT_FINAL, PARENT_GOAL } from './child-crash-script.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const WORKER = fileURLToPath(new URL('./child-crash-worker.ts', import.meta.url));

interface Worker {
  lines: string[];
  stderr(): string;
  waitForLine(re: RegExp, timeoutMs?: number): Promise<string>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  kill(signal: NodeJS.Signals): void;
}

const liveWorkers = new Set<Worker>();

function startWorker(args: string[]): Worker {
  const child = spawn(process.execPath, ['--import', 'tsx', WORKER, ...args], {
    cwd: ROOT,
    env: { ...process.env, TSX_TSCONFIG_PATH: join(ROOT, 'tsconfig.json') },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
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
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('close', (code, signal) => {
      if (partial) lines.push(partial);
      done = true;
      liveWorkers.delete(worker);
      resolve({ code, signal });
      notify();
    });
  });
  const worker: Worker = {
    lines,
    stderr: () => stderr,
    exited,
    kill: (signal) => child.kill(signal),
    waitForLine(re, timeoutMs = 20_000) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => finish(new Error(`worker printed no line matching ${re} in ${timeoutMs} ms; stderr:\n${stderr}`)),
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
          if (done)
            finish(new Error(`worker exited before printing ${re}; stderr:\n${stderr}\nstdout:\n${lines.join('\n')}`));
        };
        listeners.push(check);
        check();
      });
    },
  };
  liveWorkers.add(worker);
  return worker;
}

afterEach(() => {
  for (const w of liveWorkers) w.kill('SIGKILL');
});

function readEvents(file: string): string[][] {
  return existsSync(file)
    ? readFileSync(file, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => l.split(' '))
    : [];
}

async function childrenOf(storage: StorageAdapter, parentId: string): Promise<AgentRow[]> {
  const { rows } = await storage.listAgents({ parent_id: parentId, limit: 100 });
  return rows.sort((a, b) => Number(a.spawn_key!.split('#')[1]) - Number(b.spawn_key!.split('#')[1]));
}

async function openStorage(db: string): Promise<StorageAdapter> {
  const storage = sqliteStorage({ path: db });
  await storage.init();
  return storage;
}

describe('crash between a child agent’s steps (DESIGN §4, §7)', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'agentry-child-crash-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('a SIGKILLed child resumes from its saved step in the next process; the parent re-attaches and completes with its data', async () => {
    const db = join(dir, 'children.db');
    const events = join(dir, 'events.txt');

    // --- first process: killed while both children are in their second model turn
    const first = startWorker([db, events, 'first']);
    const parentId = (await first.waitForLine(/^parent /)).split(' ')[1]!;
    await first.waitForLine(/^in-second-turn$/);
    first.kill('SIGKILL');
    const firstExit = await first.exited;
    expect(firstExit.signal, first.stderr()).toBe('SIGKILL');
    expect(
      first.lines.filter((l) => l.startsWith('error ')),
      first.stderr(),
    ).toEqual([]);

    // What the kill left on disk: two children, each with one step saved, none finished.
    let childIds: string[];
    {
      const storage = await openStorage(db);
      try {
        const parent = (await storage.getAgent(parentId))!;
        expect(parent).toMatchObject({ goal: PARENT_GOAL, status: 'ACTIVE', step_count: 1 });
        const children = await childrenOf(storage, parentId);
        expect(children.map((c) => c.goal)).toEqual(CHILDREN.map((c) => `Research ${c.topic}`));
        for (const child of children) {
          expect(child).toMatchObject({ status: 'ACTIVE', step_count: 1, root_id: parentId });
          expect(JSON.parse(child.spec!)).toMatchObject({ instructions: CHILD_INSTRUCTIONS });
        }
        childIds = children.map((c) => c.agent_id);
        const [alphaTurns, betaTurns] = await Promise.all(childIds.map((id) => storage.listTurns(id)));
        // alpha's lookup result was to commit with its second model turn, which never came back; beta's note (not
        // idempotent) was saved before that turn started.
        expect(alphaTurns!.map((t) => t.role)).toEqual(['user', 'assistant']);
        expect(betaTurns!.map((t) => t.role)).toEqual(['user', 'assistant', 'user']);
      } finally {
        await storage.close();
      }
    }

    // --- second process: recovery resumes the tree
    const second = startWorker([db, events, 'second', parentId]);
    expect(await second.waitForLine(/^done /, 30_000)).toBe('done COMPLETED Completed');
    const secondExit = await second.exited;
    expect(secondExit.code, second.stderr()).toBe(0);
    expect(
      second.lines.filter((l) => l.startsWith('error ')),
      second.stderr(),
    ).toEqual([]);

    const lines = readEvents(events);
    const modelCalls = (agentId: string) =>
      lines.filter((l) => l[0] === 'M' && l[2] === agentId).map((l) => `${l[1]}:${l[3]}`);
    // Each child: turn 0 once (first process); turn 1 killed in flight, then played again after the restart.
    for (const id of childIds) expect(modelCalls(id)).toEqual(['first:0', 'first:1', 'second:1']);
    expect(modelCalls(parentId)).toEqual(['first:0', 'second:1']);
    // The spawn was never repeated: the re-runs of research re-attached (on recovery, and when the children woke it).
    const spawns = lines.filter((l) => l[0] === 'S').map((l) => `${l[1]}:${l[2]}`);
    expect(spawns[0]).toBe('first:false');
    expect(spawns.slice(1).length).toBeGreaterThanOrEqual(1);
    expect(spawns.slice(1).every((s) => s === 'second:true')).toBe(true);
    // Tool runs: note once; lookup rerun with the same tool_use_id (its result had not been saved).
    const toolRuns = (name: string) => lines.filter((l) => l[0] === 'T' && l[2] === name);
    const [alphaId, betaId] = childIds;
    expect(toolRuns('note').map((l) => [l[1], l[3]])).toEqual([['first', betaId]]);
    const lookups = toolRuns('lookup');
    expect(lookups.map((l) => [l[1], l[3]])).toEqual([
      ['first', alphaId],
      ['second', alphaId],
    ]);
    expect(lookups[1]![4]).toBe(lookups[0]![4]);

    // The database afterwards.
    const storage = await openStorage(db);
    try {
      const parent = (await storage.getAgent(parentId))!;
      expect(parent.status, parent.status_message).toBe('COMPLETED');
      const children = await childrenOf(storage, parentId);
      expect(children.map((c) => c.agent_id)).toEqual(childIds); // same children, none added
      expect((await storage.listAgents({ limit: 100 })).rows).toHaveLength(3);
      for (const [i, child] of children.entries()) {
        expect(child.status, child.status_message).toBe('COMPLETED');
        expect(child.step_count).toBe(2);
        const turns = await storage.listTurns(child.agent_id);
        expect(turns.map((t) => t.role)).toEqual(['user', 'assistant', 'user', 'assistant', 'user']);
        const messages = await storage.listMessages(child.agent_id);
        expect(messages.at(-1)).toMatchObject({ role: 'ASSISTANT', text: JSON.stringify(EXPECTED_RESULTS[i]) });
        const calls = [
          ...(await storage.listToolCalls(child.agent_id, 1)),
          ...(await storage.listToolCalls(child.agent_id, 3)),
        ];
        expect(calls.map((c) => [c.name, c.status, c.is_error])).toEqual([
          [CHILDREN[i]!.tool, 'finished', false],
          ['submit_result', 'finished', false],
        ]);
      }
      // The parent's research call returned the validated data, and the parent finished on it.
      const [research] = await storage.listToolCalls(parentId, 1);
      expect(research).toMatchObject({ name: 'research', status: 'finished', is_error: false });
      expect(JSON.parse(research!.result!)).toEqual({
        results: childIds.map((agent_id, i) => ({ agent_id, status: 'COMPLETED', data: EXPECTED_RESULTS[i] })),
      });
      const parentMessages = await storage.listMessages(parentId);
      expect(parentMessages.at(-1)).toMatchObject({ role: 'ASSISTANT', text: PARENT_FINAL });

      // Credits: every charge on the one account, the killed turns charged nothing, no hold left behind.
      const account = (await storage.getAccount('local'))!;
      const ledger = await storage.listLedger('local');
      expect(ledger.reduce((s, l) => s + l.amount, 0)).toBe(account.balance);
      expect(account.reserved).toBe(0);
      for (const child of children) {
        const rows = ledger.filter((l) => l.agent_id === child.agent_id);
        expect(rows.filter((l) => l.kind === 'model')).toHaveLength(2);
        expect(rows.reduce((s, l) => s - l.amount, 0)).toBe(child.credits_spent);
      }
      // alpha's lookup ran twice but was charged once: only the committed run settles.
      expect(ledger.filter((l) => l.kind === 'tool').map((l) => [l.agent_id, l.item])).toEqual(
        expect.arrayContaining([
          [alphaId, 'lookup'],
          [betaId, 'note'],
        ]),
      );
      expect(ledger.filter((l) => l.kind === 'tool')).toHaveLength(2);
    } finally {
      await storage.close();
    }
  });
});
