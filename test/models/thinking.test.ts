/**
 * models/thinking.ts (which form a model's thinking request takes, budgets, which blocks go back) and the stand-in's
 * thinking checks (testing/fake-anthropic-thinking.ts), driven through the real SDK.
 */
import Anthropic from '@anthropic-ai/sdk';
import { afterEach, describe, expect, it } from 'vitest';
import { anthropicProvider, type ModelMessage } from 'agentry-runtime';
import {
  prefixDigest,
  startFakeAnthropic,
  type FakeAnthropic,
  type ThinkingCheckedRequest,
} from 'agentry-runtime/testing';
import {
  bindsThinkingToPrefix,
  firstEditedMessage,
  replayableThinking,
  resolveThinking,
  thinkingFormOf,
  thinkingParams,
  thinkingToSend,
} from '../../src/models/thinking.js';

describe('thinkingFormOf', () => {
  it('adaptive for Opus/Sonnet 4.6 and later and the Claude 5 families, a budget before and for unknown ids', () => {
    for (const id of [
      'claude-opus-5-5',
      'claude-haiku-5-5',
      'claude-sonnet-5',
      'claude-opus-4-7',
      'claude-opus-4-6',
      'claude-sonnet-4-6',
      'claude-mythos-preview',
      'claude-fable-5-1',
    ]) {
      expect(thinkingFormOf(id), id).toBe('adaptive');
    }
    for (const id of [
      'claude-haiku-4-5',
      'claude-haiku-4-5-20251001',
      'claude-opus-4-5',
      'claude-sonnet-4-5-20250929',
      'claude-3-7-sonnet-20250219',
      'local-llama',
    ]) {
      expect(thinkingFormOf(id), id).toBe('budget');
    }
  });
});

describe('thinkingParams', () => {
  it('off sends nothing; a budget stays below max_tokens; too small a call goes without', () => {
    expect(thinkingParams('claude-haiku-4-5', false, 4096)).toEqual({});
    expect(thinkingParams('claude-haiku-4-5', { budgetTokens: 2048 }, 6144)).toEqual({
      thinking: { type: 'enabled', budget_tokens: 2048 },
    });
    expect(thinkingParams('claude-opus-4-5', { budgetTokens: 8000 }, 3000)).toEqual({
      thinking: { type: 'enabled', budget_tokens: 2999 },
    });
    expect(thinkingParams('claude-opus-4-5', { budgetTokens: 8000 }, 1024)).toEqual({});
  });

  it('adaptive models get type adaptive and the effort, never a budget', () => {
    expect(thinkingParams('claude-opus-5-5', { budgetTokens: 8000 }, 12096)).toEqual({
      thinking: { type: 'adaptive' },
    });
    expect(thinkingParams('claude-opus-5-5', { budgetTokens: 8000, effort: 'max' }, 12096)).toEqual({
      thinking: { type: 'adaptive' },
      output_config: { effort: 'max' },
    });
  });
});

describe('resolveThinking', () => {
  it('lite off and ultra on by default; the environment, then options, override', () => {
    expect(resolveThinking({})).toEqual({ 'svc-1-lite': false, 'svc-1-ultra': { budgetTokens: 8000 } });
    expect(resolveThinking({ AGENTRY_THINKING_ULTRA: 'off', AGENTRY_THINKING_LITE: '2048' })).toEqual({
      'svc-1-lite': { budgetTokens: 2048 },
      'svc-1-ultra': false,
    });
    expect(
      resolveThinking({ AGENTRY_THINKING_ULTRA: 'off' }, { 'svc-1-ultra': { budgetTokens: 4096, effort: 'high' } }),
    ).toEqual({ 'svc-1-lite': false, 'svc-1-ultra': { budgetTokens: 4096, effort: 'high' } });
  });

  it('a variable that is neither off nor a budget ≥ 1024 is an error naming it', () => {
    expect(() => resolveThinking({ AGENTRY_THINKING_ULTRA: '500' })).toThrow(/AGENTRY_THINKING_ULTRA/);
    expect(() => resolveThinking({ AGENTRY_THINKING_LITE: 'lots' })).toThrow(/AGENTRY_THINKING_LITE/);
    expect(() => anthropicProvider({ thinking: { 'svc-1-ultra': { budgetTokens: 10 } } })).toThrow(/budgetTokens/);
  });
});

