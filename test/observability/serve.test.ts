/**
 * `agentry serve` in operation, as a child process against a fake Messages API: traces exported over OTLP/HTTP to a
 * local receiver (http/protobuf and http/json), Prometheus metrics on a port of their own that match the runtime's
 * state, JSON log lines with requests, status changes and errors and without any secret, and the health routes.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  startFakeAnthropic,
  type FakeAnthropic,
  type FakeMessagesRequest,
  type FakeReply,
  type FakeRequestInfo,
} from 'agentry-runtime/testing';
import { cliEnv, startServe, tempDir, type ServeProcess } from '../http/helpers.js';
import { startReceiver } from './otlp-receiver.js';

const PROVIDER_KEY = 'sk-ant-provider-secret-0123456789';
const SMTP_PASSWORD = 'smtp-Pa55word-secret';

function goalOf(body: FakeMessagesRequest): string {
  const first = body.messages[0]?.content;
  if (typeof first === 'string') return first;
  return (first ?? []).map((b) => (typeof b.text === 'string' ? b.text : '')).join(' ');
}

/**
 * "research" plans and spawns two children, then answers; a child answers at once; "refused" is refused by the
 * provider with a message that echoes the key it was sent (as some proxies do): the agent fails, and the key must
 * still not reach the log.
 */
function handler(body: FakeMessagesRequest, info: FakeRequestInfo): FakeReply {
  const goal = goalOf(body);
  if (goal === 'refused') return { status: 400, message: `key ${info.apiKey} may not use this model` };
  if (goal === 'research') {
    if (body.messages.length === 1) {
      return {
        content: [
          { type: 'tool_use', name: 'update_plan', input: { steps: [{ title: 'spawn', status: 'in_progress' }] } },
          { type: 'tool_use', name: 'spawn_sub_agents', input: { tasks: [{ goal: 'child 0' }, { goal: 'child 1' }] } },
        ],
        usage: { input_tokens: 300, output_tokens: 40 },
      };
    }
    return { text: 'All done.', usage: { input_tokens: 500, output_tokens: 8 } };
  }
  return { text: `answer of ${goal}`, usage: { input_tokens: 50, output_tokens: 5 } };
}

