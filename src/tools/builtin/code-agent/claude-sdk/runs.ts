/**
 * @module tools/builtin/code-agent/claude-sdk/runs
 * Where one call of the claude-agent-sdk backend keeps its things, and their removal: small and loaded with the tool,
 * while the backend itself (the model bridge, the SDK glue) loads with its first call.
 *
 * - `<dataDir>/workspaces/<key>/` — the workspace, bound at /workspace;
 * - `<dataDir>/code-agents/<key>/claude-home/` — Claude Code's HOME, where it keeps its session, bound at /home/claude.
 */
import { createHash } from 'node:crypto';
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Sandbox } from '../../../../sandbox/sandbox.js';
import { removeSandboxWritable, workspacePath } from '../../../../sandbox/workspace.js';

/** The package, loaded on the first call of this backend (an optional peer dependency). */
export const CLAUDE_AGENT_SDK = '@anthropic-ai/claude-agent-sdk';

/** The key of one call's workspace and Claude Code home: the agent's id and a digest of the call's id. */
export function claudeRunKey(agentId: string, toolCallId: string): string {
  return `${agentId}_cc${createHash('sha256').update(toolCallId).digest('hex').slice(0, 16)}`;
}

/** Claude Code's HOME for the call `key`. */
export function homeOf(dataDir: string, key: string): string {
  workspacePath(dataDir, key); // checks the key
  return join(dataDir, 'code-agents', key, 'claude-home');
}

/**
 * Removes the workspaces and Claude Code homes of deleted agents' calls. Both were writable by the sandbox, so their
 * contents are deleted inside `sandbox` (see `removeSandboxWritable`); the rest of `code-agents/<key>` is the runtime's.
 */
export async function removeClaudeRuns(dataDir: string, agentIds: readonly string[], sandbox?: Sandbox): Promise<void> {
  const workspaces = await readdir(join(dataDir, 'workspaces')).catch(() => [] as string[]);
  const records = await readdir(join(dataDir, 'code-agents')).catch(() => [] as string[]);
  for (const id of agentIds) {
    for (const name of workspaces.filter((n) => n.startsWith(`${id}_cc`))) {
      await removeSandboxWritable(join(dataDir, 'workspaces', name), sandbox);
    }
    for (const name of records.filter((n) => n.startsWith(`${id}_cc`))) {
      await removeSandboxWritable(homeOf(dataDir, name), sandbox);
      await rm(join(dataDir, 'code-agents', name), { recursive: true, force: true });
    }
  }
}
