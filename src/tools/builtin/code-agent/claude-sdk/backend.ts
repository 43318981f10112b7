/**
 * @module tools/builtin/code-agent/claude-sdk/backend
 * The `claude-agent-sdk` backend of spawn_claude_code_agent: instead of a coding child of the runtime's own, Claude
 * Code itself does the task, in the sandbox (`run-claude-code.ts`), thinking with the runtime's model through the
 * model bridge (`model-bridge.ts`), every turn billed to the calling agent and refused when its budget cannot pay.
 *
 * Durable like the default backend: the workspace and Claude Code's session live on disk under the tool's data
 * directory, keyed by the agent and the call; the call's state records the commands run so far. A pause kills the
 * sandbox at once and the call waits; after the resume (or a restart) it runs again and resumes Claude Code's own
 * session (`resume`), telling it that it was interrupted. The sandbox has no network, so a command run twice can
 * only change the workspace.
 */
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { AgentryError } from '../../../../errors.js';
import type { Sandbox } from '../../../../sandbox/sandbox.js';
import { chownToSandbox, createWorkspace } from '../../../../sandbox/workspace.js';
import type { ToolContext, ToolSuspension } from '../../../define-tool.js';
import type { PlatformServices } from '../../../platform.js';
import type { CommandRecord } from '../session.js';
import { startModelBridge } from './model-bridge.js';
import { runClaudeCode, type ClaudeAgentSdk } from './run-claude-code.js';
import { CLAUDE_AGENT_SDK, claudeRunKey, homeOf } from './runs.js';

/** What the backend hands back for the shared finish (artifacts, acceptance command). */
export interface ClaudeCodeResult {
  root: string;
  summary: string;
  files: string[];
  commands: CommandRecord[];
  /** CPU time of the sandbox over the call's runs, billed as the `Bash` tool's CPU-seconds. */
  cpuMs: number;
}

export interface ClaudeSdkBackendOptions {
  dataDir: string;
  sandbox: Sandbox;
  /** The runtime's services (billed model turns); undefined when the tool was not attached to a runtime. */
  services(): PlatformServices | undefined;
  /** Loads the SDK; rejects when it is not installed. */
  loadSdk(): Promise<ClaudeAgentSdk>;
  maxTurns: number;
  /** Output tokens of one model turn at most. */
  maxOutputTokens: number;
}

type Running = { phase: 'running'; commands: CommandRecord[]; cpu_ms: number };

const RESUMED_PROMPT =
  'Your work was interrupted (the agent was paused, or the runtime restarted) and resumes now; a command that was ' +
  'running then was killed. Check the workspace for where you were, finish the task, and call submit_result.';

const RESTARTED_NOTE =
  'Note: an earlier attempt at this task was interrupted before its conversation was saved; the workspace may ' +
  'already hold some of its files.';

