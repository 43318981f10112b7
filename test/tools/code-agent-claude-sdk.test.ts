/**
 * spawn_claude_code_agent with the claude-agent-sdk backend (the optional second backend): the real Claude Code
 * binary of `@anthropic-ai/claude-agent-sdk` runs in the real bubblewrap sandbox, and its model turns go through the
 * model bridge to the runtime's (scripted) model, billed to the calling agent. The script plays Claude Code's model:
 * it asks for Write, Bash, Edit and submit_result, and Claude Code really runs them in the workspace.
 *
 * Needs bwrap, setpriv and prlimit, and the SDK's native binary (a devDependency); with AGENTRY_CI_STRICT=1 a
 * missing one fails the suite instead of skipping it.
 */
import { chmod, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ModelRequest, ToolResultBlock } from 'agentry-runtime';
import type { ScriptedTurn } from 'agentry-runtime/testing';
import { bubblewrapSandbox } from '../../src/sandbox/bubblewrap.js';
import type { Sandbox } from '../../src/sandbox/sandbox.js';
import { CODE_AGENT_TOOL_NAME, codeAgentTool } from '../../src/tools/builtin/code-agent/index.js';
import { CLAUDE_CODE_INSTRUCTIONS } from '../../src/tools/builtin/code-agent/prompts.js';
import type { PlatformServices } from '../../src/tools/platform.js';
import { eventually, openTestRuntime } from '../support/runtime.js';
import { skippable } from '../support/skip.js';

const probe = await bubblewrapSandbox().probe();
const sdkInstalled = await import('@anthropic-ai/claude-agent-sdk').then(
  () => true,
  () => false,
);
const strict = process.env.AGENTRY_CI_STRICT === '1';
const ready = probe.ok && sdkInstalled;
const skipReason =
  ready || strict ? null : !probe.ok ? probe.reason : '@anthropic-ai/claude-agent-sdk is not installed';

const isClaudeCode = (req: ModelRequest) => req.system.includes(CLAUDE_CODE_INSTRUCTIONS);
const lastResults = (req: ModelRequest) =>
  (req.messages.at(-1)!.content as ToolResultBlock[]).filter((b) => b.type === 'tool_result');

type Turn = (req: ModelRequest) => ScriptedTurn;
type Seen = { result?: ToolResultBlock; claude: ModelRequest[] };

/** The lead calls spawn_claude_code_agent with `input` once; Claude Code's model plays `turns`, one each. */
function script(input: Record<string, unknown>, turns: Turn[], seen: Seen) {
  let lead = 0;
  return (req: ModelRequest): ScriptedTurn => {
    if (isClaudeCode(req)) {
      seen.claude.push(req);
      const turn = turns[seen.claude.length - 1];
      return turn ? turn(req) : { text: 'Nothing more to do.' };
    }
    if (lead++ === 0) return { toolCalls: [{ name: CODE_AGENT_TOOL_NAME, input }] };
    seen.result = lastResults(req)[0];
    return { text: 'Done.' };
  };
}

const call =
  (name: string, input: Record<string, unknown>): Turn =>
  () => ({ toolCalls: [{ name, input }] });

let dataDir: string;
beforeEach(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'agentry-cc-'));
  await chmod(dataDir, 0o711);
});
afterEach(async () => {
  await rm(dataDir, { recursive: true, force: true });
});

async function open(input: Record<string, unknown>, turns: Turn[], credits = 1_000) {
  const seen: Seen = { claude: [] };
  const t = await openTestRuntime(script(input, turns, seen), {
    builtinTools: { env: {}, dataDir, only: [CODE_AGENT_TOOL_NAME], codeAgent: { backend: 'claude-agent-sdk' } },
    defaultAccount: { id: 'local', credits },
  });
  return { ...t, seen };
}

