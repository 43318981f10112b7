/**
 * @module tools/builtin/code-agent/child-tools
 * The coding child's tools, named and shaped after Claude Code's because models already know them:
 * `Bash`, `Read`, `Write`, `Edit`, `Glob`, `Grep`. Each works in the child's own workspace (see `session.ts` for how a
 * tool finds it from the child's agent id). Paths are relative to the workspace; `/workspace/...`, the path the
 * sandbox shows, is accepted too. `..` and symlinks that lead out are refused.
 *
 * All six run inside the sandbox as its unprivileged user: `Bash` as a shell line, the five file tools as one
 * operation each of a fixed helper program (`workspace-files.ts`), never as the runtime's user on a host path.
 * `Grep` is ripgrep there (a linear-time engine), and `Glob`'s matcher (a linear-time NFA) runs there too: no
 * pattern of the model runs on the runtime's event loop. Every one of them takes a slot of the same sandbox, for the
 * child's account (`sandbox/sandbox-slots.ts`), and is billed by the CPU-second of its sandbox at the `Bash` price.
 */
import { availableParallelism } from 'node:os';
import { z } from 'zod';
import { AgentryError } from '../../../errors.js';
import type { Sandbox } from '../../../sandbox/sandbox.js';
import { workspacePath } from '../../../sandbox/workspace.js';
import { defineTool, type Tool, type ToolContext } from '../../define-tool.js';
import { appendCommand, notACodeChild, readCommands, waitForSession, type CodeSession } from './session.js';
import { FILE_CALL_TIMEOUT_MS, workspaceFileOperation, MAX_LINES_CHARS } from './workspace-files.js';

/** Bytes of stdout, and of stderr, a `Bash` result shows. */
export const BASH_OUTPUT_BYTES = 30_000;
export const BASH_DEFAULT_TIMEOUT_MS = 120_000;
export const BASH_MAX_TIMEOUT_MS = 600_000;
/**
 * Credits per CPU-second of `Bash` (about $0.036 per CPU-hour, a cloud vCPU's price); the price table's `Bash` entry
 * overrides it.
 */
export const BASH_CPU_SECOND_PRICE = 0.001;
/** Largest file `Edit` and `Grep` open (`Read` streams any file, answering a window of its lines). */
export const MAX_READ_BYTES = 5 * 1024 * 1024;
const READ_DEFAULT_LINES = 2_000;
const LINE_CHARS = 2_000;
const MAX_GLOB_RESULTS = 500;
const MAX_GREP_MATCHES = 200;
const GREP_LINE_CHARS = 300;
/** Directory entries a `Glob` walks at most. */
const MAX_WALK = 20_000;

export interface CodeChildToolsOptions {
  dataDir: string;
  sandbox: Sandbox;
}

interface Workspace {
  root: string;
  session: CodeSession;
}

async function workspaceOf(dataDir: string, tool: string, ctx: ToolContext): Promise<Workspace> {
  const childId = ctx.agent.agent_id;
  const session = await waitForSession(dataDir, childId, ctx.signal);
  // The parent recorded itself: a session of another agent's child is never used.
  if (!session || session.parent_id !== ctx.agent.parent_id) throw notACodeChild(tool, childId);
  return { root: workspacePath(dataDir, childId), session };
}

function refuse(path: string, why: string): AgentryError {
  return new AgentryError('invalid_request', `Path ${JSON.stringify(path)} is refused: ${why}`);
}

/**
 * A path as the model gives it, relative to the workspace (`/workspace/x` is `x`). Refuses, before anything runs,
 * what can never be in the workspace: a NUL byte, another absolute path, a `..` segment.
 */
export function relativePath(path: string): string {
  const trimmed = path.trim();
  let rel = trimmed === '' ? '.' : trimmed;
  if (trimmed === '/workspace' || trimmed === '/workspace/') rel = '.';
  else if (trimmed.startsWith('/workspace/')) rel = trimmed.slice('/workspace/'.length) || '.';
  if (rel.includes('\0')) throw refuse(rel, 'it contains a NUL byte');
  if (rel.startsWith('/')) throw refuse(rel, 'paths are relative to the workspace');
  if (rel.split(/[\\/]+/).includes('..')) throw refuse(rel, '`..` is not allowed');
  return rel;
}

/** The price and meter of the five file tools: their sandbox's CPU-seconds, like `Bash`, reserved for the most. */
const FILE_TOOL_BILLING = {
  price: BASH_CPU_SECOND_PRICE,
  meter: { unit: 'cpu_second', maxUnits: () => (FILE_CALL_TIMEOUT_MS / 1000) * availableParallelism() },
} as const;

/** How a file tool runs its operation: for the child's account, its CPU reported to the call's meter. */
function fileCallOptions(ctx: ToolContext) {
  return {
    signal: ctx.signal,
    account: ctx.accountId,
    onCpuMs: (ms: number) => ctx.meter(ms / 1000),
  };
}

