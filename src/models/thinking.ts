/**
 * @module models/thinking
 * Extended thinking for the Messages API: which public model thinks and how much (options and environment), how a
 * request asks for it (the form depends on the upstream model: a `budget_tokens` budget, or adaptive thinking with an
 * effort level), and which thinking blocks of the turn log go back to the API.
 *
 * The API's rules this follows:
 * - `budget_tokens` is at least 1,024 and less than `max_tokens`; thinking counts inside `max_tokens` and is billed as
 *   output, so the loop raises `max_tokens` by the budget (see `ModelProvider.thinkingTokens`);
 * - thinking does not combine with a forced `tool_choice` or a changed `temperature`/`top_k`: agentry sends neither;
 * - within a tool-use loop the thinking blocks (signature included, and `redacted_thinking`) go back unchanged, in
 *   their turns; once a plain user turn ends the loop, earlier turns' thinking may be left out (the API strips it) —
 *   but the newer models keep earlier thinking in context and bind each block to everything before it (a block left
 *   out between others invalidates the later ones), so only models that take a budget have it left out.
 */
import { z } from 'zod';
import type { ContentBlock, ModelMessage } from './provider.js';

/** The least `budget_tokens` the Messages API accepts. */
export const MIN_THINKING_BUDGET = 1024;

/** Effort levels of `output_config.effort` (adaptive thinking). */
export const THINKING_EFFORTS = ['low', 'medium', 'high', 'xhigh', 'max'] as const;
export type ThinkingEffort = (typeof THINKING_EFFORTS)[number];

/**
 * How a public model thinks: `false` (off) or a budget of thinking tokens on top of the answer, with an optional
 * effort for models that think adaptively.
 *
 * @example
 * const ultra: ThinkingSetting = { budgetTokens: 16_000, effort: 'high' };
 */
export type ThinkingSetting =
  | false
  | {
      /**
       * Thinking tokens a call may spend besides its answer (≥ 1,024). Sent as `budget_tokens` to models that take a
       * budget; for models that think adaptively it only sizes `max_tokens` (and so the credit hold).
       */
      budgetTokens: number;
      /** `output_config.effort` for models that think adaptively; others ignore it. @default the model's own */
      effort?: ThinkingEffort;
    };

/** Defaults per public model: lite answers straight away, ultra thinks. */
export const DEFAULT_THINKING: Readonly<Record<string, ThinkingSetting>> = Object.freeze({
  'svc-1-lite': false,
  'svc-1-ultra': { budgetTokens: 8_000 },
});

/** The variable that sets each default model's thinking: `off`, or a budget in tokens (e.g. `16000`). */
export const THINKING_ENV: Readonly<Record<string, string>> = Object.freeze({
  'svc-1-lite': 'AGENTRY_THINKING_LITE',
  'svc-1-ultra': 'AGENTRY_THINKING_ULTRA',
});

export const ThinkingSettingSchema = z.union([
  z.literal(false),
  z.strictObject({
    budgetTokens: z.int().min(MIN_THINKING_BUDGET).max(1_000_000),
    effort: z.enum(THINKING_EFFORTS).optional(),
  }),
]);

type Env = Readonly<Record<string, string | undefined>>;

/**
 * The thinking of each public model: options win, then `AGENTRY_THINKING_LITE` / `AGENTRY_THINKING_ULTRA`, then
 * {@link DEFAULT_THINKING}. A variable that is neither `off` nor a whole number ≥ 1,024 is an error naming it.
 *
 * @example
 * resolveThinking({ AGENTRY_THINKING_ULTRA: '16000' })['svc-1-ultra'] // -> { budgetTokens: 16000 }
 */
export function resolveThinking(
  env: Env = process.env,
  options: Readonly<Record<string, ThinkingSetting | undefined>> = {},
): Record<string, ThinkingSetting> {
  const settings: Record<string, ThinkingSetting> = { ...DEFAULT_THINKING };
  for (const [publicId, name] of Object.entries(THINKING_ENV)) {
    const raw = env[name]?.trim().toLowerCase();
    if (raw === undefined || raw === '') continue;
    if (raw === 'off' || raw === '0' || raw === 'false') {
      settings[publicId] = false;
      continue;
    }
    const budget = Number(raw);
    if (!Number.isInteger(budget) || budget < MIN_THINKING_BUDGET) {
      throw new Error(
        `${name} must be "off" or a thinking budget of at least ${MIN_THINKING_BUDGET} tokens, got ${JSON.stringify(env[name])}`,
      );
    }
    const current = settings[publicId];
    settings[publicId] = { ...(current ? current : {}), budgetTokens: budget };
  }
  for (const [publicId, setting] of Object.entries(options)) if (setting !== undefined) settings[publicId] = setting;
  return settings;
}

/** Output tokens a call spends on thinking at most, besides its answer (what `max_tokens` grows by). */
export function thinkingAllowance(setting: ThinkingSetting | undefined): number {
  return setting ? setting.budgetTokens : 0;
}

/**
 * How an upstream model takes a thinking request:
 * - `budget`: `thinking: {type: 'enabled', budget_tokens}` (Claude 4.5 and earlier, and ids agentry does not know);
 * - `adaptive`: `thinking: {type: 'adaptive'}` with `output_config.effort` (Claude Opus and Sonnet 4.6 and later, the
 *   Claude 5 families, Mythos and Fable; on several of them a budget is refused with a 400).
 */
