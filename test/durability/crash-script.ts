/**
 * What the crash suite's agents do, shared by the child process (`crash-worker.ts`) and the test that checks the
 * database afterwards (`crash.test.ts`): the scripted turns, the test tools, and a seeded random source.
 *
 * Every scripted turn has a distinct text and a distinct usage, so the checks can tell a lost, repeated or reordered
 * turn apart from a correct transcript.
 */
import { appendFileSync } from 'node:fs';
import { z } from 'zod';
import { defineTool, type Tool } from 'agentry-runtime';

/** Agents of the 50-agent fleet. */
export const FLEET_SIZE = 50;

/** The non-idempotent test tool: appends `<agent_id> <tool_call_id>` to a file outside the database. */
export const APPEND_TOOL = 'append_line';
/** An idempotent test tool: reruns after a crash are allowed (and logged to a file of its own, to count them). */
export const LOOKUP_TOOL = 'lookup';

/** Recognises the tool result the loop gives the model for a started non-idempotent call after a crash. */
export const UNKNOWN_OUTCOME_RE = /outcome of this call is unknown/i;

export interface FleetTurn {
  text: string;
  toolCalls: Array<{ name: string; input: unknown }>;
  usage: { inputTokens: number; outputTokens: number };
}

const plan = (done: number) => ({
  steps: ['Write the lines', 'Look things up', 'Report'].map((title, i) => ({
    title,
    status: i < done ? 'done' : i === done ? 'in_progress' : 'pending',
  })),
});

/** The turns every fleet agent plays: 6 tool-calling steps and a final answer. */
export const FLEET_SCRIPT: readonly FleetTurn[] = [
  { text: '[0] Planning the work.', toolCalls: [{ name: 'update_plan', input: plan(0) }] },
  {
    text: '[1] Writing line 1 and looking up alpha.',
    toolCalls: [
      { name: APPEND_TOOL, input: { n: 1 } },
      { name: LOOKUP_TOOL, input: { key: 'alpha' } },
    ],
  },
  { text: '[2] Writing line 2.', toolCalls: [{ name: APPEND_TOOL, input: { n: 2 } }] },
  {
    text: '[3] Updating the plan and looking up beta.',
    toolCalls: [
      { name: 'update_plan', input: plan(1) },
      { name: LOOKUP_TOOL, input: { key: 'beta' } },
    ],
  },
  {
    text: '[4] Writing lines 3 and 4 at once.',
    toolCalls: [
      { name: APPEND_TOOL, input: { n: 3 } },
      { name: APPEND_TOOL, input: { n: 4 } },
    ],
  },
  {
    text: '[5] Writing line 5 and closing the plan.',
    toolCalls: [
      { name: APPEND_TOOL, input: { n: 5 } },
      { name: 'update_plan', input: plan(2) },
    ],
  },
  { text: '[6] All done: five lines written, two lookups made.', toolCalls: [] },
].map((t, i) => ({ ...t, usage: { inputTokens: 100 + 10 * i, outputTokens: 20 + i } }));

/** Tokens a fleet agent has used once it is COMPLETED. */
export const FLEET_TOKENS = FLEET_SCRIPT.reduce((s, t) => s + t.usage.inputTokens + t.usage.outputTokens, 0);

export const TOOL_PRICES = { [APPEND_TOOL]: 0.01, [LOOKUP_TOOL]: 0.005 } as const;

/** A small seeded PRNG (mulberry32): the same seed gives the same sequence. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

export interface TestToolOptions {
  /** Where append_line writes. Lookups go to `<appendFile>.lookups`. */
  appendFile: string;
  /** Milliseconds to wait before and after the append (and inside a lookup). */
  delayMs(): number;
  /** Called at the points a kill may land between (`T+` start, `A` appended, `T-` end). */
  log?(event: 'T+' | 'A' | 'T-', toolCallId: string, name: string): void;
}

/** append_line (non-idempotent) and lookup (idempotent), both priced so tool reservations are exercised. */
export function testTools(o: TestToolOptions): Tool[] {
  const log = o.log ?? (() => {});
  const appendLine = defineTool({
    name: APPEND_TOOL,
    description: 'Appends a line to the journal. Not safe to repeat.',
    input: z.object({ n: z.number().int() }),
    price: TOOL_PRICES[APPEND_TOOL],
    idempotent: false,
    async run(_input, ctx) {
      log('T+', ctx.toolCallId, APPEND_TOOL);
      try {
        await sleep(o.delayMs(), ctx.signal);
        appendFileSync(o.appendFile, `${ctx.agent.agent_id} ${ctx.toolCallId}\n`);
        log('A', ctx.toolCallId, APPEND_TOOL);
        await sleep(o.delayMs(), ctx.signal);
        return `appended ${ctx.toolCallId}`;
      } finally {
        log('T-', ctx.toolCallId, APPEND_TOOL);
      }
    },
  });
  const lookup = defineTool({
    name: LOOKUP_TOOL,
    description: 'Looks a key up. Safe to repeat.',
    input: z.object({ key: z.string() }),
    price: TOOL_PRICES[LOOKUP_TOOL],
    idempotent: true,
    async run({ key }, ctx) {
      log('T+', ctx.toolCallId, LOOKUP_TOOL);
      try {
        appendFileSync(`${o.appendFile}.lookups`, `${ctx.agent.agent_id} ${ctx.toolCallId}\n`);
        await sleep(o.delayMs(), ctx.signal);
        return { key, value: key.toUpperCase() };
      } finally {
        log('T-', ctx.toolCallId, LOOKUP_TOOL);
      }
    },
  });
  return [appendLine as Tool, lookup as Tool];
}

