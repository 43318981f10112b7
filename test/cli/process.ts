/**
 * A CLI child process from source, in any working directory, whose output the test can wait on line by line: for
 * the tests that start `serve` without `--port` (PORT), or run commands where no database is.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { CLI } from '../http/helpers.js';

/** tsx's loader by its location: `--import tsx` would look for the package in the child's working directory. */
const TSX = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;

export interface CliProcess {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves with the exit code (null after a signal). */
  exited: Promise<number | null>;
  /** Resolves with the first match of `pattern` in stdout; rejects if the process exits first or the deadline passes. */
  waitForStdout(pattern: RegExp, timeoutMs?: number): Promise<RegExpExecArray>;
  /** The same on stderr (where `serve` and `worker` print their human lines: stdout is JSON log lines only). */
  waitForStderr(pattern: RegExp, timeoutMs?: number): Promise<RegExpExecArray>;
  /** SIGTERM (unless it already ended), then its exit code. */
  stop(): Promise<number | null>;
}

export function spawnCli(args: string[], options: { env: NodeJS.ProcessEnv; cwd: string }): CliProcess {
  const child = spawn(process.execPath, ['--import', TSX, CLI, ...args], {
    cwd: options.cwd,
    env: options.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  const listeners = new Set<() => void>();
  const notify = () => listeners.forEach((l) => l());
  child.stdout!.on('data', (c: Buffer) => {
    stdout += c.toString();
    notify();
  });
  child.stderr!.on('data', (c: Buffer) => {
    stderr += c.toString();
    notify();
  });
  let done = false;
  const exited = new Promise<number | null>((resolve) =>
    child.once('close', (code) => {
      done = true;
      notify();
      resolve(code);
    }),
  );
  function waitFor(stream: 'stdout' | 'stderr', pattern: RegExp, timeoutMs: number): Promise<RegExpExecArray> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => finish(new Error(`no ${pattern} on ${stream} in ${timeoutMs} ms\n${stdout}\n${stderr}`)),
        timeoutMs,
      );
      const check = () => {
        const match = pattern.exec(stream === 'stdout' ? stdout : stderr);
        if (match) finish(undefined, match);
        else if (done) finish(new Error(`exited before printing ${pattern} on ${stream}\n${stdout}\n${stderr}`));
      };
      const finish = (error?: Error, match?: RegExpExecArray) => {
        clearTimeout(timer);
        listeners.delete(check);
        if (error) reject(error);
        else resolve(match!);
      };
      listeners.add(check);
      check();
    });
  }
  return {
    child,
    stdout: () => stdout,
    stderr: () => stderr,
    exited,
    waitForStdout: (pattern, timeoutMs = 30_000) => waitFor('stdout', pattern, timeoutMs),
    waitForStderr: (pattern, timeoutMs = 30_000) => waitFor('stderr', pattern, timeoutMs),
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      return exited;
    },
  };
}

/** Waits for the process's end with a deadline (a process that never exits is the failure being tested for). */
export async function exitWithin(cli: CliProcess, timeoutMs = 30_000): Promise<number | null> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<'running'>((resolve) => (timer = setTimeout(() => resolve('running'), timeoutMs)));
  const outcome = await Promise.race([cli.exited, deadline]);
  clearTimeout(timer);
  if (outcome === 'running') {
    cli.child.kill('SIGKILL');
    throw new Error(`still running after ${timeoutMs} ms\n${cli.stdout()}\n${cli.stderr()}`);
  }
  return outcome;
}
