/**
 * The thinking scenario shared by the in-process thinking tests and the thinking crash test: an ultra agent that
 * looks up three items (three tool turns, each thinking first; the first also sends a redacted_thinking block), then
 * answers. The stand-in signs every thinking block and refuses a request whose thinking was dropped or altered.
 */
import { z } from 'zod';
import { defineTool } from 'agentry-runtime';
import type { FakeAnthropicHandler, FakeMessagesRequest, FakeReply } from 'agentry-runtime/testing';

/** Every thinking text starts with this: none of it may ever reach a transcript, a route or the console. */
export const THOUGHT = 'SECRET-THOUGHT';
export const TOOL_TURNS = 3;
export const FINAL_TEXT = 'All three items are in stock.';
/** Each reply's usage: output includes the thinking (the API bills thinking as output). */
export const TURN_USAGE = { input_tokens: 700, output_tokens: 350 } as const;

export const lookupTool = defineTool({
  name: 'lookup_item',
  description: 'Looks up an item by number',
  input: z.object({ n: z.number().int() }),
  price: 0,
  idempotent: true,
  run: ({ n }) => ({ n, in_stock: true }),
});

/** A tool whose result is long enough for context elision to replace it (a report of ~3,000 characters). */
export const reportTool = defineTool({
  name: 'read_report',
  description: 'Reads the stock report of an item',
  input: z.object({ n: z.number().int() }),
  price: 0,
  idempotent: true,
  run: ({ n }) => ({ n, report: `Item ${n} is in stock. `.repeat(150) }),
});

/** Assistant turns already in the request: which turn the model is taking now. */
export function turnOf(body: FakeMessagesRequest): number {
  return body.messages.filter((m) => m.role === 'assistant').length;
}

/** The scripted reply of turn `n` (calling `tool` in the tool turns). */
export function thinkingReply(n: number, tool = 'lookup_item'): FakeReply {
  if (n < TOOL_TURNS) {
    return {
      thinking: `${THOUGHT} ${n}: item ${n} is next; I will look it up before answering.`,
      redactedThinking: n === 0,
      content: [
        { type: 'text', text: `Looking up item ${n}.` },
        { type: 'tool_use', name: tool, input: { n } },
      ],
      usage: TURN_USAGE,
    };
  }
  return { thinking: `${THOUGHT} final: every lookup said in stock.`, text: FINAL_TEXT, usage: TURN_USAGE };
}

/**
 * The scenario's handler. `holdTurn`: that turn's request gets no answer until the client disconnects (a process
 * killed mid-call); `onHeld` is told when it arrives.
 */
export function thinkingHandler(
  options: { holdTurn?: () => number | undefined; onHeld?: () => void; tool?: string } = {},
): FakeAnthropicHandler {
  return (body, info) => {
    const n = turnOf(body);
    if (n === options.holdTurn?.()) {
      options.onHeld?.();
      return new Promise<FakeReply>((resolve) => {
        info.signal.addEventListener('abort', () => resolve({ text: 'aborted' }), { once: true });
      });
    }
    return thinkingReply(n, options.tool);
  };
}
