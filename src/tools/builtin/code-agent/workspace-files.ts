/**
 * @module tools/builtin/code-agent/workspace-files
 * Every file operation on a coding workspace, by the child's tools (`Read`, `Write`, `Edit`, `Glob`, `Grep`) and by
 * the runtime itself (the caller's files in, the named files out as artifacts), runs INSIDE the sandbox as its
 * unprivileged user: a fixed program, `file-helper.mjs`, started by the host's node binary bound read-only into the
 * sandbox, reads the operation as JSON on stdin. Nothing opens a workspace path on the host, so a symlink swapped in
 * by a concurrent `Bash` call (renameat2 RENAME_EXCHANGE between a check and an open) leads nowhere the sandbox could
 * not already go; and no pattern the model chose runs on the runtime's event loop.
 *
 * Cost: one sandbox per call (about 50-80 ms: bwrap, then node's start), taking one of the sandbox's slots like a
 * `Bash` command (`sandbox-slots.ts`), for the caller's account. Its CPU time is reported (`onCpuMs`) so that the
 * child's file tools bill it by the CPU-second, like `Bash`; the answer is capped per operation
 * ({@link answerBytes}), so what the runtime holds per call is small whatever the file.
 */
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { AgentryError } from '../../../errors.js';
import type { Sandbox } from '../../../sandbox/sandbox.js';

/** Wall-clock and CPU limit of one file operation. */
export const FILE_CALL_TIMEOUT_MS = 30_000;
/** Memory of one file operation's sandbox (node and the operation; `Edit` holds a file of at most 5 MB twice). */
export const FILE_CALL_MEMORY_BYTES = 256 * 1024 ** 2;
const NODE_AT = '/run/agentry/node';
const HELPER_AT = '/run/agentry/file-helper.mjs';
const HELPER = fileURLToPath(new URL('./file-helper.mjs', import.meta.url));
/** Characters of lines one `lines` answer keeps at most (its JSON is at most six bytes a character). */
export const MAX_LINES_CHARS = 256 * 1024;

/**
 * Bytes of answer kept per operation: what the runtime buffers for one call. A `read` (the runtime's own, for
 * artifacts: base64, up to its `max_bytes`) gets room for its file; a `lines` answer (the `Read` tool) for
 * {@link MAX_LINES_CHARS} escaped characters; the others' answers are small and capped by their counts.
 */
function answerBytes(operation: FileOperation): number {
  if (operation.op === 'read') return Math.ceil(operation.max_bytes / 3) * 4 * 2 + 64 * 1024;
  if (operation.op === 'lines') return operation.max_chars * 6 + 64 * 1024;
  return 2 * 1024 * 1024;
}

/** The operations `file-helper.mjs` knows, as sent. */
export type FileOperation =
  | { op: 'read'; path: string; label: string; max_bytes: number; encoding: 'utf8' | 'base64' }
  | { op: 'lines'; path: string; label: string; offset: number; limit: number; line_chars: number; max_chars: number }
  | { op: 'write'; path: string; label: string; content: string; encoding: 'utf8' | 'base64' }
  | {
      op: 'edit';
      path: string;
      label: string;
      old_string: string;
      new_string: string;
      replace_all: boolean;
      max_bytes: number;
    }
  | { op: 'glob'; path: string; pattern: string; max_results: number; max_walk: number }
  | {
      op: 'grep';
      path: string;
      pattern: string;
      glob?: string;
      max_matches: number;
      max_bytes: number;
      line_chars: number;
    };

const Failure = z.object({ ok: z.literal(false), code: z.enum(['not_found', 'invalid_request']), message: z.string() });
const ANSWERS = {
  read: z.object({ ok: z.literal(true), content: z.string() }),
  lines: z.object({ ok: z.literal(true), lines: z.array(z.string()), total: z.number() }),
  write: z.object({ ok: z.literal(true), bytes: z.number(), path: z.string() }),
  edit: z.object({ ok: z.literal(true), replacements: z.number(), path: z.string() }),
  glob: z.object({ ok: z.literal(true), matches: z.array(z.string()), total: z.number() }),
  grep: z.object({ ok: z.literal(true), lines: z.array(z.string()), more: z.number() }),
} as const;
type Answers = { [K in keyof typeof ANSWERS]: z.output<(typeof ANSWERS)[K]> };

