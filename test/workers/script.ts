/**
 * What the agents of the worker tests do, shared by the worker processes (`worker.ts`) and the tests that check the
 * database and the shared log afterwards: the goals, the scripted turns each goal plays, the test tools, and the shared
 * log every process appends to.
 *
 * The script is a function of the goal and of how many assistant turns the transcript already has, so a worker that
 * takes an agent over plays on exactly where the last one stopped. Each assistant text ends with ` @<worker>` (the
 * process that produced it): the checks strip it to compare with the script, and read it to see which worker committed
 * which turn (the fencing test).
 */
import { closeSync, existsSync, openSync, readFileSync, writeSync } from 'node:fs';
import { z } from 'zod';
import { defineTool, type Tool } from 'agentry-runtime';
import type { ScriptedTurn } from 'agentry-runtime/testing';

/** The non-idempotent tool every scripted step calls: its effect is one `N` line in the shared log. */
export const NOTE_TOOL = 'note';
/** A non-idempotent tool that runs until its call is aborted (or a minute passes), and logs the abort. */
export const HOLD_TOOL = 'hold';
/** How long a hold call waits at most when nobody aborts it. */
const HOLD_MAX_MS = 60_000;

/** Recognises the result the loop gives the model for a started non-idempotent call whose worker is gone. */
export const UNKNOWN_OUTCOME_RE = /outcome of this call is unknown/i;

/**
 * A goal, parsed:
 * - `agent <label> steps <n>[ hold <k>]`: n steps each calling `note` (turn k calls `hold` instead), then an answer;
 * - `tree <label> children <c> steps <n>`: spawns c agents `agent <label>.<j> steps <n>`, then answers.
 */
export type Goal =
  | { kind: 'agent'; label: string; steps: number; hold: number | null }
  | { kind: 'tree'; label: string; children: number; steps: number };

export function agentGoal(label: string, steps: number, hold?: number): string {
  return `agent ${label} steps ${steps}${hold === undefined ? '' : ` hold ${hold}`}`;
}

export function treeGoal(label: string, children: number, steps: number): string {
  return `tree ${label} children ${children} steps ${steps}`;
}

export function parseGoal(goal: string): Goal {
  let m = /^agent (\S+) steps (\d+)(?: hold (\d+))?$/.exec(goal);
  if (m) return { kind: 'agent', label: m[1]!, steps: Number(m[2]), hold: m[3] === undefined ? null : Number(m[3]) };
  m = /^tree (\S+) children (\d+) steps (\d+)$/.exec(goal);
  if (m) return { kind: 'tree', label: m[1]!, children: Number(m[2]), steps: Number(m[3]) };
  throw new Error(`not a worker-test goal: ${JSON.stringify(goal)}`);
}

interface PlannedTurn {
  text: string;
  toolCalls: Array<{ name: string; input: unknown }>;
}

/** The turns a goal plays, without the worker tag. */
export function scriptOf(goal: string): PlannedTurn[] {
  const g = parseGoal(goal);
  if (g.kind === 'tree') {
    const tasks = Array.from({ length: g.children }, (_, j) => ({ goal: agentGoal(`${g.label}.${j}`, g.steps) }));
    return [
      { text: `[${g.label}:0] spawning ${g.children}`, toolCalls: [{ name: 'spawn_sub_agents', input: { tasks } }] },
      { text: `[${g.label}:1] done`, toolCalls: [] },
    ];
  }
  const turns: PlannedTurn[] = [];
  for (let i = 0; i < g.steps; i++) {
    turns.push(
      i === g.hold
        ? { text: `[${g.label}:${i}] hold`, toolCalls: [{ name: HOLD_TOOL, input: {} }] }
        : { text: `[${g.label}:${i}] note ${i}`, toolCalls: [{ name: NOTE_TOOL, input: { step: i } }] },
    );
  }
  turns.push({ text: `[${g.label}:${g.steps}] done`, toolCalls: [] });
  return turns;
}

/** The usage of turn i: distinct per turn, so a repeated or lost turn shows in the token count. */
export function usageOf(turn: number): { inputTokens: number; outputTokens: number } {
  return { inputTokens: 100 + turn, outputTokens: 10 };
}

