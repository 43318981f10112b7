/**
 * @module tools/builtin/code-agent/claude-sdk/run-claude-code
 * One run of Claude Code (the `@anthropic-ai/claude-agent-sdk` backend of spawn_claude_code_agent) inside the
 * sandbox. The SDK drives Claude Code over its standard streams; `spawnClaudeCodeProcess` starts it in a sandbox
 * (`Sandbox.spawn`) instead of on the host, with:
 *
 * - the workspace at `/workspace`, its working directory;
 * - its own HOME (`/home/claude`, a host directory outside the workspace) where it keeps its session, so a pause or a
 *   restart resumes the same conversation (`resume: sessionId`);
 * - its binary mounted read-only at `/opt/agentry/claude`;
 * - the model bridge's socket at `/run/agentry/model.sock` as its only way to a model (`ANTHROPIC_UNIX_SOCKET`), and
 *   no network otherwise;
 * - the six tools the default backend offers (Bash, Read, Write, Edit, Glob, Grep) and `submit_result`, an in-process
 *   MCP tool of the SDK (its calls travel over the same streams), which is how the run hands back its summary and
 *   files; permission checks are off, because the sandbox is the boundary.
 *
 * Nothing of the host's environment passes into the sandbox.
 */
import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import type * as ClaudeAgentSdkModule from '@anthropic-ai/claude-agent-sdk';
import { z } from 'zod';
import { AgentryError } from '../../../../errors.js';
import type { Sandbox, SandboxLimits, SandboxProcess } from '../../../../sandbox/sandbox.js';
import type { CommandRecord } from '../session.js';

/** Where things are inside the sandbox. */
export const CLAUDE_BINARY_AT = '/opt/agentry/claude';
export const CLAUDE_HOME_AT = '/home/claude';
export const MODEL_SOCKET_AT = '/run/agentry/model.sock';

/** The tools Claude Code is given: the same six as the default backend's child, plus submit_result. */
export const CLAUDE_TOOLS = ['Bash', 'Read', 'Write', 'Edit', 'Glob', 'Grep'];
export const SUBMIT_TOOL = 'mcp__agentry__submit_result';

/** The part of the SDK this module uses (loaded lazily: the SDK is an optional peer dependency). */
export type ClaudeAgentSdk = typeof ClaudeAgentSdkModule;

export interface ClaudeCodeRun {
  sdk: ClaudeAgentSdk;
  sandbox: Sandbox;
  /** Host directories: the workspace (bound at /workspace) and Claude Code's HOME (bound at /home/claude). */
  workspace: string;
  home: string;
  /** Host path of the model bridge's socket, and the key Claude Code sends it. */
  bridgeSocket: string;
  bridgeKey: string;
  /** The first prompt, or on a resumed run the note saying it was interrupted. */
  prompt: string;
  /** Appended to Claude Code's own system prompt. */
  instructions: string;
  /** Claude Code's session: set on the first run, resumed on the next ones. */
  sessionId: string;
  resume: boolean;
  maxTurns: number;
  /** Wall-clock limit of the whole run (Claude Code and every command it runs). */
  timeoutMs: number;
  limits?: Partial<SandboxLimits>;
  /** Aborting kills the sandbox at once (pause, delete, shutdown). */
  signal: AbortSignal;
  /** The account the sandbox's slot and disk are counted to. */
  account?: string;
  /** Told of each command Claude Code ran, when its result comes back. */
  onCommand?(command: CommandRecord): void;
}

export interface ClaudeCodeOutcome {
  /** What Claude Code submitted with submit_result, if it did. */
  submitted?: { summary: string; files?: string[] };
  /** Its last answer (the SDK's `result`), and whether it ended in an error. */
  result: string;
  isError: boolean;
  /** Model turns it took, and the sandbox's CPU time. */
  turns: number;
  cpuMs?: number;
  timedOut: boolean;
  /** The last lines Claude Code wrote to stderr, for an error message. */
  stderrTail: string;
}

/** How long Claude Code may take to exit after its conversation ended, before it is killed. */
const EXIT_GRACE_MS = 5_000;

const Submitted = z.object({
  summary: z.string().min(1).max(100_000),
  files: z.array(z.string().min(1).max(1_000)).max(50).optional(),
});

/**
 * Adapts a sandbox process that is still starting to the SDK's `SpawnedProcess`, which the SDK wants at once: its
 * streams are pass-throughs connected when the sandbox is up.
 */
