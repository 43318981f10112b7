/**
 * Tracing costs nothing for spans that are not recorded: a span the sampler drops (or any span without an SDK) gets
 * only the few attributes a sampler decides by, and none of the others is built. The hooks are driven directly, with
 * an agent row and a request that record (or refuse) every read, so a dropped span that built its attributes shows.
 */
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  InMemorySpanExporter,
  SamplingDecision,
  SimpleSpanProcessor,
  TracerProvider,
  type Sampler,
} from '@opentelemetry/sdk-trace';
import { SpanKind, trace, ROOT_CONTEXT } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { noChatTelemetry, observeChat } from '../../src/core/telemetry.js';
import { OtelTracing, startSpanLazily } from '../../src/observability/otel.js';
import type { ModelRequest, ModelResponse, ToolUseBlock } from '../../src/models/provider.js';
import type { AgentRow } from '../../src/storage/adapter.js';

const MODEL_INFO = { providerName: 'agentry.scripted', upstreamModel: 'svc-1-lite' };

/** An agent row that records which fields were read. */
function watchedAgent(read: Set<string>): AgentRow {
  const row = {
    agent_id: 'agent-1',
    root_id: 'root-1',
    parent_id: 'root-1',
    model: 'svc-1-lite',
    goal: 'the goal',
    step_count: 0,
    trace_context: null,
  };
  return new Proxy(row, {
    get(target, key) {
      read.add(String(key));
      return target[key as keyof typeof target];
    },
  }) as unknown as AgentRow;
}

/** A request whose contents throw when read: only message capture reads them. */
function untouchableRequest(): ModelRequest {
  const request = { model: 'svc-1-lite', maxTokens: 100, agentId: 'agent-1', tools: [] };
  for (const key of ['system', 'messages']) {
    Object.defineProperty(request, key, {
      get() {
        throw new Error(`the request's ${key} was read for a span that is not recorded`);
      },
    });
  }
  return request as unknown as ModelRequest;
}

/** A tool call whose input throws when read. */
function untouchableUse(): ToolUseBlock {
  return Object.defineProperty({ type: 'tool_use', id: 'toolu_1', name: 'lookup' }, 'input', {
    get() {
      throw new Error("the tool call's input was read for a span that is not recorded");
    },
  }) as unknown as ToolUseBlock;
}

const RESPONSE: ModelResponse = {
  content: [{ type: 'text', text: 'done' }],
  stopReason: 'end_turn',
  usage: { inputTokens: 10, outputTokens: 5 },
} as ModelResponse;

function provider(sampler: Sampler) {
  const exporter = new InMemorySpanExporter();
  return {
    exporter,
    provider: new TracerProvider({ sampler, spanProcessors: [new SimpleSpanProcessor({ exporter })] }),
  };
}

/** Records `invoke_agent` spans only: decided by the attribute the spans start with. */
const onlyAgentRuns: Sampler = {
  shouldSample: (_context, _traceId, _name, _kind, attributes) => ({
    decision:
      attributes['gen_ai.operation.name'] === 'invoke_agent'
        ? SamplingDecision.RECORD_AND_SAMPLED
        : SamplingDecision.NOT_RECORD,
  }),
  toString: () => 'onlyAgentRuns',
};