export function thinkingFormOf(upstream: string): 'budget' | 'adaptive' {
  if (/^claude-(mythos|fable)\b/.test(upstream)) return 'adaptive';
  // claude-<family>-<major>[-<minor>][-<yyyymmdd>]; the older scheme (claude-3-7-sonnet-…) is before 4.6 anyway.
  const match = /^claude-(?:opus|sonnet|haiku)-(\d+)(?:-(\d{1,2}))?(?:-\d{8})?$/.exec(upstream);
  if (!match) return 'budget';
  const major = Number(match[1]);
  const minor = match[2] === undefined ? 0 : Number(match[2]);
  return major > 4 || (major === 4 && minor >= 6) ? 'adaptive' : 'budget';
}

/** The thinking fields of a Messages request (`thinking`, `output_config`); empty when the call does not think. */
export interface ThinkingParams {
  thinking?: { type: 'enabled'; budget_tokens: number } | { type: 'adaptive' };
  output_config?: { effort: ThinkingEffort };
}

/**
 * The thinking fields for one call of `upstream` with `maxTokens` (answer and thinking together). A budget is kept
 * below `max_tokens`, as the API requires; a call too small for the least budget goes without thinking (the loop's
 * floor keeps that for calls the balance can barely pay). Off sends nothing: models that think by default then do,
 * and their blocks are kept like any others.
 *
 * @example
 * thinkingParams('claude-haiku-4-5', { budgetTokens: 2048 }, 6144)
 * // -> { thinking: { type: 'enabled', budget_tokens: 2048 } }
 */
export function thinkingParams(
  upstream: string,
  setting: ThinkingSetting | undefined,
  maxTokens: number,
): ThinkingParams {
  if (!setting) return {};
  if (thinkingFormOf(upstream) === 'adaptive') {
    return {
      thinking: { type: 'adaptive' },
      ...(setting.effort === undefined ? {} : { output_config: { effort: setting.effort } }),
    };
  }
  const budget = Math.min(setting.budgetTokens, maxTokens - 1);
  if (budget < MIN_THINKING_BUDGET) return {};
  return { thinking: { type: 'enabled', budget_tokens: budget } };
}

const isThinking = (block: ContentBlock): boolean => block.type === 'thinking' || block.type === 'redacted_thinking';

/**
 * The messages to send, with the thinking the API needs: every assistant turn of the current tool-use loop (since the
 * last user turn that is not only tool results) keeps its thinking blocks unchanged and in place; assistant turns
 * before that loop lose theirs, which the API would strip from the context anyway. Nothing else changes, and
 * `messages` is not modified.
 *
 * @example
 * replayableThinking([goal, assistantWithThinking, toolResults]) // -> the same three, the thinking kept
 */
export function replayableThinking(messages: ModelMessage[]): ModelMessage[] {
  let loopStart = 0;
  messages.forEach((m, i) => {
    if (m.role === 'user' && m.content.some((b) => b.type !== 'tool_result')) loopStart = i;
  });
  let changed = false;
  const out = messages.map((m, i) => {
    if (i >= loopStart || m.role !== 'assistant' || !m.content.some(isThinking)) return m;
    const rest = m.content.filter((b) => !isThinking(b));
    if (rest.length === 0) return m; // an assistant turn may not be empty: a turn of thinking alone stays whole
    changed = true;
    return { ...m, content: rest };
  });
  return changed ? out : messages;
}

/**
 * Whether `upstream` binds each thinking block to everything before it (preserved thinking: the Claude 5.5 family,
 * Fable and Mythos from 5.1 on): a block whose prefix changed since it was produced is refused.
 */
export function bindsThinkingToPrefix(upstream: string): boolean {
  return /^claude-(?:(?:opus|sonnet|haiku)-5-5|(?:fable|mythos)-5-[1-9])(?:-|$)/.test(upstream);
}

/** The index of the first message of `sent` whose content differs from `log`'s (`log.length` if none does). */
export function firstEditedMessage(log: readonly ModelMessage[], sent: readonly ModelMessage[]): number {
  const index = sent.findIndex((m, i) => {
    const logged = log[i];
    return logged === undefined || (m !== logged && JSON.stringify(m.content) !== JSON.stringify(logged.content));
  });
  return index === -1 ? Math.min(log.length, sent.length) : index;
}

/**
 * The messages to send to `upstream`:
 * - models that take a budget (Claude 4.5 and earlier) get {@link replayableThinking};
 * - models that think adaptively get the log as it is (append-only), since they keep earlier thinking;
 * - on models that bind thinking to its prefix, assistant turns after `editedFrom` (the first message changed from the
 *   log, by context elision) lose their thinking: it was produced after a different conversation and would be refused
 *   (adaptive thinking does not require a turn to start with thinking).
 */
export function thinkingToSend(upstream: string, messages: ModelMessage[], editedFrom?: number): ModelMessage[] {
  if (thinkingFormOf(upstream) === 'budget') return replayableThinking(messages);
  if (editedFrom === undefined || !bindsThinkingToPrefix(upstream)) return messages;
  let changed = false;
  const out = messages.map((m, i) => {
    if (i <= editedFrom || m.role !== 'assistant' || !m.content.some(isThinking)) return m;
    const rest = m.content.filter((b) => !isThinking(b));
    if (rest.length === 0) return m;
    changed = true;
    return { ...m, content: rest };
  });
  return changed ? out : messages;
}
