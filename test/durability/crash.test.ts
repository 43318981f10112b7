/**
 * Crash suite: SIGKILL at any moment loses no committed step and repeats no call that must not run twice.
 *
 * A child process (`crash-worker.ts`) runs 50 scripted agents on a SQLite file and is SIGKILLed at random moments,
 * 20 times in a row, restarted after each kill; a last run lets everything finish. Then, reading the file from this
 * process: every agent is COMPLETED, each transcript is exactly its goal and its scripted turns (none lost, none
 * repeated), every non-idempotent call ran at most once (checked against the file it appends to), token counts and
 * the ledger add up, and no credits are left reserved.
 *
 * The randomness is seeded: the seed is printed, and `AGENTRY_CRASH_SEED=<n>` replays the same kill schedule and
 * delays (thread timing still varies from run to run).
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  AgentRuntime,
  defineTool,
  sqliteStorage,
  type AgentRow,
  type ModelProvider,
  type StorageAdapter,
  type Tool,
  type ToolCallRow,
} from 'agentry-runtime';
import { scriptedModel } from 'agentry-runtime/testing';
import {
  APPEND_TOOL,
  FLEET_SCRIPT,
  FLEET_SIZE,
  FLEET_TOKENS,
  HOLD_GOALS,
  HOLD_PRICES,
  HOLD_SCRIPTS,
  HOLD_TOOL,
  LOOKUP_TOOL,
  POOR_CREDITS,
  PRICEY_TOOL,
  TOOL_PRICES,
  UNKNOWN_OUTCOME_RE,
  goalOf,
  holdTools,
  prng,
  sleep,
  testTools,
  type FleetTurn,
} from './crash-script.js';
import { dropSchemas, newSchemaName, postgresUnreachable, urlWithSchema } from '../support/postgres.js';
import { eventually } from '../support/runtime.js';
import { killLiveWorkers, startWorker as startHarnessWorker, type Worker } from './worker-harness.js';
import { storageAt } from './worker-main.js';

const SEED = process.env.AGENTRY_CRASH_SEED
  ? Number(process.env.AGENTRY_CRASH_SEED)
  : Math.floor(Math.random() * 2 ** 31);
const KILLS = 20;
/** A kill lands 0..KILL_WINDOW_MS after the worker printed `running` (recovery included, at the low end). */
const KILL_WINDOW_MS = 450;
const FINAL_RUN_DEADLINE_MS = 30_000;
const MICROS = 1_000_000;

// ---------------------------------------------------------------------------------------------------------------
// the child process (started and watched by the shared harness)

const startWorker = (args: string[]): Worker => startHarnessWorker('./crash-worker.ts', args);

// The fleet runs on SQLite and on PostgreSQL (when reachable; AGENTRY_CI_STRICT=1 requires it).
const postgresReachable = (await postgresUnreachable()) === null;
const BACKENDS: Array<'sqlite' | 'postgres'> =
  postgresReachable || process.env.AGENTRY_CI_STRICT === '1' ? ['sqlite', 'postgres'] : ['sqlite'];
const postgresSchemas: string[] = [];

/** A database URL on a schema of its own (dropped after the suite). */
async function postgresDb(): Promise<string> {
  const schema = newSchemaName('agentry_crash');
  postgresSchemas.push(schema);
  return urlWithSchema(schema);
}

afterAll(() => dropSchemas(postgresSchemas));

afterEach(killLiveWorkers);

/** What was in flight when a worker died, from the events it printed (written synchronously, so none is lost). */
function inFlightAtDeath(lines: string[]) {
  const models = new Map<string, number>();
  const tools = new Map<string, { name: string; appended: boolean }>();
  for (const line of lines) {
    const [ev, a, b] = line.split(' ');
    if (ev === 'M+' || ev === 'M-') {
      const key = `${a} ${b}`;
      models.set(key, (models.get(key) ?? 0) + (ev === 'M+' ? 1 : -1));
    } else if (ev === 'T+') tools.set(a!, { name: b!, appended: false });
    else if (ev === 'A') tools.get(a!)!.appended = true;
    else if (ev === 'T-') tools.delete(a!);
  }
  const liveModels = [...models.entries()].filter(([, n]) => n > 0).map(([k]) => k);
  const liveTools = [...tools.entries()].map(([id, t]) => ({ id, ...t }));
  return { models: liveModels, tools: liveTools };
}

// ---------------------------------------------------------------------------------------------------------------
// reading the database

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[47][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

async function allAgents(storage: StorageAdapter): Promise<AgentRow[]> {
  return (await storage.listAgents({ limit: 10_000 })).rows;
}

async function toolCallsOf(storage: StorageAdapter, agentId: string): Promise<ToolCallRow[]> {
  const turns = await storage.listTurns(agentId);
  const calls: ToolCallRow[] = [];
  for (const t of turns) if (t.role === 'assistant') calls.push(...(await storage.listToolCalls(agentId, t.idx)));
  return calls;
}

function readLines(file: string): string[] {
  return existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean) : [];
}

