/**
 * @module testing/fake-anthropic-thinking
 * Extended thinking as the stand-in Messages API ({@link startFakeAnthropic}) plays it. A request that asks for
 * thinking gets a `thinking` block first in its reply, signed with an HMAC of its text under a secret of the server
 * (and a `redacted_thinking` block whose `data` is sealed the same way, when the reply asks for one). A later request
 * is refused with 400 and the API's error shape, as the real API refuses it, when:
 * - a `thinking` block's signature does not match its text, or a `redacted_thinking` block's data was not sealed by
 *   this server (the block was altered, or made up);
 * - thinking is on and the last assistant turn of a tool-use loop (its tool_use answered by the tool_result that
 *   follows) does not start with its thinking (the block was dropped);
 * - `budget_tokens` is below 1,024 or not below `max_tokens`; thinking comes with a forced `tool_choice`, a
 *   `temperature` other than 1, or `top_k`.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/** The fields of a request the checks read (a Messages or count_tokens body). */
export interface ThinkingCheckedRequest {
  max_tokens?: number;
  messages: Array<{ role: 'user' | 'assistant'; content: string | Array<Record<string, unknown>> }>;
  [key: string]: unknown;
}

/** Signs and checks thinking blocks with one server secret. */
export interface ThinkingSigner {
  /** The signature of a thinking text. */
  sign(thinking: string): string;
  /** Opaque `data` of a redacted_thinking block, sealed by this server. */
  seal(label: string): string;
  /** Whether a `thinking` or `redacted_thinking` block is exactly as this server sent it. */
  verify(block: Record<string, unknown>): boolean;
}

/** A signer with `secret`, or a random one (a fresh fake accepts only the blocks it wrote itself). */
export function thinkingSigner(secret: string = randomBytes(32).toString('hex')): ThinkingSigner {
  const mac = (kind: string, text: string) => createHmac('sha256', secret).update(`${kind}\n${text}`).digest('base64');
  const same = (a: string, b: string) => {
    const x = Buffer.from(a);
    const y = Buffer.from(b);
    return x.length === y.length && timingSafeEqual(x, y);
  };
  return {
    sign: (thinking) => mac('thinking', thinking),
    seal(label) {
      const body = Buffer.from(label).toString('base64');
      return `${body}.${mac('redacted', body)}`;
    },
    verify(block) {
      if (block.type === 'thinking') {
        return (
          typeof block.thinking === 'string' &&
          typeof block.signature === 'string' &&
          same(block.signature, mac('thinking', block.thinking))
        );
      }
      if (block.type === 'redacted_thinking') {
        if (typeof block.data !== 'string') return false;
        const [body, tag, ...rest] = block.data.split('.');
        return rest.length === 0 && body !== undefined && tag !== undefined && same(tag, mac('redacted', body));
      }
      return true;
    },
  };
}

/** Whether the request asks for thinking (`enabled` with a budget, or `adaptive`). */
export function thinkingRequested(body: Record<string, unknown>): boolean {
  const thinking = body.thinking as { type?: unknown } | undefined;
  return thinking?.type === 'enabled' || thinking?.type === 'adaptive';
}

const isThinkingBlock = (block: Record<string, unknown>) =>
  block.type === 'thinking' || block.type === 'redacted_thinking';

/**
 * Why the API would refuse `body` (a 400 `invalid_request_error` message), or `undefined` when it is acceptable.
 * A count_tokens body has no `max_tokens`; the rest is checked the same.
 */
