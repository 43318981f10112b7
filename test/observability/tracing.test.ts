/**
 * Traces by the OpenTelemetry GenAI conventions, recorded with the SDK's in-memory exporter: the span tree of an agent
 * that calls a tool and spawns two children, the children in the parent's trace, and a restart in the middle of the
 * run that continues the same trace.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider, type ReadableSpan } from '@opentelemetry/sdk-trace';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { AgentRuntime, defineTool, sqliteStorage, type ModelRequest } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { deferred, eventually } from '../support/runtime.js';

const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;

/** The root looks something up and spawns two children in one turn, then answers; each child answers at once. */
function script(req: ModelRequest, { turnIndex }: { turnIndex: number }): ScriptedTurn {
  if (goalOf(req) === 'research') {
    if (turnIndex === 0) {
      return {
        toolCalls: [
          { name: 'lookup', input: { q: 'x' }, id: 'toolu_lookup' },
          { name: 'spawn_sub_agents', input: { tasks: [{ goal: 'child 0' }, { goal: 'child 1' }] }, id: 'toolu_spawn' },
        ],
        usage: { inputTokens: 120, outputTokens: 30 },
      };
    }
    return { text: 'All done.', usage: { inputTokens: 200, outputTokens: 10 } };
  }
  // A child first waits at the gate (a tool), then answers.
  if (turnIndex === 0) return { toolCalls: [{ name: 'gate', input: {} }] };
  return { text: `answer of ${goalOf(req)}` };
}

const lookup = defineTool({
  name: 'lookup',
  description: 'Looks something up',
  input: z.object({ q: z.string() }),
  price: 0.5,
  idempotent: true,
  run: async ({ q }) => ({ found: q }),
});

/** A tool that waits until the gate opens (or the runtime aborts it). */
function gateTool(gate: Promise<void>) {
  return defineTool({
    name: 'gate',
    description: 'Waits',
    input: z.object({}),
    idempotent: true,
    run: (_input, ctx) =>
      new Promise<string>((resolve, reject) => {
        void gate.then(() => resolve('open'));
        ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason as Error), { once: true });
      }),
  });
}

let dir: string | undefined;
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

function tracer() {
  const exporter = new InMemorySpanExporter();
  const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
  return { exporter, provider };
}

const named = (spans: ReadableSpan[], name: string) => spans.filter((s) => s.name === name);
const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;

