/**
 * @module observability/otel
 * Traces through `@opentelemetry/api`, named by the OpenTelemetry GenAI semantic conventions: `create_agent {name}`
 * when a root agent is made, `invoke_agent {name}` (INTERNAL) for each stretch of an agent's work, `chat {model}`
 * (CLIENT) for each model call and `execute_tool {tool}` (INTERNAL) for each tool call. A sub-agent's spans belong to
 * its parent's trace, under the `execute_tool` span of the call that spawned it: the span context is stored with the
 * agent (`trace_context`), so a restarted process continues the same trace. A root agent created with the caller's
 * `traceparent` (the HTTP create route's header, MCP `create_agent`'s `_meta`) starts under that span, in its trace.
 *
 * `gen_ai.request.model` is the provider's own model id (`claude-haiku-4-5`); agentry's public id (`svc-1-lite`) is
 * `agentry.model`. Only the `chat` span of a model call carries `gen_ai.usage.*`: the Anthropic provider turns the
 * SDK's own instrumentation off, which would record the same call's usage on a second span.
 *
 * `@opentelemetry/api` is an optional peer: without it, or without a registered SDK, nothing is recorded.
 */
import {
  context as otelContext,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Attributes,
  type Context,
  type Span,
  type Tracer,
  type TracerProvider,
} from '@opentelemetry/api';
import { noChatTelemetry } from '../core/telemetry.js';
import type {
  AgentCreatedInfo,
  AgentRunInfo,
  ChatInfo,
  ModelInfo,
  ChatTelemetry,
  RunTelemetry,
  Telemetry,
  TelemetryAttributes,
  ToolInfo,
  ToolTelemetry,
} from '../core/telemetry.js';
import type { AgentStatus } from '../base/status.js';
import { ModelError, type ModelRequest, type ModelResponse, type ToolUseBlock } from '../models/provider.js';
import type { AgentRow } from '../storage/adapter.js';

export interface OtelTracingOptions {
  /** @default the global tracer provider (`trace.getTracerProvider()`) */
  tracerProvider?: TracerProvider;
  /**
   * Records message contents (`gen_ai.system_instructions`, `gen_ai.input.messages`, `gen_ai.output.messages`,
   * `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`): the conventions' opt-in attributes. They hold whatever
   * users and web pages wrote. @default false
   */
  captureMessageContent?: boolean;
  /** @default 'agentry' */
  tracerName?: string;
}

/** The micro-credits of the ledger as credits, as the API shows them. */
const credits = (micros: number): number => micros / 1_000_000;

/** `gen_ai.agent.name`: agents have no names of their own; roots and sub-agents are told apart. */
function agentName(agent: AgentRow): string {
  return agent.parent_id === null ? 'agentry' : 'sub_agent';
}

/** The model attributes of every span: the upstream id as the conventions' `gen_ai.request.model`, the public one apart. */
function modelAttributes(agent: AgentRow, info: ModelInfo): Attributes {
  return {
    'gen_ai.provider.name': info.providerName,
    'gen_ai.request.model': info.upstreamModel,
    'agentry.model': agent.model,
  };
}

function agentAttributes(agent: AgentRow): Attributes {
  const attributes: Attributes = {
    'gen_ai.agent.id': agent.agent_id,
    'gen_ai.agent.name': agentName(agent),
    'gen_ai.conversation.id': agent.root_id,
  };
  if (agent.parent_id !== null) attributes['agentry.parent_agent_id'] = agent.parent_id;
  return attributes;
}

/**
 * Starts a span with only the attributes a sampler may decide by (`sampling`, the few the GenAI conventions name for
 * it), and adds the others only when the span records. A span that is dropped (sampled out, or no SDK registered)
 * builds none of them: `rest` is never called. A recorded span pays the same, since the SDK copies and checks the
 * attributes given at the start twice before it sets them, and those set later once.
 */
export function startSpanLazily(
  tracer: Tracer,
  name: string,
  kind: SpanKind,
  parent: Context,
  sampling: Attributes,
  rest: (span: Span) => void,
): Span {
  const span = tracer.startSpan(name, { kind, attributes: sampling }, parent);
  if (span.isRecording()) rest(span);
  return span;
}

