/**
 * Traces that add up, from `agentry serve` (a child process) through a local OTLP/HTTP receiver: a 3-turn agent has
 * exactly one span with usage per model call (agentry's `chat` span; the Anthropic SDK's own instrumentation is off),
 * named by the upstream model with the public id beside it; the agent spans say their provider; the resource says
 * agentry's version; and a `traceparent` sent with the create request (HTTP header, or MCP `create_agent`'s
 * `_meta`) is the parent of the agent's spans, in its trace.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  startFakeAnthropic,
  type FakeAnthropic,
  type FakeMessagesRequest,
  type FakeReply,
} from 'agentry-runtime/testing';
import { cliEnv, eventually, startServe, tempDir, type ServeProcess } from '../http/helpers.js';
import { startReceiver, type ReceivedSpan } from './otlp-receiver.js';

const HTTP_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const HTTP_PARENT = '00f067aa0ba902b7';
const MCP_TRACE = '0af7651916cd43dd8448eb211c80319c';
const MCP_PARENT = 'b7ad6b7169203331';
const MCP_HEADER_TRACE = '5a0b7c3d9e1f2a4b6c8d0e2f4a6b8c0d';
const MCP_HEADER_PARENT = '1a2b3c4d5e6f7a8b';
const VERSION = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

/** Three turns: a plan, a plan update, the answer. */
function handler(body: FakeMessagesRequest): FakeReply {
  const turn = (body.messages.length - 1) / 2;
  if (turn === 0) {
    return {
      content: [
        { type: 'tool_use', name: 'update_plan', input: { steps: [{ title: 'look', status: 'in_progress' }] } },
      ],
      usage: { input_tokens: 100, output_tokens: 10 },
    };
  }
  if (turn === 1) {
    return {
      content: [{ type: 'tool_use', name: 'update_plan', input: { steps: [{ title: 'look', status: 'done' }] } }],
      usage: { input_tokens: 200, output_tokens: 20 },
    };
  }
  return { text: 'The answer.', usage: { input_tokens: 300, output_tokens: 30 } };
}

let fake: FakeAnthropic;
let receiver: Awaited<ReturnType<typeof startReceiver>>;
let tmp: ReturnType<typeof tempDir>;
let serve: ServeProcess;
let httpAgent: string;
let mcpAgent: string;
let mcpHeaderAgent: string;

async function waitUntilCompleted(id: string): Promise<void> {
  await eventually(async () => {
    const r = await fetch(`${serve.url}/api/agents/${id}`, { headers: { 'x-api-key': serve.apiKey! } });
    const { agent } = (await r.json()) as { agent: { status: string } };
    if (agent.status === 'FAILED') throw new Error(`agent ${id} failed`);
    return agent.status === 'COMPLETED' ? true : undefined;
  }, `agent ${id} to complete`);
}

