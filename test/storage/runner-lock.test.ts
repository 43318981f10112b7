/**
 * One process drives a SQLite database: a second runtime (e.g. `agentry run` beside `agentry serve` on the same file)
 * is refused with a clear error; a lock left by a dead process is taken over.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AgentRuntime, AgentryError, sqliteStorage } from 'agentry-runtime';
import { scriptedModel } from 'agentry-runtime/testing';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'agentry-lock-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const model = scriptedModel({ turns: [{ text: 'done' }] });

describe('SQLite runner lock', () => {
  it('refuses a second live process, takes over the lock of a dead one, and releases it on close', async () => {
    const db = join(dir, 'a.db');
    const other = spawn('sleep', ['30']);
    await new Promise((r) => other.once('spawn', r));
    writeFileSync(`${db}.runner.lock`, String(other.pid));
    try {
      const err = await AgentRuntime.open({ storage: sqliteStorage({ path: db }), model }).then(
        () => null,
        (e: unknown) => e,
      );
      expect(AgentryError.isInstance(err) && err.code).toBe('invalid_state');
      expect(String((err as Error).message)).toContain(`pid ${other.pid}`);

      // admin access (manual scheduler) takes no lock
      const admin = await AgentRuntime.open({ storage: sqliteStorage({ path: db }), model, scheduler: 'manual' });
      await admin.close();
    } finally {
      other.kill('SIGKILL');
      await new Promise((r) => other.once('exit', r));
    }
    // the holder died: its lock is taken over
    const runtime = await AgentRuntime.open({ storage: sqliteStorage({ path: db }), model });
    const { agent_id } = await runtime.create({ goal: 'x' });
    expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
    await runtime.close();
    expect(existsSync(`${db}.runner.lock`)).toBe(false);
  });
});
