import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { AgentryError } from '../../src/errors.js';
import {
  DEFAULT_ANTHROPIC_MODELS,
  anthropicProvider,
  hasAnthropicCredentials,
  resolveAnthropicConfig,
} from '../../src/models/anthropic.js';
import { ModelError } from '../../src/models/provider.js';
import type { ModelRequest } from '../../src/models/provider.js';
import { fakeReplies, startFakeAnthropic } from '../../src/testing/fake-anthropic.js';
import type { FakeAnthropic } from '../../src/testing/fake-anthropic.js';

const SEARCH_TOOL = {
  name: 'web_search',
  description: 'Search the web',
  input_schema: {
    type: 'object',
    properties: { query: { type: 'string' } },
    required: ['query'],
  },
};

function request(overrides: Partial<ModelRequest> = {}): ModelRequest {
  return {
    model: 'svc-1-lite',
    system: 'You are a test agent.',
    messages: [
      {
        role: 'user',
        content: [{ type: 'text', text: 'Find the capital of France.' }],
      },
    ],
    tools: [SEARCH_TOOL],
    maxTokens: 1024,
    agentId: 'agent-1',
    ...overrides,
  };
}

const signal = (): AbortSignal => new AbortController().signal;

let fake: FakeAnthropic;

beforeEach(async () => {
  // The provider reads these; keep the developer's real environment out of the tests.
  for (const name of ['ANTHROPIC_API_KEY', 'ANTHROPIC_BASE_URL', 'AGENTRY_MODEL_LITE', 'AGENTRY_MODEL_ULTRA']) {
    vi.stubEnv(name, '');
  }
  fake = await startFakeAnthropic();
});

afterEach(async () => {
  vi.unstubAllEnvs();
  await fake.close();
});

