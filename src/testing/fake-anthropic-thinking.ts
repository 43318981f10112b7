/**
 * @module testing/fake-anthropic-thinking
 * Extended thinking as the stand-in Messages API ({@link startFakeAnthropic}) plays it. A request that asks for
 * thinking gets a `thinking` block first in its reply, signed with an HMAC of its text under a secret of the server
 * (and a `redacted_thinking` block whose `data` is sealed the same way, when the reply asks for one). A later request
 * is refused with 400 and the API's error shape, as the real API refuses it, when:
 * - a `thinking` block's signature does not match its text, or a `redacted_thinking` block's data was not sealed by
 *   this server (the block was altered, or made up);
 * - on a model with preserved thinking (the Claude 5.5 family, Fable and Mythos 5.1 and later), anything before a
 *   thinking block — `system`, `tools`, earlier messages and blocks, `cache_control` markers aside — differs from
 *   what the request that produced it sent (the block is bound to its prefix);
 * - thinking is on with a budget and the last assistant turn of a tool-use loop (its tool_use answered by the
 *   tool_result that follows) does not start with its thinking (the block was dropped);
 * - `budget_tokens` is below 1,024 or not below `max_tokens`; thinking comes with a forced `tool_choice`, a
 *   `temperature` other than 1, or `top_k`.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { bindsThinkingToPrefix } from '../models/thinking.js';

/** The fields of a request the checks read (a Messages or count_tokens body). */
export interface ThinkingCheckedRequest {
  max_tokens?: number;
  messages: Array<{ role: 'user' | 'assistant'; content: string | Array<Record<string, unknown>> }>;
  [key: string]: unknown;
}

/** Signs and checks thinking blocks with one server secret. */
export interface ThinkingSigner {
  /**
   * The signature of a thinking text: a MAC of the text, then a MAC of the text with `prefix` (the digest of what
   * came before the block, {@link prefixDigest}; empty for models that do not bind thinking to it).
   */
  sign(thinking: string, prefix?: string): string;
  /** Opaque `data` of a redacted_thinking block, sealed by this server (bound to `prefix` the same way). */
  seal(label: string, prefix?: string): string;
  /**
   * Whether a `thinking` or `redacted_thinking` block is exactly as this server sent it; with `prefix`, also that
   * it was produced after that same prefix.
   */
  verify(block: Record<string, unknown>, prefix?: string): boolean;
}

/** A signer with `secret`, or a random one (a fresh fake accepts only the blocks it wrote itself). */
export function thinkingSigner(secret: string = randomBytes(32).toString('hex')): ThinkingSigner {
  const mac = (kind: string, text: string) => createHmac('sha256', secret).update(`${kind}\n${text}`).digest('base64');
  const same = (a: string, b: string) => {
    const x = Buffer.from(a);
    const y = Buffer.from(b);
    return x.length === y.length && timingSafeEqual(x, y);
  };
  // Two parts: the first proves the text (checked everywhere), the second the prefix it was produced after.
  const seal = (kind: string, text: string, prefix: string) =>
    `${mac(kind, text)}~${mac(`${kind}@`, `${prefix}\n${text}`)}`;
  const check = (kind: string, text: string, signature: string, prefix: string | undefined) => {
    const [own, bound, ...rest] = signature.split('~');
    if (rest.length > 0 || own === undefined || bound === undefined || !same(own, mac(kind, text))) return false;
    return prefix === undefined || same(bound, mac(`${kind}@`, `${prefix}\n${text}`));
  };
  return {
    sign: (thinking, prefix = '') => seal('thinking', thinking, prefix),
    seal(label, prefix = '') {
      const body = Buffer.from(label).toString('base64');
      return `${body}.${seal('redacted', body, prefix)}`;
    },
    verify(block, prefix) {
      if (block.type === 'thinking') {
        return (
          typeof block.thinking === 'string' &&
          typeof block.signature === 'string' &&
          check('thinking', block.thinking, block.signature, prefix)
        );
      }
      if (block.type === 'redacted_thinking') {
        if (typeof block.data !== 'string') return false;
        const [body, tag, ...rest] = block.data.split('.');
        return rest.length === 0 && body !== undefined && tag !== undefined && check('redacted', body, tag, prefix);
      }
      return true;
    },
  };
}

