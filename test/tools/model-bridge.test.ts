/**
 * The model bridge (the Messages API server on a unix socket that Claude Code, inside its sandbox, uses as its model):
 * the translation of a Messages request into one runtime turn, the wire format checked by the real Anthropic SDK
 * client (streamed and not), the errors Claude Code must understand (auth, not found, bad request, out of credits, rate
 * limit), token counting, and that a client hanging up stops the model call.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import { Agent } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AgentryError } from '../../src/errors.js';
import { ModelError, type ModelResponse } from '../../src/models/provider.js';
import {
  startModelBridge,
  toModelTurn,
  type BridgeTurn,
  type ModelBridge,
} from '../../src/tools/builtin/code-agent/claude-sdk/model-bridge.js';
import { eventually } from '../support/runtime.js';

type MessagesRequest = Parameters<typeof toModelTurn>[0];

const API_KEY = 'sk-bridge-test';

describe('toModelTurn', () => {
  const turn = (body: Partial<MessagesRequest>, cap = 8192) =>
    toModelTurn({ max_tokens: 1000, messages: [], ...body } as MessagesRequest, cap);

  it('drops the billing header block of the system and joins the rest with blank lines', () => {
    const t = turn({
      system: [
        { type: 'text', text: 'x-anthropic-billing-header: cc_version=2.0.1; cc_entrypoint=sdk-ts' },
        { type: 'text', text: 'You are Claude Code.' },
        { type: 'text', text: 'Work in /workspace.' },
      ],
    });
    expect(t.system).toBe('You are Claude Code.\n\nWork in /workspace.');
    expect(turn({ system: 'A plain system prompt.' }).system).toBe('A plain system prompt.');
  });

  it('turns a system message into user text, merged with the user message next to it', () => {
    const t = turn({
      messages: [
        { role: 'user', content: 'Fix the bug.' },
        { role: 'system', content: 'The user changed a file.' },
        { role: 'assistant', content: [{ type: 'text', text: 'On it.' }] },
      ],
    });
    expect(t.messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Fix the bug.' },
          { type: 'text', text: '<system>\nThe user changed a file.\n</system>' },
        ],
      },
      { role: 'assistant', content: [{ type: 'text', text: 'On it.' }] },
    ]);
  });

  it('keeps thinking as it came, marks an image as omitted, and keeps tool_use and tool_result (joined text, is_error)', () => {
    const t = turn({
      messages: [
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'hmm', signature: 'sig' },
            { type: 'redacted_thinking', data: 'xxx' },
            { type: 'text', text: 'Reading it.' },
            { type: 'tool_use', id: 'toolu_1', name: 'Read', input: { file_path: '/a.ts' } },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Here is a screenshot.' },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } },
            {
              type: 'tool_result',
              tool_use_id: 'toolu_1',
              content: [
                { type: 'text', text: 'line one' },
                { type: 'text', text: 'line two' },
              ],
              is_error: true,
            },
          ],
        },
      ],
    });
    expect(t.messages).toHaveLength(2);
    // The runtime's model wrote the thinking (the bridge handed it to Claude Code): it goes back unchanged.
    expect(t.messages[0]).toEqual({
      role: 'assistant',
      content: [
        { type: 'thinking', thinking: 'hmm', signature: 'sig' },
        { type: 'redacted_thinking', data: 'xxx' },
        { type: 'text', text: 'Reading it.' },
        { type: 'tool_use', id: 'toolu_1', name: 'Read', input: { file_path: '/a.ts' } },
      ],
    });
    const user = t.messages[1]!;
    expect(user.role).toBe('user');
    // The tool result comes first, as the API wants, whatever order Claude Code sent.
    expect(user.content[0]).toEqual({
      type: 'tool_result',
      tool_use_id: 'toolu_1',
      content: 'line one\nline two',
      is_error: true,
    });
    expect(user.content[1]).toEqual({ type: 'text', text: 'Here is a screenshot.' });
    expect(user.content[2]).toMatchObject({ type: 'text' });
    expect((user.content[2] as { text: string }).text).toMatch(/image omitted/);
  });

  it('merges consecutive messages of one role, puts tool results first, and drops empty messages', () => {
    const t = turn({
      messages: [
        { role: 'user', content: 'First.' },
        { role: 'assistant', content: '' },
        // A thinking block without a signature cannot be one the model wrote: dropped, which leaves nothing.
        { role: 'assistant', content: [{ type: 'thinking', thinking: 'only thinking' }] },
        { role: 'user', content: [{ type: 'text', text: 'Second.' }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_9', content: 'ok' }] },
        { role: 'assistant', content: 'Done.' },
      ],
    });
    expect(t.messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_9', content: 'ok' },
          { type: 'text', text: 'First.' },
          { type: 'text', text: 'Second.' },
        ],
      },
      { role: 'assistant', content: [{ type: 'text', text: 'Done.' }] },
    ]);
  });

  it('keeps only custom tools with a schema, and caps max tokens', () => {
    const schema = { type: 'object', properties: { command: { type: 'string' } } };
    const t = turn(
      {
        max_tokens: 32000,
        tools: [
          { name: 'Bash', description: 'Runs a command.', input_schema: schema },
          { name: 'Custom', type: 'custom', input_schema: schema },
          { name: 'web_search', type: 'web_search_20250305', max_uses: 5 },
          { name: 'NoSchema', description: 'no schema' },
        ],
      },
      4096,
    );
    expect(t.tools).toEqual([
      { name: 'Bash', description: 'Runs a command.', input_schema: schema },
      { name: 'Custom', description: '', input_schema: schema },
    ]);
    expect(t.maxTokens).toBe(4096);
    expect(turn({ max_tokens: 100 }, 4096).maxTokens).toBe(100);
  });
});

describe('startModelBridge over its socket', () => {
  let dir: string;
  let socketPath: string;
  let bridge: ModelBridge | undefined;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'agentry-bridge-'));
    socketPath = join(dir, 'model.sock');
  });

  afterEach(async () => {
    await bridge?.close();
    bridge = undefined;
    await rm(dir, { recursive: true, force: true });
  });

  const answer: ModelResponse = {
    content: [
      { type: 'text', text: 'I will list the files.' },
      { type: 'tool_use', id: 'toolu_01', name: 'Bash', input: { command: 'ls -la', nested: { n: [1, 2] } } },
    ],
    usage: { inputTokens: 120, outputTokens: 34, cacheReadInputTokens: 7 },
    stopReason: 'tool_use',
  };

  async function start(generate: (turn: BridgeTurn, signal: AbortSignal) => Promise<ModelResponse>) {
    bridge = await startModelBridge({ socketPath, apiKey: API_KEY, generate, maxOutputTokens: 2048 });
    return bridge;
  }

  function client(apiKey = API_KEY) {
    return new Anthropic({
      apiKey,
      baseURL: 'http://model-bridge.invalid',
      maxRetries: 0,
      fetchOptions: { dispatcher: new Agent({ connect: { socketPath } }) },
    });
  }

  /** One raw HTTP exchange over the socket. */
  function raw(
    method: string,
    path: string,
    body?: string,
    headers: Record<string, string> = { 'x-api-key': API_KEY },
  ): Promise<{ status: number; headers: Record<string, unknown>; json: { [k: string]: any } }> {
    return new Promise((resolve, reject) => {
      const req = request(
        { socketPath, method, path, headers: { 'content-type': 'application/json', ...headers } },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => (text += chunk));
          res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, json: JSON.parse(text) }));
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  }

  const request1 = {
    model: 'agentry-bridge-model',
    max_tokens: 10_000,
    system: [
      { type: 'text' as const, text: 'x-anthropic-billing-header: cc_version=2' },
      { type: 'text' as const, text: 'You are Claude Code.' },
    ],
    messages: [{ role: 'user' as const, content: 'List the files.' }],
    tools: [{ name: 'Bash', description: 'Runs a command.', input_schema: { type: 'object' as const } }],
  };

  function expectAnswer(message: Anthropic.Message) {
    expect(message.content).toEqual([
      expect.objectContaining({ type: 'text', text: 'I will list the files.' }),
      expect.objectContaining({
        type: 'tool_use',
        id: 'toolu_01',
        name: 'Bash',
        input: { command: 'ls -la', nested: { n: [1, 2] } },
      }),
    ]);
    expect(message.stop_reason).toBe('tool_use');
    expect(message.model).toBe('agentry-bridge-model');
    expect(message.usage).toMatchObject({ input_tokens: 120, output_tokens: 34, cache_read_input_tokens: 7 });
  }

  it('answers the real SDK client, streamed and not, with the turn generate returned', async () => {
    const turns: BridgeTurn[] = [];
    await start(async (turn) => {
      turns.push(turn);
      return answer;
    });
    const anthropic = client();

    const streamed = await anthropic.messages.stream(request1).finalMessage();
    expectAnswer(streamed);

    const plain = await anthropic.messages.create({ ...request1, stream: false });
    expectAnswer(plain);

    expect(turns).toHaveLength(2);
    expect(turns[0]).toEqual({
      system: 'You are Claude Code.',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'List the files.' }] }],
      tools: [{ name: 'Bash', description: 'Runs a command.', input_schema: { type: 'object' } }],
      maxTokens: 2048,
    });
    expect(bridge!.stats()).toEqual({ turns: 2, firstError: undefined });
  });

  it("hands the model's thinking to Claude Code intact, streamed and not (it must come back within the loop)", async () => {
    const thinking: ModelResponse = {
      ...answer,
      content: [
        { type: 'thinking', thinking: 'First list the files.', signature: 'c2lnbmF0dXJl+/=' },
        { type: 'redacted_thinking', data: 'ZW5jcnlwdGVk' },
        ...answer.content,
      ],
    };
    await start(async () => thinking);
    const anthropic = client();
    for (const message of [
      await anthropic.messages.stream(request1).finalMessage(),
      await anthropic.messages.create({ ...request1, stream: false }),
    ]) {
      expect(message.content.slice(0, 2)).toEqual([
        { type: 'thinking', thinking: 'First list the files.', signature: 'c2lnbmF0dXJl+/=' },
        { type: 'redacted_thinking', data: 'ZW5jcnlwdGVk' },
      ]);
      expect(message.content.slice(2).map((b) => b.type)).toEqual(['text', 'tool_use']);
    }
  });

  it('refuses a wrong key (401), other methods and paths (404), and a body that is not a request (400)', async () => {
    let calls = 0;
    await start(async () => {
      calls += 1;
      return answer;
    });
    const body = JSON.stringify(request1);

    const badKey = await raw('POST', '/v1/messages', body, { 'x-api-key': 'sk-wrong' });
    expect(badKey.status).toBe(401);
    expect(badKey.json).toMatchObject({ type: 'error', error: { type: 'authentication_error' } });

    const sdkBadKey = await client('sk-wrong')
      .messages.create({ ...request1, stream: false })
      .catch((e: unknown) => e);
    expect(sdkBadKey).toBeInstanceOf(Anthropic.AuthenticationError);

    const get = await raw('GET', '/v1/messages');
    expect(get.status).toBe(404);
    expect(get.json).toMatchObject({ type: 'error', error: { type: 'not_found_error' } });
    const otherPath = await raw('POST', '/v1/complete', body);
    expect(otherPath.status).toBe(404);

    const notJson = await raw('POST', '/v1/messages', 'not json');
    expect(notJson.status).toBe(400);
    expect(notJson.json).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
    const noMessages = await raw('POST', '/v1/messages', JSON.stringify({ model: 'm', max_tokens: 10 }));
    expect(noMessages.status).toBe(400);
    expect(noMessages.json.error.type).toBe('invalid_request_error');
    expect(noMessages.json.error.message).toMatch(/not a Messages API request/);

    expect(calls).toBe(0);
    expect(bridge!.stats().turns).toBe(0);
  });

  it('answers an out-of-credits refusal as a 400 with its message, and keeps it as the first error', async () => {
    const refusal = new AgentryError('insufficient_credits', 'out of credits: the agent has 3 left, the turn needs 40');
    await start(async () => {
      throw refusal;
    });
    const res = await raw('POST', '/v1/messages', JSON.stringify({ ...request1, stream: true }));
    expect(res.status).toBe(400);
    expect(res.json.error.type).toBe('invalid_request_error');
    expect(res.json.error.message).toContain('out of credits: the agent has 3 left');

    const sdkError = await client()
      .messages.create({ ...request1, stream: false })
      .catch((e: unknown) => e);
    expect(sdkError).toBeInstanceOf(Anthropic.BadRequestError);
    expect((sdkError as Error).message).toContain('out of credits');

    expect(bridge!.stats()).toEqual({ turns: 0, firstError: refusal });
  });

  it("answers a provider's rate limit as a 429 with retry-after in seconds", async () => {
    await start(async () => {
      throw new ModelError('slow down', { retryable: true, retryAfterMs: 2000 });
    });
    const res = await raw('POST', '/v1/messages', JSON.stringify(request1));
    expect(res.status).toBe(429);
    expect(res.headers['retry-after']).toBe('2');
    expect(res.json).toEqual({ type: 'error', error: { type: 'rate_limit_error', message: 'slow down' } });

    const sdkError = await client()
      .messages.create({ ...request1, stream: false })
      .catch((e: unknown) => e);
    expect(sdkError).toBeInstanceOf(Anthropic.RateLimitError);
  });

  it('counts tokens without calling generate', async () => {
    let calls = 0;
    await start(async () => {
      calls += 1;
      return answer;
    });
    const res = await raw(
      'POST',
      '/v1/messages/count_tokens',
      JSON.stringify({ model: 'm', messages: request1.messages, system: 'You are Claude Code.' }),
    );
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ input_tokens: expect.any(Number) });
    expect(res.json.input_tokens).toBeGreaterThan(0);

    const counted = await client().messages.countTokens({ model: 'm', messages: request1.messages });
    expect(counted.input_tokens).toBeGreaterThan(0);
    expect(calls).toBe(0);
    expect(bridge!.stats().turns).toBe(0);
  });

  it('aborts the model call when the client hangs up', async () => {
    let seen: AbortSignal | undefined;
    await start(
      (_turn, signal) =>
        new Promise<ModelResponse>((_resolve, reject) => {
          seen = signal;
          signal.addEventListener('abort', () => reject(new ModelError('aborted', { retryable: false })));
        }),
    );
    const req = request({
      socketPath,
      method: 'POST',
      path: '/v1/messages',
      headers: { 'x-api-key': API_KEY, 'content-type': 'application/json' },
    });
    req.on('error', () => {}); // the hang-up below is the point
    req.end(JSON.stringify({ ...request1, stream: true }));

    await eventually(() => seen !== undefined, 5_000, 'generate to be called');
    expect(seen!.aborted).toBe(false);
    req.destroy();
    await eventually(() => seen!.aborted, 5_000, 'the signal given to generate to abort');
    expect(bridge!.stats().turns).toBe(0);
  });

  it('counts answered turns, and close() removes the socket file', async () => {
    await start(async () => answer);
    expect(existsSync(socketPath)).toBe(true);
    const anthropic = client();
    for (let i = 0; i < 3; i++) await anthropic.messages.create({ ...request1, stream: false });
    expect(bridge!.stats().turns).toBe(3);

    await bridge!.close();
    bridge = undefined;
    expect(existsSync(socketPath)).toBe(false);
  });
});
