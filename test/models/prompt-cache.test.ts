/**
 * Claude as it is billed: upstream ids checked against GET /v1/models, prompt caching on by default with
 * cache-aware credits, against the project's stand-in Messages API with its prompt-cache simulation (breakpoints, the
 * 20-block lookback, minimum length, entries readable once their writer answers, TTL).
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import {
  AgentRuntime,
  anthropicProvider,
  defineTool,
  memoryStorage,
  type ModelProvider,
  type ModelRequest,
  type ModelUsage,
} from 'agentry-runtime';
import {
  FAKE_ANTHROPIC_MODEL_IDS,
  defaultFakeTokenCount,
  fakePromptCache,
  startFakeAnthropic,
  type FakeAnthropic,
  type FakeMessagesRequest,
  type FakePromptCache,
  type FakeReply,
} from 'agentry-runtime/testing';
import { DEFAULT_PRICES, modelCost, modelHold } from '../../src/core/credits.js';
import { minCacheableTokens } from '../../src/models/prompt-cache.js';

const ULTRA = DEFAULT_PRICES.models['svc-1-ultra']!;

/** 12 KB of text: what the agent reads each turn. */
const PAGE = Array.from({ length: 200 }, (_, i) => `Line ${i}: the committee reviewed the findings and noted the gaps.`)
  .join('\n')
  .slice(0, 12_000);

const readDocument = defineTool({
  name: 'read_document',
  description: 'Reads one part of the document under study',
  input: z.object({ part: z.number().int() }),
  price: 0,
  idempotent: true,
  run: ({ part }) => `Part ${part}\n${PAGE}`,
});

const lookup = defineTool({
  name: 'lookup',
  description: 'Looks an item up',
  input: z.object({ item: z.number().int() }),
  price: 0,
  idempotent: true,
  run: ({ item }) => `item ${item} is fine`,
});

const goalOf = (body: FakeMessagesRequest): string => {
  const first = body.messages[0]?.content;
  const block = Array.isArray(first) ? first[0] : undefined;
  return typeof first === 'string' ? first : String(block?.text ?? '');
};

/** Every `cache_control` anywhere in a request body. */
function cacheMarkers(body: unknown): number {
  let n = 0;
  JSON.stringify(body, (key, value: unknown) => {
    if (key === 'cache_control') n++;
    return value;
  });
  return n;
}

/** The provider, with every answered call's usage recorded by its agent's goal. */
function recording(provider: ModelProvider): {
  model: ModelProvider;
  calls: Array<{ goal: string; usage: ModelUsage }>;
} {
  const calls: Array<{ goal: string; usage: ModelUsage }> = [];
  return {
    calls,
    model: {
      ...provider,
      generate: async (request: ModelRequest, options) => {
        const response = await provider.generate(request, options);
        const first = request.messages[0]?.content[0];
        calls.push({ goal: first?.type === 'text' ? first.text : '', usage: response.usage });
        return response;
      },
    },
  };
}

const opened: Array<{ close(): Promise<void> }> = [];
beforeEach(() => {
  for (const name of ['ANTHROPIC_API_KEY', 'ANTHROPIC_BASE_URL', 'AGENTRY_MODEL_LITE', 'AGENTRY_MODEL_ULTRA']) {
    vi.stubEnv(name, '');
  }
  vi.stubEnv('AGENTRY_PROMPT_CACHE', '');
});
afterEach(async () => {
  vi.unstubAllEnvs();
  while (opened.length > 0) await opened.pop()!.close();
});

async function fakeWith(
  handler: (body: FakeMessagesRequest) => FakeReply,
  cache?: FakePromptCache,
): Promise<FakeAnthropic> {
  const fake = await startFakeAnthropic({ handler, ...(cache === undefined ? {} : { promptCache: cache }) });
  opened.push(fake);
  return fake;
}

/** The agent reads the document `turns - 1` times, then answers. */
const longRun =
  (turns: number) =>
  (body: FakeMessagesRequest): FakeReply => {
    const turn = Math.floor(body.messages.length / 2);
    return turn < turns - 1
      ? { content: [{ type: 'tool_use', name: 'read_document', input: { part: turn } }], usage: { output_tokens: 40 } }
      : { text: 'The findings are consistent.', usage: { output_tokens: 40 } };
  };