describe('anthropicProvider against a Messages API server', () => {
  it('maps a two-turn tool_use exchange both ways', async () => {
    fake.setHandler(
      fakeReplies(
        {
          content: [
            { type: 'text', text: 'Let me search.' },
            {
              type: 'tool_use',
              id: 'toolu_01',
              name: 'web_search',
              input: { query: 'capital of France' },
            },
          ],
          usage: { input_tokens: 50, output_tokens: 20 },
        },
        { text: 'Paris.', usage: { input_tokens: 90, output_tokens: 3 } },
      ),
    );
    const model = anthropicProvider({ baseURL: fake.url, apiKey: 'sk-test' });

    const first = await model.generate(request(), { signal: signal() });
    expect(first.stopReason).toBe('tool_use');
    expect(first.content).toEqual([
      { type: 'text', text: 'Let me search.' },
      {
        type: 'tool_use',
        id: 'toolu_01',
        name: 'web_search',
        input: { query: 'capital of France' },
      },
    ]);

    const second = await model.generate(
      request({
        messages: [
          ...request().messages,
          { role: 'assistant', content: first.content },
          {
            role: 'user',
            content: [
              {
                type: 'tool_result',
                tool_use_id: 'toolu_01',
                content: 'Paris is the capital.',
                is_error: false,
              },
            ],
          },
        ],
      }),
      { signal: signal() },
    );
    expect(second).toEqual({
      content: [{ type: 'text', text: 'Paris.' }],
      usage: {
        inputTokens: 90,
        outputTokens: 3,
        cacheReadInputTokens: 0,
        cacheCreationInputTokens: 0,
      },
      stopReason: 'end_turn',
      // the upstream model that answered (the fake answers as the model asked for), for traces
      model: DEFAULT_ANTHROPIC_MODELS['svc-1-lite'],
    });

    expect(fake.requests).toHaveLength(2);
    const [sent1, sent2] = fake.requests;
    expect(sent1).toMatchObject({
      model: DEFAULT_ANTHROPIC_MODELS['svc-1-lite'],
      max_tokens: 1024,
      // prompt caching (on by default): one breakpoint on the tools+system prefix, one on the conversation's tail
      system: [{ type: 'text', text: 'You are a test agent.', cache_control: { type: 'ephemeral' } }],
      tools: [SEARCH_TOOL],
    });
    expect(sent2?.messages).toEqual([
      {
        role: 'user',
        content: [{ type: 'text', text: 'Find the capital of France.' }],
      },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Let me search.' },
          {
            type: 'tool_use',
            id: 'toolu_01',
            name: 'web_search',
            input: { query: 'capital of France' },
          },
        ],
      },
      {
        role: 'user',
        content: [
          {
            type: 'tool_result',
            tool_use_id: 'toolu_01',
            content: 'Paris is the capital.',
            is_error: false,
            cache_control: { type: 'ephemeral' },
          },
        ],
      },
    ]);
  });

  it('omits an empty system prompt and an empty tool list', async () => {
    const model = anthropicProvider({ baseURL: fake.url, apiKey: 'sk-test' });
    await model.generate(request({ system: '', tools: [] }), {
      signal: signal(),
    });
    expect(fake.requests[0]).not.toHaveProperty('system');
    expect(fake.requests[0]).not.toHaveProperty('tools');
  });

  it('maps usage, including cache tokens, exactly', async () => {
    fake.setHandler(
      fakeReplies(
        {
          text: 'cached',
          usage: {
            input_tokens: 7,
            output_tokens: 11,
            cache_read_input_tokens: 1234,
            cache_creation_input_tokens: 56,
          },
        },
        {
          text: 'no cache fields',
          usage: {
            input_tokens: 3,
            output_tokens: 4,
            cache_read_input_tokens: null,
            cache_creation_input_tokens: null,
          },
        },
        { text: 'truncated', stopReason: 'max_tokens' },
      ),
    );
    const model = anthropicProvider({ baseURL: fake.url, apiKey: 'sk-test' });
    const cached = await model.generate(request(), { signal: signal() });
    expect(cached.usage).toEqual({
      inputTokens: 7,
      outputTokens: 11,
      cacheReadInputTokens: 1234,
      cacheCreationInputTokens: 56,
    });
    const nulls = await model.generate(request(), { signal: signal() });
    expect(nulls.usage).toEqual({ inputTokens: 3, outputTokens: 4 });
    const truncated = await model.generate(request(), { signal: signal() });
    expect(truncated.stopReason).toBe('max_tokens');
  });

  it('counts tokens through POST /v1/messages/count_tokens, with the same system, tools and messages', async () => {
    fake.setCountTokens((body) => 4_321 + body.messages.length);
    const model = anthropicProvider({ baseURL: fake.url, apiKey: 'sk-test' });
    expect(await model.countTokens!(request(), { signal: signal() })).toBe(4_322);
    expect(fake.requests).toHaveLength(0);
    expect(fake.countRequests).toHaveLength(1);
    const body = fake.countRequests[0]!;
    expect(body.model).toBe(DEFAULT_ANTHROPIC_MODELS['svc-1-lite']);
    expect(body.system).toBe('You are a test agent.');
    expect(body.tools).toEqual([SEARCH_TOOL]);
    expect(body.messages).toEqual([{ role: 'user', content: [{ type: 'text', text: 'Find the capital of France.' }] }]);
    expect(body).not.toHaveProperty('max_tokens');
  });

  it('counts tokens as the fake reports input usage by default, and maps count errors like generate', async () => {
    const model = anthropicProvider({ baseURL: fake.url, apiKey: 'sk-test', maxRetries: 0 });
    const counted = await model.countTokens!(request(), { signal: signal() });
    const generated = await model.generate(request(), { signal: signal() });
    expect(counted).toBe(generated.usage.inputTokens);
    fake.setCountTokens(() => ({ status: 400, message: 'bad count' }));
    const err = await model.countTokens!(request(), { signal: signal() }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ModelError);
    expect((err as ModelError).retryable).toBe(false);
    expect((err as ModelError).message).toContain('bad count');
  });

  it('retries a 429 as the server asks, then succeeds', async () => {
    fake.setHandler(
      fakeReplies({ status: 429, retryAfter: 0, retryAfterMs: 5, message: 'slow down' }, { text: 'after 429' }),
    );
    const model = anthropicProvider({ baseURL: fake.url, apiKey: 'sk-test' });
    const response = await model.generate(request(), { signal: signal() });
    expect(response.content).toEqual([{ type: 'text', text: 'after 429' }]);
    expect(fake.requests).toHaveLength(2);
  });

  it('retries a 529 overload, then succeeds', async () => {
    fake.setHandler(fakeReplies({ status: 529, retryAfterMs: 5 }, { text: 'after 529' }));
    const model = anthropicProvider({ baseURL: fake.url, apiKey: 'sk-test' });
    const response = await model.generate(request(), { signal: signal() });
    expect(response.content).toEqual([{ type: 'text', text: 'after 529' }]);
    expect(fake.requests).toHaveLength(2);
  });

  it('gives up after maxRetries with a retryable ModelError carrying retry-after', async () => {
    fake.setHandler(() => ({
      status: 429,
      retryAfter: 7,
      retryAfterMs: 1,
      message: 'rate limited for real',
    }));
    const model = anthropicProvider({
      baseURL: fake.url,
      apiKey: 'sk-test',
      maxRetries: 2,
    });
    const error = await model.generate(request(), { signal: signal() }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ModelError);
    expect(error).toMatchObject({
      retryable: true,
      status: 429,
      retryAfterMs: 1,
    });
    expect((error as ModelError).message).toContain('rate limited for real');
    expect(fake.requests).toHaveLength(3);
  });

  it('turns a 400 into a non-retryable ModelError with the server message, without retrying', async () => {
    fake.setHandler(() => ({
      status: 400,
      message: 'messages: roles must alternate',
    }));
    const model = anthropicProvider({ baseURL: fake.url, apiKey: 'sk-test' });
    const error = await model.generate(request(), { signal: signal() }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ModelError);
    expect(error).toMatchObject({
      retryable: false,
      status: 400,
      message: 'Anthropic API error 400: messages: roles must alternate',
    });
    expect(fake.requests).toHaveLength(1);
  });

  it('turns a 401 into a non-retryable ModelError that points at the key', async () => {
    fake.setHandler(() => ({ status: 401, message: 'invalid x-api-key' }));
    const model = anthropicProvider({ baseURL: fake.url, apiKey: 'sk-wrong' });
    await expect(model.generate(request(), { signal: signal() })).rejects.toMatchObject({
      name: 'ModelError',
      retryable: false,
      status: 401,
      message: expect.stringMatching(/401: invalid x-api-key.*ANTHROPIC_API_KEY/) as unknown,
    });
  });

  it('aborts a slow reply quickly, and the server sees the connection closed', async () => {
    fake.setHandler(() => ({ text: 'too late', delayMs: 30_000 }));
    const model = anthropicProvider({ baseURL: fake.url, apiKey: 'sk-test' });
    const controller = new AbortController();
    const started = Date.now();
    setTimeout(() => controller.abort(), 50);
    const error = await model.generate(request(), { signal: controller.signal }).catch((e: unknown) => e);
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(error).not.toBeInstanceOf(ModelError);
    expect(error).toMatchObject({ name: 'AbortError' });
    expect(error).toBe(controller.signal.reason);
    await vi.waitFor(() => expect(fake.disconnects).toBe(1));
    expect(fake.requests).toHaveLength(1);
  });

  it('rejects with an AbortError carrying a custom abort reason as cause', async () => {
    fake.setHandler(() => ({ text: 'too late', delayMs: 30_000 }));
    const model = anthropicProvider({ baseURL: fake.url, apiKey: 'sk-test' });
    const controller = new AbortController();
    const reason = new Error('agent paused');
    setTimeout(() => controller.abort(reason), 20);
    const error = await model.generate(request(), { signal: controller.signal }).catch((e: unknown) => e);
    expect(error).toMatchObject({ name: 'AbortError', cause: reason });
  });

  it('does not send a request when the signal is already aborted', async () => {
    const model = anthropicProvider({ baseURL: fake.url, apiKey: 'sk-test' });
    await expect(model.generate(request(), { signal: AbortSignal.abort() })).rejects.toMatchObject({
      name: 'AbortError',
    });
    expect(fake.requests).toHaveLength(0);
  });

  it('reaches the server through ANTHROPIC_BASE_URL alone, with a placeholder key', async () => {
    vi.stubEnv('ANTHROPIC_BASE_URL', fake.url);
    const keys: unknown[] = [];
    fake.setHandler((body, info) => {
      keys.push(info.apiKey);
      return { text: 'ok' };
    });
    const model = anthropicProvider();
    await model.generate(request(), { signal: signal() });
    expect(keys).toHaveLength(1);
    expect(keys[0]).toEqual(expect.any(String));
    expect(keys[0]).not.toBe('');
  });

  it('sends the configured key and the upstream id chosen by env and options', async () => {
    vi.stubEnv('ANTHROPIC_API_KEY', 'sk-from-env');
    vi.stubEnv('ANTHROPIC_BASE_URL', fake.url);
    vi.stubEnv('AGENTRY_MODEL_ULTRA', 'claude-opus-4-8');
    const headers: unknown[] = [];
    fake.setHandler((_body, info) => {
      headers.push(info.apiKey);
      return { text: 'ok' };
    });
    const model = anthropicProvider();
    await model.generate(request({ model: 'svc-1-ultra' }), {
      signal: signal(),
    });
    expect(headers).toEqual(['sk-from-env']);
    expect(fake.requests[0]?.model).toBe('claude-opus-4-8');

    const overridden = anthropicProvider({
      models: { 'svc-1-ultra': 'claude-opus-5' },
    });
    await overridden.generate(request({ model: 'svc-1-ultra' }), {
      signal: signal(),
    });
    expect(fake.requests[1]?.model).toBe('claude-opus-5');
  });
});

