/**
 * Shared by the HTTP and CLI tests: a fake Anthropic server whose replies are chosen by markers in the agent's goal,
 * and helpers that run the CLI from source as a child process.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  startFakeAnthropic,
  type FakeAnthropic,
  type FakeMessagesRequest,
  type FakeReply,
} from 'agentry-runtime/testing';

export const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
export const CLI = join(ROOT, 'src/cli/index.ts');

/** Goal markers the fake understands. */
export const HOLD = '[hold]';
export const DRAIN = '[drain]';

function goalOf(body: FakeMessagesRequest): string {
  const first = body.messages[0]?.content;
  if (typeof first === 'string') return first;
  return (first ?? []).map((b) => (typeof b.text === 'string' ? b.text : '')).join(' ');
}

/**
 * A fake Messages API: a goal with `[hold]` gets no answer until the request is aborted (an agent that stays ACTIVE
 * until paused or deleted); `[drain]` answers with a usage far beyond any balance (the account ends at 0 credits);
 * anything else answers "Done." at once.
 */
export function startGoalDrivenAnthropic(): Promise<FakeAnthropic> {
  return startFakeAnthropic({
    handler: (body, info): FakeReply | Promise<FakeReply> => {
      const goal = goalOf(body);
      if (goal.includes(HOLD)) {
        return new Promise<FakeReply>((resolveReply) => {
          info.signal.addEventListener('abort', () => resolveReply({ text: 'aborted' }), { once: true });
        });
      }
      if (goal.includes(DRAIN))
        return { text: 'Spent it all.', usage: { input_tokens: 1_000_000_000, output_tokens: 10 } };
      return { text: 'Done.', usage: { input_tokens: 50, output_tokens: 5 } };
    },
  });
}

export function tempDir(prefix: string): { dir: string; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** The environment for CLI children: no database or model settings leak in from the test's own environment. */
export function cliEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of ['AGENTRY_DB', 'ANTHROPIC_API_KEY', 'ANTHROPIC_BASE_URL', 'NODE_OPTIONS']) delete env[name];
  return { ...env, ...extra };
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `agentry <args>` from source and collects its output. */
export function runCli(args: string[], env: NodeJS.ProcessEnv = cliEnv(), timeoutMs = 30_000): Promise<CliResult> {
  return new Promise((resolveRun, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CLI, ...args], {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`agentry ${args.join(' ')} did not finish in ${timeoutMs} ms\n${stdout}\n${stderr}`));
    }, timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolveRun({ code, stdout, stderr });
    });
  });
}

export interface ServeProcess {
  url: string;
  /** The key printed on first start, or null when none was printed. */
  apiKey: string | null;
  stdout(): string;
  stderr(): string;
  child: ChildProcess;
  /** SIGTERM (or `signal`), then waits for the exit; resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Starts `agentry serve --port 0 ...` and waits (with a deadline) until it prints its URL. */
export function startServe(args: string[], env: NodeJS.ProcessEnv, timeoutMs = 30_000): Promise<ServeProcess> {
  return new Promise((resolveStart, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CLI, 'serve', '--port', '0', ...args], {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let settled = false;
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    const timer = setTimeout(
      () => fail(new Error(`agentry serve did not start in ${timeoutMs} ms\n${stdout}\n${stderr}`)),
      timeoutMs,
    );
    const fail = (error: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(error);
    };
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    // The lines for people (URL, API key) are on stderr: stdout carries the JSON log lines only.
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      const url = /^agentry listening on (http:\/\/\S+)/m.exec(stderr)?.[1];
      if (url === undefined || settled) return;
      settled = true;
      clearTimeout(timer);
      resolveStart({
        url,
        apiKey: /^API key: (\S+)$/m.exec(stderr)?.[1] ?? null,
        stdout: () => stdout,
        stderr: () => stderr,
        child,
        async stop(signal = 'SIGTERM') {
          if (child.exitCode === null && child.signalCode === null) child.kill(signal);
          return exited;
        },
      });
    });
    child.once('exit', (code) =>
      fail(new Error(`agentry serve exited with ${code} before listening\n${stdout}\n${stderr}`)),
    );
  });
}

/** Polls `check` until it returns a value other than undefined, or fails after `timeoutMs`. */
export async function eventually<T>(check: () => Promise<T | undefined>, what: string, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