class SandboxedClaudeProcess extends EventEmitter {
  readonly stdin = new PassThrough();
  readonly stdout = new PassThrough();
  killed = false;
  exitCode: number | null = null;
  /** Resolves when the sandbox has exited (or never started). */
  readonly ended: Promise<void>;
  private process: SandboxProcess | undefined;

  constructor(
    started: Promise<SandboxProcess>,
    onStderr: (chunk: string) => void,
    onExit: (cpuMs?: number, timedOut?: boolean) => void,
  ) {
    super();
    let done!: () => void;
    this.ended = new Promise((resolve) => (done = resolve));
    started.then(
      (p) => {
        this.process = p;
        if (this.killed) p.kill();
        this.stdin.pipe(p.stdin);
        p.stdout.pipe(this.stdout);
        p.stderr.on('data', (chunk: Buffer) => onStderr(chunk.toString('utf8')));
        // A write after the sandbox died must not throw out of the SDK's stream.
        p.stdin.on('error', () => undefined);
        p.exited.then(
          (ended) => {
            this.exitCode = ended.exitCode;
            onExit(ended.cpuMs, ended.timedOut);
            this.emit('exit', ended.exitCode, ended.signal as NodeJS.Signals | null);
            done();
          },
          (error: unknown) => {
            this.emit('error', error);
            done();
          },
        );
      },
      (error: unknown) => {
        this.stdout.end();
        this.emit('error', error);
        done();
      },
    );
  }

  kill(): boolean {
    this.killed = true;
    this.process?.kill();
    return true;
  }
}

/** Exit code of a Bash result as Claude Code reports it ("Exit code 2" on the first line of a failed command). */
function exitCodeOf(content: unknown, isError: boolean): number | null {
  const text =
    typeof content === 'string'
      ? content
      : Array.isArray(content)
        ? content.map((b: { text?: string }) => b.text ?? '').join('\n')
        : '';
  const stated = text.match(/Exit code:? (\d+)/);
  if (stated) return Number(stated[1]);
  if (/interrupted|timed out|was aborted/i.test(text) && isError) return null;
  return isError ? 1 : 0;
}

/**
 * Runs Claude Code in the sandbox until it finishes, fails, times out or is aborted.
 *
 * @example
 * const outcome = await runClaudeCode({ sdk, sandbox, workspace, home, bridgeSocket, bridgeKey, prompt, ... });
 */
