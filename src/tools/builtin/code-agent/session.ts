/**
 * @module tools/builtin/code-agent/session
 * Which workspace belongs to which coding child, kept on disk under the tool's data directory:
 *
 * - `<dataDir>/workspaces/<child agent id>/` — the workspace (`sandbox/workspace.ts`), bound at `/workspace`;
 * - `<dataDir>/code-agents/<child agent id>/session.json` — written by the spawning call once the caller's files are
 *   in the workspace: the parent agent, the tool call and the command-time budget;
 * - `<dataDir>/code-agents/<child agent id>/commands.jsonl` — one line per `Bash` run, read back by the parent.
 *
 * The key is the CHILD's agent id because it is the one thing both sides know that no model can alter: the spawning
 * call learns it from `ctx.subAgentResults` right after `ctx.spawn` (and again, from the same durable spawn, when it
 * re-runs after a crash), and the child's tools read it from `ctx.agent.agent_id`, which comes from the runtime, not
 * from the model. A key the child had to repeat (a path or a call id in its goal) could be altered by the model; a
 * module-level map would not survive a restart. The session file lives outside the workspace, so nothing inside the
 * sandbox can forge or remove it, and it doubles as the "ready" mark: a child whose first tool call comes before the
 * parent has written the caller's files waits for it (briefly; see {@link waitForSession}).
 */
import { appendFile, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { AgentryError } from '../../../errors.js';
import type { Sandbox } from '../../../sandbox/sandbox.js';
import { removeWorkspace, workspacePath } from '../../../sandbox/workspace.js';

/** What the spawning call records for its child. */
export interface CodeSession {
  parent_id: string;
  tool_call_id: string;
  /** Wall-clock milliseconds the child's commands may take together (the call's `timeout_s`). */
  budget_ms: number;
}

/** One `Bash` run as the parent reports it. `exit_code` is null when the run was killed (timeout, pause, delete). */
export interface CommandRecord {
  command: string;
  exit_code: number | null;
  ms: number;
}

function sessionDir(dataDir: string, childId: string): string {
  // workspacePath checks the id (letters, digits, - and _): the same rule keeps this path inside dataDir.
  workspacePath(dataDir, childId);
  return join(dataDir, 'code-agents', childId);
}

export async function readSession(dataDir: string, childId: string): Promise<CodeSession | undefined> {
  try {
    return JSON.parse(await readFile(join(sessionDir(dataDir, childId), 'session.json'), 'utf8')) as CodeSession;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

/** Records the session; written to a temporary name and renamed, so a reader never sees half of it. */
export async function writeSession(dataDir: string, childId: string, session: CodeSession): Promise<void> {
  const dir = sessionDir(dataDir, childId);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const tmp = join(dir, 'session.json.tmp');
  await writeFile(tmp, JSON.stringify(session), { mode: 0o600 });
  await rename(tmp, join(dir, 'session.json'));
}

/**
 * The session of a child, waiting up to `timeoutMs` for the spawning call to write it (the child can take its first
 * step before the parent's call has written the caller's files). Undefined when there is none: the tool was called
 * by an agent that is not a child of spawn_claude_code_agent.
 */
export async function waitForSession(
  dataDir: string,
  childId: string,
  signal: AbortSignal,
  timeoutMs = 10_000,
): Promise<CodeSession | undefined> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const session = await readSession(dataDir, childId);
    if (session || Date.now() > deadline || signal.aborted) return session;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

export async function appendCommand(dataDir: string, childId: string, record: CommandRecord): Promise<void> {
  await appendFile(join(sessionDir(dataDir, childId), 'commands.jsonl'), `${JSON.stringify(record)}\n`, {
    mode: 0o600,
  });
}

export async function readCommands(dataDir: string, childId: string): Promise<CommandRecord[]> {
  let text: string;
  try {
    text = await readFile(join(sessionDir(dataDir, childId), 'commands.jsonl'), 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
  const records: CommandRecord[] = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    try {
      records.push(JSON.parse(line) as CommandRecord);
    } catch {
      // a line cut by a crash mid-write
    }
  }
  return records;
}

/**
 * Removes a child's workspace (emptied inside `sandbox`, see `removeSandboxWritable`) and its session, after the
 * call has kept what it returns.
 */
export async function removeSession(dataDir: string, childId: string, sandbox?: Sandbox): Promise<void> {
  await removeWorkspace(dataDir, childId, sandbox);
  await rm(sessionDir(dataDir, childId), { recursive: true, force: true });
}

export function notACodeChild(tool: string, agentId: string): AgentryError {
  return new AgentryError(
    'invalid_request',
    `${tool} works only in a child of spawn_claude_code_agent: no workspace was prepared for agent ${agentId}`,
  );
}