describe('replayableThinking', () => {
  const thinking = (n: number) => ({ type: 'thinking' as const, thinking: `t${n}`, signature: `s${n}` });
  const use = (n: number) => ({ type: 'tool_use' as const, id: `tu${n}`, name: 'x', input: {} });
  const result = (n: number) => ({ type: 'tool_result' as const, tool_use_id: `tu${n}`, content: 'ok' });
  const goal: ModelMessage = { role: 'user', content: [{ type: 'text', text: 'goal' }] };

  it('keeps every thinking block of the current tool-use loop, unchanged and in place', () => {
    const messages: ModelMessage[] = [
      goal,
      { role: 'assistant', content: [thinking(1), { type: 'redacted_thinking', data: 'd' }, use(1)] },
      { role: 'user', content: [result(1)] },
      { role: 'assistant', content: [thinking(2), use(2)] },
      { role: 'user', content: [result(2)] },
    ];
    expect(replayableThinking(messages)).toBe(messages);
  });

  it('leaves out the thinking of turns before a plain user turn (the loop ended); never empties a turn', () => {
    const messages: ModelMessage[] = [
      goal,
      { role: 'assistant', content: [thinking(1), use(1)] },
      { role: 'user', content: [result(1)] },
      { role: 'assistant', content: [thinking(2), { type: 'text', text: 'answer' }] },
      { role: 'user', content: [{ type: 'text', text: 'please submit' }] },
      { role: 'assistant', content: [thinking(3), use(3)] },
      { role: 'user', content: [result(3)] },
    ];
    const out = replayableThinking(messages);
    expect(out.map((m) => m.content.map((b) => b.type))).toEqual([
      ['text'],
      ['tool_use'],
      ['tool_result'],
      ['text'],
      ['text'],
      ['thinking', 'tool_use'],
      ['tool_result'],
    ]);
    expect(messages[1]!.content).toHaveLength(2); // the input is not modified
    const alone: ModelMessage[] = [
      goal,
      { role: 'assistant', content: [thinking(1)] },
      { role: 'user', content: [{ type: 'text', text: 'go on' }] },
    ];
    expect(replayableThinking(alone)).toBe(alone);
  });
});

describe('thinking after an edit (models that bind thinking to its prefix)', () => {
  const thinking = (n: number) => ({ type: 'thinking' as const, thinking: `t${n}`, signature: `s${n}` });
  const use = (n: number) => ({ type: 'tool_use' as const, id: `tu${n}`, name: 'x', input: {} });
  const result = (n: number, content = 'ok') => ({ type: 'tool_result' as const, tool_use_id: `tu${n}`, content });
  const log: ModelMessage[] = [
    { role: 'user', content: [{ type: 'text', text: 'goal' }] },
    { role: 'assistant', content: [thinking(1), use(1)] },
    { role: 'user', content: [result(1, 'a long result')] },
    { role: 'assistant', content: [thinking(2), use(2)] },
    { role: 'user', content: [result(2)] },
  ];
  const sent = log.map((m, i) => (i === 2 ? { ...m, content: [result(1, '[elided]')] } : m));

  it('finds the first edited message; leaves out thinking after it only on binding models', () => {
    expect(firstEditedMessage(log, sent)).toBe(2);
    expect(firstEditedMessage(log, log)).toBe(log.length);
    expect(bindsThinkingToPrefix('claude-opus-5-5')).toBe(true);
    expect(bindsThinkingToPrefix('claude-opus-5')).toBe(false);
    const kinds = (messages: ModelMessage[]) => messages.map((m) => m.content.map((b) => b.type).join('+'));
    expect(kinds(thinkingToSend('claude-opus-5-5', sent, 2))).toEqual([
      'text',
      'thinking+tool_use',
      'tool_result',
      'tool_use',
      'tool_result',
    ]);
    expect(thinkingToSend('claude-opus-5-5', sent)).toBe(sent);
    expect(thinkingToSend('claude-opus-5', sent, 2)).toBe(sent);
  });
});

describe('which thinking anthropicProvider sends back', () => {
  let fake: FakeAnthropic | undefined;
  afterEach(async () => {
    await fake?.close();
    fake = undefined;
  });

  it('after a plain user turn: left out for a model that takes a budget, kept (append-only) for an adaptive one', async () => {
    fake = await startFakeAnthropic();
    const messages: ModelMessage[] = [{ role: 'user', content: [{ type: 'text', text: 'goal' }] }];
    // Signed as the stand-in signs for Claude Opus 5.5: after everything before the block (no system, no tools).
    const signed = (text: string) => ({
      type: 'thinking' as const,
      thinking: text,
      signature: fake!.thinking.sign(
        text,
        prefixDigest(JSON.parse(JSON.stringify({ messages })) as ThinkingCheckedRequest, messages.length, 0),
      ),
    });
    messages.push({
      role: 'assistant',
      content: [signed('old loop'), { type: 'tool_use', id: 'tu_1', name: 'x', input: {} }],
    });
    messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'tu_1', content: 'ok' }] });
    messages.push({ role: 'assistant', content: [signed('answer'), { type: 'text', text: 'done?' }] });
    messages.push({ role: 'user', content: [{ type: 'text', text: 'please submit' }] });
    const request = { system: '', messages, tools: [], maxTokens: 4096, agentId: 'a' };
    const signal = new AbortController().signal;
    for (const [upstream, kept] of [
      ['claude-haiku-4-5', false],
      ['claude-opus-5-5', true],
    ] as const) {
      const model = anthropicProvider({
        baseURL: fake.url,
        apiKey: 'sk-test',
        maxRetries: 0,
        models: { 'svc-1-lite': upstream },
        thinking: { 'svc-1-lite': { budgetTokens: 2048 } },
      });
      await model.generate({ ...request, model: 'svc-1-lite' }, { signal });
      await model.countTokens!({ ...request, model: 'svc-1-lite' }, { signal });
      for (const sent of [fake.requests.at(-1)!, fake.countRequests.at(-1)!]) {
        const thinking = sent.messages.flatMap((m) =>
          (m.content as Array<{ type: string }>).filter((b) => b.type === 'thinking'),
        );
        expect(thinking, upstream).toHaveLength(kept ? 2 : 0);
        expect(sent.thinking, upstream).toBeDefined();
      }
    }
  });
});

