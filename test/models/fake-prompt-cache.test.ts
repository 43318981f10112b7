/**
 * The stand-in's prompt-cache simulation follows the Messages API's rules: breakpoints (at most four), a hit up to 20
 * blocks before a breakpoint, the minimum cacheable length, entries readable only once their writer's response has
 * started, and a 5-minute TTL refreshed by reads, on a clock the test moves.
 */
import { describe, expect, it } from 'vitest';
import { fakePromptCache } from 'agentry-runtime/testing';
import { formatModelIds, unlistedModelWarnings } from '../../src/cli/model-ids.js';
import { PrefixWriteGate } from '../../src/models/prompt-cache.js';

const MARK = { type: 'ephemeral' };
/** A block of about `tokens` tokens (4 characters a token). */
const text = (tokens: number, tag: string, marked = false) => ({
  type: 'text',
  text: `${tag}:`.padEnd(tokens * 4 - 30, '.'),
  ...(marked ? { cache_control: MARK } : {}),
});

function conversation(turns: number, markLast = true) {
  const messages = Array.from({ length: turns }, (_, i) => ({
    role: i % 2 === 0 ? ('user' as const) : ('assistant' as const),
    content: [text(300, `turn ${i}`, markLast && i === turns - 1)],
  }));
  return { model: 'claude-test', system: [text(2_000, 'system', true)], messages };
}

describe('fakePromptCache', () => {
  it('writes at breakpoints, reads them back, and bills the rest as input', () => {
    let now = 0;
    const cache = fakePromptCache({ now: () => now });
    const first = cache.lookup(conversation(1));
    expect(first.usage.cache_read_input_tokens).toBe(0);
    expect(first.usage.cache_creation_input_tokens).toBeGreaterThan(2_000);
    first.commit();
    expect(cache.writes.map((w) => w.region)).toEqual(['prefix', 'messages']);
    now += 1_000;
    const second = cache.lookup(conversation(3));
    // reads everything up to the previous tail, writes the two new turns
    expect(second.usage.cache_read_input_tokens).toBe(
      first.usage.cache_creation_input_tokens + first.usage.cache_read_input_tokens,
    );
    expect(second.usage.cache_creation_input_tokens).toBeGreaterThan(500);
    expect(second.usage.input_tokens).toBe(0);
  });

  it('an entry is readable only once its writer has answered', () => {
    const cache = fakePromptCache();
    const writer = cache.lookup(conversation(1));
    const sibling = cache.lookup(conversation(1));
    expect(sibling.usage.cache_read_input_tokens).toBe(0); // the writer's response has not started
    writer.commit();
    expect(cache.lookup(conversation(1)).usage.cache_read_input_tokens).toBeGreaterThan(2_000);
  });

  it('looks back at most 20 blocks from a breakpoint', () => {
    const cache = fakePromptCache();
    cache.lookup(conversation(1)).commit();
    const system = cache.writes[0]!.tokens;
    // 21 blocks after the first tail, with only the newest marked: the first tail is out of reach, the system is not
    expect(cache.lookup(conversation(21)).usage.cache_read_input_tokens).toBeGreaterThan(system);
    expect(cache.lookup(conversation(22)).usage.cache_read_input_tokens).toBe(system);
  });

  it('does not cache below the minimum length and refuses a fifth breakpoint', () => {
    const cache = fakePromptCache({ minTokens: () => 100_000 });
    const small = cache.lookup(conversation(2));
    small.commit();
    expect(small.usage.cache_creation_input_tokens).toBe(0);
    expect(cache.writes).toHaveLength(0);
    const many = conversation(5);
    for (const m of many.messages) (m.content[0] as Record<string, unknown>).cache_control = MARK;
    expect(() => cache.lookup(many)).toThrow(/maximum of 4 blocks/);
  });

  it('expires an entry 5 minutes after its last use on the given clock', () => {
    let now = 0;
    const cache = fakePromptCache({ now: () => now });
    cache.lookup(conversation(1)).commit();
    now += 4 * 60_000;
    const read = cache.lookup(conversation(1));
    expect(read.usage.cache_read_input_tokens).toBeGreaterThan(0);
    read.commit(); // the read refreshes the TTL
    now += 4 * 60_000;
    expect(cache.lookup(conversation(1)).usage.cache_read_input_tokens).toBeGreaterThan(0);
    now += 5 * 60_000 + 1;
    expect(cache.lookup(conversation(1)).usage.cache_read_input_tokens).toBe(0);
  });
});

describe('the CLI lines about model ids', () => {
  it('names the variable of an unlisted id', () => {
    const ids = [
      { model: 'svc-1-lite', upstream: 'claude-haiku-4-5', listed: true },
      { model: 'svc-1-ultra', upstream: 'claude-opus-0', listed: false },
    ];
    expect(formatModelIds(ids)).toContain('svc-1-lite   claude-haiku-4-5  (listed by the server)');
    expect(unlistedModelWarnings(ids)).toEqual([expect.stringContaining('AGENTRY_MODEL_ULTRA')]);
    expect(unlistedModelWarnings(ids)[0]).toContain('"claude-opus-0"');
  });
});

describe('PrefixWriteGate', () => {
  it('lets one writer through, holds its siblings until it answers, then passes warm calls at once', async () => {
    const gate = new PrefixWriteGate();
    const signal = new AbortController().signal;
    const order: string[] = [];
    const writer = await gate.enter('p', signal);
    const siblings = [1, 2, 3].map((i) => gate.enter('p', signal).then((release) => (order.push(`s${i}`), release)));
    await Promise.resolve();
    expect(order).toEqual([]);
    order.push('answer');
    writer(true);
    (await Promise.all(siblings)).forEach((release) => release(true));
    expect(order).toEqual(['answer', 's1', 's2', 's3']);
  });

  it('hands the turn on when the writer fails, and gives up waiting after maxWaitMs', async () => {
    let now = 0;
    const gate = new PrefixWriteGate({ now: () => now, maxWaitMs: 1 });
    const signal = new AbortController().signal;
    const writer = await gate.enter('p', signal);
    const next = gate.enter('p', signal);
    writer(false);
    const second = await next; // the next caller becomes the writer
    now += 5;
    const late = await gate.enter('p', signal); // the writer is still out: it waits at most 1 ms, then goes
    late(true);
    second(true);
  });
});
