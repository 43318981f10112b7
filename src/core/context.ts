/**
 * @module core/context
 * Keeps a long conversation inside the model's context window. Old tool results are the bulk of a long agent's
 * context and the least needed later, so when the estimate nears the window they are replaced, oldest first, by a
 * short note. The turn log in storage keeps them whole; only what is sent changes.
 */
import type { ModelMessage } from '../models/provider.js';

/** Fraction of the context window a request may fill before old tool results are elided. */
export const CONTEXT_FILL_TARGET = 0.7;
/** The most recent messages are never elided: the model is usually working on them. */
const KEEP_RECENT_MESSAGES = 4;
/** Results shorter than this are not worth eliding. */
const MIN_ELIDE_CHARS = 200;

/** A rough token estimate (about 3.5 characters per token for English and JSON). */
export function estimateTokens(text: string): number {
  return Math.ceil(text.length / 3.5);
}

function estimateMessages(messages: ModelMessage[], fixed: number): number {
  return messages.reduce((sum, m) => sum + estimateTokens(JSON.stringify(m.content)), fixed);
}

/**
 * Returns `messages` with the oldest tool results elided until the estimate fits `CONTEXT_FILL_TARGET` of
 * `contextWindow`. `fixedTokens` covers the system prompt and tool definitions. The input is not modified.
 */
export function fitContext(
  messages: ModelMessage[],
  contextWindow: number,
  fixedTokens: number,
  /** Characters of the messages' content as JSON, when the caller knows them. */
  contentChars?: number,
): ModelMessage[] {
  const budget = Math.floor(contextWindow * CONTEXT_FILL_TARGET);
  let total =
    contentChars === undefined ? estimateMessages(messages, fixedTokens) : fixedTokens + Math.ceil(contentChars / 3.5);
  if (total <= budget) return messages;
  const out = messages.map((m) => ({ ...m, content: [...m.content] }));
  const last = out.length - KEEP_RECENT_MESSAGES;
  for (let i = 0; i < last && total > budget; i++) {
    const m = out[i]!;
    m.content = m.content.map((block) => {
      if (total <= budget || block.type !== 'tool_result' || block.content.length < MIN_ELIDE_CHARS) return block;
      const note = `[elided to save context: ${block.content.length} characters of this tool result are kept in storage]`;
      total -= estimateTokens(block.content) - estimateTokens(note);
      return { ...block, content: note };
    });
  }
  return out;
}
