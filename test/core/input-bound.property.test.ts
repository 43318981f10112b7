/**
 * Property test of the learned input bound (core/input-bound.ts): over random conversations of several
 * agents, random tool lists and system prompts (changed now and then), elisions made by the loop's own fitContext and
 * several tokenizers (one token per byte, about 4 bytes a token, and a ratio that varies from piece to piece):
 * - the bound, and so the reservation, is never below the real count (cost);
 * - for an agent's call after its first with the same prefix (nothing elided, same model, system and tools), the bound
 *   exceeds the real input by at most the bytes of the messages added since its previous call plus their framing.
 */
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fitContext } from '../../src/core/context.js';
import { modelCost } from '../../src/core/credits.js';
import { InputBounds, MESSAGE_FRAMING_TOKENS } from '../../src/core/input-bound.js';
import type { ContentBlock, ModelMessage, ModelRequest, ModelToolSpec } from '../../src/models/provider.js';

type Tokenizer = (request: Pick<ModelRequest, 'system' | 'tools' | 'messages'>) => number;

/** Counts each piece of a request on its own (system, each tool, each message), as real tokenizers do with framing. */
function pieceTokenizer(tokensOf: (piece: string) => number, perMessage: number, perRequest: number): Tokenizer {
  return (request) => {
    let n = perRequest + tokensOf(request.system);
    for (const t of request.tools) n += tokensOf(JSON.stringify(t));
    for (const m of request.messages) n += perMessage + tokensOf(JSON.stringify(m.content));
    return n;
  };
}

const bytes = (s: string) => Buffer.byteLength(s);
const TOKENIZERS: Record<string, Tokenizer> = {
  // The worst case: one token per byte, with the most framing the byte bound allows.
  'tokens = bytes': pieceTokenizer(bytes, MESSAGE_FRAMING_TOKENS, 16),
  '~4 bytes a token': pieceTokenizer((s) => Math.ceil(bytes(s) / 4), 3, 5),
  // Deterministic per piece, between 1 and 6 bytes a token.
  'varying ratio': pieceTokenizer(
    (s) => {
      const ratio = 1 + (createHash('sha1').update(s).digest()[0]! % 6);
      return Math.ceil(bytes(s) / ratio);
    },
    5,
    9,
  ),
};

const text = fc.string({ unit: 'grapheme', maxLength: 400 });
const bigText = fc.oneof(text, fc.string({ unit: 'binary', minLength: 200, maxLength: 3_000 }));
const toolSpec: fc.Arbitrary<ModelToolSpec> = fc.record({
  name: fc.string({ minLength: 1, maxLength: 20 }),
  description: text,
  input_schema: fc.constant({ type: 'object', properties: { q: { type: 'string' } } }),
});
const assistantBlocks: fc.Arbitrary<ContentBlock[]> = fc.array(
  fc.oneof(
    text.map((t): ContentBlock => ({ type: 'text', text: t })),
    fc
      .record({ name: fc.string({ maxLength: 12 }), q: text })
      .map(({ name, q }): ContentBlock => ({ type: 'tool_use', id: `toolu_${name.length}`, name, input: { q } })),
  ),
  { minLength: 1, maxLength: 3 },
);
const resultBlocks: fc.Arbitrary<ContentBlock[]> = fc.array(
  fc.record({ content: bigText, error: fc.boolean() }).map(({ content, error }): ContentBlock => ({
    type: 'tool_result',
    tool_use_id: 'toolu_x',
    content,
    ...(error ? { is_error: true } : {}),
  })),
  { minLength: 1, maxLength: 3 },
);

/** One step of the world: an agent takes a model turn (its log grows by the turn and the results), or a change. */
const event = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.record({
      kind: fc.constant('turn' as const),
      agent: fc.nat(3),
      assistant: assistantBlocks,
      results: resultBlocks,
      // A small window makes fitContext elide old tool results, as the loop does near the context limit.
      window: fc.oneof(fc.constant(1_000_000), fc.integer({ min: 500, max: 20_000 })),
      cacheRead: fc.double({ min: 0, max: 1, noNaN: true }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('system' as const), system: text }) },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant('tools' as const), tools: fc.array(toolSpec, { maxLength: 6 }) }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant('model' as const), model: fc.constantFrom('svc-1-lite', 'svc-1-ultra') }),
  },
);

const PRICES = {
  'svc-1-lite': { inputPerMillion: 100, outputPerMillion: 500 },
  'svc-1-ultra': { inputPerMillion: 500, outputPerMillion: 2_500 },
};

