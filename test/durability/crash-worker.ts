/**
 * The child process of the crash suite. Run it as
 *
 *   node --import tsx test/durability/crash-worker.ts <dbPath> <appendFile> <mode> <seed> <run>
 *
 * from the repository root (tsx maps `agentry` and `agentry-runtime/testing` to src/ through tsconfig `paths`).
 *
 * Modes:
 * - `fleet`: opens the runtime on the database (a SQLite file, or a postgres:// URL) (which recovers whatever the last, killed, process left), creates
 *   the 50 fleet agents if the database has none, prints `running`, and keeps working until it is killed. SIGTERM
 *   closes the runtime gracefully and exits 0.
 * - `hold`: the PAUSED / OUT_OF_CREDITS scenario. On an empty database it creates one agent it pauses while its
 *   long tool call runs, one that runs out of credits, and one that keeps working, then prints `held` and waits to be
 *   killed. On a database that has them it opens the runtime, waits until this process has nothing left to run, prints
 *   `idle`, closes the runtime and exits 0.
 *
 * Progress goes to stdout, one event per line, written synchronously so a SIGKILL never loses a printed line:
 *   M+ <agent_id> <turn> / M- <agent_id> <turn>      a model call starts / returns (or is aborted)
 *   T+ <tool_call_id> <tool> / A <tool_call_id> <tool> / T- <tool_call_id> <tool>
 *                                                     a tool call starts / has appended its line / returns
 */
import { writeSync } from 'node:fs';
import { AgentRuntime, type ModelProvider, type ModelRequest } from 'agentry-runtime';
import { storageAt } from './worker-main.js';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import {
  FLEET_SCRIPT,
  FLEET_SIZE,
  HOLD_GOALS,
  HOLD_SCRIPTS,
  POOR_CREDITS,
  goalOf,
  holdTools,
  prng,
  testTools,
} from './crash-script.js';

const [dbPath, appendFile, mode = 'fleet', seedArg = '1', runArg = '0'] = process.argv.slice(2);
if (!dbPath || !appendFile) {
  process.stderr.write('usage: crash-worker.ts <dbPath> <appendFile> [fleet|hold] [seed] [run]\n');
  process.exit(2);
}
const seed = Number(seedArg);
const run = Number(runArg);
const rand = prng((seed * 7919 + run * 104729) >>> 0);

function out(line: string): void {
  writeSync(1, `${line}\n`);
}

/** Wraps a provider so every call prints when it starts and when it returns. */
function logged(inner: ModelProvider): ModelProvider {
  return {
    models: inner.models,
    async generate(request: ModelRequest, options) {
      const turn = request.messages.filter((m) => m.role === 'assistant').length;
      out(`M+ ${request.agentId} ${turn}`);
      try {
        return await inner.generate(request, options);
      } finally {
        out(`M- ${request.agentId} ${turn}`);
      }
    },
  };
}

function toScripted(turn: (typeof FLEET_SCRIPT)[number], delayMs: number): ScriptedTurn {
  return { text: turn.text, toolCalls: turn.toolCalls, usage: turn.usage, delayMs };
}

