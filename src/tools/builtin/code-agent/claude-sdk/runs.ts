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
import { workspacePath } from '../../../../sandbox/workspace.js';

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

/** Removes the workspaces and Claude Code homes of deleted agents' calls. */
export async function removeClaudeRuns(dataDir: string, agentIds: readonly string[]): Promise<void> {
  for (const dir of [join(dataDir, 'workspaces'), join(dataDir, 'code-agents')]) {
    const names = await readdir(dir).catch(() => [] as string[]);
    for (const id of agentIds) {
      for (const name of names.filter((n) => n.startsWith(`${id}_cc`))) {
        await rm(join(dir, name), { recursive: true, force: true });
      }
    }
  }
}