beforeAll(async () => {
  fake = await startFakeAnthropic({ handler });
  receiver = await startReceiver();
  tmp = tempDir('agentry-trace-context-');
  serve = await startServe(
    ['--db', join(tmp.dir, 'agentry.db'), '--rate-limit', 'off'],
    cliEnv({
      ANTHROPIC_BASE_URL: fake.url,
      ANTHROPIC_API_KEY: 'test-key',
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    }),
  );
  try {
    const created = await fetch(`${serve.url}/api/agents`, {
      method: 'POST',
      headers: {
        'x-api-key': serve.apiKey!,
        'content-type': 'application/json',
        traceparent: `00-${HTTP_TRACE}-${HTTP_PARENT}-01`,
      },
      body: JSON.stringify({ goal: 'three turns over HTTP' }),
    });
    expect(created.status).toBe(201);
    httpAgent = ((await created.json()) as { agent_id: string }).agent_id;
    await waitUntilCompleted(httpAgent);

    /** MCP `create_agent` over the `/mcp` mount, with the trace context in `_meta` or in the request's header. */
    const createOverMcp = async (goal: string, trace: { meta?: string; header?: string }) => {
      const call = await fetch(`${serve.url}/mcp`, {
        method: 'POST',
        headers: {
          'x-api-key': serve.apiKey!,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          ...(trace.header ? { traceparent: trace.header } : {}),
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'tools/call',
          params: {
            name: 'create_agent',
            arguments: { goal },
            ...(trace.meta ? { _meta: { traceparent: trace.meta } } : {}),
          },
        }),
      });
      const reply = (await call.json()) as { result?: { structuredContent?: { agent_id: string } } };
      const id = reply.result!.structuredContent!.agent_id;
      await waitUntilCompleted(id);
      return id;
    };
    mcpAgent = await createOverMcp('three turns over MCP', { meta: `00-${MCP_TRACE}-${MCP_PARENT}-01` });
    mcpHeaderAgent = await createOverMcp('three turns over MCP, traced by the header', {
      header: `00-${MCP_HEADER_TRACE}-${MCP_HEADER_PARENT}-01`,
    });
  } finally {
    // SIGTERM: the SDK exports its last spans before the process exits.
    expect(await serve.stop()).toBe(0);
  }
}, 120_000);

afterAll(async () => {
  await new Promise((r) => receiver?.server.close(r));
  await fake?.close();
  tmp?.remove();
});

const ofAgent = (id: string): ReceivedSpan[] =>
  receiver.spans.filter((s) => s.attributes['gen_ai.conversation.id'] === id);

describe('agentry serve traces over OTLP', () => {
  it('has exactly one span with usage per model call, and none of the SDK', () => {
    expect(fake.requests).toHaveLength(9); // three agents of three turns
    const withUsage = receiver.spans.filter((s) => s.attributes['gen_ai.usage.input_tokens'] !== undefined);
    expect(withUsage).toHaveLength(fake.requests.length);
    expect(new Set(withUsage.map((s) => s.name))).toEqual(new Set(['chat claude-haiku-4-5']));
    expect(withUsage.map((s) => s.attributes['gen_ai.usage.input_tokens']).sort()).toEqual([
      100, 100, 100, 200, 200, 200, 300, 300, 300,
    ]);
    expect(receiver.spans.filter((s) => s.name.startsWith('anthropic.'))).toEqual([]);
  });

  it('names the upstream model, keeps the public id apart, says the provider and the version', () => {
    const spans = ofAgent(httpAgent);
    const named = (prefix: string) => spans.filter((s) => s.name.startsWith(prefix));
    expect(named('chat ')).toHaveLength(3);
    for (const s of [...named('chat '), ...named('invoke_agent '), ...named('create_agent ')]) {
      expect(s.attributes).toMatchObject({
        'gen_ai.request.model': 'claude-haiku-4-5',
        'agentry.model': 'svc-1-lite',
        'gen_ai.provider.name': 'anthropic',
      });
    }
    expect(named('invoke_agent ').length).toBeGreaterThan(0);
    expect(named('create_agent ')).toHaveLength(1);
    for (const s of spans) expect(s.resource['service.version']).toBe(VERSION);
  });

  it.each([
    ['the HTTP create request', () => httpAgent, HTTP_TRACE, HTTP_PARENT],
    ["MCP create_agent's _meta", () => mcpAgent, MCP_TRACE, MCP_PARENT],
    ['the header of the /mcp request (no _meta)', () => mcpHeaderAgent, MCP_HEADER_TRACE, MCP_HEADER_PARENT],
  ])("puts the agent's spans in the trace of the traceparent sent with %s", (_how, agent, traceId, parentId) => {
    const spans = ofAgent(agent());
    expect(spans.length).toBeGreaterThanOrEqual(5); // create, invoke, 3 chats, tool calls
    expect(new Set(spans.map((s) => s.traceId))).toEqual(new Set([traceId]));
    const create = spans.find((s) => s.name === 'create_agent agentry')!;
    expect(create.parentSpanId).toBe(parentId);
  });
});