describe('anthropicProvider configuration', () => {
  it('uses a Haiku model for svc-1-lite and an Opus model for svc-1-ultra by default', () => {
    expect(DEFAULT_ANTHROPIC_MODELS['svc-1-lite']).toMatch(/^claude-haiku-/);
    expect(DEFAULT_ANTHROPIC_MODELS['svc-1-ultra']).toMatch(/^claude-opus-/);
    expect(resolveAnthropicConfig({})).toEqual({
      apiKey: undefined,
      baseURL: undefined,
      models: { ...DEFAULT_ANTHROPIC_MODELS },
    });
  });

  it('lets env override the defaults and options override env', () => {
    const env = {
      ANTHROPIC_API_KEY: 'sk-env',
      ANTHROPIC_BASE_URL: 'http://proxy.local',
      AGENTRY_MODEL_LITE: 'haiku-env',
      AGENTRY_MODEL_ULTRA: 'opus-env',
    };
    expect(resolveAnthropicConfig(env)).toEqual({
      apiKey: 'sk-env',
      baseURL: 'http://proxy.local',
      models: { 'svc-1-lite': 'haiku-env', 'svc-1-ultra': 'opus-env' },
    });
    expect(
      resolveAnthropicConfig(env, {
        apiKey: 'sk-opt',
        baseURL: 'http://other.local',
        models: {
          'svc-1-lite': 'haiku-opt',
          'svc-2-custom': 'claude-sonnet-4-6',
        },
      }),
    ).toEqual({
      apiKey: 'sk-opt',
      baseURL: 'http://other.local',
      models: {
        'svc-1-lite': 'haiku-opt',
        'svc-1-ultra': 'opus-env',
        'svc-2-custom': 'claude-sonnet-4-6',
      },
    });
  });

  it('treats empty variables as unset', () => {
    expect(
      resolveAnthropicConfig({
        AGENTRY_MODEL_LITE: '',
        ANTHROPIC_API_KEY: ' ',
      }),
    ).toMatchObject({
      apiKey: undefined,
      models: DEFAULT_ANTHROPIC_MODELS,
    });
    expect(hasAnthropicCredentials({ ANTHROPIC_API_KEY: '' })).toBe(false);
  });

  it('reports credentials when a key or a base URL is set', () => {
    expect(hasAnthropicCredentials({})).toBe(false);
    expect(hasAnthropicCredentials({ ANTHROPIC_API_KEY: 'sk' })).toBe(true);
    expect(hasAnthropicCredentials({ ANTHROPIC_BASE_URL: 'http://127.0.0.1:1' })).toBe(true);
  });

  it('lists the public models it serves, including added ones', () => {
    expect(anthropicProvider().models).toEqual(['svc-1-lite', 'svc-1-ultra']);
    expect(anthropicProvider({ models: { 'svc-2-custom': 'claude-sonnet-4-6' } }).models).toEqual([
      'svc-1-lite',
      'svc-1-ultra',
      'svc-2-custom',
    ]);
  });

  it('reports a 200k context window unless told otherwise', () => {
    const model = anthropicProvider({
      contextWindows: { 'svc-1-ultra': 1_000_000 },
    });
    expect(model.contextWindow?.('svc-1-lite')).toBe(200_000);
    expect(model.contextWindow?.('svc-1-ultra')).toBe(1_000_000);
  });

  it('constructs without credentials, but generate says how to set them', async () => {
    const model = anthropicProvider();
    const error = await model.generate(request(), { signal: signal() }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ModelError);
    expect(error).toMatchObject({ retryable: false });
    expect((error as Error).message).toContain('ANTHROPIC_API_KEY');
    expect((error as Error).message).toContain('ANTHROPIC_BASE_URL');
  });

  it('refuses an unknown public model without calling the server', async () => {
    const model = anthropicProvider({ baseURL: fake.url, apiKey: 'sk-test' });
    await expect(model.generate(request({ model: 'svc-9' }), { signal: signal() })).rejects.toMatchObject({
      name: 'ModelError',
      retryable: false,
    });
    expect(fake.requests).toHaveLength(0);
  });

  it.each([
    [{ maxRetries: -1 }, 'maxRetries'],
    [{ maxRetries: 1.5 }, 'maxRetries'],
    [{ baseURL: 'not a url' }, 'baseURL'],
    [{ timeoutMs: 0 }, 'timeoutMs'],
    [{ apiKey: '' }, 'apiKey'],
    [{ models: { 'svc-1-lite': '' } }, 'models.svc-1-lite'],
    [{ fetch: 'nope' }, 'fetch'],
    [{ maxRetry: 3 }, 'maxRetry'],
  ])('rejects bad options %j with invalid_request', (options, path) => {
    let caught: unknown;
    try {
      anthropicProvider(options as never);
    } catch (error) {
      caught = error;
    }
    expect(AgentryError.isInstance(caught)).toBe(true);
    expect(caught).toMatchObject({ code: 'invalid_request' });
    expect((caught as Error).message).toContain(path);
  });
});
