/**
 * @module tools/builtin/code-agent
 * `spawn_claude_code_agent` (README.md#a-coding-agent-in-a-sandbox-spawn_claude_code_agent): one coding child works on
 * a task in a workspace of its own, with tools named after Claude Code's (`child-tools.ts`); its commands run in the
 * sandbox (bubblewrap by default: no network, an unprivileged uid, resource limits). The call then returns the child's
 * summary, the commands it ran with their exit codes, and the files it named as artifacts of the calling agent. With
 * `acceptance_command`, the runtime runs that command itself, in a fresh sandbox on the final workspace, and reports
 * `verified` from its exit code: the caller need not take the child's word.
 *
 * Workspaces live under the `dataDir` option (default `/var/lib/agentry` for root: `defaultDataDir()`), one per child, keyed by the
 * child's agent id (why: `session.ts`). The spawn is keyed by the call, so a re-run after a crash re-attaches to the
 * same child and finds its workspace; once the call has kept its output in its durable state, the workspace is
 * removed.
 *
 * Two backends do the coding. `runtime` (the default) is the child above: the runtime's model with Claude Code's six
 * tools. `claude-agent-sdk` runs Claude Code itself in the sandbox (`claude-sdk/`), thinking with the runtime's model
 * through a billed model bridge; it needs the optional `@anthropic-ai/claude-agent-sdk` package. Both end the same
 * way: the named files as artifacts, the commands, and the acceptance command re-run by the runtime.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { delimiter, extname, join } from 'node:path';
import { z } from 'zod';
import { AgentryError } from '../../../errors.js';
import { bubblewrapSandbox } from '../../../sandbox/bubblewrap.js';
import type { Sandbox, SandboxProbe } from '../../../sandbox/sandbox.js';
import { isSlotted, withSandboxSlots, type SandboxSlotOptions } from '../../../sandbox/sandbox-slots.js';
import { createWorkspace, defaultDataDir } from '../../../sandbox/workspace.js';
import { defineTool, ToolSuspension, type ChildTask, type Tool, type ToolContext } from '../../define-tool.js';
import type { PlatformServices } from '../../platform.js';
import { CLAUDE_AGENT_SDK, removeClaudeRuns } from './claude-sdk/runs.js';
import type { ClaudeAgentSdk } from './claude-sdk/run-claude-code.js';
import { BASH_CPU_SECOND_PRICE, codeChildTools, relativePath } from './child-tools.js';
import { CLAUDE_CODE_INSTRUCTIONS, CODER_INSTRUCTIONS, CODER_STEPS, coderGoal } from './prompts.js';
import { ripgrepReadiness } from './ripgrep.js';
import { readCommands, readSession, removeSession, writeSession, type CommandRecord } from './session.js';
import { workspaceFileOperation } from './workspace-files.js';

export const CODE_AGENT_TOOL_NAME = 'spawn_claude_code_agent';
/** The child's tools, by name. */
export const CODE_CHILD_TOOL_NAMES = ['Bash', 'Read', 'Write', 'Edit', 'Glob', 'Grep'] as const;
export const DEFAULT_TIMEOUT_S = 600;
/** Characters of the acceptance command's stdout and stderr shown (their ends). */
const TAIL_CHARS = 4_000;
/** Commands listed in the output at most (the first ones; the total is given). */
const MAX_COMMANDS_SHOWN = 200;

