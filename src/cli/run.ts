/**
 * @module cli/run
 * `agentry run "<goal>"`: runs one agent in this process on SQLite, with a live progress line and the transcript as
 * it grows. Ctrl-C pauses the agent; `--resume <agent_id>` continues it. The exit code tells how it ended.
 */
import { parseArgs } from 'node:util';
import { AgentRuntime } from '../index.js';
import { AgentryError } from '../errors.js';
import { anthropicProvider, hasAnthropicCredentials } from '../models/anthropic.js';
import type { ModelProvider } from '../models/provider.js';
import type { Tool } from '../tools/define-tool.js';
import type { Agent } from '../core/schemas.js';
import { demoModel } from './demo-model.js';
import { describeParseError, mcpServersOption, openStorage, resolveDb, UsageError } from './common.js';
import { NAMED_SUB_AGENTS, ProgressView, subAgentLabel, type ProgressOutput } from './progress.js';

/** How a direct sub-agent's end is told on the run's output. */
const CHILD_ENDINGS: Partial<Record<Agent['status'], string>> = {
  COMPLETED: 'completed',
  FAILED: 'failed',
  OUT_OF_CREDITS: 'ran out of credits',
};

/** Exit codes of `agentry run`, by how the agent ended. */
export const RUN_EXIT_CODES = {
  COMPLETED: 0,
  FAILED: 1,
  usage: 2,
  OUT_OF_CREDITS: 3,
  PAUSED: 4,
  interrupted: 130,
} as const;

export const RUN_USAGE = `Usage: agentry run "<goal>" [options]
       agentry run --resume <agent_id> [options]

Runs an agent in this process until it completes, with live progress. Ctrl-C pauses it.

Options:
  --model <id>        svc-1-lite (default) or svc-1-ultra
  --db <path>         SQLite file or postgres:// URL (default: $AGENTRY_DB or ./agentry.db)
  --credits <n>       budget for this run, in credits; the local account is topped up to cover it
  --resume <id>       continue a paused, stopped or interrupted agent
  --mcp-config <file> MCP servers whose tools the agent may use ({"mcpServers": {...}}; else $AGENTRY_MCP_CONFIG)
  --demo              a scripted stand-in plays the model (as in \`agentry serve --demo\`): offline, no key; the agent
                      plans, takes a few seconds, and completes with an answer that says it is a stand-in's
  -h, --help          show this help

Needs ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL for a server that speaks the Messages API), except with --demo.`;

export const MISSING_KEY_MESSAGE = `agentry run needs a model to talk to. Set your Anthropic API key:

  export ANTHROPIC_API_KEY=sk-ant-...

or point ANTHROPIC_BASE_URL at a server that speaks the Anthropic Messages API.
To see agentry work without a key, run: agentry run --demo "<goal>"`;

export interface RunIO {
  stdout: ProgressOutput;
  stderr: { write(text: string): void };
  env: NodeJS.ProcessEnv;
  /** Registers the Ctrl-C handler; returns a function that removes it. */
  onInterrupt(handler: () => void): () => void;
  /** Registers the termination handler (SIGTERM); returns a function that removes it. */
  onTerminate(handler: () => void): () => void;
  /** For tests and embedding: the model and tools to use instead of Anthropic. */
  model?: ModelProvider;
  tools?: Tool[];
}