/** Goals of the PAUSED / OUT_OF_CREDITS scenario ("hold" mode of the worker). */
export const HOLD_GOALS = {
  paused: 'hold: pause me while my long call runs',
  poor: 'hold: run out of credits',
  busy: 'hold: keep working',
} as const;

export const HOLD_TOOL = 'hold_line';
export const PRICEY_TOOL = 'pricey';

/** The scripted turns of each hold-mode agent, by goal. */
export const HOLD_SCRIPTS: Record<string, readonly FleetTurn[]> = {
  [HOLD_GOALS.paused]: [
    {
      text: '[P0] Starting the long call.',
      toolCalls: [{ name: HOLD_TOOL, input: {} }],
      usage: { inputTokens: 50, outputTokens: 5 },
    },
    { text: '[P1] Finished after the restart.', toolCalls: [], usage: { inputTokens: 60, outputTokens: 6 } },
  ],
  [HOLD_GOALS.poor]: [
    {
      text: '[O0] Calling the pricey tool.',
      toolCalls: [{ name: PRICEY_TOOL, input: {} }],
      usage: { inputTokens: 70, outputTokens: 7 },
    },
    { text: '[O1] Finished after the top-up.', toolCalls: [], usage: { inputTokens: 80, outputTokens: 8 } },
  ],
  [HOLD_GOALS.busy]: [
    {
      text: '[B0] Writing a line.',
      toolCalls: [{ name: APPEND_TOOL, input: { n: 1 } }],
      usage: { inputTokens: 90, outputTokens: 9 },
    },
    {
      text: '[B1] Looking up.',
      toolCalls: [{ name: LOOKUP_TOOL, input: { key: 'k' } }],
      usage: { inputTokens: 91, outputTokens: 9 },
    },
    { text: '[B2] Done.', toolCalls: [], usage: { inputTokens: 92, outputTokens: 9 } },
  ],
};

/** Prices of the hold tools (credits): hold_line's hold is what a crash must not leak; pricey exceeds the poor account. */
export const HOLD_PRICES = { [HOLD_TOOL]: 0.25, [PRICEY_TOOL]: 1 } as const;
/** Credits of the account the "poor" agent runs on: enough for its first model turn, not for the pricey tool. */
export const POOR_CREDITS = 0.5;

export interface HoldToolOptions {
  appendFile: string;
  /** How long hold_line runs after its append (abortable). */
  holdMs: number;
  onHoldStart?(toolCallId: string): void;
}

/** hold_line (non-idempotent, long-running) and pricey (idempotent, costs more than the poor account has). */
export function holdTools(o: HoldToolOptions): Tool[] {
  const holdLine = defineTool({
    name: HOLD_TOOL,
    description: 'Appends a line, then takes a long time. Not safe to repeat.',
    input: z.object({}),
    price: HOLD_PRICES[HOLD_TOOL],
    idempotent: false,
    async run(_input, ctx) {
      appendFileSync(o.appendFile, `${ctx.agent.agent_id} ${ctx.toolCallId}\n`);
      o.onHoldStart?.(ctx.toolCallId);
      await sleep(o.holdMs, ctx.signal);
      return 'held';
    },
  });
  const pricey = defineTool({
    name: PRICEY_TOOL,
    description: 'Costs a whole credit. Safe to repeat.',
    input: z.object({}),
    price: HOLD_PRICES[PRICEY_TOOL],
    idempotent: true,
    run: () => 'expensive result',
  });
  return [holdLine as Tool, pricey as Tool];
}

/** The goal of a request: the text of its first user message. */
export function goalOf(messages: ReadonlyArray<{ role: string; content: unknown }>): string {
  const first = messages[0]?.content;
  if (Array.isArray(first)) {
    const block = first[0] as { type?: string; text?: string } | undefined;
    if (block?.type === 'text' && typeof block.text === 'string') return block.text;
  }
  return typeof first === 'string' ? first : '';
}