export async function runClaudeCode(run: ClaudeCodeRun): Promise<ClaudeCodeOutcome> {
  const { sdk } = run;
  if (!run.sandbox.spawn) {
    throw new AgentryError(
      'not_configured',
      `the ${run.sandbox.name} sandbox cannot host Claude Code (it has no spawn())`,
    );
  }
  const spawnInSandbox = run.sandbox.spawn.bind(run.sandbox);
  let submitted: ClaudeCodeOutcome['submitted'];
  const submit = sdk.tool(
    'submit_result',
    'Submit the result of the task once it is done: a summary (what you built, the commands you ran and the output ' +
      'that shows it works, or what still fails) and the paths of the files the caller should receive.',
    { summary: z.string().describe('What was done and how it was checked'), files: z.array(z.string()).optional() },
    async (args) => {
      const parsed = Submitted.safeParse(args);
      if (!parsed.success) {
        return { content: [{ type: 'text', text: `Not submitted: ${z.prettifyError(parsed.error)}` }], isError: true };
      }
      submitted = parsed.data;
      return { content: [{ type: 'text', text: 'Result submitted. You are done: stop here.' }] };
    },
  );

  let stderrTail = '';
  let cpuMs: number | undefined;
  let timedOut = false;
  const abort = new AbortController();
  const onAbort = () => abort.abort();
  run.signal.addEventListener('abort', onAbort, { once: true });
  const processes: SandboxedClaudeProcess[] = [];

  const env: Record<string, string> = {
    HOME: CLAUDE_HOME_AT,
    // Any base URL that is not Anthropic's: Claude Code then treats the endpoint as a gateway and fetches no remote
    // settings or policies (it has no network to fetch them by); every request goes through the socket.
    ANTHROPIC_BASE_URL: 'http://agentry-model-bridge.invalid',
    ANTHROPIC_UNIX_SOCKET: MODEL_SOCKET_AT,
    ANTHROPIC_API_KEY: run.bridgeKey,
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_AUTOUPDATER: '1',
    DISABLE_TELEMETRY: '1',
    DISABLE_ERROR_REPORTING: '1',
    CLAUDE_AGENT_SDK_CLIENT_APP: 'agentry',
  };

  const commandsById = new Map<string, { command: string; started: number }>();
  let turns = 0;
  let result = '';
  let isError = false;
  try {
    const conversation = sdk.query({
      prompt: run.prompt,
      options: {
        cwd: '/workspace',
        tools: CLAUDE_TOOLS,
        allowedTools: [...CLAUDE_TOOLS, SUBMIT_TOOL],
        permissionMode: 'bypassPermissions',
        allowDangerouslySkipPermissions: true,
        settingSources: [],
        mcpServers: { agentry: sdk.createSdkMcpServer({ name: 'agentry', tools: [submit] }) },
        systemPrompt: { type: 'preset', preset: 'claude_code', append: run.instructions },
        maxTurns: run.maxTurns,
        ...(run.resume ? { resume: run.sessionId } : { sessionId: run.sessionId }),
        env,
        abortController: abort,
        stderr: (data: string) => {
          stderrTail = (stderrTail + data).slice(-4_000);
        },
        spawnClaudeCodeProcess: (options) => {
          const process = new SandboxedClaudeProcess(
            spawnInSandbox(
              {
                argv: [CLAUDE_BINARY_AT, ...options.args],
                workspace: run.workspace,
                // Only what the SDK set (our `env` and its own CLAUDE_* variables): the host's environment never passes.
                env: Object.fromEntries(
                  Object.entries(options.env).filter((e): e is [string, string] => typeof e[1] === 'string'),
                ),
                mounts: [
                  { host: options.command, at: CLAUDE_BINARY_AT },
                  { host: run.home, at: CLAUDE_HOME_AT, writable: true },
                  { host: run.bridgeSocket, at: MODEL_SOCKET_AT },
                ],
                timeoutMs: run.timeoutMs,
                ...(run.limits ? { limits: run.limits } : {}),
              },
              { signal: abort.signal, ...(run.account !== undefined ? { account: run.account } : {}) },
            ),
            (chunk) => {
              stderrTail = (stderrTail + chunk).slice(-4_000);
            },
            (cpu, timeout) => {
              if (cpu !== undefined) cpuMs = (cpuMs ?? 0) + cpu;
              if (timeout) timedOut = true;
            },
          );
          processes.push(process);
          return process;
        },
      },
    });
    for await (const message of conversation) {
      if (message.type === 'assistant') {
        for (const block of message.message.content) {
          if (block.type === 'tool_use' && block.name === 'Bash') {
            const input = block.input as { command?: unknown };
            commandsById.set(block.id, { command: String(input.command ?? ''), started: Date.now() });
          }
        }
      } else if (message.type === 'user' && Array.isArray(message.message.content)) {
        for (const block of message.message.content) {
          if (typeof block !== 'object' || block.type !== 'tool_result') continue;
          const started = commandsById.get(block.tool_use_id);
          if (!started) continue;
          commandsById.delete(block.tool_use_id);
          run.onCommand?.({
            command: started.command,
            exit_code: exitCodeOf(block.content, block.is_error === true),
            ms: Date.now() - started.started,
          });
        }
      } else if (message.type === 'result') {
        turns = message.num_turns;
        isError = message.is_error;
        result =
          message.subtype === 'success'
            ? message.result
            : `Claude Code stopped (${message.subtype})${'errors' in message && message.errors.length > 0 ? `: ${message.errors.join('; ')}` : ''}`;
      }
    }
  } catch (error) {
    if (run.signal.aborted) throw error;
    isError = true;
    const said = stderrTail.trim().split('\n').slice(-3).join(' | ');
    result = `Claude Code failed: ${(error as Error).message}${said ? ` (stderr: ${said})` : ''}`;
  } finally {
    run.signal.removeEventListener('abort', onAbort);
    // The SDK closes Claude Code's stdin when the conversation ends and Claude Code exits (its CPU time is then
    // known); one that lingers is killed.
    let linger: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(processes.map((p) => p.ended)),
      new Promise((resolve) => (linger = setTimeout(resolve, EXIT_GRACE_MS))),
    ]);
    clearTimeout(linger);
    for (const p of processes) p.kill();
    // Commands still running when it ended (or was stopped) were killed with the sandbox.
    for (const { command, started } of commandsById.values()) {
      run.onCommand?.({ command, exit_code: null, ms: Date.now() - started });
    }
  }
  return {
    ...(submitted ? { submitted } : {}),
    result,
    isError,
    turns,
    ...(cpuMs !== undefined ? { cpuMs } : {}),
    timedOut,
    stderrTail,
  };
}