describe('spawn_claude_code_agent, claude-agent-sdk backend, without the SDK', () => {
  it('fails the call with not_configured naming the package to install', async () => {
    const standIn: Sandbox = { name: 'stand-in', probe: async () => ({ ok: true }), run: async () => ({}) as never };
    const tool = codeAgentTool({
      dataDir,
      sandbox: standIn,
      backend: 'claude-agent-sdk',
      claudeCode: { loadSdk: () => Promise.reject(new Error("Cannot find package '@anthropic-ai/claude-agent-sdk'")) },
    });
    tool.attach({} as PlatformServices);
    const ctx = { state: { get: async () => undefined } } as never;
    await expect(tool.run({ task: 'x' }, ctx)).rejects.toMatchObject({
      code: 'not_configured',
      message: expect.stringContaining('npm install @anthropic-ai/claude-agent-sdk'),
    });
    expect(() => codeAgentTool({ backend: 'claude' as never })).toThrow(/Invalid spawn_claude_code_agent options/);
  });
});

describe.skipIf(!ready && !strict)(
  skippable('spawn_claude_code_agent, claude-agent-sdk backend, in the sandbox', skipReason),
  () => {
    it('has a sandbox and the SDK (AGENTRY_CI_STRICT=1 fails here instead of skipping)', () => {
      expect(probe).toEqual({ ok: true });
      expect(sdkInstalled).toBe(true);
    });

    it('Claude Code writes Python and Node, runs both, fixes one with Edit, submits; the acceptance command decides', async () => {
      const t = await open(
        {
          task: 'Write add.py and add.js that print 2+3, run both, write the sum to sum.txt',
          files: [{ path: 'README.md', content: 'Adders\n' }],
          acceptance_command: 'test "$(cat sum.txt)" = 6',
        },
        [
          call('Write', { file_path: '/workspace/add.py', content: 'print(2 + 3)\n' }),
          call('Write', { file_path: '/workspace/add.js', content: 'console.log(2 + three)\n' }),
          call('Bash', { command: 'python3 add.py && node add.js', description: 'run both' }),
          call('Edit', { file_path: '/workspace/add.js', old_string: 'three', new_string: '3' }),
          call('Bash', { command: 'python3 add.py > sum.txt && node add.js', description: 'run again' }),
          call('mcp__agentry__submit_result', {
            summary: 'Both print 5; sum.txt holds 5',
            files: ['sum.txt', 'add.py', 'add.js'],
          }),
        ],
      );
      const { agent_id } = await t.runtime.create({ goal: 'Get some code written' });
      const agent = await t.runtime.waitFor(agent_id, { signal: AbortSignal.timeout(120_000) });
      expect(agent.status).toBe('COMPLETED');
      const out = JSON.parse(t.seen.result!.content) as {
        summary: string;
        files: Array<{ path: string; size: number; artifact_id: string }>;
        commands: Array<{ command: string; exit_code: number | null }>;
        verified: boolean;
        verification: { exit_code: number };
      };
      expect(t.seen.result!.is_error).toBeFalsy();
      expect(out.summary).toBe('Both print 5; sum.txt holds 5');
      // Claude Code really ran them: node failed (ReferenceError), then passed after the Edit
      expect(out.commands.map((c) => c.exit_code)).toEqual([1, 0]);
      const sawFailure = t.seen.claude[3]!.messages.at(-1)!.content as ToolResultBlock[];
      expect(sawFailure[0]!.content).toMatch(/ReferenceError: three is not defined/);
      expect(out.files.map((f) => f.path)).toEqual(['sum.txt', 'add.py', 'add.js']);
      // the child claimed success; the runtime's own run of the acceptance command says otherwise (5, not 6)
      expect(out.verified).toBe(false);
      expect(out.verification.exit_code).toBe(1);
      // Claude Code's model turns were the runtime's, billed to the caller, one ledger row each
      const ledger = (await t.storage.listLedger('local')).filter((l) => l.agent_id === agent_id);
      expect(ledger.filter((l) => l.kind === 'model').length).toBe(2 + t.seen.claude.length);
      expect(ledger.some((l) => l.kind === 'tool' && l.item === 'Bash')).toBe(true);
      // Claude Code saw only its six tools and submit_result, and the caller's file was in its workspace
      expect(t.seen.claude[0]!.tools.map((x) => x.name)).toEqual(
        expect.arrayContaining(['Bash', 'Read', 'Write', 'Edit', 'Glob', 'Grep', 'mcp__agentry__submit_result']),
      );
      expect(t.seen.claude[0]!.tools.map((x) => x.name)).not.toContain('WebFetch');
      // done: the workspace and Claude Code's home are removed
      expect(await readdir(join(dataDir, 'workspaces')).catch(() => [])).toEqual([]);
      expect(await readdir(join(dataDir, 'code-agents')).catch(() => [])).toEqual([]);
      expect(t.runtime.toolStatus().find((x) => x.name === CODE_AGENT_TOOL_NAME)).toMatchObject({
        ready: true,
        detail: 'Claude Code (claude-agent-sdk) thinking with the runtime’s model, in a bubblewrap sandbox',
      });
      await t.runtime.close();
    });

    it('a pause kills the sandbox within 2 s (no process left); the resume continues Claude Code’s session', async () => {
      const marker = `wait-${process.pid}`;
      // (Claude Code refuses a plain long `sleep`; a Python one it runs.)
      const command = `python3 -c 'import time; time.sleep(60)' ${marker}`;
      const t = await open({ task: 'Wait, then write done.txt' }, [
        call('Bash', { command, description: 'wait' }),
        // after the resume: Claude Code was told it was interrupted, in the same conversation
        (req) => {
          const text = JSON.stringify(req.messages);
          expect(text).toContain('Your work was interrupted');
          expect(text).toContain(marker);
          return { toolCalls: [{ name: 'Write', input: { file_path: '/workspace/done.txt', content: 'ok\n' } }] };
        },
        call('mcp__agentry__submit_result', { summary: 'done.txt written', files: ['done.txt'] }),
      ]);
      const { agent_id } = await t.runtime.create({ goal: 'Get some code written' });
      const waiting = async () => {
        for (const pid of await sandboxProcesses(dataDir)) {
          if (safeRead(`/proc/${pid}/cmdline`).includes(marker)) return true;
        }
        return false;
      };
      await eventually(waiting, 30_000, 'the wait in the sandbox');
      const running = await sandboxProcesses(dataDir);
      const started = Date.now();
      await t.runtime.pause(agent_id);
      await eventually(async () => running.every((pid) => !alive(pid)), 2_000, 'the sandbox processes to be gone');
      expect(Date.now() - started).toBeLessThan(2_000);
      expect(await sandboxProcesses(dataDir)).toEqual([]);
      await t.runtime.whenIdle();
      expect((await t.runtime.get(agent_id)).agent).toMatchObject({
        status: 'PAUSED',
        status_message: 'Paused while coding: Wait, then write done.txt',
      });
      await t.runtime.resume(agent_id);
      const agent = await t.runtime.waitFor(agent_id, { signal: AbortSignal.timeout(120_000) });
      expect(agent.status).toBe('COMPLETED');
      const out = JSON.parse(t.seen.result!.content) as {
        summary: string;
        commands: Array<{ exit_code: number | null }>;
      };
      expect(out.summary).toBe('done.txt written');
      expect(out.commands).toEqual([expect.objectContaining({ command, exit_code: null })]);
      await t.runtime.close();
    });

    it('a delete kills the sandbox within 2 s and removes the workspace and Claude Code’s home', async () => {
      const marker = `gone-${process.pid}`;
      const t = await open({ task: 'Wait' }, [
        call('Bash', { command: `python3 -c 'import time; time.sleep(60)' ${marker}`, description: 'wait' }),
      ]);
      const { agent_id } = await t.runtime.create({ goal: 'Get some code written' });
      await eventually(
        async () => (await sandboxProcesses(dataDir)).some((pid) => safeRead(`/proc/${pid}/cmdline`).includes(marker)),
        30_000,
        'the wait in the sandbox',
      );
      expect((await readdir(join(dataDir, 'workspaces'))).length).toBe(1);
      const running = await sandboxProcesses(dataDir);
      const started = Date.now();
      await t.runtime.delete(agent_id);
      await eventually(async () => running.every((pid) => !alive(pid)), 2_000, 'the sandbox processes to be gone');
      expect(Date.now() - started).toBeLessThan(2_000);
      expect(await readdir(join(dataDir, 'workspaces'))).toEqual([]);
      expect(await readdir(join(dataDir, 'code-agents'))).toEqual([]);
      await t.runtime.close();
    });

    it('Claude Code’s commands see none of the host’s environment, no network, and a bridge that wants the run’s key', async () => {
      process.env.AGENTRY_TEST_CANARY = 'canary-7f3a';
      const probeBridge =
        "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('/run/agentry/model.sock'); " +
        "s.sendall(b'POST /v1/messages HTTP/1.0\\r\\ncontent-length: 2\\r\\n\\r\\n{}'); print(s.recv(200).split(b' ')[1].decode())\"";
      const t = await open({ task: 'Look around' }, [
        call('Bash', { command: 'env | sort', description: 'env' }),
        call('Bash', { command: 'python3 -c "import socket; socket.create_connection((\'1.1.1.1\', 80), 3)"' }),
        call('Bash', { command: probeBridge, description: 'bridge without the key' }),
        call('mcp__agentry__submit_result', { summary: 'looked' }),
      ]);
      try {
        const { agent_id } = await t.runtime.create({ goal: 'Get some code written' });
        expect((await t.runtime.waitFor(agent_id, { signal: AbortSignal.timeout(120_000) })).status).toBe('COMPLETED');
        const shown = (i: number) => (t.seen.claude[i]!.messages.at(-1)!.content as ToolResultBlock[])[0]!.content;
        expect(shown(1)).toContain('HOME=/home/claude');
        expect(shown(1)).not.toContain('canary-7f3a');
        expect(shown(1)).not.toMatch(/^(VITEST|NODE_OPTIONS|npm_)/m);
        expect(shown(2)).toMatch(/Network is unreachable|OSError/);
        expect(shown(3).trim()).toBe('401');
      } finally {
        delete process.env.AGENTRY_TEST_CANARY;
        await t.runtime.close();
      }
    });

    it('a budget that cannot pay Claude Code’s next turn ends the call with insufficient_credits; no overshoot', async () => {
      // Claude Code's request is ~50 KB: the strict input bound alone reserves far more than 3 credits.
      const t = await open({ task: 'Print 1' }, [call('Bash', { command: 'echo 1' })], 3);
      const { agent_id } = await t.runtime.create({ goal: 'Get some code written' });
      const agent = await t.runtime.waitFor(agent_id, { signal: AbortSignal.timeout(120_000) });
      expect(t.seen.claude).toHaveLength(0);
      expect(t.seen.result).toMatchObject({ is_error: true });
      expect(t.seen.result!.content).toMatch(/out of credits/i);
      expect(['COMPLETED', 'OUT_OF_CREDITS']).toContain(agent.status);
      const account = await t.storage.getAccount('local');
      expect(account!.balance).toBeGreaterThanOrEqual(0);
      await t.runtime.close();
    });
  },
);

/** Pids of the bubblewrap sandboxes started for workspaces under `dir`, and of everything running inside them. */
async function sandboxProcesses(dir: string): Promise<number[]> {
  const found: number[] = [];
  for (const pid of await readdir('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (cmdline.startsWith('setpriv') || cmdline.includes('bwrap\0')) {
      if (cmdline.includes(dir) && alive(Number(pid))) found.push(Number(pid));
    }
  }
  const all = new Set(found);
  const visit = (pid: number) => {
    for (const task of safeReaddir(`/proc/${pid}/task`)) {
      const children = safeRead(`/proc/${pid}/task/${task}/children`).split(' ').filter(Boolean).map(Number);
      for (const child of children) {
        if (!all.has(child) && alive(child)) {
          all.add(child);
          visit(child);
        }
      }
    }
  };
  for (const pid of found) visit(pid);
  return [...all];
}

function alive(pid: number): boolean {
  const status = safeRead(`/proc/${pid}/status`);
  return status !== '' && !/^State:\s+[ZX]/m.test(status);
}

function safeReaddir(path: string): string[] {
  try {
    return readdirSync(path);
  } catch {
    return [];
  }
}
function safeRead(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}