/** The six tools of a coding child. */
export function codeChildTools({ dataDir, sandbox }: CodeChildToolsOptions): Tool[] {
  const bash = defineTool({
    name: 'Bash',
    description:
      'Run a shell command (/bin/sh -c) in your workspace, /workspace, inside a sandbox with no network. Python 3, ' +
      'Node.js and the usual command-line tools are there. Each call starts a fresh shell: files persist, the ' +
      'working directory and variables do not. `timeout` is in milliseconds (default 120000, at most 600000).',
    input: z.object({
      command: z.string().min(1).max(100_000),
      timeout: z.number().int().min(1).max(BASH_MAX_TIMEOUT_MS).optional(),
    }),
    idempotent: false,
    // No lane of its own: the sandbox's slots, shared fairly between accounts, bound it (a FIFO lane in front of them
    // would let one account's queued commands hold another's back).
    // Billed by the CPU time the command used, reserved for the most it could use: every core for its whole timeout.
    price: BASH_CPU_SECOND_PRICE,
    meter: {
      unit: 'cpu_second',
      maxUnits: ({ timeout }) => ((timeout ?? BASH_DEFAULT_TIMEOUT_MS) / 1000) * availableParallelism(),
    },
    describe: ({ command }) => `Running: ${command.length > 80 ? `${command.slice(0, 77)}...` : command}`,
    async run({ command, timeout }, ctx) {
      const { root, session } = await workspaceOf(dataDir, 'Bash', ctx);
      const childId = ctx.agent.agent_id;
      const used = (await readCommands(dataDir, childId)).reduce((sum, c) => sum + c.ms, 0);
      const remaining = session.budget_ms - used;
      if (remaining <= 0) {
        throw new AgentryError(
          'invalid_request',
          `The task's command time (${Math.round(session.budget_ms / 1000)} s) is used up: call submit_result now.`,
        );
      }
      const timeoutMs = Math.min(timeout ?? BASH_DEFAULT_TIMEOUT_MS, remaining);
      const r = await sandbox.run(
        { shell: command, workspace: root, timeoutMs, maxOutputBytes: BASH_OUTPUT_BYTES },
        // A pause stops the command at once; the model is told, and can run it again after resume.
        { signal: AbortSignal.any([ctx.signal, ctx.pauseSignal]), account: ctx.accountId },
      );
      // A run killed before it could be measured (timeout, pause) is billed its wall time, on one core.
      ctx.meter((r.cpuMs ?? r.durationMs) / 1000);
      const ms = Math.round(r.durationMs);
      await appendCommand(dataDir, childId, { command, exit_code: r.exitCode, ms });
      return {
        exit_code: r.exitCode,
        ms,
        stdout: r.stdout,
        stderr: r.stderr,
        ...(r.stdoutTruncated ? { stdout_truncated: true } : {}),
        ...(r.stderrTruncated ? { stderr_truncated: true } : {}),
        ...(r.timedOut ? { note: `killed after ${timeoutMs} ms (timeout)` } : {}),
        ...(r.signal && !r.timedOut ? { note: killNote(r) } : {}),
      };
    },
  });

  const read = defineTool({
    name: 'Read',
    description:
      'Read a text file of your workspace, with line numbers. `offset` is the first line (1-based), `limit` the ' +
      `number of lines (default ${READ_DEFAULT_LINES}).`,
    input: z.object({
      file_path: z.string().min(1),
      offset: z.number().int().min(1).optional(),
      limit: z.number().int().min(1).max(1_000_000).optional(),
    }),
    idempotent: true,
    ...FILE_TOOL_BILLING,
    describe: ({ file_path }) => `Reading ${file_path}`,
    async run({ file_path, offset, limit }, ctx) {
      const { root } = await workspaceOf(dataDir, 'Read', ctx);
      const first = (offset ?? 1) - 1;
      // The helper streams the file and answers only this window, each line cut: never the whole file.
      const { lines, total } = await workspaceFileOperation(
        sandbox,
        root,
        {
          op: 'lines',
          path: relativePath(file_path),
          label: file_path,
          offset: first + 1,
          limit: limit ?? READ_DEFAULT_LINES,
          line_chars: LINE_CHARS,
          max_chars: MAX_LINES_CHARS,
        },
        fileCallOptions(ctx),
      );
      if (total === 0) return `${file_path} is empty.`;
      const body = lines.map((line, i) => `${String(first + i + 1).padStart(6)}\t${line}`).join('\n');
      const rest = total - first - lines.length;
      return rest > 0 ? `${body}\n(${rest} more lines; read on with offset ${first + lines.length + 1})` : body;
    },
  });

  const write = defineTool({
    name: 'Write',
    description:
      'Write a file in your workspace (created with its directories, or replaced). Paths are relative to /workspace.',
    input: z.object({ file_path: z.string().min(1), content: z.string().max(1_000_000) }),
    // Writing the same content twice leaves the same file.
    idempotent: true,
    ...FILE_TOOL_BILLING,
    describe: ({ file_path }) => `Writing ${file_path}`,
    async run({ file_path, content }, ctx) {
      const { root } = await workspaceOf(dataDir, 'Write', ctx);
      const wrote = await workspaceFileOperation(
        sandbox,
        root,
        { op: 'write', path: relativePath(file_path), label: file_path, content, encoding: 'utf8' },
        fileCallOptions(ctx),
      );
      return `Wrote ${wrote.bytes} bytes to ${wrote.path}.`;
    },
  });

  const edit = defineTool({
    name: 'Edit',
    description:
      'Replace `old_string` with `new_string` in a file of your workspace. `old_string` must occur exactly once ' +
      'unless `replace_all` is true; include surrounding lines to make it unique.',
    input: z.object({
      file_path: z.string().min(1),
      old_string: z.string().min(1),
      new_string: z.string(),
      replace_all: z.boolean().optional(),
    }),
    idempotent: false,
    ...FILE_TOOL_BILLING,
    describe: ({ file_path }) => `Editing ${file_path}`,
    async run({ file_path, old_string, new_string, replace_all }, ctx) {
      const { root } = await workspaceOf(dataDir, 'Edit', ctx);
      const path = relativePath(file_path);
      if (old_string === new_string) {
        throw new AgentryError('invalid_request', 'old_string and new_string are the same: nothing to change');
      }
      const edited = await workspaceFileOperation(
        sandbox,
        root,
        {
          op: 'edit',
          path,
          label: file_path,
          old_string,
          new_string,
          replace_all: replace_all ?? false,
          max_bytes: MAX_READ_BYTES,
        },
        fileCallOptions(ctx),
      );
      const n = edited.replacements;
      return `Edited ${edited.path}: ${n} replacement${n > 1 ? 's' : ''}.`;
    },
  });

  const glob = defineTool({
    name: 'Glob',
    description:
      'List the files of your workspace that match a glob pattern (`*`, `**`, `?`, `[abc]`, `{a,b}`), e.g. ' +
      '`**/*.py`. `path` is the directory to search (default: the workspace).',
    input: z.object({ pattern: z.string().min(1).max(1_000), path: z.string().optional() }),
    idempotent: true,
    ...FILE_TOOL_BILLING,
    describe: ({ pattern }) => `Finding ${pattern}`,
    async run({ pattern, path }, ctx) {
      const { root } = await workspaceOf(dataDir, 'Glob', ctx);
      const found = await workspaceFileOperation(
        sandbox,
        root,
        { op: 'glob', path: relativePath(path ?? '.'), pattern, max_results: MAX_GLOB_RESULTS, max_walk: MAX_WALK },
        fileCallOptions(ctx),
      );
      if (found.total === 0) return 'No files found.';
      const listed = found.matches.join('\n');
      return found.total > found.matches.length ? `${listed}\n(${found.total - found.matches.length} more)` : listed;
    },
  });

  const grep = defineTool({
    name: 'Grep',
    description:
      'Search the text files of your workspace for a regular expression (ripgrep: Rust regex syntax, no ' +
      'backreferences or lookaround). `path`: a file or directory (default: the workspace); `glob`: only files that ' +
      'match it (e.g. `*.py`). Answers `path:line:text`.',
    input: z.object({
      pattern: z.string().min(1).max(1_000),
      path: z.string().optional(),
      glob: z.string().max(1_000).optional(),
    }),
    idempotent: true,
    ...FILE_TOOL_BILLING,
    describe: ({ pattern }) => `Searching for ${pattern}`,
    async run({ pattern, path, glob: only }, ctx) {
      const { root } = await workspaceOf(dataDir, 'Grep', ctx);
      const { lines, more } = await workspaceFileOperation(
        sandbox,
        root,
        {
          op: 'grep',
          path: relativePath(path ?? '.'),
          pattern,
          ...(only !== undefined ? { glob: only } : {}),
          max_matches: MAX_GREP_MATCHES,
          max_bytes: MAX_READ_BYTES,
          line_chars: GREP_LINE_CHARS,
        },
        fileCallOptions(ctx),
      );
      if (lines.length === 0) return 'No matches.';
      return more > 0 ? `${lines.join('\n')}\n(${more} more matches)` : lines.join('\n');
    },
  });

  return [bash, read, write, edit, glob, grep] as Tool[];
}

/** Why a command was killed, for the model: its workspace's quota, its memory, or a pause or stop. */
function killNote(r: { quotaExceeded?: boolean; memoryExceeded?: boolean }): string {
  if (r.quotaExceeded) {
    return (
      'killed: over the workspace quota (disk of this workspace, or of all your account’s workspaces together); ' +
      'delete files to go on'
    );
  }
  if (r.memoryExceeded) return 'killed: the sandbox ran out of memory';
  return 'killed: the agent was paused or stopped';
}