async function runLong(options: { promptCache: boolean; credits?: number }) {
  const cache = fakePromptCache({ minTokens: minCacheableTokens });
  const fake = await fakeWith(longRun(20), cache);
  const { model, calls } = recording(
    anthropicProvider({ baseURL: fake.url, apiKey: 'sk-test', maxRetries: 0, promptCache: options.promptCache }),
  );
  const runtime = await AgentRuntime.open({
    storage: memoryStorage(),
    model,
    tools: [readDocument],
    defaultAccount: { id: 'local', credits: options.credits ?? 1_000 },
  });
  opened.push(runtime);
  const { agent_id } = await runtime.create({ goal: 'Study the document part by part', model: 'svc-1-ultra' });
  const agent = await runtime.waitFor(agent_id);
  const account = (await runtime.storage.getAccount('local'))!;
  const ledger = await runtime.storage.listLedger('local');
  return { agent, account, ledger, calls, fake, cache };
}

describe('model ids checked against GET /v1/models', () => {
  it('an id the server does not list fails the agent within one call, naming the id and the variables', async () => {
    vi.stubEnv('AGENTRY_MODEL_ULTRA', 'claude-opus-9-retired');
    const fake = await fakeWith(() => ({ text: 'never sent' }));
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model: anthropicProvider({ baseURL: fake.url, apiKey: 'sk-test', maxRetries: 0 }),
    });
    opened.push(runtime);
    const { agent_id } = await runtime.create({ goal: 'Think hard', model: 'svc-1-ultra' });
    const agent = await runtime.waitFor(agent_id);
    expect(agent.status).toBe('FAILED');
    expect(agent.status_message).toContain('"claude-opus-9-retired"');
    expect(agent.status_message).toContain('AGENTRY_MODEL_ULTRA');
    expect(agent.status_message).toContain('AGENTRY_MODEL_LITE');
    expect(fake.requests).toHaveLength(0); // failed before its first Messages call
    // svc-1-lite's default id is listed: it runs, and the list was fetched once
    const lite = await runtime.waitFor((await runtime.create({ goal: 'Say ok', model: 'svc-1-lite' })).agent_id);
    expect(lite.status).toBe('COMPLETED');
    expect(fake.modelListRequests).toBe(1);
  });

  it('lists every page, keeps the defaults listed, and skips the check with one warning where the route is missing', async () => {
    // three ids a page: the defaults are on different pages
    const paged = await startFakeAnthropic({ maxModelPageSize: 3 });
    opened.push(paged);
    const provider = anthropicProvider({ baseURL: paged.url, apiKey: 'sk-test' });
    const resolved = await provider.resolveModels!();
    expect(resolved).toEqual([
      { model: 'svc-1-lite', upstream: 'claude-haiku-4-5', listed: true },
      { model: 'svc-1-ultra', upstream: 'claude-opus-5-5', listed: true },
    ]);
    expect(paged.modelListRequests).toBe(Math.ceil(FAKE_ANTHROPIC_MODEL_IDS.length / 3));

    const bare = await startFakeAnthropic({ models: null });
    opened.push(bare);
    const warnings: string[] = [];
    vi.stubEnv('AGENTRY_MODEL_LITE', 'a-local-model');
    const local = anthropicProvider({ baseURL: bare.url, apiKey: 'sk-test', warn: (m) => warnings.push(m) });
    const signal = new AbortController().signal;
    const request: ModelRequest = {
      model: 'svc-1-lite',
      system: '',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }],
      tools: [],
      maxTokens: 16,
      agentId: 'a',
    };
    await local.generate(request, { signal });
    await local.generate(request, { signal });
    expect(bare.requests).toHaveLength(2);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('GET /v1/models');
    expect((await local.resolveModels!())[0]).toEqual({
      model: 'svc-1-lite',
      upstream: 'a-local-model',
      listed: undefined,
    });
  });
});