describe('the stand-in refuses thinking the API would refuse (400, invalid_request_error)', () => {
  let fake: FakeAnthropic | undefined;
  afterEach(async () => {
    await fake?.close();
    fake = undefined;
  });

  async function loop() {
    fake = await startFakeAnthropic({
      handler: () => ({ thinking: 'first thought', content: [{ type: 'tool_use', id: 'tu_1', name: 'x', input: {} }] }),
    });
    const client = new Anthropic({ baseURL: fake.url, apiKey: 'sk-test', maxRetries: 0 });
    const base = {
      model: 'claude-opus-4-5',
      max_tokens: 4096,
      thinking: { type: 'enabled' as const, budget_tokens: 2048 },
      tools: [{ name: 'x', input_schema: { type: 'object' as const } }],
    };
    const first = await client.messages.create({ ...base, messages: [{ role: 'user', content: 'go' }] });
    expect(first.content.map((b) => b.type)).toEqual(['thinking', 'tool_use']);
    const next = (assistant: Anthropic.ContentBlockParam[], extra: Record<string, unknown> = {}) =>
      client.messages.create({
        ...base,
        ...extra,
        messages: [
          { role: 'user', content: 'go' },
          { role: 'assistant', content: assistant },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'tu_1', content: 'ok' }] },
        ],
      });
    return { first: first.content as Anthropic.ContentBlockParam[], next, client, base };
  }

  const refusal = async (promise: Promise<unknown>): Promise<string> => {
    const error = await promise.then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(Anthropic.BadRequestError);
    const body = (error as InstanceType<typeof Anthropic.BadRequestError>).error as {
      error: { type: string; message: string };
    };
    expect(body.error.type).toBe('invalid_request_error');
    return body.error.message;
  };

  it('accepts the blocks it signed, sent back unchanged', async () => {
    const { first, next } = await loop();
    expect((await next(first)).content[0]!.type).toBe('thinking');
  });

  it('refuses a tool-use loop whose thinking block was dropped', async () => {
    const { first, next } = await loop();
    expect(await refusal(next(first.filter((b) => b.type !== 'thinking')))).toMatch(
      /Expected `thinking` or `redacted_thinking`/,
    );
  });

  it('refuses an altered thinking text, an altered signature and a made-up redacted block', async () => {
    const { first, next } = await loop();
    const [thought, call] = first as [Anthropic.ThinkingBlockParam, Anthropic.ToolUseBlockParam];
    expect(await refusal(next([{ ...thought, thinking: `${thought.thinking} (edited)` }, call]))).toMatch(
      /Invalid `signature`/,
    );
    expect(await refusal(next([{ ...thought, signature: `x${thought.signature}` }, call]))).toMatch(
      /Invalid `signature`/,
    );
    expect(await refusal(next([{ type: 'redacted_thinking', data: 'made-up' }, call]))).toMatch(/Invalid `signature`/);
  });

  it('refuses a budget below 1024 or not below max_tokens, a forced tool_choice, a temperature other than 1', async () => {
    const { client, base } = await loop();
    const ask = (extra: Record<string, unknown>) =>
      client.messages.create({ ...base, messages: [{ role: 'user', content: 'go' }], ...extra });
    expect(await refusal(ask({ thinking: { type: 'enabled', budget_tokens: 1000 } }))).toMatch(/1024/);
    expect(await refusal(ask({ max_tokens: 2048 }))).toMatch(/max_tokens/);
    expect(await refusal(ask({ tool_choice: { type: 'any' } }))).toMatch(/tool_choice/);
    expect(await refusal(ask({ temperature: 0.2 }))).toMatch(/temperature/);
  });
});
