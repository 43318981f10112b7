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
  return {
    'gen_ai.agent.id': agent.agent_id,
    'gen_ai.agent.name': agentName(agent),
    'gen_ai.conversation.id': agent.root_id,
    ...(agent.parent_id !== null ? { 'agentry.parent_agent_id': agent.parent_id } : {}),
  };
}

/** W3C `traceparent` of a span, or null for a span that records nothing (no SDK). */
export function traceparentOf(span: Span): string | null {
  const sc = span.spanContext();
  if (!trace.isSpanContextValid(sc)) return null;
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The context a stored `traceparent` names (as a remote parent), or the root context when there is none. */
export function contextOfTraceparent(traceparent: string | null | undefined): Context {
  const m = traceparent ? TRACEPARENT.exec(traceparent) : null;
  if (!m) return ROOT_CONTEXT;
  const sc = { traceId: m[1]!, spanId: m[2]!, traceFlags: parseInt(m[3]!, 16) & TraceFlags.SAMPLED, isRemote: true };
  return trace.isSpanContextValid(sc) ? trace.setSpanContext(ROOT_CONTEXT, sc) : ROOT_CONTEXT;
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
    const span = this.tracer.startSpan(
      `create_agent ${name}`,
      {
        kind: SpanKind.INTERNAL,
        attributes: {
          'gen_ai.operation.name': 'create_agent',
          ...modelAttributes(agent, info),
          ...agentAttributes(agent),
          ...(this.capture
            ? {
                'gen_ai.input.messages': JSON.stringify([
                  { role: 'user', parts: [{ type: 'text', content: agent.goal }] },
                ]),
              }
            : {}),
        },
      },
      parent,
    );
    span.end();
    return traceparentOf(span);
  }

  agentRun(agent: AgentRow, info: AgentRunInfo): RunTelemetry {
    const name = agentName(agent);
    const parent = agent.trace_context ? contextOfTraceparent(agent.trace_context) : otelContext.active();
    const span = this.tracer.startSpan(
      `invoke_agent ${name}`,
      {
        kind: SpanKind.INTERNAL,
        attributes: {
          'gen_ai.operation.name': 'invoke_agent',
          ...modelAttributes(agent, info),
          ...agentAttributes(agent),
        },
      },
      parent,
    );
    if (!span.isRecording()) return noRecording;
    if (info.recovered) span.addEvent('agentry.crash_recovery', { 'agentry.step_count': agent.step_count });
    this.runs.set(agent.agent_id, span);
    const runContext = trace.setSpan(parent, span);
    let reserved = 0;
    let charged = 0;
    return {
      chat: (request, chatInfo) => {
        reserved += chatInfo.reservedMicros;
        return this.chat(runContext, agent, request, chatInfo, (c) => (charged += c));
      },
      tool: (use, toolInfo) => {
        reserved += toolInfo.reservedMicros;
        return this.tool(runContext, agent, use, toolInfo, (c) => (charged += c));
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
    agent: AgentRow,
    request: ModelRequest,
    info: ChatInfo,
    onCharged: (micros: number) => void,
  ): ChatTelemetry {
    const span = this.tracer.startSpan(
      `chat ${info.upstreamModel}`,
      {
        kind: SpanKind.CLIENT,
        attributes: {
          'gen_ai.operation.name': 'chat',
          'gen_ai.provider.name': info.providerName,
          'gen_ai.request.model': info.upstreamModel,
          'agentry.model': request.model,
          'gen_ai.request.max_tokens': request.maxTokens,
          'agentry.credits.reserved': credits(info.reservedMicros),
          ...agentAttributes(agent),
          ...(this.capture
            ? {
                'gen_ai.system_instructions': JSON.stringify([{ type: 'text', content: request.system }]),
                'gen_ai.input.messages': messagesJson(request),
              }
            : {}),
        },
      },
      parent,
    );
    const active = trace.setSpan(parent, span);
    return {
      within: (fn) => otelContext.with(active, fn),
      end: ({ response, error, chargedMicros }) => {
        if (response) {
          span.setAttributes({
            'gen_ai.response.model': response.model ?? info.upstreamModel,
            'gen_ai.response.finish_reasons': [response.stopReason],
            'gen_ai.usage.input_tokens':
              response.usage.inputTokens +
              (response.usage.cacheReadInputTokens ?? 0) +
              (response.usage.cacheCreationInputTokens ?? 0),
            'gen_ai.usage.output_tokens': response.usage.outputTokens,
            ...(this.capture ? { 'gen_ai.output.messages': outputJson(response) } : {}),
          });
        }
        if (chargedMicros !== undefined) {
          span.setAttribute('agentry.credits.charged', credits(chargedMicros));
          onCharged(chargedMicros);
        }
        if (error !== undefined) recordError(span, error);
        span.end();
      },
    };
  }

  private tool(
    parent: Context,
    agent: AgentRow,
    use: ToolUseBlock,
    info: ToolInfo,
    onCharged: (micros: number) => void,
  ): ToolTelemetry {
    const span = this.tracer.startSpan(
      `execute_tool ${use.name}`,
      {
        kind: SpanKind.INTERNAL,
        attributes: {
          'gen_ai.operation.name': 'execute_tool',
          'gen_ai.tool.name': use.name,
          'gen_ai.tool.call.id': use.id,
          'gen_ai.tool.type': info.type,
          'agentry.credits.reserved': credits(info.reservedMicros),
          ...agentAttributes(agent),
          ...(this.capture ? { 'gen_ai.tool.call.arguments': JSON.stringify(use.input ?? {}) } : {}),
        },
      },
      parent,
    );
    const active = trace.setSpan(parent, span);
    return {
      traceparent: traceparentOf(span),
      within: (fn) => otelContext.with(active, fn),
      end: ({ isError, error, suspended, chargedMicros }) => {
        span.setAttribute('agentry.credits.charged', credits(chargedMicros));
        onCharged(chargedMicros);
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

const noRecording: RunTelemetry = {
  chat: () => ({ within: (fn) => fn(), end: () => undefined }),
  tool: () => ({ traceparent: null, within: (fn) => fn(), end: () => undefined }),
  event: (_name: string, _attributes?: TelemetryAttributes) => undefined,
  end: () => undefined,
};