describe('tracing of spans that are not recorded', () => {
  it('never calls the attribute function of a dropped span, and calls it once for a recorded one', () => {
    let built = 0;
    const rest = () => void built++;
    const dropped = provider(new AlwaysOffSampler()).provider.getTracer('t');
    const span = startSpanLazily(
      dropped,
      'chat x',
      SpanKind.CLIENT,
      ROOT_CONTEXT,
      { 'gen_ai.operation.name': 'chat' },
      rest,
    );
    span.end();
    expect(span.isRecording()).toBe(false);
    expect(built).toBe(0);

    const recorded = provider(new AlwaysOnSampler());
    startSpanLazily(
      recorded.provider.getTracer('t'),
      'chat x',
      SpanKind.CLIENT,
      ROOT_CONTEXT,
      { 'gen_ai.operation.name': 'chat' },
      (s) => {
        built++;
        s.setAttribute('gen_ai.request.max_tokens', 100);
      },
    ).end();
    expect(built).toBe(1);
    expect(recorded.exporter.getFinishedSpans()[0]!.attributes).toEqual({
      'gen_ai.operation.name': 'chat',
      'gen_ai.request.max_tokens': 100,
    });
  });

  it('builds no attributes for chat and tool spans its sampler drops, even with message capture on', async () => {
    const { exporter, provider: tracerProvider } = provider(onlyAgentRuns);
    const tracing = new OtelTracing({ tracerProvider, captureMessageContent: true });
    const read = new Set<string>();
    const run = tracing.agentRun(watchedAgent(read), { ...MODEL_INFO, recovered: false });

    const answer = await observeChat(
      run,
      untouchableRequest(),
      { ...MODEL_INFO, reservedMicros: 1000 },
      () => 700,
      async () => RESPONSE,
    );
    expect(answer).toBe(RESPONSE);
    const tool = run.tool(untouchableUse(), { registered: true, type: 'function', reservedMicros: 500 });
    expect(await tool.within(async () => 'looked up')).toBe('looked up');
    tool.end({ isError: false, chargedMicros: 500 });
    run.end();

    const spans = exporter.getFinishedSpans();
    expect(spans.map((s) => s.name)).toEqual(['invoke_agent sub_agent']);
    // The stretch still adds up what its unrecorded calls cost.
    expect(spans[0]!.attributes).toMatchObject({
      'agentry.credits.reserved': 0.0015,
      'agentry.credits.charged': 0.0012,
    });
  });

  it('builds nothing for an agent whose run the sampler drops, and passes "not sampled" on to its children', async () => {
    const { exporter, provider: tracerProvider } = provider(new AlwaysOffSampler());
    const tracing = new OtelTracing({ tracerProvider, captureMessageContent: true });
    const read = new Set<string>();
    const run = tracing.agentRun(watchedAgent(read), { ...MODEL_INFO, recovered: false });

    // What deciding to sample needs, and nothing more: no ids, no goal.
    expect([...read].sort()).toEqual(['model', 'parent_id', 'trace_context']);
    expect(run.chat(untouchableRequest(), { ...MODEL_INFO, reservedMicros: 1 })).toBe(noChatTelemetry);
    const tool = run.tool(untouchableUse(), { registered: true, type: 'function', reservedMicros: 1 });
    tool.end({ isError: false, chargedMicros: 1 });
    run.end();
    expect(exporter.getFinishedSpans()).toEqual([]);

    // The children spawned by the call join the dropped trace, marked not sampled, so they are dropped alike.
    expect(tool.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/);
    const childRead = new Set<string>();
    const child = { ...watchedAgent(childRead), trace_context: tool.traceparent };
    const sampledChildren = provider(new AlwaysOnSampler());
    new OtelTracing({ tracerProvider: sampledChildren.provider })
      .agentRun(child as AgentRow, { ...MODEL_INFO, recovered: false })
      .end();
    // AlwaysOn records whatever it is asked: the child's span is in the dropped trace, under the dropped span.
    const [childSpan] = sampledChildren.exporter.getFinishedSpans();
    expect(childSpan!.spanContext().traceId).toBe(tool.traceparent!.split('-')[1]);
    expect(childSpan!.parentSpanContext?.traceFlags).toBe(0);
  });

  it('records nothing and builds nothing without an SDK', () => {
    const tracing = new OtelTracing({ tracerProvider: trace.getTracerProvider() });
    const read = new Set<string>();
    const run = tracing.agentRun(watchedAgent(read), { ...MODEL_INFO, recovered: false });
    expect([...read].sort()).toEqual(['model', 'parent_id', 'trace_context']);
    expect(
      run.tool(untouchableUse(), { registered: true, type: 'function', reservedMicros: 1 }).traceparent,
    ).toBeNull();
    run.end();
  });
});
