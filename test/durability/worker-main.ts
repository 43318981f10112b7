/**
 * The worker side of `worker-harness.ts`: what every `*-worker.ts` of the crash tests does around its own scenario.
 * The `first` run creates the root agent and lives until the test kills it; the `second` run reopens the file, lets
 * recovery finish the tree and reports how the root ended. Lines go to stdout with `writeSync`, so a line printed just
 * before a SIGKILL is not lost in a buffer.
 */
import { writeSync } from 'node:fs';
import { sqliteStorage, type AgentRuntime, type StorageAdapter } from 'agentry-runtime';
import { postgresStorage } from 'agentry-runtime/storage/postgres';

/** Prints one protocol line to the test process. */
export function out(line: string): void {
  writeSync(1, `${line}\n`);
}

/**
 * `first`: creates the root agent with `goal`, prints `<label> <agent_id>` and keeps the process alive until killed.
 * `second`: waits for the root agent `rootId` to end, prints `done <status> <status_message>`, closes and exits 0.
 */
export async function runOrResumeRoot(
  runtime: AgentRuntime,
  run: string,
  root: { label: string; goal: string; rootId: string | undefined; model?: string },
): Promise<void> {
  if (run === 'first') {
    const { agent_id } = await runtime.create({ goal: root.goal, ...(root.model ? { model: root.model } : {}) });
    out(`${root.label} ${agent_id}`);
    setInterval(() => {}, 60_000); // until killed
    return;
  }
  const agent = await runtime.waitFor(root.rootId!, { until: ['COMPLETED', 'FAILED'] });
  await runtime.whenIdle();
  out(`done ${agent.status} ${agent.status_message}`);
  await runtime.close();
  process.exit(0);
}

/** Runs the worker's `main`; a failure goes to stderr (which the test shows) with exit code 1. */
export function runWorker(name: string, main: () => Promise<void>): void {
  main().catch((err: unknown) => {
    process.stderr.write(`${name} failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  });
}

/** The storage behind a worker's database argument: a SQLite path, or a postgres:// URL (with `?schema=`). */
export function storageAt(db: string): StorageAdapter {
  // A killed worker's leases run out after a second, so a restarted one continues its agents at once.
  return /^postgres(ql)?:\/\//.test(db)
    ? postgresStorage({ connectionString: db, leaseMs: 1_000, heartbeatMs: 200 })
    : sqliteStorage({ path: db });
}