/** A UUID made from the key, so a re-run after a crash finds the session the first run started. */
function sessionIdOf(key: string): string {
  const h = createHash('sha256').update(`claude-session:${key}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/** Whether Claude Code saved a session under this home (it keeps them as `projects/<cwd>/<id>.jsonl`). */
function hasSession(home: string, sessionId: string): boolean {
  return existsSync(join(home, '.claude', 'projects', '-workspace', `${sessionId}.jsonl`));
}

/**
 * Runs (or resumes) the call's Claude Code. Answers a suspension when a pause stopped it; rejects on delete or
 * shutdown, and with `insufficient_credits` when a model turn could not be paid.
 */
export async function runClaudeCodeBackend(
  o: ClaudeSdkBackendOptions,
  input: { task: string; files?: Array<{ path: string; content: string }> | undefined },
  prompt: { first: string; instructions: string },
  ctx: ToolContext,
  budgetMs: number,
  writeGivenFiles: (root: string) => Promise<void>,
): Promise<ClaudeCodeResult | ToolSuspension> {
  const services = o.services();
  if (!services) {
    throw new AgentryError(
      'not_configured',
      'the claude-agent-sdk backend needs the runtime’s model (the tool must be one of the runtime’s built-in tools)',
    );
  }
  let sdk: ClaudeAgentSdk;
  try {
    sdk = await o.loadSdk();
  } catch (error) {
    throw new AgentryError(
      'not_configured',
      `the claude-agent-sdk backend needs ${CLAUDE_AGENT_SDK} (npm install ${CLAUDE_AGENT_SDK}): ${(error as Error).message}`,
    );
  }
  const agentId = ctx.agent.agent_id;
  const key = claudeRunKey(agentId, ctx.toolCallId);
  const state = (await ctx.state.get<Running | { phase: 'done' }>()) ?? undefined;
  const running: Running = state?.phase === 'running' ? state : { phase: 'running', commands: [], cpu_ms: 0 };
  const root = await createWorkspace(o.dataDir, key);
  const home = homeOf(o.dataDir, key);
  if (!state) {
    await writeGivenFiles(root);
    // Its parent is traversable (the sandbox's uid binds the home from there) but not listable.
    await mkdir(dirname(home), { recursive: true, mode: 0o711 });
    await chmod(dirname(home), 0o711);
    await mkdir(home, { mode: 0o700 }).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== 'EEXIST') throw error;
    });
    await chownToSandbox(home);
    await ctx.state.set(running);
  }
  const sessionId = sessionIdOf(key);
  const resume = hasSession(home, sessionId);

  // A short path (a unix socket's is limited to ~100 bytes) in a directory only its owner can list.
  const socketDir = await mkdtemp(join(tmpdir(), 'agentry-mb-'));
  await chmod(socketDir, 0o711);
  const bridgeKey = randomBytes(24).toString('base64url');
  const bridge = await startModelBridge({
    socketPath: join(socketDir, 'model.sock'),
    apiKey: bridgeKey,
    maxOutputTokens: o.maxOutputTokens,
    generate: (turn, signal) => services.generate(agentId, turn, { signal }),
  });
  const stop = AbortSignal.any([ctx.signal, ctx.pauseSignal]);
  let outcome;
  try {
    outcome = await runClaudeCode({
      sdk,
      sandbox: o.sandbox,
      workspace: root,
      home,
      bridgeSocket: bridge.socketPath,
      bridgeKey,
      // A run that began before (a crash, a pause) but saved no conversation starts over, on the same workspace.
      prompt: resume ? RESUMED_PROMPT : state ? `${prompt.first}\n\n${RESTARTED_NOTE}` : prompt.first,
      instructions: prompt.instructions,
      sessionId,
      resume,
      maxTurns: o.maxTurns,
      timeoutMs: budgetMs,
      signal: stop,
      account: ctx.accountId,
      onCommand: (c) => running.commands.push(c),
    });
  } catch (error) {
    if (!stop.aborted) throw error;
  } finally {
    await bridge.close();
    await rm(socketDir, { recursive: true, force: true });
  }
  if (outcome?.cpuMs) running.cpu_ms += outcome.cpuMs;
  if (ctx.signal.aborted)
    throw new AgentryError('internal_error', 'the coding run was stopped (agent deleted or runtime shut down)');
  if (ctx.pauseSignal.aborted || !outcome) {
    // Killed by the pause: what it ran so far is kept, and the call runs again after the resume.
    await ctx.state.set(running);
    return ctx.waitUntil(`Paused while coding: ${input.task.slice(0, 60)}`);
  }
  const refused = bridge.stats().firstError;
  if (refused instanceof AgentryError && refused.code === 'insufficient_credits' && !outcome.submitted) {
    throw new AgentryError(
      'insufficient_credits',
      `Claude Code stopped: ${refused.message}. Its workspace is kept; add credits and call again to start over.`,
    );
  }
  const summary =
    outcome.submitted?.summary ??
    `Claude Code did not submit a result${outcome.timedOut ? ` (it ran out of its ${Math.round(budgetMs / 1000)} s)` : ''}: ${outcome.result || outcome.stderrTail.trim().split('\n').at(-1) || 'no answer'}`;
  return { root, summary, files: outcome.submitted?.files ?? [], commands: running.commands, cpuMs: running.cpu_ms };
}