/** The ledger invariant: Σ ledger = balance >= 0, and nothing is left reserved. */
async function expectLedgerInvariant(storage: StorageAdapter, accountId: string) {
  const account = (await storage.getAccount(accountId))!;
  const ledger = await storage.listLedger(accountId);
  expect(ledger.reduce((s, l) => s + l.amount, 0)).toBe(account.balance);
  expect(account.balance).toBeGreaterThanOrEqual(0);
  return { account, ledger };
}

/** Checks one completed agent against its script; returns its append_line calls split by how they ended. */
async function expectScriptedAgent(
  storage: StorageAdapter,
  agent: AgentRow,
  script: readonly FleetTurn[],
  ledger: Awaited<ReturnType<StorageAdapter['listLedger']>>,
  { checkReserved = true } = {},
) {
  expect(agent.status, `agent ${agent.agent_id}: ${agent.status_message}`).toBe('COMPLETED');
  expect(agent.progress).toBe(1);
  if (checkReserved) expect(agent.tree_reserved).toBe(0);

  // Public transcript: the goal, then each scripted text exactly once, in order.
  const messages = await storage.listMessages(agent.agent_id);
  expect(messages.map((m) => [m.role, m.text])).toEqual([
    ['USER', agent.goal],
    ...script.map((t) => ['ASSISTANT', t.text]),
  ]);
  expect(agent.message_count).toBe(script.length + 1);
  expect(agent.step_count).toBe(script.length);

  // Tokens: exactly the usage of the committed assistant turns (aborted or lost calls count nothing).
  const tokens = script.reduce((s, t) => s + t.usage.inputTokens + t.usage.outputTokens, 0);
  expect(agent.token_count).toBe(tokens);

  // The model's log: goal, then assistant/tool-result pairs, each turn's tool calls as scripted.
  const turns = await storage.listTurns(agent.agent_id);
  expect(turns.map((t) => t.idx)).toEqual(turns.map((_, i) => i));
  expect(turns.map((t) => t.role)).toEqual([
    'user',
    ...script.flatMap((t) => (t.toolCalls.length ? ['assistant', 'user'] : ['assistant'])),
  ]);
  const assistant = turns.filter((t) => t.role === 'assistant');
  assistant.forEach((t, i) => {
    const blocks = JSON.parse(t.content) as Array<{ type: string; name?: string; input?: unknown; text?: string }>;
    expect(blocks.filter((b) => b.type === 'text').map((b) => b.text)).toEqual([script[i]!.text]);
    expect(blocks.filter((b) => b.type === 'tool_use').map((b) => [b.name, b.input])).toEqual(
      script[i]!.toolCalls.map((c) => [c.name, c.input]),
    );
  });

  // Every tool call finished, and its result is what the model saw.
  const calls = await toolCallsOf(storage, agent.agent_id);
  expect(calls).toHaveLength(script.reduce((s, t) => s + t.toolCalls.length, 0));
  for (const c of calls) expect(c.status).toBe('finished');
  const unknown = calls.filter((c) => UNKNOWN_OUTCOME_RE.test(c.result ?? ''));
  // Only non-idempotent calls may end with an unknown outcome; idempotent ones are rerun instead.
  for (const c of unknown) expect(c.idempotent, `${c.name} ${c.tool_use_id}`).toBe(false);
  for (const c of calls.filter((c) => !UNKNOWN_OUTCOME_RE.test(c.result ?? '')))
    expect(c.is_error, `${c.name}: ${c.result}`).toBe(false);

  // Ledger of this agent: one model row per scripted turn, with its usage; one tool row per priced call that ran and
  // was committed; credits_spent is their sum.
  const rows = ledger.filter((l) => l.agent_id === agent.agent_id);
  expect(rows.filter((l) => l.kind === 'model').map((l) => [l.tokens_in, l.tokens_out])).toEqual(
    script.map((t) => [t.usage.inputTokens, t.usage.outputTokens]),
  );
  const prices: Record<string, number> = { ...TOOL_PRICES, ...HOLD_PRICES };
  const charged = calls.filter((c) => (prices[c.name] ?? 0) > 0 && !UNKNOWN_OUTCOME_RE.test(c.result ?? ''));
  expect(
    rows
      .filter((l) => l.kind === 'tool')
      .map((l) => l.item)
      .sort(),
  ).toEqual(charged.map((c) => c.name).sort());
  expect(rows.filter((l) => l.kind === 'tool').reduce((s, l) => s - l.amount, 0)).toBe(
    charged.reduce((s, c) => s + Math.round(prices[c.name]! * MICROS), 0),
  );
  expect(rows.reduce((s, l) => s - l.amount, 0)).toBe(agent.credits_spent);
  return { calls, unknown };
}

