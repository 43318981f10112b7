/**
 * What the MCP tests share: the fixture server's command line, counting server processes in /proc, the fixture's
 * event file, a scripted model that plays a list of tool calls, and the tool results an agent's transcript shows.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { ScriptedTurn } from 'agentry-runtime/testing';
import type { StorageAdapter } from 'agentry-runtime';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const FIXTURE = fileURLToPath(new URL('./fixtures/counting-server.mjs', import.meta.url));
export const EVERYTHING = fileURLToPath(
  new URL('../../node_modules/@modelcontextprotocol/server-everything/dist/index.js', import.meta.url),
);

/** A stdio config of the fixture, tagged so its processes can be counted; `env` reaches the server. */
export function fixtureServer(env: Record<string, string> = {}, extra: Record<string, unknown> = {}) {
  const tag = `--tag=${randomUUID()}`;
  return {
    tag,
    config: { command: process.execPath, args: [FIXTURE, tag], env, cwd: ROOT, ...extra },
  };
}

/** Live processes whose command line contains `needle` (zombies excluded). */
export function processesWith(needle: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      if (!cmdline.includes(needle)) continue;
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (/\) Z /.test(stat)) continue;
      pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

/** Every MCP server process any test of this folder starts. */
export function mcpServerProcesses(): number[] {
  return [...processesWith('counting-server.mjs'), ...processesWith('server-everything')];
}

/** The fixture's event lines, split on spaces. */
export function readEvents(file: string): string[][] {
  return existsSync(file)
    ? readFileSync(file, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => l.split(' '))
    : [];
}

/**
 * A scripted model that makes `calls` one per turn (the agent's n-th turn makes the n-th call), then answers
 * `final`. Tool use ids are `call_<n>`.
 */
export function playCalls(calls: Array<{ name: string; input: unknown }>, final = 'All done.') {
  return (_request: unknown, { turnIndex }: { turnIndex: number }): ScriptedTurn => {
    const call = calls[turnIndex];
    if (!call) return { text: final };
    return { toolCalls: [{ ...call, id: `call_${turnIndex}` }] };
  };
}

/** The tool results of an agent's transcript, by tool use id. */
export async function toolResults(
  storage: StorageAdapter,
  agentId: string,
): Promise<Map<string, { content: string; is_error: boolean }>> {
  const out = new Map<string, { content: string; is_error: boolean }>();
  for (const turn of await storage.listTurns(agentId)) {
    if (turn.role !== 'user') continue;
    const blocks = JSON.parse(turn.content) as Array<{
      type: string;
      tool_use_id?: string;
      content?: string;
      is_error?: boolean;
    }>;
    for (const b of blocks) {
      if (b.type === 'tool_result')
        out.set(b.tool_use_id!, { content: b.content ?? '', is_error: b.is_error === true });
    }
  }
  return out;
}

/** Starts the fixture as a Streamable HTTP server on a free port; resolves with its URL. */
export async function startHttpFixture(
  env: Record<string, string> = {},
  extraArgs: string[] = [],
): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, [FIXTURE, '--http', '0', ...extraArgs], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    let out = '';
    child.stdout!.setEncoding('utf8').on('data', (c: string) => {
      out += c;
      const m = /listening (\d+)/.exec(out);
      if (m) resolve(Number(m[1]));
    });
    child.once('exit', (code) => reject(new Error(`the HTTP fixture exited with ${code}`)));
  });
  return { url: `http://127.0.0.1:${port}/mcp`, child };
}

/** Kills a child and waits for it to be gone. */
export async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const gone = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await gone;
}