/** The scripted turn `turnIndex` of `goal`, as worker `worker` plays it. */
export function scriptedTurn(goal: string, turnIndex: number, worker: string, delayMs: number): ScriptedTurn {
  const turn = scriptOf(goal)[turnIndex];
  if (!turn) throw new Error(`the script of ${JSON.stringify(goal)} has no turn ${turnIndex}`);
  return { text: `${turn.text} @${worker}`, toolCalls: turn.toolCalls, usage: usageOf(turnIndex), delayMs };
}

/** Splits an assistant text into the scripted text and the worker that produced it. */
export function splitTag(text: string): { text: string; worker: string | null } {
  const m = / @(\S+)$/.exec(text);
  return m ? { text: text.slice(0, m.index), worker: m[1]! } : { text, worker: null };
}

// ---------------------------------------------------------------------------------------------------------------
// the shared log

/**
 * One file every process appends to, one event a line: `<ms> <worker> <event> <fields…>`. Each line is one write(2) on
 * a file opened O_APPEND, so lines of different processes never interleave, and the order of the lines is the real
 * order in which the writes happened (a line written after another returned is below it). The events:
 *
 *   M+ <agent> <turn>                 a model call starts (before the model is asked)
 *   M- <agent> <turn> ok|abort|error  it returned
 *   N+ <agent> <call> <step>          a note call starts
 *   N <agent> <call> <step>           the note call took effect (the at-most-once record)
 *   H+ <agent> <call> / H! <agent> <call> / H- <agent> <call>   a hold call starts / saw its abort / ran out
 *   X <pause|resume|delete> <agent>   a control call returned in this process
 *   B                                 the worker is alive (a beat, when asked for)
 *   E <agent> <message…>              the runtime reported an error
 */
export class SharedLog {
  private fd: number | null;

  constructor(
    readonly file: string,
    readonly worker: string,
  ) {
    this.fd = openSync(file, 'a');
  }

  write(event: string, ...fields: Array<string | number>): void {
    if (this.fd === null) return;
    writeSync(this.fd, `${Date.now()} ${this.worker} ${event}${fields.map((f) => ` ${f}`).join('')}\n`);
  }

  close(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }
}

export interface LogLine {
  /** Position in the file: the order the lines were written in. */
  seq: number;
  at: number;
  worker: string;
  event: string;
  fields: string[];
}

export function readLog(file: string): LogLine[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line, seq) => {
      const [at, worker, event, ...fields] = line.split(' ');
      return { seq, at: Number(at), worker: worker!, event: event!, fields };
    });
}

// ---------------------------------------------------------------------------------------------------------------
// the tools

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * `note` (non-idempotent: it waits `delayMs`, writes its `N` line, waits again, so a kill can land on either side of
 * the effect) and `hold` (non-idempotent: it waits on its signal and logs the abort).
 */
export function workerTools(log: SharedLog, delayMs: number): Tool[] {
  const note = defineTool({
    name: NOTE_TOOL,
    description: 'Notes a step down. Not safe to repeat.',
    input: z.object({ step: z.number().int().min(0) }),
    price: 0.001,
    idempotent: false,
    async run({ step }, ctx) {
      log.write('N+', ctx.agent.agent_id, ctx.toolCallId, step);
      if (delayMs > 0) await sleep(delayMs, ctx.signal);
      log.write('N', ctx.agent.agent_id, ctx.toolCallId, step);
      if (delayMs > 0) await sleep(delayMs, ctx.signal);
      return `noted ${step} by ${log.worker}`;
    },
  });
  const hold = defineTool({
    name: HOLD_TOOL,
    description: 'Holds on until it is stopped. Not safe to repeat.',
    input: z.object({}),
    idempotent: false,
    async run(_input, ctx) {
      log.write('H+', ctx.agent.agent_id, ctx.toolCallId);
      try {
        await sleep(HOLD_MAX_MS, ctx.signal);
      } catch (error) {
        log.write('H!', ctx.agent.agent_id, ctx.toolCallId);
        throw error;
      }
      log.write('H-', ctx.agent.agent_id, ctx.toolCallId);
      return 'held';
    },
  });
  return [note as Tool, hold as Tool];
}