describe('prompt caching', () => {
  it('AGENTRY_PROMPT_CACHE=off (or promptCache: false) sends no cache_control; on by default it sends both breakpoints', async () => {
    const bodies = async (options: { env?: string; option?: boolean }) => {
      if (options.env !== undefined) vi.stubEnv('AGENTRY_PROMPT_CACHE', options.env);
      const fake = await fakeWith(longRun(3));
      const runtime = await AgentRuntime.open({
        storage: memoryStorage(),
        model: anthropicProvider({
          baseURL: fake.url,
          apiKey: 'sk-test',
          ...(options.option === undefined ? {} : { promptCache: options.option }),
        }),
        tools: [readDocument],
      });
      opened.push(runtime);
      const agent = await runtime.waitFor((await runtime.create({ goal: 'Read' })).agent_id);
      expect(agent.status).toBe('COMPLETED');
      vi.stubEnv('AGENTRY_PROMPT_CACHE', '');
      return fake.requests;
    };
    const off = await bodies({ env: 'off' });
    expect(off).toHaveLength(3);
    expect(off.map(cacheMarkers)).toEqual([0, 0, 0]);
    expect((await bodies({ option: false })).map(cacheMarkers)).toEqual([0, 0, 0]);
    const on = await bodies({});
    expect(on.map(cacheMarkers)).toEqual([2, 2, 2]); // tools+system, and the conversation's last block
    const last = on[2]!.messages[on[2]!.messages.length - 1]!.content as Array<Record<string, unknown>>;
    expect(last[last.length - 1]!.cache_control).toEqual({ type: 'ephemeral' });
    expect(on[2]!.system).toEqual([expect.objectContaining({ cache_control: { type: 'ephemeral' } })]);
  });

  it('a 20-turn ultra run reading 12 KB a turn costs ≤ 0.35× the same calls uncached, exactly Σ usage × prices', async () => {
    const cached = await runLong({ promptCache: true });
    const plain = await runLong({ promptCache: false });
    expect(cached.agent.status).toBe('COMPLETED');
    expect(plain.agent.status).toBe('COMPLETED');
    expect(cached.calls).toHaveLength(20);
    expect(plain.calls).toHaveLength(20);
    const spent = (r: typeof cached) => -r.ledger.filter((l) => l.amount < 0).reduce((sum, l) => sum + l.amount, 0);
    // the charge is exactly the usage at the input, cache-write, cache-read and output prices
    expect(spent(cached)).toBe(cached.calls.reduce((sum, c) => sum + modelCost(ULTRA, c.usage), 0));
    expect(spent(plain)).toBe(plain.calls.reduce((sum, c) => sum + modelCost(ULTRA, c.usage), 0));
    expect(cached.calls.some((c) => (c.usage.cacheReadInputTokens ?? 0) > 0)).toBe(true);
    expect(plain.calls.every((c) => !c.usage.cacheReadInputTokens && !c.usage.cacheCreationInputTokens)).toBe(true);
    // the same prompts: every call's total input is the same with and without caching
    const inputOf = (u: ModelUsage) =>
      u.inputTokens + (u.cacheReadInputTokens ?? 0) + (u.cacheCreationInputTokens ?? 0);
    expect(cached.calls.map((c) => inputOf(c.usage))).toEqual(plain.calls.map((c) => inputOf(c.usage)));
    const ratio = spent(cached) / spent(plain);
    expect(ratio).toBeLessThanOrEqual(0.35);
    // the ledger line shows the three kinds of input: all of them in tokens_in, and which were cache writes and reads
    const modelRows = cached.ledger.filter((l) => l.kind === 'model');
    expect(modelRows.map((l) => [l.tokens_in, l.tokens_cache_write ?? 0, l.tokens_cache_read ?? 0])).toEqual(
      cached.calls.map((c) => [
        inputOf(c.usage),
        c.usage.cacheCreationInputTokens ?? 0,
        c.usage.cacheReadInputTokens ?? 0,
      ]),
    );
    const account = cached.account;
    expect(cached.ledger.reduce((sum, l) => sum + l.amount, 0)).toBe(account.balance);
  }, 120_000);

  it('1,000 siblings: input cost ≤ 0.40× uncached, and ≤ 5 cache writes of their shared prefix', async () => {
    const N = 1_000;
    const cache = fakePromptCache({ minTokens: minCacheableTokens });
    const fake = await fakeWith((body) => {
      const goal = goalOf(body);
      const turn = Math.floor(body.messages.length / 2);
      if (goal === 'fan out') {
        return turn === 0
          ? {
              content: [
                {
                  type: 'tool_use',
                  name: 'spawn_sub_agents',
                  input: { tasks: Array.from({ length: N }, (_, i) => ({ goal: `child ${i}`, model: 'svc-1-ultra' })) },
                },
              ],
            }
          : { text: 'all done' };
      }
      const i = Number(goal.slice(6));
      return turn === 0
        ? // a call takes a while, as a real one does: siblings that start meanwhile find no entry yet
          {
            content: [{ type: 'tool_use', name: 'lookup', input: { item: i } }],
            usage: { output_tokens: 10 },
            delayMs: 250,
          }
        : { text: `answer ${i}`, usage: { output_tokens: 5 } };
    }, cache);
    const { model, calls } = recording(anthropicProvider({ baseURL: fake.url, apiKey: 'sk-test', maxRetries: 0 }));
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model,
      tools: [lookup],
      defaultAccount: { id: 'local', credits: 100_000 },
    });
    opened.push(runtime);
    // The children run on ultra (Claude Opus): the default tools and instructions (~3,000 tokens) are above its
    // minimum cacheable length. The parent runs on lite, whose prefix (another model) they cannot read: the children's
    // first calls race to write their own.
    const parent = await runtime.waitFor((await runtime.create({ goal: 'fan out', model: 'svc-1-lite' })).agent_id);
    expect(parent.status).toBe('COMPLETED');
    const children = calls.filter((c) => c.goal.startsWith('child '));
    expect(children).toHaveLength(2 * N);
    const input = (u: ModelUsage) => u.inputTokens + (u.cacheReadInputTokens ?? 0) + (u.cacheCreationInputTokens ?? 0);
    const uncachedCost = children.reduce((sum, c) => sum + input(c.usage) * ULTRA.inputPerMillion, 0);
    const cachedCost = children.reduce((sum, c) => sum + modelCost(ULTRA, { ...c.usage, outputTokens: 0 }), 0);
    expect(cachedCost / uncachedCost).toBeLessThanOrEqual(0.4);
    // the children's shared tools+system prefix (it fills the minimum: the built-in tools are several thousand tokens)
    const childBody = fake.requests.find((b) => goalOf(b) === 'child 0')!;
    const prefixTokens = cache.lookup({ ...childBody, messages: [] }).usage;
    expect(prefixTokens.cache_read_input_tokens + prefixTokens.cache_creation_input_tokens).toBeGreaterThanOrEqual(
      minCacheableTokens('claude-opus-5-5'),
    );
    const prefixWrites = cache.writes.filter((w) => w.region === 'prefix');
    expect(prefixWrites.length).toBeGreaterThanOrEqual(1);
    expect(prefixWrites.length).toBeLessThanOrEqual(5);
  }, 300_000);

  it('a tight budget with caching on is never overshot and stops only when the next call cannot be paid', async () => {
    // Enough for a few turns of the long run, not for twenty.
    const { agent, account, ledger, calls, fake } = await runLong({ promptCache: true, credits: 20 });
    expect(agent.status).toBe('OUT_OF_CREDITS');
    expect(calls.length).toBeGreaterThan(1);
    expect(calls.length).toBeLessThan(20);
    expect(account.balance).toBeGreaterThanOrEqual(0);
    expect(account.reserved).toBe(0);
    expect(ledger.reduce((sum, l) => sum + l.amount, 0)).toBe(account.balance);
    // what was left cannot pay the call it stopped before: its exact input at the plain input price (sent without
    // cache_control) and the smallest answer (256 tokens)
    const counted = fake.countRequests[fake.countRequests.length - 1];
    expect(counted).toBeDefined();
    expect(account.balance).toBeLessThan(modelHold(ULTRA, defaultFakeTokenCount(counted!), 256, false));
    // it kept caching (with shorter answers) while it could hold the write price, then sent a call without
    // cache_control rather than stop while the plain price could still be paid
    expect(cacheMarkers(fake.requests[0])).toBe(2);
    expect(fake.requests.some((r) => cacheMarkers(r) === 0)).toBe(true);
  }, 120_000);
});
