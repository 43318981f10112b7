/**
 * The spans of a fan-out, as the bench's children make them: each sub-agent records exactly its GenAI spans
 * (`invoke_agent` under the spawning `execute_tool`, and under it `chat`, `execute_tool`, `chat`), its routine status
 * changes as the `agentry.status` attribute rather than events, and, with an AsyncLocalStorage context manager (what
 * an SDK's `register()` installs), a span started inside a model or tool call (an HTTP client's) nests under that
 * call's span.
 */
import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider, type ReadableSpan } from '@opentelemetry/sdk-trace';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { AgentRuntime, defineTool, memoryStorage, type ModelRequest } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';

const CHILDREN = 3;
const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;
const idOf = (s: ReadableSpan) => s.spanContext().spanId;

afterEach(() => {
  context.disable();
});

/** A runtime whose root spawns CHILDREN children; each child looks an item up, then answers. */
async function fanOut(inside: (where: string) => void = () => undefined) {
  const exporter = new InMemorySpanExporter();
  const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
  const lookup = defineTool({
    name: 'lookup',
    description: 'Looks an item up',
    input: z.object({ item: z.number() }),
    idempotent: true,
    run: ({ item }) => {
      inside(`lookup ${item}`);
      return `item ${item}`;
    },
  });
  const model = scriptedModel({
    turns: (req, { turnIndex }): ScriptedTurn => {
      const goal = goalOf(req);
      inside(`chat ${goal} ${turnIndex}`);
      if (goal === 'fan out') {
        return turnIndex === 0
          ? {
              toolCalls: [
                {
                  name: 'spawn_sub_agents',
                  input: { tasks: Array.from({ length: CHILDREN }, (_, i) => ({ goal: `child ${i}` })) },
                },
              ],
            }
          : { text: 'all children reported' };
      }
      const i = Number(goal.split(' ')[1]);
      return turnIndex === 0 ? { toolCalls: [{ name: 'lookup', input: { item: i } }] } : { text: `answer ${i}` };
    },
  });
  const runtime = await AgentRuntime.open({
    storage: memoryStorage(),
    model,
    tools: [lookup],
    tracing: { tracerProvider: provider },
  });
  const { agent_id } = await runtime.create({ goal: 'fan out' });
  expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
  await runtime.close();
  return { spans: exporter.getFinishedSpans(), provider };
}

describe('the spans of a fan-out', () => {
  it('records each child as invoke_agent over chat, execute_tool, chat, with its status as an attribute', async () => {
    const { spans } = await fanOut();
    const spawns = spans.filter((s) => s.name === 'execute_tool spawn_sub_agents');
    expect(spawns.length).toBeGreaterThanOrEqual(1);
    const spawnId = idOf(spawns[0]!);

    const childRuns = spans.filter((s) => s.name === 'invoke_agent sub_agent');
    expect(childRuns).toHaveLength(CHILDREN);
    for (const run of childRuns) {
      expect(parentOf(run)).toBe(spawnId);
      expect(run.attributes['agentry.status']).toBe('COMPLETED');
      // Started and completed are where the span starts and ends: no event says so again.
      expect(run.events.map((e) => e.name)).toEqual([]);
      const under = spans.filter((s) => parentOf(s) === idOf(run));
      expect(under.map((s) => s.name).sort()).toEqual(['chat svc-1-lite', 'chat svc-1-lite', 'execute_tool lookup']);
      for (const s of under) {
        expect(s.spanContext().traceId).toBe(run.spanContext().traceId);
        expect(s.attributes['gen_ai.agent.id']).toBe(run.attributes['gen_ai.agent.id']);
      }
    }
    // Nothing but the GenAI spans: per child its four, and the root's own.
    const names = new Set(spans.map((s) => s.name.split(' ')[0]));
    expect([...names].sort()).toEqual(['chat', 'create_agent', 'execute_tool', 'invoke_agent']);
    expect(spans.length - spans.filter((s) => s.attributes['gen_ai.agent.name'] === 'agentry').length).toBe(
      4 * CHILDREN,
    );
  });

  it('makes a model or tool call the active span inside it, with an AsyncLocalStorage context manager', async () => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    const inner = new Map<string, string | undefined>();
    const { spans } = await fanOut((where) => {
      // What an HTTP client's instrumentation does: a span under whatever is active.
      inner.set(where, trace.getActiveSpan()?.spanContext().spanId);
    });
    const byId = new Map(spans.map((s) => [idOf(s), s]));
    expect(inner.size).toBe(2 + 3 * CHILDREN);
    for (const [where, activeId] of inner) {
      const active = byId.get(activeId!);
      expect(active?.name, where).toBe(where.startsWith('lookup') ? 'execute_tool lookup' : 'chat svc-1-lite');
    }
    const lookupSpans = spans.filter((s) => s.name === 'execute_tool lookup');
    expect(new Set(lookupSpans.map(idOf))).toEqual(
      new Set([...inner].filter(([w]) => w.startsWith('lookup')).map(([, id]) => id)),
    );
  });
});