/**
 * The file check: no `<agent_id> <tool_call_id>` line twice, every line is a recorded call of a non-idempotent tool
 * of that agent, and every such call that finished with a real result has exactly its one line.
 */
function expectAtMostOnce(lines: string[], callsByAgent: Map<string, ToolCallRow[]>, unsafeTools: string[]) {
  const seen = new Map<string, number>();
  for (const line of lines) seen.set(line, (seen.get(line) ?? 0) + 1);
  const duplicates = [...seen.entries()].filter(([, n]) => n > 1);
  expect(duplicates, 'non-idempotent calls that ran twice').toEqual([]);
  const known = new Set<string>();
  let unknownRan = 0;
  let unknownNotRun = 0;
  for (const [agentId, calls] of callsByAgent) {
    for (const c of calls.filter((c) => unsafeTools.includes(c.name))) {
      const key = `${agentId} ${c.tool_use_id}`;
      known.add(key);
      if (UNKNOWN_OUTCOME_RE.test(c.result ?? '')) {
        if (seen.has(key)) unknownRan++;
        else unknownNotRun++;
      } else {
        expect(seen.get(key), `${key} finished with "${c.result}" but its line is missing`).toBe(1);
      }
    }
  }
  const strays = lines.filter((l) => !known.has(l));
  expect(strays, 'lines that match no recorded call').toEqual([]);
  for (const line of lines) expect(line.split(' ')[0]).toMatch(UUID);
  return { unknownRan, unknownNotRun };
}

/** Polls the database (no fixed sleeps) until `check` holds or the deadline passes. */
async function pollUntil<T>(
  read: () => Promise<T>,
  check: (v: T) => boolean,
  deadlineMs: number,
  what: string,
): Promise<T> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const v = await read();
    if (check(v)) return v;
    if (Date.now() > deadline)
      throw new Error(`timed out after ${deadlineMs} ms waiting for ${what}; last: ${JSON.stringify(v)}`);
    await sleep(50);
  }
}

// ---------------------------------------------------------------------------------------------------------------