export interface CodeAgentToolOptions {
  /**
   * Where workspaces are kept: `<dataDir>/workspaces/<child agent id>`, plus `<dataDir>/code-agents/` for the
   * runtime's own records. Its parents must be traversable by the sandbox's uid (not under /root). It is made private
   * to the runtime, and refused when someone else owns it or can write it (`ensurePrivateDir`).
   * @default defaultDataDir(): /var/lib/agentry for root, else ~/.local/state/agentry
   * @example '/var/lib/agentry'
   */
  dataDir?: string;
  /**
   * Where commands and file operations run. Wrapped in sandbox slots ({@link withSandboxSlots}) unless it already
   * has them.
   * @default bubblewrapSandbox() (one per tool instance; probed on first use)
   */
  sandbox?: Sandbox;
  /**
   * How many sandboxes run at once across every tool of the coding child (`Bash`, the file tools, the acceptance
   * command, Claude Code), and how many of them one account may hold.
   * @default { slots: 2, perAccount: 1 }
   */
  sandboxSlots?: SandboxSlotOptions;
  /** Credits per call (the child's model use is billed on its own). @default 1 */
  price?: number;
  /** Largest file kept as an artifact; a larger one is reported, not kept. @default 1 MB */
  maxFileBytes?: number;
  /**
   * Who does the coding: `runtime`, a child agent of the runtime's model with Claude Code's six tools, or
   * `claude-agent-sdk`, Claude Code itself in the same sandbox (needs the optional package
   * `@anthropic-ai/claude-agent-sdk`; its model turns go to the runtime's model, billed to the calling agent).
   * @default AGENTRY_CODE_AGENT_BACKEND, else 'runtime'
   */
  backend?: CodeAgentBackend;
  /** The claude-agent-sdk backend's bounds. */
  claudeCode?: {
    /** Model turns of one call at most. @default 100 */
    maxTurns?: number;
    /** Output tokens of one model turn at most (Claude Code asks for up to 64k; the reservation counts on it). @default 8192 */
    maxOutputTokens?: number;
    /**
     * Loads the SDK module (typed loosely so that this type does not need the optional package).
     * @default () => import('@anthropic-ai/claude-agent-sdk')
     */
    loadSdk?: () => Promise<unknown>;
  };
}

export const CODE_AGENT_BACKENDS = ['runtime', 'claude-agent-sdk'] as const;
export type CodeAgentBackend = (typeof CODE_AGENT_BACKENDS)[number];

const OptionsSchema = z.object({
  backend: z.enum(CODE_AGENT_BACKENDS).optional(),
  claudeCode: z
    .object({
      maxTurns: z.number().int().min(1).max(1_000).optional(),
      maxOutputTokens: z.number().int().min(256).max(128_000).optional(),
      loadSdk: z.custom<() => Promise<unknown>>((v) => typeof v === 'function').optional(),
    })
    .strict()
    .optional(),
});

const Input = z.object({
  task: z
    .string()
    .max(50_000)
    .refine((t) => t.trim().length > 0, 'must not be blank')
    .describe('What to build or fix, in full: the child sees only this and the files'),
  files: z
    .array(z.object({ path: z.string().min(1).max(1_000), content: z.string().max(1_000_000) }))
    .max(100)
    .optional()
    .describe('Files to put in the workspace first (paths relative to it)'),
  timeout_s: z
    .number()
    .int()
    .min(1)
    .max(3_600)
    .optional()
    .describe(
      `Seconds the child's commands may run in total (default ${DEFAULT_TIMEOUT_S}); also the acceptance command's limit`,
    ),
  acceptance_command: z
    .string()
    .min(1)
    .max(10_000)
    .optional()
    .describe('A shell command run on the final workspace in a fresh sandbox; exit code 0 means verified'),
});

const ChildResult = z.object({
  summary: z.string(),
  files: z.array(z.string()).max(50).optional(),
});

type Output = {
  summary: string;
  files: Array<{ path: string; size: number; artifact_id: string }>;
  commands: CommandRecord[];
  commands_total?: number;
  /** Files the child named that were not kept, and why. */
  not_saved?: Array<{ path: string; reason: string }>;
  verified?: boolean;
  verification?: {
    exit_code: number | null;
    stdout: string;
    stderr: string;
    timed_out?: boolean;
  };
};

type State = { phase: 'done'; output: Output };

const MIME: Record<string, string> = {
  '.py': 'text/x-python',
  '.js': 'text/javascript',
  '.mjs': 'text/javascript',
  '.cjs': 'text/javascript',
  '.ts': 'text/plain',
  '.json': 'application/json',
  '.md': 'text/markdown',
  '.txt': 'text/plain',
  '.csv': 'text/csv',
  '.html': 'text/html',
  '.css': 'text/css',
  '.sh': 'text/x-shellscript',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
};