async function api(serve: ServeProcess, method: string, path: string, body?: unknown, key = serve.apiKey!) {
  const r = await fetch(`${serve.url}${path}`, {
    method,
    headers: { 'x-api-key': key, ...(body ? { 'content-type': 'application/json' } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { status: r.status, json: (await r.json()) as Record<string, unknown> };
}

async function waitForStatus(serve: ServeProcess, id: string, statuses: string[], timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { json } = await api(serve, 'GET', `/api/agents/${id}`);
    const agent = json.agent as { status: string };
    if (statuses.includes(agent.status)) return agent;
    if (Date.now() > deadline) throw new Error(`agent ${id} is ${agent.status}, not ${statuses.join('/')}`);
    await new Promise((r) => setImmediate(r));
  }
}

/** Runs the scenario against one serve process and returns what it left behind. */
async function runScenario(protocol: 'http/protobuf' | 'http/json') {
  const receiver = await startReceiver();
  const tmp = tempDir('agentry-ops-');
  const db = join(tmp.dir, 'agentry.db');
  const env = cliEnv({
    ANTHROPIC_BASE_URL: fake.url,
    ANTHROPIC_API_KEY: PROVIDER_KEY,
    SMTP_URL: `smtp://mailer:${SMTP_PASSWORD}@127.0.0.1:2525`,
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
    OTEL_SERVICE_NAME: 'agentry-under-test',
  });
  const serve = await startServe(
    ['--db', db, '--metrics-port', '0', '--log-level', 'info', '--rate-limit', 'off'],
    env,
  );
  try {
    const metricsUrl = /^agentry metrics on (http:\/\/\S+)/m.exec(serve.stderr())![1]!;
    const health = await fetch(`${serve.url}/healthz`);
    const ready = await fetch(`${serve.url}/readyz`);
    const research = await api(serve, 'POST', '/api/agents', { goal: 'research' });
    expect(research.status).toBe(201);
    const rootId = research.json.agent_id as string;
    const refused = await api(serve, 'POST', '/api/agents', { goal: 'refused' });
    expect((await waitForStatus(serve, rootId, ['COMPLETED'])).status).toBe('COMPLETED');
    expect((await waitForStatus(serve, refused.json.agent_id as string, ['FAILED'])).status).toBe('FAILED');
    // An unexpected failure: another connection holds the database's write lock, so a create fails with a 500.
    const lock = new Database(db);
    lock.exec('BEGIN EXCLUSIVE');
    const broken = await api(serve, 'POST', '/api/agents', { goal: 'never' });
    lock.exec('ROLLBACK');
    lock.close();
    expect(broken.status).toBe(500);
    const wrongKey = await api(serve, 'GET', '/api/agents', undefined, 'agk_not-a-real-key-123456');
    expect(wrongKey.status).toBe(401);

    const metricsResponse = await fetch(metricsUrl);
    const metricsText = await metricsResponse.text();
    const notMetrics = await fetch(metricsUrl.replace('/metrics', '/api/agents'), {
      headers: { 'x-api-key': serve.apiKey! },
    });
    const agents = (await api(serve, 'GET', '/api/agents?limit=100')).json.data as Array<{ status: string }>;
    expect(await serve.stop()).toBe(0); // SIGTERM: the SDK flushes its last spans before the exit
    return {
      serve,
      receiver,
      rootId,
      health,
      ready,
      metricsResponse,
      metricsText,
      notMetrics,
      agents,
      cleanup: async () => {
        await new Promise((r) => receiver.server.close(r));
        tmp.remove();
      },
    };
  } catch (error) {
    await serve.stop('SIGKILL');
    throw error;
  }
}

let fake: FakeAnthropic;
let protobufRun: Awaited<ReturnType<typeof runScenario>>;
let jsonRun: Awaited<ReturnType<typeof runScenario>>;

beforeAll(async () => {
  fake = await startFakeAnthropic({ handler });
  protobufRun = await runScenario('http/protobuf');
  jsonRun = await runScenario('http/json');
}, 120_000);

afterAll(async () => {
  await protobufRun?.cleanup();
  await jsonRun?.cleanup();
  await fake?.close();
});

describe.each([
  ['http/protobuf', () => protobufRun],
  ['http/json', () => jsonRun],
])('agentry serve exporting traces over OTLP %s', (protocol, run) => {
  it('sends the span tree of an agent with a tool call and two children, in one trace', () => {
    const { receiver, rootId } = run();
    expect(receiver.contentTypes.length).toBeGreaterThan(0);
    for (const t of receiver.contentTypes) {
      expect(t).toContain(protocol === 'http/json' ? 'application/json' : 'application/x-protobuf');
    }
    const spans = receiver.spans.filter((s) => s.attributes['gen_ai.conversation.id'] === rootId);
    expect(new Set(spans.map((s) => s.service))).toEqual(new Set(['agentry-under-test']));
    const traceId = spans[0]!.traceId;
    expect(traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(spans.every((s) => s.traceId === traceId)).toBe(true);
    const names = spans.map((s) => s.name);
    expect(names).toContain('create_agent agentry');
    expect(names).toContain('invoke_agent agentry');
    expect(names).toContain('execute_tool update_plan');
    expect(names.filter((n) => n === 'invoke_agent sub_agent')).toHaveLength(2);
    const chat = spans.find(
      (s) => s.name === 'chat claude-haiku-4-5' && s.attributes['gen_ai.usage.input_tokens'] === 300,
    )!;
    expect(chat.kind).toBe(3); // SPAN_KIND_CLIENT in OTLP
    expect(chat.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'anthropic',
      'gen_ai.request.model': 'claude-haiku-4-5',
      'agentry.model': 'svc-1-lite',
      'gen_ai.usage.output_tokens': 40,
      'gen_ai.response.finish_reasons': ['tool_use'],
      'gen_ai.agent.id': rootId,
    });
    const spawn = spans.find((s) => s.name === 'execute_tool spawn_sub_agents')!;
    expect(spawn.attributes['gen_ai.tool.type']).toBe('function');
    for (const child of spans.filter((s) => s.name === 'invoke_agent sub_agent')) {
      expect(child.parentSpanId).toBe(spawn.spanId);
      expect(child.attributes['agentry.parent_agent_id']).toBe(rootId);
    }
    // The refused call is a chat span with the provider's status as error.type.
    const refused = receiver.spans.find(
      (s) => s.name === 'chat claude-haiku-4-5' && s.attributes['error.type'] === '400',
    );
    expect(refused).toBeDefined();
  });

  it('serves /metrics on its own port, parseable, matching the runtime, with bounded labels', async () => {
    const { metricsResponse, metricsText, notMetrics, agents } = run();
    expect(metricsResponse.status).toBe(200);
    expect(metricsResponse.headers.get('content-type')).toContain('text/plain');
    expect(notMetrics.status).toBe(404);
    const families = parsePrometheusTextFormat(metricsText) as Array<{
      name: string;
      type: string;
      metrics: Array<{
        value?: string;
        labels?: Record<string, string>;
        buckets?: Record<string, string>;
        count?: string;
        sum?: string;
      }>;
    }>;
    const family = (name: string) => families.find((f) => f.name === name);
    // Agents by status, as the API lists them (roots and children: 3 + 2; the 500 created none).
    const byStatus = Object.fromEntries(
      family('agentry_agents')!.metrics.map((m) => [m.labels!.status, Number(m.value)]),
    );
    const listed: Record<string, number> = {};
    for (const a of agents) listed[a.status] = (listed[a.status] ?? 0) + 1;
    expect(byStatus).toEqual(listed);
    expect(byStatus).toEqual({ COMPLETED: 3, FAILED: 1 });
    // Model turns: root 2, children 1 each; the refused call is no turn.
    expect(Number(family('agentry_steps_total')!.metrics[0]!.value)).toBe(4);
    // The parser keeps a histogram's buckets but drops its labels: the labelled series are read from their lines.
    expect(family('gen_ai_client_token_usage')!.type).toBe('HISTOGRAM');
    expect(family('gen_ai_client_operation_duration_seconds')!.type).toBe('HISTOGRAM');
    expect(family('agentry_tool_call_duration_seconds')!.type).toBe('HISTOGRAM');
    const series = (name: string, label: string) =>
      metricsText
        .split('\n')
        .filter((l) => l.startsWith(`${name}{`) && l.includes(label))
        .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
    expect(series('gen_ai_client_token_usage_count', 'gen_ai_token_type="input"')).toBe(4);
    expect(series('gen_ai_client_token_usage_sum', 'gen_ai_token_type="input"')).toBe(300 + 500 + 50 + 50);
    expect(series('gen_ai_client_token_usage_sum', 'gen_ai_token_type="output"')).toBe(40 + 8 + 5 + 5);
    expect(series('gen_ai_client_operation_duration_seconds_count', 'error_type=""')).toBe(4);
    expect(series('gen_ai_client_operation_duration_seconds_count', 'error_type="400"')).toBeGreaterThanOrEqual(1);
    const toolCalls = Object.fromEntries(
      family('agentry_tool_calls_total')!.metrics.map((m) => [
        `${m.labels!.tool}/${m.labels!.outcome}`,
        Number(m.value),
      ]),
    );
    // A spawn counts once, when it ends (its first stretch only spawned and waited).
    expect(toolCalls).toEqual({ 'update_plan/ok': 1, 'spawn_sub_agents/ok': 1 });
    expect(series('agentry_tool_call_duration_seconds_count', 'outcome="ok"')).toBe(2);
    expect(metricsText).toMatch(/^agentry_build_info\{version="\d+\.\d+\.\d+[^"]*"\} 1$/m);
    const charged = family('agentry_credits_charged_total')!.metrics.find((m) => m.labels!.item === 'svc-1-lite')!;
    // 900 input tokens at 100 credits per million and 58 output tokens at 500 per million
    expect(Number(charged.value)).toBeCloseTo(0.09 + 0.029, 9);
    expect(family('agentry_lane_in_flight')).toBeDefined();
    expect(family('agentry_lane_queue_depth')).toBeDefined();
    expect(family('nodejs_eventloop_lag_seconds')).toBeDefined();
    // No label carries an id: every label value comes from a small fixed set.
    for (const f of families) {
      for (const m of f.metrics) {
        for (const [label, value] of Object.entries(m.labels ?? {})) {
          expect(label).not.toMatch(/id$/);
          expect(value).not.toMatch(/[0-9a-f]{8}-[0-9a-f]{4}/);
        }
      }
    }
  });

  it('logs JSON lines: requests, status changes, errors with a stack, and no secret', () => {
    const { serve, rootId, health, ready } = run();
    expect(health.status).toBe(200);
    expect(ready.status).toBe(200);
    const out = serve.stdout();
    const lines = out
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.length).toBeGreaterThan(5);
    const requests = lines.filter((l) => l.msg === 'request');
    expect(requests.find((l) => l.route === 'create' && l.status === 201)).toMatchObject({
      method: 'POST',
      request_id: expect.any(String),
      duration_ms: expect.any(Number),
      level: 30,
    });
    expect(requests.find((l) => l.route === 'list' && l.status === 401)).toBeDefined();
    const statuses = lines.filter((l) => l.msg === 'agent status changed');
    expect(statuses.find((l) => l.agent_id === rootId && l.status === 'COMPLETED')).toMatchObject({
      trace_id: expect.stringMatching(/^[0-9a-f]{32}$/),
    });
    expect(statuses.find((l) => l.status === 'FAILED')).toBeDefined();
    const error = lines.find((l) => l.msg === 'request failed')!;
    expect(error.level).toBe(50);
    expect((error.err as { stack: string }).stack).toMatch(/\n\s+at /);
    // The secrets: the provider key (the provider even echoed it into an error), the SMTP password, the API keys.
    for (const secret of [PROVIDER_KEY, SMTP_PASSWORD, serve.apiKey!, 'agk_not-a-real-key-123456']) {
      for (const line of out.split('\n').filter((l) => l.startsWith('{'))) expect(line).not.toContain(secret);
    }
    expect(JSON.stringify(statuses.find((l) => l.status === 'FAILED'))).toContain('[redacted]');
    expect(serve.stderr()).not.toContain(PROVIDER_KEY);
  });
});