describe('crash suite: SIGKILL at random moments, then restart', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'agentry-crash-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it.each(BACKENDS)(
    `%s: 50 agents survive ${KILLS} kills: all COMPLETED, no message lost or repeated, unsafe calls at most once`,
    async (backend) => {
      const started = Date.now();
      const db = backend === 'sqlite' ? join(dir, 'fleet.db') : await postgresDb();
      const journal = join(dir, `journal-${backend}.txt`);
      const rand = prng(SEED);
      // One report at the end (or on failure): the seed, where each kill landed, and the totals.
      const log = [`crash suite (${backend}): seed ${SEED} (AGENTRY_CRASH_SEED=${SEED} replays it)`];
      try {
        const stats = {
          midModelOnly: 0,
          midToolOnly: 0,
          both: 0,
          neither: 0,
          models: 0,
          tools: 0,
          appends: 0,
          appendedUncommitted: 0,
          lookups: 0,
        };
        /** append_line calls that were running when a kill landed: each must end with an unknown outcome. */
        const killedAppends = new Set<string>();
        let observer: StorageAdapter | null = null;
        const completedCount = async () => (observer ? (await observer.listAgentIdsByStatus(['COMPLETED'])).length : 0);

        for (let k = 0; k < KILLS; k++) {
          const worker = startWorker([db, journal, 'fleet', String(SEED), String(k)]);
          await worker.waitForLine(/^running /);
          const delay = Math.floor(rand() * KILL_WINDOW_MS);
          await sleep(delay); // the random kill moment, not a wait for work
          worker.kill('SIGKILL');
          const exit = await worker.exited;
          expect(exit.signal, `run ${k} exited on its own: code ${exit.code}\n${worker.stderr()}`).toBe('SIGKILL');
          expect(
            worker.lines.filter((l) => l.startsWith('error ')),
            worker.stderr(),
          ).toEqual([]);

          const live = inFlightAtDeath(worker.lines);
          const liveTools = live.tools.length > 0;
          const liveModels = live.models.length > 0;
          if (liveModels && liveTools) stats.both++;
          else if (liveModels) stats.midModelOnly++;
          else if (liveTools) stats.midToolOnly++;
          else stats.neither++;
          stats.models += live.models.length;
          stats.tools += live.tools.length;
          for (const t of live.tools) {
            if (t.name === APPEND_TOOL) {
              stats.appends++;
              if (t.appended) stats.appendedUncommitted++;
              killedAppends.add(t.id);
            } else stats.lookups++;
          }
          if (!observer) {
            observer = storageAt(db);
            await observer.init();
          }
          log.push(
            `kill ${String(k + 1).padStart(2)}: ${String(delay).padStart(3)} ms after "running"; in flight: ` +
              `${live.models.length} model calls, ${live.tools.length} tool calls ` +
              `(${live.tools.filter((t) => t.name === APPEND_TOOL).length} append_line); completed ${await completedCount()}/${FLEET_SIZE}`,
          );
        }
        const killsDone = Date.now();

        // The last run: let everything finish, polling the database with a deadline.
        const final = startWorker([db, journal, 'fleet', String(SEED), String(KILLS)]);
        await final.waitForLine(/^running /);
        await pollUntil(
          async () => {
            const rows = await allAgents(observer!);
            const failed = rows.filter((r) => r.status === 'FAILED');
            if (failed.length) throw new Error(`agents FAILED: ${failed.map((f) => f.status_message).join('; ')}`);
            return rows.filter((r) => r.status === 'COMPLETED').length;
          },
          (n) => n === FLEET_SIZE,
          FINAL_RUN_DEADLINE_MS,
          `all ${FLEET_SIZE} agents COMPLETED`,
        );
        final.kill('SIGTERM'); // graceful close
        const finalExit = await final.exited;
        expect(finalExit.code, final.stderr()).toBe(0);
        expect(final.lines).toContain('closed');
        // Holds live in the process that took them: the last one reports its account once everything is done.
        const accountLine = final.lines.find((l) => l.startsWith('account '));
        const finalAccount = JSON.parse(accountLine!.slice('account '.length)) as { reserved: number; balance: number };
        expect(finalAccount.reserved).toBe(0);
        expect(
          final.lines.filter((l) => l.startsWith('error ')),
          final.stderr(),
        ).toEqual([]);
        await observer!.close();

        // Read the file afresh.
        const storage = storageAt(db);
        await storage.init();
        try {
          const agents = await allAgents(storage);
          expect(agents).toHaveLength(FLEET_SIZE);
          expect(new Set(agents.map((a) => a.goal)).size).toBe(FLEET_SIZE);
          const { account, ledger } = await expectLedgerInvariant(storage, 'local');
          expect(account.reserved).toBe(0);
          expect(Math.round(finalAccount.balance * MICROS)).toBe(account.balance);

          const callsByAgent = new Map<string, ToolCallRow[]>();
          let unknownOutcomes = 0;
          for (const agent of agents) {
            expect(agent.token_count).toBe(FLEET_TOKENS);
            const { calls, unknown } = await expectScriptedAgent(storage, agent, FLEET_SCRIPT, ledger);
            callsByAgent.set(agent.agent_id, calls);
            unknownOutcomes += unknown.length;
          }
          expect(agents.reduce((s, a) => s + a.credits_spent, 0)).toBe(
            -ledger.filter((l) => l.amount < 0).reduce((s, l) => s + l.amount, 0),
          );

          // Every append_line a kill interrupted had been recorded started, so it was never run again: unknown outcome.
          const interrupted = [...callsByAgent.values()]
            .flat()
            .filter((c) => c.name === APPEND_TOOL && killedAppends.has(c.tool_use_id));
          expect(interrupted).toHaveLength(killedAppends.size);
          for (const c of interrupted)
            expect(c.result, `${c.agent_id} ${c.tool_use_id} was interrupted by a kill`).toMatch(UNKNOWN_OUTCOME_RE);

          const { unknownRan, unknownNotRun } = expectAtMostOnce(readLines(journal), callsByAgent, [APPEND_TOOL]);
          const lookupRuns = readLines(`${journal}.lookups`).length;
          const lookupCalls = [...callsByAgent.values()].flat().filter((c) => c.name === LOOKUP_TOOL).length;
          expect(lookupRuns).toBeGreaterThanOrEqual(lookupCalls);

          const total = Date.now() - started;
          log.push(
            ...[
              `${KILLS} kills in ${((killsDone - started) / 1000).toFixed(1)} s, final run ` +
                `${((Date.now() - killsDone) / 1000).toFixed(1)} s, total ${(total / 1000).toFixed(1)} s`,
              `  kills that landed with model calls in flight only: ${stats.midModelOnly}, tool calls only: ` +
                `${stats.midToolOnly}, both: ${stats.both}, neither (commit, recovery or idle): ${stats.neither}`,
              `  calls interrupted: ${stats.models} model calls, ${stats.tools} tool calls (${stats.appends} append_line, ` +
                `${stats.appendedUncommitted} of them after their append; ${stats.lookups} lookup)`,
              `  append_line calls with an unknown outcome: ${unknownOutcomes} (${unknownRan} had run, ${unknownNotRun} ` +
                `had not); lookup reruns: ${lookupRuns - lookupCalls}`,
            ],
          );
          // The kills must have landed mid-run for this to test anything.
          expect(stats.models + stats.tools).toBeGreaterThanOrEqual(KILLS);
          expect(unknownOutcomes).toBeGreaterThan(0);
        } finally {
          await storage.close();
        }
      } finally {
        console.log(log.join('\n'));
      }
    },
    120_000,
  );

  it('a PAUSED and an OUT_OF_CREDITS agent stay so across a kill and restart, and resume from their last step', async () => {
    const db = join(dir, 'hold.db');
    const journal = join(dir, 'hold-journal.txt');

    const first = startWorker([db, journal, 'hold', String(SEED), '0']);
    const held = JSON.parse((await first.waitForLine(/^held /)).slice(5)) as {
      paused: string;
      poor: string;
      busy: string;
    };
    first.kill('SIGKILL'); // the paused agent's long call is still running and holds its price
    expect((await first.exited).signal).toBe('SIGKILL');

    const second = startWorker([db, journal, 'hold', String(SEED), '1']);
    const idle = JSON.parse((await second.waitForLine(/^idle /)).slice(5)) as Record<string, string>;
    expect((await second.exited).code, second.stderr()).toBe(0);
    expect(idle).toEqual({ [held.paused]: 'PAUSED', [held.poor]: 'OUT_OF_CREDITS', [held.busy]: 'COMPLETED' });

    // Resume both in this process, on the same file and script.
    const model = scriptedModel({
      record: false,
      turns: (request, { turnIndex }) => {
        const turn = HOLD_SCRIPTS[goalOf(request.messages)]![turnIndex]!;
        return { text: turn.text, toolCalls: turn.toolCalls, usage: turn.usage };
      },
    });
    const runtime = await AgentRuntime.open({
      storage: sqliteStorage({ path: db }),
      model,
      tools: [
        ...testTools({ appendFile: journal, delayMs: () => 1 }),
        ...holdTools({ appendFile: journal, holdMs: 1 }),
      ],
      limits: { maxOutputTokens: 256 },
    });
    try {
      expect((await runtime.get(held.paused)).agent.status).toBe('PAUSED');
      expect((await runtime.get(held.poor)).agent.status).toBe('OUT_OF_CREDITS');
      // The hold the paused agent's call took died with the process that took it.
      expect((await runtime.accounts.get('local')).reserved).toBe(0);
      await runtime.accounts.addCredits('poor', 5);
      await runtime.resume(held.paused);
      await runtime.resume(held.poor);
      expect((await runtime.waitFor(held.paused)).status).toBe('COMPLETED');
      expect((await runtime.waitFor(held.poor)).status).toBe('COMPLETED');
      await runtime.whenIdle();
      expect((await runtime.accounts.get('local')).reserved).toBe(0);
      expect((await runtime.accounts.get('poor')).reserved).toBe(0);
    } finally {
      await runtime.close();
    }

    const storage = sqliteStorage({ path: db });
    await storage.init();
    try {
      const byId = new Map((await allAgents(storage)).map((a) => [a.agent_id, a]));
      const local = await expectLedgerInvariant(storage, 'local');
      const poor = await expectLedgerInvariant(storage, 'poor');
      expect(poor.account.reserved).toBe(0);
      expect(poor.ledger.filter((l) => l.kind === 'topup').map((l) => l.amount)).toEqual([
        POOR_CREDITS * MICROS,
        5 * MICROS,
      ]);
      expect(local.account.reserved).toBe(0);

      const callsByAgent = new Map<string, ToolCallRow[]>();
      for (const [goal, script] of Object.entries(HOLD_SCRIPTS)) {
        const agent = [...byId.values()].find((a) => a.goal === goal)!;
        const { calls } = await expectScriptedAgent(
          storage,
          agent,
          script,
          goal === HOLD_GOALS.poor ? poor.ledger : local.ledger,
        );
        callsByAgent.set(agent.agent_id, calls);
      }
      // The long call was running when the process died: never repeated, and the model was told so.
      const holdCall = callsByAgent.get(held.paused)!.find((c) => c.name === HOLD_TOOL)!;
      expect(holdCall.result).toMatch(UNKNOWN_OUTCOME_RE);
      // The pricey call was refused before it ran, so after the top-up it ran (once) and was charged.
      const priceyCall = callsByAgent.get(held.poor)!.find((c) => c.name === PRICEY_TOOL)!;
      expect(priceyCall.result).toBe('expensive result');
      expect(poor.ledger.filter((l) => l.kind === 'tool').map((l) => l.amount)).toEqual([
        -HOLD_PRICES[PRICEY_TOOL] * MICROS,
      ]);
      const { unknownRan } = expectAtMostOnce(readLines(journal), callsByAgent, [APPEND_TOOL, HOLD_TOOL]);
      expect(unknownRan).toBeGreaterThanOrEqual(1); // the hold call appended before it was killed
    } finally {
      await storage.close();
    }
  }, 60_000);
});

