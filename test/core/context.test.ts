import { describe, expect, it } from 'vitest';
import { fitContext } from '../../src/core/context.js';
import type { ModelMessage } from 'agentry-runtime';

const big = 'x'.repeat(20_000);
function conversation(rounds: number): ModelMessage[] {
  const messages: ModelMessage[] = [{ role: 'user', content: [{ type: 'text', text: 'goal' }] }];
  for (let i = 0; i < rounds; i++) {
    messages.push({ role: 'assistant', content: [{ type: 'tool_use', id: `t${i}`, name: 'read', input: { i } }] });
    messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: `t${i}`, content: `${i}:${big}` }] });
  }
  return messages;
}

describe('fitContext', () => {
  it('leaves a conversation that fits untouched', () => {
    const m = conversation(2);
    expect(fitContext(m, 200_000, 1_000)).toBe(m);
  });

  it('elides the oldest tool results first, keeps the recent ones and the goal, and does not modify its input', () => {
    const m = conversation(40); // ~230k tokens of tool results
    const before = JSON.stringify(m);
    const fitted = fitContext(m, 200_000, 1_000);
    expect(JSON.stringify(m)).toBe(before);
    const results = fitted.flatMap((x) => x.content).filter((b) => b.type === 'tool_result') as Array<{
      content: string;
    }>;
    expect(results[0]!.content).toMatch(/^\[elided/);
    expect(results.at(-1)!.content.startsWith('39:')).toBe(true);
    expect(results.at(-2)!.content.startsWith('38:')).toBe(true);
    const size = fitted.reduce((s, x) => s + JSON.stringify(x.content).length, 0) / 3.5;
    expect(size).toBeLessThan(200_000 * 0.7);
    expect(fitted[0]).toEqual(m[0]);
    // tool_use / tool_result pairing is intact
    expect(fitted.map((x) => x.role)).toEqual(m.map((x) => x.role));
  });
});

describe('fitContext in large steps (prompt caching)', () => {
  it('keeps the elided prefix the same for many turns while the conversation grows', () => {
    const small = 'y'.repeat(8_000); // ~2,300 tokens a turn
    const messages: ModelMessage[] = [{ role: 'user', content: [{ type: 'text', text: 'goal' }] }];
    let previous: string | undefined;
    let changes = 0;
    let elidedTurns = 0;
    for (let i = 0; i < 120; i++) {
      messages.push({ role: 'assistant', content: [{ type: 'tool_use', id: `t${i}`, name: 'read', input: { i } }] });
      messages.push({
        role: 'user',
        content: [{ type: 'tool_result', tool_use_id: `t${i}`, content: `${i}:${small}` }],
      });
      const fitted = fitContext(messages, 200_000, 1_000);
      if (fitted === messages) continue;
      elidedTurns++;
      const size = fitted.reduce((s, x) => s + JSON.stringify(x.content).length, 0) / 3.5;
      expect(size).toBeLessThan(200_000 * 0.7);
      // the elided notes: which results are elided
      const elided = JSON.stringify(
        fitted.map((m) => m.content.map((b) => b.type === 'tool_result' && b.content.startsWith('[elided'))),
      );
      const prefix = elided.slice(0, elided.lastIndexOf('true'));
      if (previous !== undefined && prefix !== previous) changes++;
      previous = prefix;
    }
    expect(elidedTurns).toBeGreaterThan(50);
    // eliding one more result each turn would change it on every one of those turns
    expect(changes).toBeLessThanOrEqual(elidedTurns / 8);
  });
});