const ZERO_TRACE_ID = '0'.repeat(32);
const ZERO_SPAN_ID = '0'.repeat(16);

/** W3C `traceparent` of a span, or null for a span that records nothing (no SDK). */
export function traceparentOf(span: Span): string | null {
  const sc = span.spanContext();
  if (!trace.isSpanContextValid(sc)) return null;
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

/** {@link traceparentOf} of a span the SDK records: its ids are valid by construction, so they are not checked. */
function traceparentOfRecorded(span: Span): string {
  const sc = span.spanContext();
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The context a stored `traceparent` names (as a remote parent), or the root context when there is none. */
export function contextOfTraceparent(traceparent: string | null | undefined): Context {
  const m = traceparent ? TRACEPARENT.exec(traceparent) : null;
  // The pattern has checked the ids' form; a valid span context only has to be other than all zeros.
  if (!m || m[1] === ZERO_TRACE_ID || m[2] === ZERO_SPAN_ID) return ROOT_CONTEXT;
  const sc = { traceId: m[1]!, spanId: m[2]!, traceFlags: parseInt(m[3]!, 16) & TraceFlags.SAMPLED, isRemote: true };
  return trace.setSpanContext(ROOT_CONTEXT, sc);
}

/** `error.type`: the provider's HTTP status when it said one, else the error's class. */
function errorType(error: unknown): string {
  if (error instanceof ModelError && error.status !== undefined) return String(error.status);
  if (error instanceof Error) return error.name || 'Error';
  return '_OTHER';
}

function recordError(span: Span, error: unknown, message?: string): void {
  span.setAttribute('error.type', errorType(error));
  span.setStatus({ code: SpanStatusCode.ERROR, message: message ?? (error instanceof Error ? error.message : '') });
}

/** A thinking block in recorded messages: that the model thought, never what (its text stays out of every record). */
const REASONING_PART = { type: 'reasoning' } as const;

/** The conventions' message shape: role and parts. */
function messagesJson(request: ModelRequest): string {
  return JSON.stringify(
    request.messages.map((m) => ({
      role: m.role,
      parts: m.content.map((b) =>
        b.type === 'text'
          ? { type: 'text', content: b.text }
          : b.type === 'tool_use'
            ? { type: 'tool_call', id: b.id, name: b.name, arguments: b.input }
            : b.type === 'tool_result'
              ? { type: 'tool_call_response', id: b.tool_use_id, response: b.content }
              : REASONING_PART,
      ),
    })),
  );
}

function outputJson(response: ModelResponse): string {
  return JSON.stringify([
    {
      role: 'assistant',
      finish_reason: response.stopReason,
      parts: response.content.map((b) =>
        b.type === 'text'
          ? { type: 'text', content: b.text }
          : b.type === 'tool_use'
            ? { type: 'tool_call', id: b.id, name: b.name, arguments: b.input }
            : REASONING_PART,
      ),
    },
  ]);
}

/**
 * Tracing of a runtime through the OpenTelemetry API. `AgentRuntime.open()` installs it by default when
 * `@opentelemetry/api` is installed (option `tracing`); spans are recorded once an SDK is registered.
 *
 * @example
 * import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
 * new NodeTracerProvider({ spanProcessors: [...] }).register();
 * const runtime = await AgentRuntime.open({ tracing: { captureMessageContent: false } });
 */
export class OtelTracing implements Telemetry {
  private readonly tracer: Tracer;
  private readonly capture: boolean;
  /** The open `invoke_agent` span of each agent running in this process: status changes land on it as events. */
  private readonly runs = new Map<string, Span>();

  constructor(options: OtelTracingOptions = {}) {
    const provider = options.tracerProvider ?? trace.getTracerProvider();
    this.tracer = provider.getTracer(options.tracerName ?? 'agentry');
    this.capture = options.captureMessageContent ?? false;
  }

  agentCreated(agent: AgentRow, info: AgentCreatedInfo): string | null {
    const name = agentName(agent);
    // The caller's trace, when it sent one that parses; else whatever span is active here (an embedding app's).
    const callers = info.traceparent ? contextOfTraceparent(info.traceparent) : ROOT_CONTEXT;
    const parent = trace.getSpanContext(callers) ? callers : otelContext.active();
    const span = startSpanLazily(
      this.tracer,
      `create_agent ${name}`,
      SpanKind.INTERNAL,
      parent,
      { 'gen_ai.operation.name': 'create_agent', ...modelAttributes(agent, info) },
      (recording) => {
        recording.setAttributes(agentAttributes(agent));
        if (this.capture) {
          recording.setAttribute(
            'gen_ai.input.messages',
            JSON.stringify([{ role: 'user', parts: [{ type: 'text', content: agent.goal }] }]),
          );
        }
      },
    );
    span.end();
    return traceparentOf(span);
  }

  agentRun(agent: AgentRow, info: AgentRunInfo): RunTelemetry {
    const parent = agent.trace_context ? contextOfTraceparent(agent.trace_context) : otelContext.active();
    // Built once for the stretch: every chat and tool span of the agent carries the same ones (the SDK copies them).
    let agentAttrs: Attributes | undefined;
    const span = startSpanLazily(
      this.tracer,
      `invoke_agent ${agentName(agent)}`,
      SpanKind.INTERNAL,
      parent,
      { 'gen_ai.operation.name': 'invoke_agent', ...modelAttributes(agent, info) },
      (recording) => {
        agentAttrs = agentAttributes(agent);
        recording.setAttributes(agentAttrs);
      },
    );
    if (!agentAttrs) return droppedRun(span);
    if (info.recovered) span.addEvent('agentry.crash_recovery', { 'agentry.step_count': agent.step_count });
    this.runs.set(agent.agent_id, span);
    const runContext = trace.setSpan(parent, span);
    const attrs = agentAttrs;
    let reserved = 0;
    let charged = 0;
    const addCharged = (c: number) => (charged += c);
    return {
      chat: (request, chatInfo) => {
        reserved += chatInfo.reservedMicros;
        return this.chat(runContext, attrs, request, chatInfo, addCharged);
      },
      tool: (use, toolInfo) => {
        reserved += toolInfo.reservedMicros;
        return this.tool(runContext, attrs, use, toolInfo, addCharged);
      },
      event: (eventName, attributes) => span.addEvent(eventName, attributes),
      end: () => {
        if (this.runs.get(agent.agent_id) === span) this.runs.delete(agent.agent_id);
        span.setAttributes({
          'agentry.credits.reserved': credits(reserved),
          'agentry.credits.charged': credits(charged),
        });
        span.end();
      },
    };
  }

  statusChanged(agent: AgentRow, previous: AgentStatus): void {
    const span = this.runs.get(agent.agent_id);
    if (!span) return;
    const attributes = { 'agentry.status.from': previous, 'agentry.status.to': agent.status };
    if (agent.status === 'PAUSED') span.addEvent('agentry.paused', attributes);
    else if (agent.status === 'OUT_OF_CREDITS') span.addEvent('agentry.out_of_credits', attributes);
    else span.addEvent('agentry.status_change', attributes);
    span.setAttribute('agentry.status', agent.status);
    if (agent.status === 'FAILED') {
      span.setAttribute('error.type', 'agent_failed');
      span.setStatus({ code: SpanStatusCode.ERROR, message: agent.status_message });
    }
  }

  private chat(
    parent: Context,
    agentAttrs: Attributes,
    request: ModelRequest,
    info: ChatInfo,
    onCharged: (micros: number) => void,
  ): ChatTelemetry {
    const span = startSpanLazily(
      this.tracer,
      `chat ${info.upstreamModel}`,
      SpanKind.CLIENT,
      parent,
      {
        'gen_ai.operation.name': 'chat',
        'gen_ai.provider.name': info.providerName,
        'gen_ai.request.model': info.upstreamModel,
      },
      (recording) => {
        recording.setAttributes(agentAttrs);
        recording.setAttributes({
          'agentry.model': request.model,
          'gen_ai.request.max_tokens': request.maxTokens,
          'agentry.credits.reserved': credits(info.reservedMicros),
        });
        if (this.capture) {
          recording.setAttributes({
            'gen_ai.system_instructions': JSON.stringify([{ type: 'text', content: request.system }]),
            'gen_ai.input.messages': messagesJson(request),
          });
        }
      },
    );
    const recording = span.isRecording();
    return {
      // The span is the active context even when it records nothing: a sampled-out call says so downstream.
      within: (fn) => otelContext.with(trace.setSpan(parent, span), fn),
      end: ({ response, error, chargedMicros }) => {
        if (chargedMicros !== undefined) onCharged(chargedMicros);
        if (!recording) return span.end();
        if (response) {
          span.setAttributes({
            'gen_ai.response.model': response.model ?? info.upstreamModel,
            'gen_ai.response.finish_reasons': [response.stopReason],
            'gen_ai.usage.input_tokens':
              response.usage.inputTokens +
              (response.usage.cacheReadInputTokens ?? 0) +
              (response.usage.cacheCreationInputTokens ?? 0),
            'gen_ai.usage.output_tokens': response.usage.outputTokens,
          });
          if (this.capture) span.setAttribute('gen_ai.output.messages', outputJson(response));
        }
        if (chargedMicros !== undefined) span.setAttribute('agentry.credits.charged', credits(chargedMicros));
        if (error !== undefined) recordError(span, error);
        span.end();
      },
    };
  }

  private tool(
    parent: Context,
    agentAttrs: Attributes,
    use: ToolUseBlock,
    info: ToolInfo,
    onCharged: (micros: number) => void,
  ): ToolTelemetry {
    const span = startSpanLazily(
      this.tracer,
      `execute_tool ${use.name}`,
      SpanKind.INTERNAL,
      parent,
      { 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': use.name },
      (recording) => {
        recording.setAttributes(agentAttrs);
        recording.setAttributes({
          'gen_ai.tool.call.id': use.id,
          'gen_ai.tool.type': info.type,
          'agentry.credits.reserved': credits(info.reservedMicros),
        });
        if (this.capture) recording.setAttribute('gen_ai.tool.call.arguments', JSON.stringify(use.input ?? {}));
      },
    );
    const recording = span.isRecording();
    return {
      // A plain value, not a getter: V8 allocates objects with accessors so that 10,000 of them cost more in garbage
      // collection than working the string out for every call.
      traceparent: recording ? traceparentOfRecorded(span) : traceparentOf(span),
      within: (fn) => otelContext.with(trace.setSpan(parent, span), fn),
      end: ({ isError, error, suspended, chargedMicros }) => {
        onCharged(chargedMicros);
        if (!recording) return span.end();
        span.setAttribute('agentry.credits.charged', credits(chargedMicros));
        if (suspended) span.setAttribute('agentry.tool.suspended', true);
        if (!info.registered) recordError(span, new Error('unknown tool'), 'no tool of that name');
        else if (error !== undefined) recordError(span, error);
        else if (isError) {
          span.setAttribute('error.type', 'tool_error');
          span.setStatus({ code: SpanStatusCode.ERROR });
        }
        span.end();
      },
    };
  }
}

/**
 * A stretch of work whose `invoke_agent` span records nothing: no spans under it. Its span context still goes to the
 * children it spawns (and to MCP servers) when it has one: a span a sampler dropped has one, marked not sampled, so
 * the children's spans are dropped alike instead of starting traces of their own. Without an SDK it is the caller's
 * trace context the agent was created with, passed on, or none.
 */
function droppedRun(span: Span): RunTelemetry {
  const traceparent = traceparentOf(span);
  const tool: ToolTelemetry = { traceparent, within: (fn) => fn(), end: () => undefined };
  return {
    chat: () => noChatTelemetry,
    tool: () => tool,
    event: (_name: string, _attributes?: TelemetryAttributes) => undefined,
    end: () => undefined,
  };
}