describe('tracing (OpenTelemetry GenAI conventions)', () => {
  it('records the span tree of a tool call and two children, in one trace across a restart', async () => {
    dir = mkdtempSync(join(tmpdir(), 'agentry-trace-'));
    const path = join(dir, 'agentry.db');
    const { exporter, provider } = tracer();
    const closed = new Promise<void>(() => undefined);
    const opened = Promise.resolve();
    const open = (closeTimeoutMs: number, gate: Promise<void>) =>
      AgentRuntime.open({
        storage: sqliteStorage({ path }),
        model: scriptedModel({ turns: script }),
        tools: [lookup, gateTool(gate)],
        builtinTools: false,
        tracing: { tracerProvider: provider },
        closeTimeoutMs,
      });

    // First process: the root runs its tools; the children start and wait at the gate; then it stops.
    const first = await open(0, closed);
    const { agent_id: rootId } = await first.create({ goal: 'research' });
    await eventually(() => named(exporter.getFinishedSpans(), 'chat svc-1-lite').length >= 3, 10_000, 'children chat');
    await first.close();
    const beforeRestart = exporter.getFinishedSpans().length;

    // Second process on the same database: the children go on, the root wakes and finishes.
    const second = await open(10_000, opened);
    const root = await second.waitFor(rootId);
    expect(root.status).toBe('COMPLETED');
    await second.close();

    const spans = exporter.getFinishedSpans();
    expect(spans.length).toBeGreaterThan(beforeRestart);
    // One trace for everything, both processes.
    const traceId = spans[0]!.spanContext().traceId;
    expect(new Set(spans.map((s) => s.spanContext().traceId))).toEqual(new Set([traceId]));

    const [created] = named(spans, 'create_agent agentry');
    expect(created).toBeDefined();
    expect(parentOf(created!)).toBeUndefined();
    expect(created!.attributes).toMatchObject({
      'gen_ai.operation.name': 'create_agent',
      'gen_ai.agent.id': rootId,
      'gen_ai.conversation.id': rootId,
    });

    const rootRuns = named(spans, 'invoke_agent agentry');
    expect(rootRuns.length).toBeGreaterThanOrEqual(2); // before the restart, and after it (woken by its children)
    for (const run of rootRuns) {
      expect(parentOf(run)).toBe(created!.spanContext().spanId);
      expect(run.kind).toBe(0); // INTERNAL
      expect(run.attributes).toMatchObject({
        'gen_ai.operation.name': 'invoke_agent',
        'gen_ai.agent.id': rootId,
        'gen_ai.agent.name': 'agentry',
        'gen_ai.conversation.id': rootId,
      });
    }
    const rootRunIds = new Set(rootRuns.map((r) => r.spanContext().spanId));

    const rootChats = named(spans, 'chat svc-1-lite').filter((s) => s.attributes['gen_ai.agent.id'] === rootId);
    expect(rootChats).toHaveLength(2);
    const firstChat = rootChats.find((c) => c.attributes['gen_ai.usage.input_tokens'] === 120)!;
    expect(firstChat.kind).toBe(2); // CLIENT
    expect(rootRunIds.has(parentOf(firstChat)!)).toBe(true);
    expect(firstChat.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'agentry.scripted',
      'gen_ai.request.model': 'svc-1-lite',
      'gen_ai.response.model': 'svc-1-lite',
      'gen_ai.request.max_tokens': 4096,
      'gen_ai.usage.input_tokens': 120,
      'gen_ai.usage.output_tokens': 30,
      'gen_ai.response.finish_reasons': ['tool_use'],
    });
    expect(firstChat.attributes['agentry.credits.reserved']).toBeGreaterThan(0);
    // 120 input tokens at 100 credits per million, 30 output tokens at 500 per million
    expect(firstChat.attributes['agentry.credits.charged']).toBeCloseTo(0.027, 9);
    // No message contents unless opted in.
    expect(Object.keys(firstChat.attributes).some((k) => k.includes('messages'))).toBe(false);

    const [lookupSpan] = named(spans, 'execute_tool lookup');
    expect(lookupSpan!.attributes).toMatchObject({
      'gen_ai.operation.name': 'execute_tool',
      'gen_ai.tool.name': 'lookup',
      'gen_ai.tool.call.id': 'toolu_lookup',
      'gen_ai.tool.type': 'function',
      'agentry.credits.reserved': 0.5,
      'agentry.credits.charged': 0.5,
    });
    expect(rootRunIds.has(parentOf(lookupSpan!)!)).toBe(true);

    // The spawn call runs twice: it spawns and suspends, then (after the restart) reattaches and reads the results.
    const spawnSpans = named(spans, 'execute_tool spawn_sub_agents');
    expect(spawnSpans.length).toBeGreaterThanOrEqual(2);
    const firstSpawn = spawnSpans[0]!;
    expect(firstSpawn.attributes).toMatchObject({
      'gen_ai.tool.call.id': 'toolu_spawn',
      'agentry.tool.suspended': true,
    });

    // Each child's every stretch (before and after the restart) hangs under the spawning call's span.
    const childRuns = named(spans, 'invoke_agent sub_agent');
    const childIds = new Set(childRuns.map((s) => s.attributes['gen_ai.agent.id']));
    expect(childIds.size).toBe(2);
    for (const run of childRuns) {
      expect(parentOf(run)).toBe(firstSpawn.spanContext().spanId);
      expect(run.attributes).toMatchObject({ 'agentry.parent_agent_id': rootId, 'gen_ai.conversation.id': rootId });
    }
    // After the restart the children's new stretches say they were recovered.
    const recovered = childRuns.filter((s) => s.events.some((e) => e.name === 'agentry.crash_recovery'));
    expect(recovered).toHaveLength(2);
    const childTools = named(spans, 'execute_tool gate');
    expect(childTools.length).toBeGreaterThanOrEqual(2);
    for (const t of childTools) expect(childRuns.map((r) => r.spanContext().spanId)).toContain(parentOf(t));
  });

  it('records message contents only when opted in, and a pause as a span event', async () => {
    const { exporter, provider } = tracer();
    const { memoryStorage } = await import('agentry-runtime');
    const gate = deferred();
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model: scriptedModel({
        turns: [{ toolCalls: [{ name: 'gate', input: {} }] }, { text: 'secret answer' }],
      }),
      tools: [gateTool(gate.promise)],
      builtinTools: false,
      tracing: { tracerProvider: provider, captureMessageContent: true },
    });
    const { agent_id } = await runtime.create({ goal: 'the goal text' });
    await eventually(() => named(exporter.getFinishedSpans(), 'chat svc-1-lite').length === 1, 5_000, 'first chat');
    await runtime.pause(agent_id);
    gate.resolve();
    await eventually(() => named(exporter.getFinishedSpans(), 'invoke_agent agentry').length === 1, 5_000, 'run end');
    await runtime.resume(agent_id);
    expect((await runtime.waitFor(agent_id, { until: ['COMPLETED'] })).status).toBe('COMPLETED');
    await runtime.close();
    const spans = exporter.getFinishedSpans();
    const chats = named(spans, 'chat svc-1-lite');
    expect(String(chats[0]!.attributes['gen_ai.input.messages'])).toContain('the goal text');
    expect(String(chats.at(-1)!.attributes['gen_ai.output.messages'])).toContain('secret answer');
    const [firstRun] = named(spans, 'invoke_agent agentry');
    expect(firstRun!.events.map((e) => e.name)).toContain('agentry.paused');
  });
});
