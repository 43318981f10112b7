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
import { LIGHT_ROOT, lighten } from './light-context.js';
import { RecordedRun, traceparentOf, type RunScope } from './otel-run.js';
import { noChatTelemetry } from '../core/telemetry.js';
import type {
  AgentCreatedInfo,
  AgentRunInfo,
  ModelInfo,
  RunTelemetry,
  Telemetry,
  TelemetryAttributes,
  ToolTelemetry,
} from '../core/telemetry.js';
import type { AgentStatus } from '../base/status.js';
import type { AgentRow } from '../storage/adapter.js';

export { traceparentOf } from './otel-run.js';

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

/** `gen_ai.agent.name`: agents have no names of their own; roots and sub-agents are told apart. */
function agentName(agent: AgentRow): string {
  return agent.parent_id === null ? 'agentry' : 'sub_agent';
}

/**
 * The attributes an agent span starts with: its operation and model, the upstream id as the conventions'
 * `gen_ai.request.model`, the public one apart. One literal, not a spread of two: the SDK copies it twice more.
 */
function agentSpanAttributes(operation: string, agent: AgentRow, info: ModelInfo): Attributes {
  return {
    'gen_ai.operation.name': operation,
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

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/**
 * The context a stored `traceparent` names (as a remote parent), or the root context when there is none. Both are
 * light (observability/light-context.ts): so are the contexts of the spans under it.
 */
export function contextOfTraceparent(traceparent: string | null | undefined): Context {
  const m = traceparent ? TRACEPARENT.exec(traceparent) : null;
  // The pattern has checked the ids' form; a valid span context only has to be other than all zeros.
  if (!m || m[1] === ZERO_TRACE_ID || m[2] === ZERO_SPAN_ID) return LIGHT_ROOT;
  const sc = { traceId: m[1]!, spanId: m[2]!, traceFlags: parseInt(m[3]!, 16) & TraceFlags.SAMPLED, isRemote: true };
  return trace.setSpanContext(LIGHT_ROOT, sc);
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
  /** The open `invoke_agent` span of each agent running in this process: status changes land on it. */
  private readonly runs = new Map<string, Span>();
  /** What the recorded stretches share. */
  private readonly scope: RunScope;
  /** The stored trace context parsed last, and its context: every child of one spawn call continues the same one. */
  private lastParent: { traceparent: string; context: Context } | undefined;

  constructor(options: OtelTracingOptions = {}) {
    const provider = options.tracerProvider ?? trace.getTracerProvider();
    this.tracer = provider.getTracer(options.tracerName ?? 'agentry');
    this.capture = options.captureMessageContent ?? false;
    this.scope = {
      tracer: this.tracer,
      capture: this.capture,
      ended: (agentId, span) => {
        if (this.runs.get(agentId) === span) this.runs.delete(agentId);
      },
    };
  }

  agentCreated(agent: AgentRow, info: AgentCreatedInfo): string | null {
    const name = agentName(agent);
    // The caller's trace, when it sent one that parses; else whatever span is active here (an embedding app's).
    const callers = info.traceparent ? contextOfTraceparent(info.traceparent) : LIGHT_ROOT;
    const parent = trace.getSpanContext(callers) ? callers : otelContext.active();
    const span = startSpanLazily(
      this.tracer,
      `create_agent ${name}`,
      SpanKind.INTERNAL,
      parent,
      agentSpanAttributes('create_agent', agent, info),
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
    const parent = agent.trace_context ? this.storedParent(agent.trace_context) : otelContext.active();
    let agentAttrs: Attributes | undefined;
    const span = startSpanLazily(
      this.tracer,
      `invoke_agent ${agentName(agent)}`,
      SpanKind.INTERNAL,
      parent,
      agentSpanAttributes('invoke_agent', agent, info),
      (recording) => {
        agentAttrs = agentAttributes(agent);
        recording.setAttributes(agentAttrs);
      },
    );
    if (!agentAttrs) return droppedRun(span);
    if (info.recovered) span.addEvent('agentry.crash_recovery', { 'agentry.step_count': agent.step_count });
    this.runs.set(agent.agent_id, span);
    return new RecordedRun(this.scope, agent.agent_id, span, lighten(parent), agentAttrs);
  }

  /** The context of an agent's stored `traceparent` (its remote parent); immutable, so shared by its siblings. */
  private storedParent(traceparent: string): Context {
    const last = this.lastParent;
    if (last?.traceparent === traceparent) return last.context;
    const context = contextOfTraceparent(traceparent);
    this.lastParent = { traceparent, context };
    return context;
  }

  statusChanged(agent: AgentRow, previous: AgentStatus): void {
    const span = this.runs.get(agent.agent_id);
    if (!span) return;
    // The routine changes (started, waiting for children, completed) are where the span starts and ends, and
    // `agentry.status` says where it ended: only a pause and running out of credits are events of their own.
    if (agent.status === 'PAUSED') {
      span.addEvent('agentry.paused', { 'agentry.status.from': previous, 'agentry.status.to': agent.status });
    } else if (agent.status === 'OUT_OF_CREDITS') {
      span.addEvent('agentry.out_of_credits', { 'agentry.status.from': previous, 'agentry.status.to': agent.status });
    }
    span.setAttribute('agentry.status', agent.status);
    if (agent.status === 'FAILED') {
      span.setAttribute('error.type', 'agent_failed');
      span.setStatus({ code: SpanStatusCode.ERROR, message: agent.status_message });
    }
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
