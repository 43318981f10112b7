/**
 * Extended thinking end to end: the real SDK against the
 * stand-in Messages API, which signs thinking blocks and refuses a request whose thinking was dropped or altered.
 * - an ultra agent with three tool turns under thinking completes: every later request carries each earlier turn's
 *   thinking (signature and redacted_thinking included) unchanged, `max_tokens` covers budget + answer, and the
 *   thinking tokens are billed as output;
 * - no thinking text reaches the transcript: `runtime.get`, `GET /api/agents/{id}`, the console API;
 * - a tight balance lowers `max_tokens` but keeps the budget below it (and room for the least budget); the exact
 *   count (`count_tokens`) is asked with the thinking config;
 * - a provider that drops the thinking (what the turn log did before) fails against the stand-in with its 400;
 * - on a model that binds thinking to its prefix (Opus 5.5), context elision leaves out the thinking it invalidated
 *   instead of sending it back to be refused.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { AgentRuntime, anthropicProvider, memoryStorage, type ModelProvider } from 'agentry-runtime';
import { createFetchHandler } from 'agentry-runtime/http';
import { startFakeAnthropic, type FakeAnthropic, type FakeMessagesRequest } from 'agentry-runtime/testing';
import {
  FINAL_TEXT,
  THOUGHT,
  TOOL_TURNS,
  TURN_USAGE,
  lookupTool,
  reportTool,
  thinkingHandler,
} from './thinking-fixtures.js';

let fake: FakeAnthropic | undefined;
let runtime: AgentRuntime | undefined;
afterEach(async () => {
  await runtime?.close();
  await fake?.close();
  runtime = undefined;
  fake = undefined;
});

const MAX_OUTPUT = 4096;
const BUDGET = 8000; // the default budget of svc-1-ultra

async function open(
  ultraUpstream: string,
  wrap: (model: ModelProvider) => ModelProvider = (m) => m,
  credits = 1_000,
  { tool, contextWindow }: { tool?: string; contextWindow?: number } = {},
) {
  fake = await startFakeAnthropic({ handler: thinkingHandler(tool === undefined ? {} : { tool }) });
  const model = anthropicProvider({
    baseURL: fake.url,
    apiKey: 'sk-test',
    maxRetries: 0,
    models: { 'svc-1-ultra': ultraUpstream },
    ...(contextWindow === undefined ? {} : { contextWindows: { 'svc-1-ultra': contextWindow } }),
  });
  runtime = await AgentRuntime.open({
    storage: memoryStorage(),
    model: wrap(model),
    tools: [lookupTool, reportTool],
    builtinTools: false,
    defaultAccount: { id: 'local', credits },
    limits: { maxOutputTokens: MAX_OUTPUT },
  });
  return { fake, runtime };
}

type Block = Record<string, unknown>;
const blocksOf = (message: FakeMessagesRequest['messages'][number]) => message.content as Block[];

describe('extended thinking for svc-1-ultra (stand-in Messages API)', () => {
  it('an ultra agent with 3 tool turns under thinking completes; each turn goes back with its thinking intact', async () => {
    const { fake, runtime } = await open('claude-opus-5-5');
    const { agent_id } = await runtime.create({ goal: 'Are items 0, 1 and 2 in stock?', model: 'svc-1-ultra' });
    const agent = await runtime.waitFor(agent_id);
    expect(agent.status, agent.status_message).toBe('COMPLETED');
    expect(fake.requests).toHaveLength(TOOL_TURNS + 1);

    for (const [i, request] of fake.requests.entries()) {
      // Opus 5.5 thinks adaptively (a budget would be refused); max_tokens covers thinking and answer.
      expect(request.thinking).toEqual({ type: 'adaptive' });
      expect(request.max_tokens).toBe(MAX_OUTPUT + BUDGET);
      expect(request.tool_choice).toBeUndefined();
      expect(request.temperature).toBeUndefined();
      // Every earlier assistant turn comes back starting with the thinking the stand-in signed for it.
      const assistants = request.messages.filter((m) => m.role === 'assistant');
      expect(assistants).toHaveLength(i);
      assistants.forEach((m, n) => {
        const blocks = blocksOf(m);
        expect(blocks[0]).toMatchObject({ type: 'thinking', thinking: expect.stringContaining(`${THOUGHT} ${n}:`) });
        expect(fake.thinking.verify(blocks[0]!)).toBe(true);
        if (n === 0) {
          expect(blocks[1]).toMatchObject({ type: 'redacted_thinking' });
          expect(fake.thinking.verify(blocks[1]!)).toBe(true);
        }
      });
    }

    // The turn log keeps the blocks whole, signatures included.
    const turns = await runtime.storage.listTurns(agent_id);
    const stored = turns.filter((t) => t.role === 'assistant').map((t) => JSON.parse(t.content) as Block[]);
    expect(stored).toHaveLength(TOOL_TURNS + 1);
    for (const blocks of stored) {
      expect(blocks[0]!.type).toBe('thinking');
      expect(typeof blocks[0]!.signature).toBe('string');
      expect(fake.thinking.verify(blocks[0]!)).toBe(true);
    }

    // Thinking tokens are output: each call is billed usage × the ultra prices (500 / 2,500 per million).
    const ledger = (await runtime.storage.listLedger('local')).filter((l) => l.kind === 'model');
    expect(ledger.map((l) => [l.tokens_in, l.tokens_out, -l.amount])).toEqual(
      Array.from({ length: TOOL_TURNS + 1 }, () => [
        TURN_USAGE.input_tokens,
        TURN_USAGE.output_tokens,
        TURN_USAGE.input_tokens * 500 + TURN_USAGE.output_tokens * 2500,
      ]),
    );
    expect((await runtime.accounts.get('local')).reserved).toBe(0);
  });

  it('no thinking text in the transcript: runtime.get, GET /api/agents/{id}, the console API', async () => {
    const { runtime } = await open('claude-opus-5-5');
    const { agent_id } = await runtime.create({ goal: 'Are items 0, 1 and 2 in stock?', model: 'svc-1-ultra' });
    expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');

    const { messages } = await runtime.get(agent_id);
    expect(messages.map((m) => [m.role, m.text])).toEqual([
      ['USER', 'Are items 0, 1 and 2 in stock?'],
      ...Array.from({ length: TOOL_TURNS }, (_, n) => ['ASSISTANT', `Looking up item ${n}.`]),
      ['ASSISTANT', FINAL_TEXT],
    ]);

    const key = await runtime.accounts.createApiKey('local');
    const handle = createFetchHandler(runtime, { console: { authenticate: () => 'local' } });
    const bodies: string[] = [];
    for (const [path, headers] of [
      [`/api/agents/${agent_id}`, { 'x-api-key': key.key }],
      ['/api/agents', { 'x-api-key': key.key }],
      [`/console/api/agents/${agent_id}`, {}],
      ['/console/api/agents', {}],
      ['/console/api/credits', {}],
    ] as const) {
      const response = await handle(new Request(`http://x${path}`, { headers }));
      expect(response.status, path).toBe(200);
      bodies.push(await response.text());
    }
    expect(bodies[0]).toContain(FINAL_TEXT);
    expect(bodies[2]).toContain(FINAL_TEXT);
    for (const body of bodies) {
      expect(body).not.toContain(THOUGHT);
      expect(body).not.toContain('signature');
      expect(body).not.toContain('redacted');
    }
  });

  it('a model that takes a budget gets budget_tokens below max_tokens', async () => {
    const { fake, runtime } = await open('claude-opus-4-5');
    const { agent_id } = await runtime.create({ goal: 'Are items 0, 1 and 2 in stock?', model: 'svc-1-ultra' });
    expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
    for (const request of fake.requests) {
      expect(request.thinking).toEqual({ type: 'enabled', budget_tokens: BUDGET });
      expect(request.max_tokens).toBe(MAX_OUTPUT + BUDGET);
    }
  });

  it('a tight balance lowers max_tokens, the budget stays below it; count_tokens carries the thinking config', async () => {
    // 4 credits pay ~1,600 output tokens at 2,500 credits per million: less than 4,096 + 8,000, more than the floor
    // (256 + the least budget, 1,024). A call costs 1.225 credits: the second one no longer fits.
    const { fake, runtime } = await open('claude-opus-4-5', undefined, 4);
    const { agent_id } = await runtime.create({ goal: 'Are items 0, 1 and 2 in stock?', model: 'svc-1-ultra' });
    const agent = await runtime.waitFor(agent_id);
    const first = fake.requests[0]!;
    expect(first.max_tokens).toBeLessThan(MAX_OUTPUT + BUDGET);
    expect(first.max_tokens).toBeGreaterThanOrEqual(256 + 1024);
    const budget = (first.thinking as { budget_tokens: number }).budget_tokens;
    expect(budget).toBeGreaterThanOrEqual(1024);
    expect(budget).toBeLessThan(first.max_tokens);
    // The balance runs out within the run: the last call the balance cannot pay is counted exactly, with thinking.
    expect(agent.status).toBe('OUT_OF_CREDITS');
    expect(fake.countRequests.length).toBeGreaterThan(0);
    for (const counted of fake.countRequests) expect(counted.thinking).toMatchObject({ type: 'enabled' });
    const account = await runtime.accounts.get('local');
    expect(account.balance).toBeGreaterThanOrEqual(0);
    expect(account.reserved).toBe(0);
  });

  it('svc-1-lite does not think: no thinking field, max_tokens is the answer alone', async () => {
    const { fake, runtime } = await open('claude-opus-5-5');
    const { agent_id } = await runtime.create({ goal: 'Are items 0, 1 and 2 in stock?', model: 'svc-1-lite' });
    expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
    for (const request of fake.requests) {
      expect(request.thinking).toBeUndefined();
      expect(request.max_tokens).toBe(MAX_OUTPUT);
      expect(JSON.stringify(request.messages)).not.toContain('"thinking"');
    }
  });

  it('the stand-in refuses a tool-use loop whose thinking was dropped (what the turn log did before)', async () => {
    const strip = (model: ModelProvider): ModelProvider => ({
      ...model,
      models: model.models,
      generate: (request, options) =>
        model.generate(
          {
            ...request,
            messages: request.messages.map((m) => ({
              ...m,
              content: m.content.filter((b) => b.type !== 'thinking' && b.type !== 'redacted_thinking'),
            })),
          },
          options,
        ),
    });
    // A model that takes a budget: the API then insists that the loop's last assistant turn starts with its thinking.
    const { fake, runtime } = await open('claude-opus-4-5', strip);
    const { agent_id } = await runtime.create({ goal: 'Are items 0, 1 and 2 in stock?', model: 'svc-1-ultra' });
    const agent = await runtime.waitFor(agent_id);
    expect(agent.status).toBe('FAILED');
    expect(agent.status_message).toContain('400');
    expect(agent.status_message).toContain('Expected `thinking` or `redacted_thinking`');
    expect(fake.requests).toHaveLength(2);
  });

  describe('context elision on a model that binds thinking to its prefix (claude-opus-5-5)', () => {
    // A window this small makes the loop elide the first report before the last call (the 4 latest messages stay).
    const elided = { tool: 'read_report', contextWindow: 1_000 };
    const goal = 'Read the reports of items 0, 1 and 2.';

    it('completes: the thinking after the elided result is left out, the thinking before it kept', async () => {
      const { fake, runtime } = await open('claude-opus-5-5', undefined, 1_000, elided);
      const { agent_id } = await runtime.create({ goal, model: 'svc-1-ultra' });
      const agent = await runtime.waitFor(agent_id);
      expect(agent.status, agent.status_message).toBe('COMPLETED');
      const last = fake.requests.at(-1)!;
      expect(JSON.stringify(last.messages[2])).toContain('[elided to save context');
      const thinkingAt = last.messages.map((m) => blocksOf(m).filter((b) => b.type === 'thinking').length);
      expect(thinkingAt).toEqual([0, 1, 0, 0, 0, 0, 0]);
      // The turn log keeps every block all the same.
      const turns = await runtime.storage.listTurns(agent_id);
      for (const t of turns.filter((t) => t.role === 'assistant')) expect(t.content).toContain('"signature"');
    });

    it('sending the invalidated thinking back (what the loop did before) is refused by the stand-in', async () => {
      const keepAll = (model: ModelProvider): ModelProvider => ({
        ...model,
        models: model.models,
        generate: (request, options) => {
          const { editedFrom: _ignored, ...rest } = request;
          return model.generate(rest, options);
        },
      });
      const { runtime } = await open('claude-opus-5-5', keepAll, 1_000, elided);
      const { agent_id } = await runtime.create({ goal, model: 'svc-1-ultra' });
      const agent = await runtime.waitFor(agent_id);
      expect(agent.status).toBe('FAILED');
      expect(agent.status_message).toContain('bound to a different conversation');
    });
  });
});
