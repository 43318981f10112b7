/**
 * Crash recovery of the claude-agent-sdk backend of spawn_claude_code_agent: a worker process
 * (`claude-code-crash-worker.ts`) is SIGKILLed while Claude Code runs a command in the sandbox. The sandbox dies with
 * it (bwrap's --die-with-parent: no process is left). A second process reopens the SQLite file; recovery runs the
 * call again, which resumes Claude Code's own session from its home on disk: Claude Code's model sees the earlier
 * command and is told it was interrupted, finishes, and the caller gets the result.
 *
 * Needs bwrap and the SDK's binary, like test/tools/code-agent-claude-sdk.test.ts (fails under AGENTRY_CI_STRICT=1).
 */
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { bubblewrapSandbox } from '../../src/sandbox/bubblewrap.js';
import { eventually } from '../support/runtime.js';
import { killLiveWorkers, killWorker, startWorker } from './worker-harness.js';
import { skippable } from '../support/skip.js';

const probe = await bubblewrapSandbox().probe();
const sdkInstalled = await import('@anthropic-ai/claude-agent-sdk').then(
  () => true,
  () => false,
);
const strict = process.env.AGENTRY_CI_STRICT === '1';
const skipReason =
  (probe.ok && sdkInstalled) || strict
    ? null
    : !probe.ok
      ? probe.reason
      : '@anthropic-ai/claude-agent-sdk is not installed';

afterEach(killLiveWorkers);

/** Live processes of the sandbox's uid (65534; not the worker, whose arguments name the marker too) naming `marker`. */
function processesWith(marker: string): number[] {
  const found: number[] = [];
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      if (/^State:\s+[ZX]/m.test(status) || !/^Uid:\s+65534\s/m.test(status)) continue;
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(marker)) found.push(Number(pid));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** Whether a Claude Code session saved under `dataDir` mentions `text`. */
function sessionMentions(dataDir: string, text: string): boolean {
  const runs = join(dataDir, 'code-agents');
  for (const run of safeList(runs)) {
    const sessions = join(runs, run, 'claude-home', '.claude', 'projects', '-workspace');
    for (const file of safeList(sessions).filter((f) => f.endsWith('.jsonl'))) {
      if (readFileSync(join(sessions, file), 'utf8').includes(text)) return true;
    }
  }
  return false;
}

function safeList(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

describe.skipIf(!(probe.ok && sdkInstalled) && !strict)(
  skippable('a runtime SIGKILLed while Claude Code works', skipReason),
  () => {
    let root: string;
    beforeAll(() => {
      root = mkdtempSync(join(tmpdir(), 'agentry-cc-crash-'));
      chmodSync(root, 0o711);
    });
    afterAll(() => rmSync(root, { recursive: true, force: true }));

    it('has a sandbox and the SDK (AGENTRY_CI_STRICT=1 fails here instead of skipping)', () => {
      expect(probe).toEqual({ ok: true });
      expect(sdkInstalled).toBe(true);
    });

    it('leaves no sandbox process; the restart resumes Claude Code’s session and the call completes', async () => {
      const dataDir = join(root, 'data');
      const db = join(root, 'agents.db');
      const marker = `crashwait-${process.pid}`;
      const first = startWorker('claude-code-crash-worker.ts', [db, dataDir, marker, 'first']);
      const agentId = (await first.waitForLine(/^agent /)).split(' ')[1]!;
      await eventually(() => processesWith(marker).length > 0, 30_000, 'the command in the sandbox');
      // Claude Code writes its session a moment after it starts a command; the crash comes once it is on disk (a crash
      // before that restarts the task on the same workspace instead, which the backend tells Claude Code).
      await eventually(() => sessionMentions(dataDir, marker), 10_000, 'the session on disk');
      await killWorker(first);
      await eventually(() => processesWith(marker).length === 0, 5_000, 'the sandbox to die with its parent');

      const second = startWorker('claude-code-crash-worker.ts', [db, dataDir, marker, 'second', agentId]);
      expect(await second.waitForLine(/^resumed /, 60_000)).toBe('resumed true');
      const saw = JSON.parse((await second.waitForLine(/^saw /, 60_000)).slice(4)) as { content: string };
      expect(await second.waitForLine(/^done /, 30_000)).toBe('done COMPLETED Completed');
      expect((await second.exited).code, second.stderr()).toBe(0);
      const output = JSON.parse(saw.content) as {
        summary: string;
        files: Array<{ path: string }>;
        commands: unknown[];
      };
      expect(output.summary).toBe('done.txt written');
      expect(output.files.map((f) => f.path)).toEqual(['done.txt']);
      expect(readdirSync(join(dataDir, 'workspaces'))).toEqual([]);
    });
  },
);
