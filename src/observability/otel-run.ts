/**
 * @module observability/otel-run
 * The recorded stretch of an agent's work (its `invoke_agent` span) and the `chat` and `execute_tool` spans under it.
 * Each is one object of a class, not a literal of closures: a 10,000-child fan-out makes 40,000 of them, and their
 * allocation is paid in garbage collection. The spans' parent context is passed explicitly (the stretch's context,
 * light: observability/light-context.ts); `within` makes a call's span the active context only for instrumentation
 * below agentry (an HTTP client's spans nest under `chat`).
 */
import {
  context as otelContext,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import type {
  ChatInfo,
  ChatTelemetry,
  RunTelemetry,
  TelemetryAttributes,
  ToolInfo,
  ToolTelemetry,
} from '../core/telemetry.js';
import { ModelError, type ModelRequest, type ModelResponse, type ToolUseBlock } from '../models/provider.js';

/** The micro-credits of the ledger as credits, as the API shows them. */
export const credits = (micros: number): number => micros / 1_000_000;

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

/** What a stretch's spans share: where they are recorded, and whether message contents go with them. */
export interface RunScope {
  tracer: Tracer;
  capture: boolean;
  /** Called when the stretch ends (the tracer forgets its open span). */
  ended(agentId: string, span: Span): void;
}

/** A recorded stretch of an agent's work: its `invoke_agent` span, and what its calls held and were charged. */
export class RecordedRun implements RunTelemetry {
  /** The parent context of every chat and tool span of the stretch. */
  readonly context: Context;
  private reserved = 0;
  private charged = 0;

  constructor(
    private readonly scope: RunScope,
    private readonly agentId: string,
    private readonly span: Span,
    parent: Context,
    /** The agent's attributes, built once: every chat and tool span of the stretch carries them (the SDK copies). */
    readonly agentAttributes: Attributes,
  ) {
    this.context = trace.setSpan(parent, span);
  }

  chat(request: ModelRequest, info: ChatInfo): ChatTelemetry {
    this.reserved += info.reservedMicros;
    return new ChatCall(this, this.scope, request, info);
  }

  tool(use: ToolUseBlock, info: ToolInfo): ToolTelemetry {
    this.reserved += info.reservedMicros;
    return new ToolCall(this, this.scope, use, info);
  }

  event(name: string, attributes?: TelemetryAttributes): void {
    this.span.addEvent(name, attributes);
  }

  /** A call's charge, counted into the stretch's. */
  addCharged(micros: number): void {
    this.charged += micros;
  }

  end(): void {
    this.scope.ended(this.agentId, this.span);
    this.span.setAttributes({
      'agentry.credits.reserved': credits(this.reserved),
      'agentry.credits.charged': credits(this.charged),
    });
    this.span.end();
  }
}

/** One model call of a recorded stretch: its `chat` span (which a sampler may still drop). */
class ChatCall implements ChatTelemetry {
  private readonly span: Span;
  private readonly recording: boolean;

  constructor(
    private readonly run: RecordedRun,
    private readonly scope: RunScope,
    request: ModelRequest,
    private readonly info: ChatInfo,
  ) {
    const sampling = {
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': info.providerName,
      'gen_ai.request.model': info.upstreamModel,
    };
    this.span = scope.tracer.startSpan(
      `chat ${info.upstreamModel}`,
      { kind: SpanKind.CLIENT, attributes: sampling },
      run.context,
    );
    this.recording = this.span.isRecording();
    // The rest only for a span that records: a dropped one builds none of it, message contents included.
    if (!this.recording) return;
    this.span.setAttributes(run.agentAttributes);
    this.span.setAttributes({
      'agentry.model': request.model,
      'gen_ai.request.max_tokens': request.maxTokens,
      'agentry.credits.reserved': credits(info.reservedMicros),
    });
    if (scope.capture) {
      this.span.setAttributes({
        'gen_ai.system_instructions': JSON.stringify([{ type: 'text', content: request.system }]),
        'gen_ai.input.messages': messagesJson(request),
      });
    }
  }

  // The span is the active context even when it records nothing: a sampled-out call says so downstream.
  within<T>(fn: () => Promise<T>): Promise<T> {
    return otelContext.with(trace.setSpan(this.run.context, this.span), fn);
  }

  end({ response, error, chargedMicros }: { response?: ModelResponse; error?: unknown; chargedMicros?: number }): void {
    if (chargedMicros !== undefined) this.run.addCharged(chargedMicros);
    const span = this.span;
    if (!this.recording) return span.end();
    if (response) {
      span.setAttributes({
        'gen_ai.response.model': response.model ?? this.info.upstreamModel,
        'gen_ai.response.finish_reasons': [response.stopReason],
        'gen_ai.usage.input_tokens':
          response.usage.inputTokens +
          (response.usage.cacheReadInputTokens ?? 0) +
          (response.usage.cacheCreationInputTokens ?? 0),
        'gen_ai.usage.output_tokens': response.usage.outputTokens,
      });
      if (this.scope.capture) span.setAttribute('gen_ai.output.messages', outputJson(response));
    }
    if (chargedMicros !== undefined) span.setAttribute('agentry.credits.charged', credits(chargedMicros));
    if (error !== undefined) recordError(span, error);
    span.end();
  }
}

/** One tool call of a recorded stretch: its `execute_tool` span (which a sampler may still drop). */
class ToolCall implements ToolTelemetry {
  /** A plain field, worked out once: the tool context and the children it spawns read it. */
  readonly traceparent: string | null;
  private readonly span: Span;
  private readonly recording: boolean;

  constructor(
    private readonly run: RecordedRun,
    scope: RunScope,
    use: ToolUseBlock,
    private readonly info: ToolInfo,
  ) {
    this.span = scope.tracer.startSpan(
      `execute_tool ${use.name}`,
      {
        kind: SpanKind.INTERNAL,
        attributes: { 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': use.name },
      },
      run.context,
    );
    this.recording = this.span.isRecording();
    if (!this.recording) {
      this.traceparent = traceparentOf(this.span);
      return;
    }
    this.traceparent = traceparentOfRecorded(this.span);
    this.span.setAttributes(run.agentAttributes);
    this.span.setAttributes({
      'gen_ai.tool.call.id': use.id,
      'gen_ai.tool.type': info.type,
      'agentry.credits.reserved': credits(info.reservedMicros),
    });
    if (scope.capture) this.span.setAttribute('gen_ai.tool.call.arguments', JSON.stringify(use.input ?? {}));
  }

  within<T>(fn: () => Promise<T>): Promise<T> {
    return otelContext.with(trace.setSpan(this.run.context, this.span), fn);
  }

  end({
    isError,
    error,
    suspended,
    chargedMicros,
  }: {
    isError: boolean;
    error?: unknown;
    suspended?: boolean;
    chargedMicros: number;
  }): void {
    this.run.addCharged(chargedMicros);
    const span = this.span;
    if (!this.recording) return span.end();
    span.setAttribute('agentry.credits.charged', credits(chargedMicros));
    if (suspended) span.setAttribute('agentry.tool.suspended', true);
    if (!this.info.registered) recordError(span, new Error('unknown tool'), 'no tool of that name');
    else if (error !== undefined) recordError(span, error);
    else if (isError) {
      span.setAttribute('error.type', 'tool_error');
      span.setStatus({ code: SpanStatusCode.ERROR });
    }
    span.end();
  }
}