async function fleet(): Promise<void> {
  // Real delays of 10-140 ms in every model turn and around every append, so kills land at varied points.
  const delay = () => 10 + Math.floor(rand() * 130);
  const model = logged(
    scriptedModel({
      record: false,
      turns: (_request, { turnIndex }) => {
        const turn = FLEET_SCRIPT[turnIndex];
        if (!turn) throw new Error(`fleet script has no turn ${turnIndex}`);
        return toScripted(turn, delay());
      },
    }),
  );
  const runtime = await AgentRuntime.open({
    storage: storageAt(dbPath!),
    model,
    tools: testTools({
      appendFile: appendFile!,
      delayMs: delay,
      log: (event, id, name) => out(`${event} ${id} ${name}`),
    }),
    defaultAccount: { id: 'local', credits: 1_000_000 },
    limits: { maxOutputTokens: 256 },
    concurrency: { runSlots: 8 },
  });
  runtime.on('error', ({ error, agent_id }) => out(`error ${agent_id} ${String(error)}`));
  runtime.on('agent.status', ({ agent }) => out(`status ${agent.agent_id} ${agent.status}`));

  process.on('SIGTERM', () => {
    void (async () => {
      // Holds live in this process: report them (and the balance) before closing.
      out(`account ${JSON.stringify(await runtime.accounts.get('local'))}`);
      await runtime.close();
      out('closed');
      process.exit(0);
    })();
  });

  const existing = await runtime.list({ limit: 1 });
  if (existing.data.length === 0) {
    for (let i = 0; i < FLEET_SIZE; i++) await runtime.create({ goal: `crash-suite agent #${i}` });
    out(`created ${FLEET_SIZE}`);
  }
  out(`running run=${run} seed=${seed}`);
  // Keep the process alive until it is killed, even once every agent is done.
  setInterval(() => {}, 60_000);
}

async function hold(): Promise<void> {
  let holdStarted!: () => void;
  const holding = new Promise<void>((resolve) => (holdStarted = resolve));
  const model = logged(
    scriptedModel({
      record: false,
      turns: (request, { turnIndex }) => {
        const turn = HOLD_SCRIPTS[goalOf(request.messages)]?.[turnIndex];
        if (!turn) throw new Error(`hold script has no turn ${turnIndex} for ${goalOf(request.messages)}`);
        return toScripted(turn, 20);
      },
    }),
  );
  const runtime = await AgentRuntime.open({
    storage: storageAt(dbPath!),
    model,
    tools: [
      ...testTools({
        appendFile: appendFile!,
        delayMs: () => 150,
        log: (event, id, name) => out(`${event} ${id} ${name}`),
      }),
      ...holdTools({ appendFile: appendFile!, holdMs: 60_000, onHoldStart: () => holdStarted() }),
    ],
    defaultAccount: { id: 'local', credits: 1_000 },
    limits: { maxOutputTokens: 256 },
  });
  runtime.on('error', ({ error, agent_id }) => out(`error ${agent_id} ${String(error)}`));

  const existing = await runtime.list({ limit: 10 });
  if (existing.data.length > 0) {
    out('running');
    await runtime.whenIdle();
    const statuses = Object.fromEntries(
      await Promise.all(
        existing.data.map(async (a) => [a.agent_id, (await runtime.get(a.agent_id)).agent.status] as const),
      ),
    );
    out(`idle ${JSON.stringify(statuses)}`);
    await runtime.close();
    process.exit(0);
  }

  await runtime.accounts.create({ id: 'poor', credits: POOR_CREDITS });
  const paused = await runtime.create({ goal: HOLD_GOALS.paused });
  const poor = await runtime.create({ goal: HOLD_GOALS.poor, accountId: 'poor' });
  await holding;
  // Paused while its long call runs: the call keeps running (and holds its price) until the process is killed.
  await runtime.pause(paused.agent_id);
  const stopped = await runtime.waitFor(poor.agent_id);
  if (stopped.status !== 'OUT_OF_CREDITS') throw new Error(`poor agent is ${stopped.status}`);
  // Created last, so it is mid-step (its append sleeps 150 ms on each side) when the kill lands.
  const busy = await runtime.create({ goal: HOLD_GOALS.busy });
  await new Promise<void>((resolve) => {
    const off = runtime.on('agent.progress', ({ agent }) => {
      if (agent.agent_id === busy.agent_id) {
        off();
        resolve();
      }
    });
  });
  out(`held ${JSON.stringify({ paused: paused.agent_id, poor: poor.agent_id, busy: busy.agent_id })}`);
  setInterval(() => {}, 60_000);
}

(mode === 'hold' ? hold() : fleet()).catch((err: unknown) => {
  process.stderr.write(`crash-worker failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