/** How one operation runs. */
export interface FileOperationOptions {
  /** Aborting kills its sandbox (or gives up its place in the queue for a slot). */
  signal?: AbortSignal;
  /** The account whose sandbox slots and disk the operation counts to. */
  account?: string;
  /**
   * Told the operation's CPU time (or its wall time, when it could not be measured) as soon as the sandbox has
   * ended, before the answer is checked: a refused or failed operation used CPU too.
   */
  onCpuMs?: (ms: number) => void;
}

/**
 * Runs one operation on the workspace `root` in a fresh sandbox and returns its answer; a refusal (no such file, a
 * path out of the workspace, an invalid pattern) rejects with an `AgentryError` carrying the helper's message.
 *
 * @example
 * const { content } = await workspaceFileOperation(sandbox, root, {
 *   op: 'read', path: 'src/a.py', label: 'src/a.py', max_bytes: 5_000_000, encoding: 'utf8',
 * });
 */
export async function workspaceFileOperation<O extends FileOperation>(
  sandbox: Sandbox,
  root: string,
  operation: O,
  options: FileOperationOptions = {},
): Promise<Answers[O['op']]> {
  const { signal, account, onCpuMs } = options;
  const r = await sandbox.run(
    {
      argv: [NODE_AT, HELPER_AT],
      stdin: JSON.stringify(operation),
      workspace: root,
      // Read, Glob and Grep only read: the workspace is bound read-only for them.
      workspaceReadOnly:
        operation.op === 'read' || operation.op === 'lines' || operation.op === 'glob' || operation.op === 'grep',
      mounts: [
        { host: process.execPath, at: NODE_AT },
        { host: HELPER, at: HELPER_AT },
      ],
      timeoutMs: FILE_CALL_TIMEOUT_MS,
      limits: { cpuSeconds: FILE_CALL_TIMEOUT_MS / 1000, memoryBytes: FILE_CALL_MEMORY_BYTES },
      maxOutputBytes: answerBytes(operation),
      // A workspace over its disk quota takes no more writes (Bash can still delete files).
      refuseOverQuota: operation.op === 'write' || operation.op === 'edit',
    },
    // A signal of its own per call: many concurrent calls of one agent would otherwise pile listeners on one signal.
    {
      ...(signal ? { signal: AbortSignal.any([signal]) } : {}),
      ...(account !== undefined ? { account } : {}),
    },
  );
  onCpuMs?.(r.cpuMs ?? r.durationMs);
  if (r.timedOut) {
    throw new AgentryError('invalid_request', `The ${operation.op} took longer than ${FILE_CALL_TIMEOUT_MS / 1000} s`);
  }
  if (r.memoryExceeded || r.quotaExceeded) {
    throw new AgentryError(
      'invalid_request',
      r.memoryExceeded
        ? `The ${operation.op} was stopped: it used up its memory (${FILE_CALL_MEMORY_BYTES} bytes)`
        : `The ${operation.op} was stopped: the workspace quota is used up (this workspace's, or the account's ` +
            'across its workspaces); delete files first',
    );
  }
  if (r.signal)
    throw new AgentryError('invalid_request', `The ${operation.op} was stopped (the agent paused or ended)`);
  let answer: unknown;
  try {
    answer = JSON.parse(r.stdout);
  } catch {
    throw new AgentryError(
      'internal_error',
      `The file helper gave no answer (exit ${r.exitCode}${r.stdoutTruncated ? ', output too large' : ''}): ` +
        r.stderr.slice(-2_000).trim(),
    );
  }
  const failed = Failure.safeParse(answer);
  if (failed.success) throw new AgentryError(failed.data.code, failed.data.message);
  const parsed = ANSWERS[operation.op].safeParse(answer);
  if (!parsed.success) {
    throw new AgentryError('internal_error', `The file helper answered out of shape: ${z.prettifyError(parsed.error)}`);
  }
  return parsed.data as Answers[O['op']];
}