describe('learned input bound (property)', () => {
  for (const [name, tokenizer] of Object.entries(TOKENIZERS)) {
    it(`is never below the real count and tight after the first call (${name})`, () => {
      fc.assert(
        fc.property(
          text,
          fc.array(toolSpec, { maxLength: 6 }),
          fc.array(text, { minLength: 4, maxLength: 4 }),
          fc.array(event, { minLength: 1, maxLength: 40 }),
          fc.integer({ min: 1, max: 4 }),
          (firstSystem, firstTools, goals, events, agentsCap) => {
            // A small memory now and then: a forgotten agent or prefix must only cost the byte bound.
            const bounds = new InputBounds({ agents: agentsCap, prefixes: agentsCap });
            let system = firstSystem;
            let tools = firstTools;
            let model = 'svc-1-lite';
            const logs = goals.map((g): ModelMessage[] => [{ role: 'user', content: [{ type: 'text', text: g }] }]);
            /** Per agent: what its previous call sent (to know whether the prefix is unchanged). */
            const previous = new Map<number, { key: string; count: number; elided: boolean }>();
            for (const e of events) {
              if (e.kind === 'system') system = e.system;
              else if (e.kind === 'tools') tools = e.tools;
              else if (e.kind === 'model') model = e.model;
              if (e.kind !== 'turn') continue;
              const log = logs[e.agent]!;
              const sent = fitContext(log, e.window, Math.ceil(bytes(system + JSON.stringify(tools)) / 3.5));
              const elided = sent !== log;
              const messageBytes = sent.map((m) => bytes(JSON.stringify(m.content)));
              const request = { system, tools, messages: sent };
              const real = tokenizer(request);
              const bound = bounds.bound({ agentId: `a${e.agent}`, model, system, tools, messageBytes, elided });
              expect(bound.tokens).toBeGreaterThanOrEqual(real);
              const maxTokens = 4_096;
              const price = PRICES[model as keyof typeof PRICES];
              expect(modelCost(price, { inputTokens: bound.tokens, outputTokens: maxTokens })).toBeGreaterThanOrEqual(
                modelCost(price, { inputTokens: real, outputTokens: maxTokens }),
              );
              const key = `${model}\n${system}\n${JSON.stringify(tools)}`;
              const before = previous.get(e.agent);
              if (before && !before.elided && !elided && before.key === key && agentsCap >= 4) {
                let added = 0;
                for (let i = before.count; i < messageBytes.length; i++)
                  added += messageBytes[i]! + MESSAGE_FRAMING_TOKENS;
                expect(bound.tokens - real).toBeLessThanOrEqual(added);
              }
              previous.set(e.agent, { key, count: sent.length, elided });
              // The provider reports the count, part of it as cache reads and writes (they count as input too).
              const cacheRead = Math.floor(real * e.cacheRead * 0.5);
              const cacheWrite = Math.floor((real - cacheRead) * e.cacheRead * 0.3);
              bounds.learn(bound, {
                inputTokens: real - cacheRead - cacheWrite,
                cacheReadInputTokens: cacheRead,
                cacheCreationInputTokens: cacheWrite,
                outputTokens: 10,
              });
              log.push({ role: 'assistant', content: e.assistant }, { role: 'user', content: e.results });
            }
          },
        ),
        { numRuns: 150 },
      );
    });
  }

  it('a provider that reports no usage keeps the byte bound', () => {
    const bounds = new InputBounds();
    const request = { agentId: 'a', model: 'm', system: 'sys', tools: [], messageBytes: [100, 200], elided: false };
    const first = bounds.bound(request);
    bounds.learn(first, { inputTokens: 0, outputTokens: 5 });
    const second = bounds.bound({ ...request, messageBytes: [100, 200, 300] });
    expect(second.source).toBe('bytes');
    expect(second.tokens).toBe(first.tokens + 300 + MESSAGE_FRAMING_TOKENS);
  });

  it('reports that break a learned bound turn learning off for that provider', () => {
    const bounds = new InputBounds();
    const request = { agentId: 'a', model: 'm', system: 'sys', tools: [], messageBytes: [1_000], elided: false };
    bounds.learn(bounds.bound(request), { inputTokens: 10, outputTokens: 1 });
    const learned = bounds.bound({ ...request, messageBytes: [1_000, 10] });
    expect(learned.source).toBe('agent');
    expect(learned.tokens).toBe(10 + 10 + MESSAGE_FRAMING_TOKENS);
    bounds.learn(learned, { inputTokens: 500, outputTokens: 1 }); // more than the learned bound allowed
    expect(bounds.bound({ ...request, messageBytes: [1_000, 10, 5] }).source).toBe('bytes');
  });
});
