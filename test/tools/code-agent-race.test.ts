/**
 * The symlink race against the coding child's file tools. A racer running as the sandbox's
 * uid exchanges a real directory `d` of the workspace with a symlink `l` to a root-only host directory
 * (renameat2 RENAME_EXCHANGE, in a tight loop) while the scripted coder fires Write, Edit and Read calls through `d/`,
 * 60 per turn, concurrently. With the file tools inside the sandbox, nothing lands in the host directory and no
 * canary byte reaches a result. (Run against the old check-then-open tools, at commit 99d4381, the same test fails:
 * files are written there as root and the canary is read back; see docs/decisions.md.)
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelRequest, Tool, ToolResultBlock } from 'agentry-runtime';
import type { ScriptedTurn } from 'agentry-runtime/testing';
import { bubblewrapSandbox } from '../../src/sandbox/bubblewrap.js';
import { CODE_AGENT_TOOL_NAME, codeAgentTool } from '../../src/tools/builtin/code-agent/index.js';
import { CODER_INSTRUCTIONS } from '../../src/tools/builtin/code-agent/prompts.js';
import { openTestRuntime } from '../support/runtime.js';

const sandbox = bubblewrapSandbox();
const probe = await sandbox.probe();
const strict = process.env.AGENTRY_CI_STRICT === '1';
const PYTHON = '/usr/bin/python3';

/** Swaps `d` and `l` until SIGTERM, then prints how many exchanges succeeded. */
const RACER = `
import ctypes, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
n = 0
def done(*_):
    print(n, flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, done)
print("ready", flush=True)
while True:
    if libc.renameat2(-100, b"d", -100, b"l", 2) == 0:
        n += 1
`;

const TURNS = 9;
const PER_KIND = 20; // Write, Edit and Read each, per turn: 9 × 60 = 540 attempts

let base: string;
let dataDir: string;
let outside: string;
const canary = `CANARY-${randomBytes(8).toString('hex')}`;

beforeAll(async () => {
  base = await mkdtemp(join(tmpdir(), 'agentry-race-'));
  await chmod(base, 0o755);
  dataDir = join(base, 'data');
  // The host directory the symlink points at: the runtime's (root's) only, with a secret in it.
  outside = join(base, 'outside');
  await mkdir(outside, { mode: 0o700 });
  await writeFile(join(outside, 'secret.txt'), `${canary}\n`, { mode: 0o600 });
  await writeFile(join(outside, 'edit.txt'), `a inside ${canary}\n`, { mode: 0o600 });
});
afterAll(() => rm(base, { recursive: true, force: true }));

function startRacer(workspace: string): Promise<ChildProcess> {
  const asSandboxUser =
    process.getuid?.() === 0 ? ['setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', PYTHON]] : null;
  const [command, prefix] = asSandboxUser ?? [PYTHON, []];
  const racer = spawn(command as string, [...(prefix as string[]), '-c', RACER], {
    cwd: workspace,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    racer.once('error', reject);
    racer.stdout!.once('data', () => resolve(racer));
  });
}

function stopRacer(racer: ChildProcess): Promise<number> {
  return new Promise((resolve) => {
    let out = '';
    racer.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
    racer.once('close', () => resolve(Number(out.trim().split('\n').at(-1))));
    racer.kill('SIGTERM');
  });
}

describe('the file tools under a symlink race', () => {
  // Stands in for what the test below needs; a failure under AGENTRY_CI_STRICT=1 when it is missing.
  it.runIf(strict && !probe.ok)('bubblewrap works here (needed by the race test below)', () => {
    expect(probe).toEqual({ ok: true });
  });

  it.skipIf(!probe.ok || !existsSync(PYTHON))(
    `≥ 500 Write/Edit/Read calls while a racer swaps a directory for a symlink out: 0 files outside, 0 canary bytes`,
    async () => {
      let racer: ChildProcess | undefined;
      let swaps = 0;
      const results: ToolResultBlock[] = [];
      const coder = async (req: ModelRequest, turnIndex: number): Promise<ScriptedTurn> => {
        if (turnIndex > 0) {
          results.push(...(req.messages.at(-1)!.content as ToolResultBlock[]).filter((b) => b.type === 'tool_result'));
        }
        if (turnIndex === 0) {
          return {
            toolCalls: [
              {
                name: 'Bash',
                input: {
                  command: `mkdir d && echo inside > d/secret.txt && echo "a inside" > d/edit.txt && ln -s ${outside} l`,
                },
              },
            ],
          };
        }
        if (turnIndex === 1) racer = await startRacer(join(dataDir, 'workspaces', req.agentId));
        if (turnIndex <= TURNS) {
          const calls = [];
          for (let i = 0; i < PER_KIND; i++) {
            calls.push({ name: 'Write', input: { file_path: `d/w-${turnIndex}-${i}.txt`, content: 'written' } });
            calls.push({
              name: 'Edit',
              input: { file_path: 'd/edit.txt', old_string: 'inside', new_string: 'inside!', replace_all: true },
            });
            calls.push({ name: 'Read', input: { file_path: 'd/secret.txt' } });
          }
          return { toolCalls: calls };
        }
        swaps = await stopRacer(racer!);
        return { toolCalls: [{ name: 'submit_result', input: { summary: 'Raced.' } }] };
      };
      const t = await openTestRuntime(
        async (req, { turnIndex }) => {
          if (req.system === CODER_INSTRUCTIONS) return coder(req, turnIndex);
          if (turnIndex === 0) return { toolCalls: [{ name: CODE_AGENT_TOOL_NAME, input: { task: 'Race.' } }] };
          return { text: 'Done.' };
        },
        {
          builtinTools: false,
          tools: [codeAgentTool({ dataDir, sandbox }) as Tool],
          defaultAccount: { id: 'local', credits: 1_000_000 },
        },
      );
      try {
        const { agent_id } = await t.runtime.create({ goal: 'Race the file tools' });
        const agent = await t.runtime.waitFor(agent_id, { signal: AbortSignal.timeout(600_000) });
        expect(agent.status).toBe('COMPLETED');
      } finally {
        if (racer && racer.exitCode === null) racer.kill('SIGKILL');
        await t.runtime.close();
      }

      // the race was real: the racer swapped all along, and some calls met the symlink
      expect(results.length).toBeGreaterThanOrEqual(500);
      expect(swaps).toBeGreaterThan(1_000);
      const refusedBySymlink = results.filter((r) => r.is_error && /symlink/.test(r.content)).length;
      const succeeded = results.filter((r) => !r.is_error).length;
      console.log(
        `race: ${results.length} calls, ${swaps} swaps, ${succeeded} succeeded, ${refusedBySymlink} refused (symlink)`,
      );
      expect(refusedBySymlink).toBeGreaterThan(0);

      // nothing outside the workspace was written or read
      expect((await readdir(outside)).sort()).toEqual(['edit.txt', 'secret.txt']);
      expect(await readFile(join(outside, 'edit.txt'), 'utf8')).toBe(`a inside ${canary}\n`);
      expect(await readFile(join(outside, 'secret.txt'), 'utf8')).toBe(`${canary}\n`);
      const leaked = results.filter((r) => r.content.includes('CANARY'));
      expect(leaked.map((r) => r.content)).toEqual([]);
    },
    900_000,
  );
});