/** JSON with sorted keys and without `cache_control` (a cache breakpoint is not a change of the conversation). */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([key, v]) => key !== 'cache_control' && v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([key, v]) => `${JSON.stringify(key)}:${canonical(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/** `system` as blocks: a string and one text block are the same prompt. */
function systemBlocks(system: unknown): unknown {
  return typeof system === 'string' ? [{ type: 'text', text: system }] : (system ?? []);
}

/**
 * The digest of what precedes block `block` of message `message` of `body`: `system`, `tools`, the messages before
 * it and the blocks before it in its own message. `message` may be `body.messages.length` (the reply being made, with
 * `replyBlocks` before the block).
 */
export function prefixDigest(
  body: ThinkingCheckedRequest,
  message: number,
  block: number,
  replyBlocks: Array<Record<string, unknown>> = [],
): string {
  const messages = body.messages.slice(0, message).map((m) => ({
    role: m.role,
    content: typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : m.content,
  }));
  const own = body.messages[message];
  const ownBlocks = own === undefined ? replyBlocks : typeof own.content === 'string' ? [] : own.content;
  messages.push({ role: 'assistant', content: ownBlocks.slice(0, block) });
  return createHash('sha256')
    .update(canonical({ system: systemBlocks(body.system), tools: body.tools ?? [], messages }))
    .digest('base64');
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
  const bound = typeof body.model === 'string' && bindsThinkingToPrefix(body.model);
  for (const [i, message] of messages.entries()) {
    if (typeof message.content === 'string') continue;
    for (const [j, block] of message.content.entries()) {
      if (!isThinkingBlock(block)) continue;
      if (message.role !== 'assistant')
        return `messages.${i}.content.${j}: thinking blocks are only allowed in assistant messages`;
      if (!signer.verify(block)) {
        return `messages.${i}.content.${j}: Invalid \`signature\` in \`${String(block.type)}\` block. 'thinking' or 'redacted_thinking' blocks in the latest assistant message cannot be modified. These blocks must remain as they were in the original response.`;
      }
      if (bound && !signer.verify(block, prefixDigest(body, i, j))) {
        return `messages.${i}.content.${j}: Invalid \`signature\` in \`${String(block.type)}\` block. The block is bound to a different conversation. Remove the block, or set \`thinking.block_binding.prefix_mismatch_behavior\` to "drop_block".`;
      }
    }
  }
  // With a budget, in a tool-use loop (the last assistant turn called tools and the user turn after it answers them),
  // that assistant turn must begin with the thinking that led to its calls. Adaptive thinking may skip thinking on a
  // turn, so a turn without it is no proof that it was dropped.
  if (thinking?.type !== 'enabled') return undefined;
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
  body: ThinkingCheckedRequest,
  reply: FakeThinkingReply,
  signer: ThinkingSigner,
  index: number,
): Array<Record<string, unknown>> {
  if (!thinkingRequested(body)) return content.filter((block) => !isThinkingBlock(block));
  const scripted = content.filter(isThinkingBlock);
  const rest = content.filter((block) => !isThinkingBlock(block));
  const text = reply.thinking ?? `(fake thinking ${index}) Let me work out what to do next.`;
  const wanted: Array<{ type: string; thinking?: string }> =
    scripted.length > 0
      ? scripted.map((block) => ({ type: String(block.type), thinking: String(block.thinking) }))
      : [{ type: 'thinking', thinking: text }];
  if (reply.redactedThinking) wanted.push({ type: 'redacted_thinking' });
  // Each block is signed after what precedes it: the request and the reply's blocks before it.
  const bound = typeof body.model === 'string' && bindsThinkingToPrefix(body.model);
  const out: Array<Record<string, unknown>> = [];
  for (const block of wanted) {
    const prefix = bound ? prefixDigest(body, body.messages.length, out.length, out) : '';
    out.push(
      block.type === 'thinking'
        ? { type: 'thinking', thinking: block.thinking ?? text, signature: signer.sign(block.thinking ?? text, prefix) }
        : { type: 'redacted_thinking', data: signer.seal(`redacted ${index}`, prefix) },
    );
  }
  return [...out, ...rest];
}