export function thinkingRefusal(body: ThinkingCheckedRequest, signer: ThinkingSigner): string | undefined {
  const on = thinkingRequested(body);
  const thinking = body.thinking as { type?: string; budget_tokens?: unknown } | undefined;
  if (thinking?.type === 'enabled') {
    const budget = thinking.budget_tokens;
    if (typeof budget !== 'number' || !Number.isInteger(budget) || budget < 1024) {
      return 'thinking.enabled.budget_tokens: Input should be greater than or equal to 1024';
    }
    if (typeof body.max_tokens === 'number' && budget >= body.max_tokens) {
      return '`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size';
    }
  }
  if (on) {
    const choice = (body.tool_choice as { type?: string } | undefined)?.type;
    if (choice === 'any' || choice === 'tool') return 'Thinking may not be enabled when `tool_choice` forces tool use.';
    if (body.temperature !== undefined && body.temperature !== 1) {
      return '`temperature` may only be set to 1 when thinking is enabled. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#feature-compatibility';
    }
    if (body.top_k !== undefined) return '`top_k` is not supported when thinking is enabled.';
  }
  const messages = body.messages;
  for (const [i, message] of messages.entries()) {
    if (typeof message.content === 'string') continue;
    for (const [j, block] of message.content.entries()) {
      if (!isThinkingBlock(block)) continue;
      if (message.role !== 'assistant')
        return `messages.${i}.content.${j}: thinking blocks are only allowed in assistant messages`;
      if (!signer.verify(block)) {
        return `messages.${i}.content.${j}: Invalid \`signature\` in \`${String(block.type)}\` block. 'thinking' or 'redacted_thinking' blocks in the latest assistant message cannot be modified. These blocks must remain as they were in the original response.`;
      }
    }
  }
  if (!on) return undefined;
  // In a tool-use loop (the last assistant turn called tools and the user turn after it answers them), that assistant
  // turn must begin with the thinking that led to its calls.
  const lastAssistant = messages.findLastIndex((m) => m.role === 'assistant');
  const assistant = messages[lastAssistant];
  const answer = messages[lastAssistant + 1];
  if (!assistant || typeof assistant.content === 'string' || !answer || typeof answer.content === 'string')
    return undefined;
  const calls = assistant.content.some((b) => b.type === 'tool_use');
  const results = answer.content.some((b) => b.type === 'tool_result');
  const first = assistant.content[0];
  if (calls && results && (first === undefined || !isThinkingBlock(first))) {
    return `messages.${lastAssistant}.content.0.type: Expected \`thinking\` or \`redacted_thinking\`, but found \`${String(first?.type)}\`. When \`thinking\` is enabled, a final \`assistant\` message must start with a thinking block (preceeding the lastmost set of \`tool_use\` and \`tool_result\` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable \`thinking\`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking`;
  }
  return undefined;
}

/** What a scripted reply may say about its thinking. */
export interface FakeThinkingReply {
  /** The text of the thinking block the reply starts with when the request asks for thinking. @default a short note */
  thinking?: string;
  /** Also send a `redacted_thinking` block (after the thinking block). */
  redactedThinking?: boolean;
}

/**
 * The reply's content with its thinking: when `body` asks for thinking, a signed thinking block (and a sealed
 * redacted one, if asked) first; thinking blocks the script gave without a signature are signed. Without thinking
 * in the request, scripted thinking blocks are dropped, as the API sends none.
 */
export function withThinking(
  content: Array<Record<string, unknown>>,
  body: Record<string, unknown>,
  reply: FakeThinkingReply,
  signer: ThinkingSigner,
  index: number,
): Array<Record<string, unknown>> {
  if (!thinkingRequested(body)) return content.filter((block) => !isThinkingBlock(block));
  const own = content
    .filter(isThinkingBlock)
    .map((block) =>
      block.type === 'thinking'
        ? { type: 'thinking', thinking: String(block.thinking), signature: signer.sign(String(block.thinking)) }
        : { type: 'redacted_thinking', data: signer.seal(`redacted ${index}`) },
    );
  const rest = content.filter((block) => !isThinkingBlock(block));
  const text = reply.thinking ?? `(fake thinking ${index}) Let me work out what to do next.`;
  const thinking = own.length > 0 ? own : [{ type: 'thinking', thinking: text, signature: signer.sign(text) }];
  if (reply.redactedThinking) thinking.push({ type: 'redacted_thinking', data: signer.seal(`redacted ${index}`) });
  return [...thinking, ...rest];
}