/** Whether bwrap is on PATH, without running anything (the real probe runs on first use). */
function bwrapOnPath(): boolean {
  const dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/bin', '/usr/sbin', '/bin', '/sbin'];
  return dirs.some((d) => d.startsWith('/') && existsSync(join(d, 'bwrap')));
}

/** Whether the optional SDK can be found from here (without loading it). */
function sdkInstalled(): boolean {
  try {
    createRequire(import.meta.url).resolve(CLAUDE_AGENT_SDK);
    return true;
  } catch {
    return false;
  }
}

/** The tool, with its readiness for `agentry tools`. */
export type CodeAgentTool = Tool<z.input<typeof Input>> & {
  /** Ready or not, and why: the probe's answer once it ran, else a quick look for bwrap ("checked on first use"). */
  readiness(): { ready: boolean; detail: string };
  /** Whether the coding child's `Grep` can start: ripgrep (`rg`) where the sandbox finds programs. */
  grepReadiness(): { ready: boolean; detail: string };
  /** Removes the workspaces of deleted agents (a coding child's workspace is keyed by the child's id). */
  agentsDeleted(agentIds: readonly string[]): Promise<void>;
  /** The runtime's services: the claude-agent-sdk backend's model turns are billed through them. */
  attach(services: PlatformServices): void;
  readonly backend: CodeAgentBackend;
};

/**
 * The spawn_claude_code_agent tool.
 *
 * @example
 * const runtime = await AgentRuntime.open({ tools: [codeAgentTool({ dataDir: '/var/lib/agentry' })] });
 */
