/**
 * The test side of the crash tests that run a scenario in a worker process and SIGKILL it (`child-crash`,
 * `enrich-crash`, `find-all-crash`): start a `*-worker.ts` from source with tsx, wait for the lines it prints, kill it
 * and check how it ended, then reopen the SQLite file it left and read the event file it wrote. The worker side of
 * the same protocol is `worker-main.ts`. Each test keeps its own scenario and its own checks.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import type { AgentRow, LedgerRow, StorageAdapter } from 'agentry-runtime';
import { storageAt } from './worker-main.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export interface Worker {
  lines: string[];
  stderr(): string;
  /** Resolves with the first line (already printed or to come) that matches; rejects if the worker exits first. */
  waitForLine(re: RegExp, timeoutMs?: number): Promise<string>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  kill(signal: NodeJS.Signals): void;
}

/** Workers not yet exited; `killLiveWorkers` after each test so a failed test leaves no process behind. */
const liveWorkers = new Set<Worker>();

export function killLiveWorkers(): void {
  for (const w of liveWorkers) w.kill('SIGKILL');
}

/** Starts `test/durability/<file>` with `args` in a new node process, from source (tsx). */
export function startWorker(file: string, args: string[]): Worker {
  const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL(file, import.meta.url)), ...args], {
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

/** The `error <agent_id> <error>` lines a worker prints for the runtime's `error` events: none is expected. */
function expectNoRuntimeErrors(worker: Worker): void {
  expect(
    worker.lines.filter((l) => l.startsWith('error ')),
    worker.stderr(),
  ).toEqual([]);
}

/** SIGKILLs the first worker and checks it died of the kill, with no runtime error before it. */
export async function killWorker(worker: Worker): Promise<void> {
  worker.kill('SIGKILL');
  expect((await worker.exited).signal, worker.stderr()).toBe('SIGKILL');
  expectNoRuntimeErrors(worker);
}

/** Waits for the second worker to report its root agent COMPLETED and exit 0, with no runtime error. */
export async function expectWorkerCompleted(worker: Worker): Promise<void> {
  expect(await worker.waitForLine(/^done /, 30_000)).toBe('done COMPLETED Completed');
  expect((await worker.exited).code, worker.stderr()).toBe(0);
  expectNoRuntimeErrors(worker);
}

/** The worker's event file, one event a line, each split on spaces (absent file: no events). */
export function readEvents(file: string): string[][] {
  return existsSync(file)
    ? readFileSync(file, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => l.split(' '))
    : [];
}

/** Reopens the SQLite file a worker left; the caller closes it. */
export async function openStorage(db: string): Promise<StorageAdapter> {
  const storage = storageAt(db);
  await storage.init();
  return storage;
}

/** A tool call's children in task order (spawn keys end in `#<task index>`). */
export async function childrenInTaskOrder(storage: StorageAdapter, parentId: string): Promise<AgentRow[]> {
  const { rows } = await storage.listAgents({ parent_id: parentId, limit: 100 });
  return rows.sort((a, b) => Number(a.spawn_key!.split('#')[1]) - Number(b.spawn_key!.split('#')[1]));
}

/** The ledger invariant after a crash and recovery: Σ ledger = balance of the `local` account, no hold left behind. */
export async function expectLedgerSettled(storage: StorageAdapter): Promise<LedgerRow[]> {
  const account = (await storage.getAccount('local'))!;
  const ledger = await storage.listLedger('local');
  expect(ledger.reduce((s, l) => s + l.amount, 0)).toBe(account.balance);
  expect(account.reserved).toBe(0);
  return ledger;
}

/** What an agent was charged, by the ledger. */
export function spentBy(ledger: readonly LedgerRow[], agentId: string): number {
  return ledger.filter((l) => l.agent_id === agentId).reduce((s, l) => s - l.amount, 0);
}