/** Runs `agentry run` with `args` (after the word `run`); resolves with the exit code. */
export async function runCommand(args: string[], io: RunIO): Promise<number> {
  const options = {
    model: { type: 'string' },
    db: { type: 'string' },
    credits: { type: 'string' },
    resume: { type: 'string' },
    'mcp-config': { type: 'string' },
    demo: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  } as const;
  let parsed;
  try {
    parsed = parseArgs({ args, allowPositionals: true, options });
  } catch (err) {
    io.stderr.write(`agentry run: ${describeParseError(err, options)}\n\n${RUN_USAGE}\n`);
    return RUN_EXIT_CODES.usage;
  }
  const { values, positionals } = parsed;
  if (values.help) {
    io.stdout.write(`${RUN_USAGE}\n`);
    return 0;
  }
  const goal = positionals.join(' ').trim();
  if (!goal && !values.resume) {
    io.stderr.write(`Give a goal, or --resume an agent.\n\n${RUN_USAGE}\n`);
    return RUN_EXIT_CODES.usage;
  }
  let credits: number | undefined;
  if (values.credits !== undefined) {
    credits = Number(values.credits);
    if (!Number.isFinite(credits) || credits <= 0) {
      io.stderr.write(`--credits must be a positive number, got ${JSON.stringify(values.credits)}\n`);
      return RUN_EXIT_CODES.usage;
    }
  }
  if (!io.model && !values.demo && !hasAnthropicCredentials(io.env)) {
    io.stderr.write(`${MISSING_KEY_MESSAGE}\n`);
    return RUN_EXIT_CODES.usage;
  }

  let path: string;
  try {
    path = resolveDb(values.db, io.env);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    io.stderr.write(`agentry run: ${err.message}\n`);
    return RUN_EXIT_CODES.usage;
  }
  if (values.demo) {
    io.stdout.write(
      'Demo mode: a scripted stand-in plays the model (no key, no network); run without --demo, with ' +
        'ANTHROPIC_API_KEY set, for real work.\n',
    );
  }
  let mcp: { mcpServers?: Record<string, unknown> };
  try {
    mcp = mcpServersOption(values['mcp-config']);
  } catch (err) {
    io.stderr.write(`agentry run: ${(err as Error).message}\n`);
    return RUN_EXIT_CODES.usage;
  }
  const runtime = await AgentRuntime.open({
    storage: await openStorage(path),
    model: io.model ?? (values.demo ? demoModel() : anthropicProvider()),
    tools: io.tools ?? [],
    ...mcp,
  });
  const view = new ProgressView(io.stdout);
  let interrupted = false;
  const removeInterrupt = io.onInterrupt(() => {
    if (interrupted) return;
    interrupted = true;
    view.note('\nPausing… (the step in flight is saved or redone on resume)');
    void pauseQuietly(runtime, agentId);
  });
  let terminated = false;
  const removeTerminate = io.onTerminate(() => {
    terminated = true;
    void runtime.close();
  });
  let agentId = values.resume ?? '';
  try {
    if (credits !== undefined) await ensureAvailable(runtime, credits);
    if (values.resume) {
      const { agent, messages } = await runtime.get(values.resume);
      view.note(`Resuming agent ${agent.agent_id} (${agent.model}, ${agent.status})`);
      for (const m of messages) view.message(m);
      if (agent.status === 'PAUSED' || agent.status === 'OUT_OF_CREDITS') await runtime.resume(agent.agent_id);
    } else {
      const created = await runtime.create({
        goal,
        ...(values.model !== undefined ? { model: values.model } : {}),
        ...(credits !== undefined ? { maxCredits: credits } : {}),
      });
      agentId = created.agent_id;
      view.note(
        `Agent ${created.agent_id} · ${created.model}${credits !== undefined ? ` · budget ${credits} credits` : ''}`,
      );
      view.message({ role: 'USER', text: goal });
    }
    runtime.on('agent.message', ({ agent_id, message }) => {
      if (agent_id === agentId) view.message(message);
    });
    runtime.on('agent.progress', ({ agent }) => {
      if (agent.agent_id === agentId) view.update(agent);
    });
    let named = 0;
    runtime.on('agent.status', ({ agent }) => {
      if (agent.agent_id === agentId) view.update(agent);
      else if (agent.parent_id === agentId && CHILD_ENDINGS[agent.status] && named < NAMED_SUB_AGENTS) {
        named++;
        const reason = agent.status === 'COMPLETED' ? '' : `: ${agent.status_message}`;
        view.note(`  ${subAgentLabel(agent)} ${CHILD_ENDINGS[agent.status]}${reason}`);
        if (named === NAMED_SUB_AGENTS) view.note('  (further sub-agents are counted in the progress line)');
      }
    });
    view.update((await runtime.get(agentId)).agent);
    const final = await runtime.waitFor(agentId);
    view.update(final);
    view.finish();
    printSummary(io, final);
    if (terminated) return RUN_EXIT_CODES.interrupted;
    if (interrupted && final.status === 'PAUSED') {
      io.stdout.write(
        `Paused. Continue with: agentry run --resume ${final.agent_id}${values.db ? ` --db ${values.db}` : ''}\n`,
      );
      return RUN_EXIT_CODES.interrupted;
    }
    return RUN_EXIT_CODES[final.status as keyof typeof RUN_EXIT_CODES] ?? 1;
  } catch (err) {
    view.finish();
    if (AgentryError.isInstance(err)) {
      io.stderr.write(`agentry run: ${err.message}\n`);
      return err.code === 'invalid_request' || err.code === 'not_found' ? RUN_EXIT_CODES.usage : 1;
    }
    if (terminated) return RUN_EXIT_CODES.interrupted;
    throw err;
  } finally {
    removeInterrupt();
    removeTerminate();
    await runtime.close();
  }
}

async function pauseQuietly(runtime: AgentRuntime, agentId: string): Promise<void> {
  if (!agentId) return;
  try {
    await runtime.pause(agentId);
  } catch {
    // already finished: waitFor reports how
  }
}

/** Tops the local account up so that `credits` are available for this run. */
async function ensureAvailable(runtime: AgentRuntime, credits: number): Promise<void> {
  const account = await runtime.accounts.get(runtime.defaultAccountId);
  if (account.available < credits)
    await runtime.accounts.addCredits(runtime.defaultAccountId, credits - account.available);
}

function printSummary(io: RunIO, agent: Agent): void {
  io.stdout.write(
    `\n${agent.status}: ${agent.status_message}\n` +
      `${agent.token_count.toLocaleString('en-US')} tokens · ${agent.message_count} messages · ` +
      `${agent.credits_spent} credits (this agent) · agent ${agent.agent_id}\n`,
  );
}

/** Usage text of `agentry run --help` (the dispatcher's CommandModule shape). */
export const usage = RUN_USAGE;

/** `agentry run` on the real process: stdout/stderr, SIGINT pauses, SIGTERM shuts down gracefully. */
export function run(args: string[]): Promise<number> {
  const signalHandler = (signal: NodeJS.Signals) => (handler: () => void) => {
    process.on(signal, handler);
    return () => {
      process.off(signal, handler);
    };
  };
  return runCommand(args, {
    stdout: {
      write: (text) => process.stdout.write(text),
      isTTY: Boolean(process.stdout.isTTY),
      ...(process.stdout.columns ? { columns: process.stdout.columns } : {}),
    },
    stderr: { write: (text) => process.stderr.write(text) },
    env: process.env,
    onInterrupt: signalHandler('SIGINT'),
    onTerminate: signalHandler('SIGTERM'),
  });
}