// ---------------------------------------------------------------------------------------------------------------
// graceful shutdown, in this process

/** A provider that counts its calls in flight and how they ended. */
function countingModel(inner: ModelProvider) {
  const state = { inFlight: new Set<string>(), started: 0, aborted: 0 };
  const model: ModelProvider = {
    models: inner.models,
    async generate(request, options) {
      const key = `${request.agentId} ${request.messages.filter((m) => m.role === 'assistant').length}`;
      state.inFlight.add(key);
      state.started++;
      try {
        return await inner.generate(request, options);
      } catch (err) {
        state.aborted++;
        throw err;
      } finally {
        state.inFlight.delete(key);
      }
    },
  };
  return { model, state };
}

function fleetModel(delayMs: (goal: string) => number) {
  return scriptedModel({
    record: false,
    turns: (request, { turnIndex }) => {
      const turn = FLEET_SCRIPT[turnIndex]!;
      return {
        text: turn.text,
        toolCalls: turn.toolCalls,
        usage: turn.usage,
        delayMs: delayMs(goalOf(request.messages)),
      };
    },
  });
}

describe('graceful shutdown: close()', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'agentry-close-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('lets steps in flight finish and commit; the next open continues every agent to COMPLETED', async () => {
    const db = join(dir, 'graceful.db');
    const journal = join(dir, 'graceful.txt');
    const toolsInFlight = new Map<string, string>();
    const toolErrors: string[] = [];
    const tools = () =>
      testTools({
        appendFile: journal,
        delayMs: () => 60,
        log: (event, id, name) => {
          if (event === 'T+') toolsInFlight.set(id, name);
          if (event === 'T-') toolsInFlight.delete(id);
        },
      });
    // Even agents think slowly and odd ones quickly, so the odd ones' append_line calls (60 ms on each side of the
    // append) run while the even ones' model calls do.
    const first = countingModel(fleetModel((goal) => (Number(goal.split('#')[1]) % 2 === 0 ? 150 : 15)));
    const runtime = await AgentRuntime.open({
      storage: sqliteStorage({ path: db }),
      model: first.model,
      tools: tools(),
      limits: { maxOutputTokens: 256 },
      closeTimeoutMs: 10_000,
    });
    runtime.on('error', ({ error }) => toolErrors.push(String(error)));
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push((await runtime.create({ goal: `graceful #${i}` })).agent_id);

    // Close while at least one model call and one append_line call are running.
    await eventually(
      () => first.state.inFlight.size > 0 && [...toolsInFlight.values()].includes(APPEND_TOOL),
      10_000,
      'a model call and an append_line call in flight',
    );
    const modelsAtClose = [...first.state.inFlight];
    const toolsAtClose = [...toolsInFlight.entries()];
    const t0 = Date.now();
    await runtime.close();
    const closeMs = Date.now() - t0;
    expect(first.state.aborted).toBe(0); // nothing was aborted: everything in flight got to finish
    expect(toolsInFlight.size).toBe(0);
    expect(closeMs).toBeLessThan(5_000);
    expect(toolErrors).toEqual([]);

    // What was in flight was committed: the model turns, and the tool calls with their real results.
    const storage = sqliteStorage({ path: db });
    await storage.init();
    try {
      for (const key of modelsAtClose) {
        const [agentId, turn] = key.split(' ');
        const turns = await storage.listTurns(agentId!);
        expect(turns.filter((t) => t.role === 'assistant').length, `model turn ${key}`).toBeGreaterThan(Number(turn));
      }
      const byCall = new Map<string, ToolCallRow>();
      for (const id of ids) for (const c of await toolCallsOf(storage, id)) byCall.set(c.tool_use_id, c);
      for (const [callId, name] of toolsAtClose) {
        const call = byCall.get(callId)!;
        expect(call.status, `${name} ${callId}`).toBe('finished');
        expect(call.is_error, `${name} ${callId}: ${call.result}`).toBe(false);
      }
      const statuses = await Promise.all(ids.map(async (id) => (await storage.getAgent(id))!.status));
      expect(statuses.every((s) => s === 'ACTIVE')).toBe(true); // closed mid-run, not finished
      expect((await storage.getAccount('local'))!.reserved).toBe(0);
    } finally {
      await storage.close();
    }

    // The next open continues every agent from its last committed step.
    const second = countingModel(fleetModel(() => 1));
    const again = await AgentRuntime.open({
      storage: sqliteStorage({ path: db }),
      model: second.model,
      tools: tools(),
      limits: { maxOutputTokens: 256 },
    });
    try {
      for (const id of ids) expect((await again.waitFor(id)).status).toBe('COMPLETED');
    } finally {
      await again.close();
    }
    const check = sqliteStorage({ path: db });
    await check.init();
    try {
      const { account, ledger } = await expectLedgerInvariant(check, 'local');
      expect(account.reserved).toBe(0);
      const callsByAgent = new Map<string, ToolCallRow[]>();
      for (const id of ids) {
        const { calls, unknown } = await expectScriptedAgent(check, (await check.getAgent(id))!, FLEET_SCRIPT, ledger);
        expect(unknown).toEqual([]); // a graceful close leaves no call with an unknown outcome
        callsByAgent.set(id, calls);
      }
      const { unknownRan, unknownNotRun } = expectAtMostOnce(readLines(journal), callsByAgent, [APPEND_TOOL]);
      expect([unknownRan, unknownNotRun]).toEqual([0, 0]);
      // The model was asked for every turn exactly once across both runtimes.
      expect(first.state.started + second.state.started).toBe(ids.length * FLEET_SCRIPT.length);
    } finally {
      await check.close();
    }
  });

  it('aborts steps that outlast closeTimeoutMs; close() returns soon after, and the next open redoes them', async () => {
    const db = join(dir, 'timeout.db');
    const journal = join(dir, 'timeout.txt');
    let slow = true;
    let slowToolStarted = 0;
    const slowTool = defineTool({
      name: 'slow_lookup',
      description: 'A slow, idempotent lookup that honours its abort signal.',
      input: z.object({}),
      idempotent: true,
      async run(_input, ctx) {
        slowToolStarted++;
        if (slow) await sleep(30_000, ctx.signal);
        return 'looked up';
      },
    });
    const script = (goal: string, turnIndex: number) =>
      goal === 'slow model'
        ? [{ text: '[m0] Thinking slowly.', delayMs: slow ? 30_000 : 1 }, undefined][turnIndex]
        : [
            { text: '[t0] Calling the slow tool.', toolCalls: [{ name: 'slow_lookup', input: {} }] },
            { text: '[t1] Done.' },
          ][turnIndex];
    const model = () =>
      countingModel(
        scriptedModel({
          record: false,
          turns: (request, { turnIndex }) => script(goalOf(request.messages), turnIndex)!,
        }),
      );
    const first = model();
    const tools: Tool[] = [slowTool as Tool, ...testTools({ appendFile: journal, delayMs: () => 1 })];
    const runtime = await AgentRuntime.open({
      storage: sqliteStorage({ path: db }),
      model: first.model,
      tools,
      closeTimeoutMs: 150,
    });
    const slowModel = await runtime.create({ goal: 'slow model' });
    const slowTooled = await runtime.create({ goal: 'slow tool' });
    await eventually(
      () => first.state.inFlight.has(`${slowModel.agent_id} 0`) && slowToolStarted === 1,
      10_000,
      'both in flight',
    );

    const t0 = Date.now();
    await runtime.close();
    const closeMs = Date.now() - t0;
    expect(closeMs).toBeGreaterThanOrEqual(140);
    expect(closeMs).toBeLessThan(2_000);
    expect(first.state.aborted).toBe(1);

    slow = false;
    const second = model();
    const again = await AgentRuntime.open({ storage: sqliteStorage({ path: db }), model: second.model, tools });
    try {
      const a = await again.waitFor(slowModel.agent_id);
      const b = await again.waitFor(slowTooled.agent_id);
      expect([a.status, b.status]).toEqual(['COMPLETED', 'COMPLETED']);
      const transcript = async (id: string) => (await again.get(id)).messages.map((m) => m.text);
      expect(await transcript(slowModel.agent_id)).toEqual(['slow model', '[m0] Thinking slowly.']);
      expect(await transcript(slowTooled.agent_id)).toEqual(['slow tool', '[t0] Calling the slow tool.', '[t1] Done.']);
      expect((await again.accounts.get('local')).reserved).toBe(0);
    } finally {
      await again.close();
    }
  });

  it('a tool call aborted by close() after closeTimeoutMs is redone on the next open, not committed as "Error: runtime closed"', async () => {
    const db = join(dir, 'aborted.db');
    let slow = true;
    let runs = 0;
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    const lookup = defineTool({
      name: 'slow_lookup',
      description: 'Idempotent; honours its abort signal.',
      input: z.object({}),
      idempotent: true,
      async run(_input, ctx) {
        started();
        if (slow) await sleep(30_000, ctx.signal);
        runs++;
        return 'looked up';
      },
    });
    const model = scriptedModel({ turns: [{ toolCalls: [{ name: 'slow_lookup', input: {} }] }, { text: 'done' }] });
    const first = await AgentRuntime.open({
      storage: sqliteStorage({ path: db }),
      model,
      tools: [lookup as Tool],
      closeTimeoutMs: 50,
    });
    const { agent_id } = await first.create({ goal: 'look it up' });
    await running;
    await first.close(); // aborts the call after 50 ms; the agent should continue from before it on the next open
    slow = false;
    const second = await AgentRuntime.open({ storage: sqliteStorage({ path: db }), model, tools: [lookup as Tool] });
    try {
      expect((await second.waitFor(agent_id)).status).toBe('COMPLETED');
      const [call] = await toolCallsOf(second.storage, agent_id);
      expect([call!.result, call!.is_error, runs]).toEqual(['looked up', false, 1]);
    } finally {
      await second.close();
    }
  });
});

