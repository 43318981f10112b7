/**
 * The runtime driving the real @anthropic-ai/sdk client against a local server that speaks the Messages API.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { AgentRuntime, anthropicProvider, defineTool, memoryStorage } from 'agentry-runtime';
import { fakeReplies, startFakeAnthropic, type FakeAnthropic } from 'agentry-runtime/testing';
import { eventually } from '../support/runtime.js';

const weather = defineTool({
  name: 'get_weather',
  description: 'Weather for a city',
  input: z.object({ city: z.string() }),
  price: 0.1,
  idempotent: true,
  run: ({ city }) => ({ city, temperature_c: 21 }),
});

let fake: FakeAnthropic | undefined;
let runtime: AgentRuntime | undefined;
afterEach(async () => {
  await runtime?.close();
  await fake?.close();
  runtime = undefined;
  fake = undefined;
});

async function open(handler: Parameters<typeof startFakeAnthropic>[0]) {
  fake = await startFakeAnthropic(handler);
  runtime = await AgentRuntime.open({
    storage: memoryStorage(),
    model: anthropicProvider({ baseURL: fake.url, apiKey: 'sk-test', maxRetries: 2 }),
    tools: [weather],
  });
  return { fake, runtime };
}

describe('runtime + Anthropic provider (real SDK, local Messages API server)', () => {
  it('counts a call exactly (count_tokens) when even the learned bound does not fit, then makes it', async () => {
    fake = await startFakeAnthropic();
    // Every built-in tool is offered: their definitions' byte bound (~0.9 credits) is more than the 0.5 credits left.
    runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model: anthropicProvider({ baseURL: fake.url, apiKey: 'sk-test', maxRetries: 0 }),
      defaultAccount: { id: 'local', credits: 0.5 },
    });
    const { agent_id } = await runtime.create({ goal: 'Say ok' });
    const agent = await runtime.waitFor(agent_id);
    expect(agent.status).toBe('COMPLETED');
    expect(fake.countRequests).toHaveLength(1);
    expect(fake.requests).toHaveLength(1);
    expect(fake.requests[0]!.max_tokens).toBeLessThan(4_096);
    expect(fake.requests[0]!.max_tokens).toBeGreaterThanOrEqual(256);
    const ledger = await runtime.storage.listLedger('local');
    const account = (await runtime.storage.getAccount('local'))!;
    expect(ledger.reduce((sum, l) => sum + l.amount, 0)).toBe(account.balance);
    expect(account.reserved).toBe(0);
  });

  it('completes a multi-turn tool_use conversation; usage reaches token_count and the ledger exactly', async () => {
    const { fake, runtime } = await open({
      handler: fakeReplies(
        {
          content: [
            { type: 'text', text: 'Let me check.' },
            { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } },
          ],
          usage: {
            input_tokens: 812,
            output_tokens: 45,
            cache_read_input_tokens: 300,
            cache_creation_input_tokens: 20,
          },
        },
        { text: 'It is 21 °C in Paris.', usage: { input_tokens: 905, output_tokens: 12 } },
      ),
    });
    const { agent_id } = await runtime.create({ goal: 'Weather in Paris?' });
    const agent = await runtime.waitFor(agent_id);
    expect(agent.status).toBe('COMPLETED');
    expect(agent.token_count).toBe(812 + 45 + 300 + 20 + 905 + 12);
    const { messages } = await runtime.get(agent_id);
    expect(messages.map((m) => m.text)).toEqual(['Weather in Paris?', 'Let me check.', 'It is 21 °C in Paris.']);

    // the second request carried the tool result back to the model
    const second = fake.requests[1]!;
    const lastUser = second.messages.at(-1)!;
    expect(lastUser.role).toBe('user');
    expect(JSON.stringify(lastUser.content)).toContain('"tool_use_id":"toolu_1"');
    expect(JSON.stringify(lastUser.content)).toContain('temperature_c');
    expect(second.model).toBe('claude-haiku-4-5');

    const ledger = await runtime.storage.listLedger('local');
    const model = ledger.filter((l) => l.kind === 'model');
    // cache reads bill at 0.1× and cache writes at 1.25× the input price; the row says how many of each
    expect(
      model.map((l) => [l.tokens_in, l.tokens_cache_write ?? 0, l.tokens_cache_read ?? 0, l.tokens_out, -l.amount]),
    ).toEqual([
      [812 + 300 + 20, 20, 300, 45, 812 * 100 + 300 * 10 + 20 * 125 + 45 * 500],
      [905, 0, 0, 12, 905 * 100 + 12 * 500],
    ]);
  });

  it('a 429 with retry-after, then success, completes', async () => {
    const { fake, runtime } = await open({
      handler: fakeReplies({ status: 429, retryAfter: 0, retryAfterMs: 5 }, { text: 'ok' }),
    });
    const { agent_id } = await runtime.create({ goal: 'x' });
    expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
    expect(fake.requests).toHaveLength(2);
  });

  it('a 400 fails the agent with the server message in status_message', async () => {
    const { runtime } = await open({
      handler: fakeReplies({ status: 400, message: 'messages.0.content: field required (test)' }),
    });
    const { agent_id } = await runtime.create({ goal: 'x' });
    const agent = await runtime.waitFor(agent_id);
    expect(agent.status).toBe('FAILED');
    expect(agent.status_message).toContain('messages.0.content: field required (test)');
    expect((await runtime.accounts.get('local')).reserved).toBe(0);
  });

  it('pause during a slow response aborts the request; resume later completes the agent', async () => {
    let slow = true;
    const { fake, runtime } = await open({
      handler: () =>
        slow
          ? { text: 'too late', delayMs: 60_000 }
          : { text: 'on time', usage: { input_tokens: 10, output_tokens: 2 } },
    });
    const { agent_id } = await runtime.create({ goal: 'x' });
    await eventually(() => fake.requests.length === 1, 5_000, 'the first request');
    expect((await runtime.pause(agent_id)).status).toBe('PAUSED');
    await eventually(() => fake.disconnects === 1, 5_000, 'the aborted request to close');
    await runtime.whenIdle();
    const paused = await runtime.get(agent_id);
    expect(paused.agent.status).toBe('PAUSED');
    expect(paused.agent.token_count).toBe(0);
    expect((await runtime.accounts.get('local')).reserved).toBe(0);

    slow = false;
    await runtime.resume(agent_id);
    const agent = await runtime.waitFor(agent_id);
    expect(agent.status).toBe('COMPLETED');
    expect(agent.token_count).toBe(12);
    expect((await runtime.get(agent_id)).messages.at(-1)!.text).toBe('on time');
  });
});
