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
 * Elision moves in steps of this fraction of the budget: it elides whole stretches of the conversation at once, past
 * what is needed, so that the elided prefix, and the provider's prompt cache over it, stays the same for many turns
 * instead of changing (and being written again in full) every turn.
 */
export const ELIDE_STEP_FRACTION = 0.25;

/**
 * Returns `messages` with the oldest tool results elided until the estimate fits `CONTEXT_FILL_TARGET` of
 * `contextWindow`. `fixedTokens` covers the system prompt and tool definitions. The input is not modified.
 *
 * The results elided are those of the messages that end before a boundary in the conversation's characters, and the
 * boundary moves in steps of {@link ELIDE_STEP_FRACTION} of the budget: as the conversation grows turn by turn, the
 * same messages stay elided until the next step is needed. The turn log is append-only, so a boundary always covers
 * the same messages.
 */
export function fitContext(
  messages: ModelMessage[],
  contextWindow: number,
  fixedTokens: number,
  /** Characters of the messages' content as JSON, when the caller knows them. */
  contentChars?: number,
): ModelMessage[] {
  const budget = Math.floor(contextWindow * CONTEXT_FILL_TARGET);
  const total =
    contentChars === undefined ? estimateMessages(messages, fixedTokens) : fixedTokens + Math.ceil(contentChars / 3.5);
  if (total <= budget) return messages;
  // Where each message ends, in characters of the conversation.
  const ends: number[] = [];
  let chars = 0;
  for (const m of messages) {
    chars += JSON.stringify(m.content).length;
    ends.push(chars);
  }
  const last = messages.length - KEEP_RECENT_MESSAGES;
  const step = Math.max(1, Math.floor(budget * ELIDE_STEP_FRACTION * 3.5));
  for (let boundary = step; ; boundary += step) {
    let left = total;
    let more = false;
    const out = messages.map((m, i) => {
      if (i >= last || ends[i]! > boundary) {
        if (i < last) more = true;
        return m;
      }
      let changed = false;
      const content = m.content.map((block) => {
        if (block.type !== 'tool_result' || block.content.length < MIN_ELIDE_CHARS) return block;
        const note = `[elided to save context: ${block.content.length} characters of this tool result are kept in storage]`;
        left -= estimateTokens(block.content) - estimateTokens(note);
        changed = true;
        return { ...block, content: note };
      });
      return changed ? { ...m, content } : m;
    });
    if (left <= budget || !more) return out;
  }
}