export function codeAgentTool(options: CodeAgentToolOptions = {}): CodeAgentTool {
  const dataDir = options.dataDir ?? defaultDataDir();
  // One set of slots for everything this tool runs in a sandbox (a host's own sandbox too, unless it has slots).
  const given = options.sandbox ?? bubblewrapSandbox();
  const sandbox = isSlotted(given) ? given : withSandboxSlots(given, options.sandboxSlots);
  const maxFileBytes = options.maxFileBytes ?? 1024 * 1024;
  const parsed = OptionsSchema.safeParse({ backend: options.backend, claudeCode: options.claudeCode });
  if (!parsed.success) {
    throw new AgentryError(
      'invalid_request',
      `Invalid ${CODE_AGENT_TOOL_NAME} options: ${z.prettifyError(parsed.error)}`,
    );
  }
  const backend = options.backend ?? 'runtime';
  const loadSdk = (options.claudeCode?.loadSdk ?? (() => import(CLAUDE_AGENT_SDK))) as () => Promise<ClaudeAgentSdk>;
  let services: PlatformServices | undefined;
  let probed: SandboxProbe | undefined;
  const probe = async () => (probed = await sandbox.probe());

  const tool = defineTool({
    name: CODE_AGENT_TOOL_NAME,
    description:
      'Hand a coding task to a coding sub-agent that writes and runs code (Python 3, Node.js, shell) in a sandbox ' +
      'without network access, and get back its summary, the commands it ran with their exit codes, and the files ' +
      'it produced (as artifacts). Give files to start from in `files`. With `acceptance_command`, that command is ' +
      're-run by the runtime on the final files and `verified` says whether it exited 0.',
    input: Input,
    price: options.price ?? 1,
    // A re-run re-attaches to the same child (spawns are keyed by the call) and its workspace; the output, once made,
    // is in the call's durable state.
    idempotent: true,
    childTools: codeChildTools({ dataDir, sandbox }),
    describe: ({ task }) => `Coding: ${task.length > 80 ? `${task.slice(0, 77)}...` : task}`,
    async run(raw, ctx) {
      const input = Input.parse(raw);
      const state = await ctx.state.get<State>();
      if (state?.phase === 'done') return state.output;
      const available = await probe();
      if (!available.ok) {
        throw new AgentryError(
          'not_configured',
          `${CODE_AGENT_TOOL_NAME} needs a working sandbox (${sandbox.name}): ${available.reason}`,
        );
      }
      const budgetMs = (input.timeout_s ?? DEFAULT_TIMEOUT_S) * 1000;
      const given = (input.files ?? []).map((f) => relativePath(f.path));
      // Written by the sandbox's user, inside the sandbox, like every other write to a workspace.
      const writeGivenFiles = async (root: string) => {
        for (const [i, file] of (input.files ?? []).entries()) {
          const path = given[i]!;
          await workspaceFileOperation(
            sandbox,
            root,
            { op: 'write', path, label: file.path, content: file.content, encoding: 'utf8' },
            { signal: ctx.signal, account: ctx.accountId },
          );
        }
      };
      if (backend === 'claude-agent-sdk') {
        // The backend (the model bridge, the SDK glue) loads with its first call.
        const { runClaudeCodeBackend } = await import('./claude-sdk/backend.js');
        const ran = await runClaudeCodeBackend(
          {
            dataDir,
            sandbox,
            services: () => services,
            loadSdk,
            maxTurns: options.claudeCode?.maxTurns ?? CODER_STEPS,
            maxOutputTokens: options.claudeCode?.maxOutputTokens ?? 8192,
          },
          input,
          { first: coderGoal(input.task, given, input.acceptance_command), instructions: CLAUDE_CODE_INSTRUCTIONS },
          ctx,
          budgetMs,
          writeGivenFiles,
        );
        if (ran instanceof ToolSuspension) return ran;
        // Its sandbox's CPU time, billed like the Bash tool's.
        if (ran.cpuMs > 0)
          await services?.chargeTool(ctx.agent.agent_id, 'Bash', BASH_CPU_SECOND_PRICE, ran.cpuMs / 1000);
        const output = await finish(
          ctx,
          ran.root,
          { summary: ran.summary, files: ran.files },
          ran.commands,
          input,
          budgetMs,
        );
        await ctx.state.set({ phase: 'done', output } satisfies State);
        await removeClaudeRuns(dataDir, [ctx.agent.agent_id], sandbox);
        return output;
      }
      const task: ChildTask = {
        goal: coderGoal(input.task, given, input.acceptance_command),
        instructions: CODER_INSTRUCTIONS,
        tools: [...CODE_CHILD_TOOL_NAMES],
        result: ChildResult,
        maxSteps: CODER_STEPS,
      };
      const spawned = await ctx.spawn([task]);
      const { results } = await ctx.subAgentResults(spawned.spawn_id, { offset: 0, limit: 1 });
      const child = results[0];
      if (!child) throw new AgentryError('internal_error', 'the coding child was not found after spawning it');
      if (!(await readSession(dataDir, child.agent_id))) {
        // First run (or a crash before the session was recorded): the caller's files, then the session, which tells
        // the child's tools the workspace is ready.
        await writeGivenFiles(await createWorkspace(dataDir, child.agent_id));
        await writeSession(dataDir, child.agent_id, {
          parent_id: ctx.agent.agent_id,
          tool_call_id: ctx.toolCallId,
          budget_ms: budgetMs,
        });
      }
      const done = (spawned.counts.COMPLETED ?? 0) + (spawned.counts.FAILED ?? 0);
      if (done < spawned.total) return ctx.suspend(`Coding: ${input.task.slice(0, 80)}`, spawned.spawn_id);

      const submitted = ChildResult.safeParse(child.data);
      const summary = submitted.success
        ? submitted.data.summary
        : `The coding child did not submit a result (${child.status})${child.result ? `: ${child.result}` : '.'}`;
      const output = await finish(
        ctx,
        await createWorkspace(dataDir, child.agent_id),
        { summary, files: submitted.data?.files ?? [] },
        await readCommands(dataDir, child.agent_id),
        input,
        budgetMs,
      );
      await ctx.state.set({ phase: 'done', output } satisfies State);
      await removeSession(dataDir, child.agent_id, sandbox);
      return output;
    },
  });

  /** The output of either backend: the named files as artifacts, the commands, and the acceptance command's verdict. */
  async function finish(
    ctx: ToolContext,
    root: string,
    { summary, files: namedFiles }: { summary: string; files: string[] },
    commands: CommandRecord[],
    input: z.output<typeof Input>,
    budgetMs: number,
  ): Promise<Output> {
    const files: Output['files'] = [];
    const notSaved: NonNullable<Output['not_saved']> = [];
    for (const named of new Set(namedFiles)) {
      try {
        const rel = relativePath(named);
        // Read inside the sandbox, as its user: a Bash call of the child may still be rearranging the workspace.
        const read = await workspaceFileOperation(
          sandbox,
          root,
          { op: 'read', path: rel, label: named, max_bytes: maxFileBytes, encoding: 'base64' },
          { signal: ctx.signal, account: ctx.accountId },
        ).catch((error: unknown) => {
          if (!AgentryError.isInstance(error)) throw error;
          const reason = error.message.startsWith('File does not exist')
            ? 'no such file'
            : error.message.startsWith('Not a file')
              ? 'not a regular file'
              : error.message.replace(/^.* is (\d+) bytes; the limit is (\d+)$/, '$1 bytes, above the limit of $2');
          notSaved.push({ path: named, reason });
          return undefined;
        });
        if (!read) continue;
        const data = Buffer.from(read.content, 'base64');
        const kept = await ctx.artifacts.put({
          name: rel,
          mime_type: MIME[extname(rel).toLowerCase()] ?? 'application/octet-stream',
          data,
        });
        files.push({ path: rel, size: kept.size, artifact_id: kept.artifact_id });
      } catch (error) {
        notSaved.push({ path: named, reason: (error as Error).message });
      }
    }
    const output: Output = {
      summary,
      files,
      commands: commands.slice(0, MAX_COMMANDS_SHOWN),
      ...(commands.length > MAX_COMMANDS_SHOWN ? { commands_total: commands.length } : {}),
      ...(notSaved.length > 0 ? { not_saved: notSaved } : {}),
    };
    if (input.acceptance_command !== undefined) {
      // A new sandbox on the final workspace. Only a delete or shutdown stops it: a pause lets it finish, so that
      // `verified` is never false because of a pause.
      const r = await sandbox.run(
        { shell: input.acceptance_command, workspace: root, timeoutMs: budgetMs, maxOutputBytes: 64 * 1024 },
        { signal: ctx.signal, account: ctx.accountId },
      );
      output.verified = r.exitCode === 0;
      output.verification = {
        exit_code: r.exitCode,
        stdout: r.stdout.slice(-TAIL_CHARS),
        stderr: r.stderr.slice(-TAIL_CHARS),
        ...(r.timedOut ? { timed_out: true } : {}),
      };
    }
    return output;
  }

  return Object.assign(tool, {
    backend,
    attach(given: PlatformServices) {
      services = given;
    },
    async agentsDeleted(agentIds: readonly string[]) {
      for (const id of agentIds) await removeSession(dataDir, id, sandbox);
      await removeClaudeRuns(dataDir, agentIds, sandbox);
    },
    readiness(): { ready: boolean; detail: string } {
      const coder =
        backend === 'claude-agent-sdk'
          ? 'Claude Code (claude-agent-sdk) thinking with the runtime’s model, in a'
          : 'a coding child whose commands run in a';
      if (backend === 'claude-agent-sdk' && !options.claudeCode?.loadSdk && !sdkInstalled()) {
        return { ready: false, detail: `the claude-agent-sdk backend needs ${CLAUDE_AGENT_SDK} (npm install it)` };
      }
      if (probed) {
        return probed.ok
          ? { ready: true, detail: `${coder} ${sandbox.name} sandbox` }
          : { ready: false, detail: `no sandbox: ${probed.reason}` };
      }
      if (!options.sandbox && process.platform === 'linux' && !bwrapOnPath()) {
        return { ready: false, detail: 'no sandbox: bwrap was not found (install the bubblewrap package)' };
      }
      if (!options.sandbox && process.platform !== 'linux') {
        return { ready: false, detail: `no sandbox: bubblewrap needs Linux, this is ${process.platform}` };
      }
      return { ready: true, detail: `${coder} ${sandbox.name} sandbox (checked on first use)` };
    },
    grepReadiness: () => ripgrepReadiness(),
  }) as CodeAgentTool;
}