describe('holds across a crash', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'agentry-holds-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('the hold of a call still running when its agent was paused does not outlive the process (no credits leak)', async () => {
    const db = join(dir, 'leak.db');
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    const stuck = defineTool({
      name: 'stuck',
      description: 'Never returns (the process dies first).',
      input: z.object({}),
      price: 0.25,
      idempotent: true,
      run: () => {
        started();
        return new Promise<never>(() => {});
      },
    });
    const model = scriptedModel({ turns: [{ toolCalls: [{ name: 'stuck', input: {} }] }, { text: 'done' }] });
    const dead = await AgentRuntime.open({ storage: sqliteStorage({ path: db }), model, tools: [stuck as Tool] });
    const next = { runtime: null as AgentRuntime | null };
    try {
      const { agent_id } = await dead.create({ goal: 'pause me mid-call' });
      await running;
      await dead.pause(agent_id); // the call keeps running and keeps its 0.25-credit hold
      // The process "dies": `dead` is abandoned as it is, and a new runtime opens the same file.
      next.runtime = await AgentRuntime.open({ storage: sqliteStorage({ path: db }), model, tools: [stuck as Tool] });
      expect((await next.runtime.get(agent_id)).agent.status).toBe('PAUSED');
      expect((await next.runtime.accounts.get('local')).reserved).toBe(0);
    } finally {
      await next.runtime?.close();
      await dead.storage.close();
    }
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Regressions found by this suite while src/ was being written.

describe('regressions found by the crash suite', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'agentry-bugs-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('a non-idempotent call that returned before a hard shutdown keeps its result; only the aborted sibling is redone', async () => {
    const db = join(dir, 'sibling.db');
    const journal = join(dir, 'sibling.txt');
    let slow = true;
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    const slowLookup = defineTool({
      name: 'slow_lookup',
      description: 'Idempotent; honours its abort signal.',
      input: z.object({}),
      idempotent: true,
      async run(_input, ctx) {
        started();
        if (slow) await sleep(30_000, ctx.signal);
        return 'looked up';
      },
    });
    const tools = [slowLookup as Tool, ...testTools({ appendFile: journal, delayMs: () => 0 })];
    // One turn asks for both: append_line returns at once, slow_lookup is still running when close() gives up.
    const model = scriptedModel({
      turns: [
        {
          toolCalls: [
            { name: APPEND_TOOL, input: { n: 1 } },
            { name: 'slow_lookup', input: {} },
          ],
        },
        { text: 'done' },
      ],
    });
    const first = await AgentRuntime.open({ storage: sqliteStorage({ path: db }), model, tools, closeTimeoutMs: 50 });
    const { agent_id } = await first.create({ goal: 'append, then look up' });
    await running;
    await eventually(() => readLines(journal).length === 1, 5_000, 'the append');
    await first.close();
    slow = false;
    const second = await AgentRuntime.open({ storage: sqliteStorage({ path: db }), model, tools });
    try {
      expect((await second.waitFor(agent_id)).status).toBe('COMPLETED');
      const calls = await toolCallsOf(second.storage, agent_id);
      const append = calls.find((c) => c.name === APPEND_TOOL)!;
      expect(readLines(journal)).toHaveLength(1); // ran once, never repeated (holds today)
      // Its result was in hand when the step was aborted: the model should get it, not "outcome unknown" (which
      // invites a retry of a call that already took effect). Fails today: the whole turn's results are dropped.
      expect(append.result).toBe(`appended ${append.tool_use_id}`);
    } finally {
      await second.close();
    }
  });
});
