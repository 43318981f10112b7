/**
 * @module core/telemetry
 * The observability extension point of the loop: what an agent's stretch of work, its model calls and its tool calls
 * look like from outside. The loop calls it at a few points and knows nothing of OpenTelemetry or Prometheus; the
 * tracing (observability/otel.ts) and metrics (observability/metrics.ts) implementations live outside core/.
 *
 * The default is {@link noTelemetry}: every hook does nothing, and the loop pays one property read per call.
 */
import type { ModelProvider, ModelRequest, ModelResponse, ToolUseBlock } from '../models/provider.js';
import type { AgentRow } from '../storage/adapter.js';
import type { AgentStatus } from '../base/status.js';

/** Attribute values of span events (OpenTelemetry's primitive attribute values). */
export type TelemetryAttributes = Record<string, string | number | boolean>;

/** Who serves an agent's model: `gen_ai.provider.name`, and the upstream model behind agentry's public id. */
export interface ModelInfo {
  /** `gen_ai.provider.name` of the model provider (`_OTHER` when it does not say). */
  providerName: string;
  /** The provider's own id of the model (`gen_ai.request.model`), or the public id when the provider does not say. */
  upstreamModel: string;
}

/** The {@link ModelInfo} of a public model id as `provider` serves it. */
export function modelInfoOf(provider: ModelProvider, publicModel: string): ModelInfo {
  let upstream: string | undefined;
  try {
    upstream = provider.upstreamModel?.(publicModel);
  } catch {
    // a provider that cannot say: the public id stands in
  }
  return { providerName: provider.providerName ?? '_OTHER', upstreamModel: upstream ?? publicModel };
}

/** What an observer hears when a root agent is created. */
export interface AgentCreatedInfo extends ModelInfo {
  /** The caller's W3C `traceparent` (HTTP header, MCP `_meta`), when it sent one: the agent's trace continues it. */
  traceparent: string | null;
}

/** What an observer hears when an agent gets a run slot. */
export interface AgentRunInfo extends ModelInfo {
  /** The agent was running when the last process stopped: this stretch recovers it. */
  recovered: boolean;
}

/**
 * Observes a runtime. Every method must be cheap and must never throw: it runs on the agents' hot path.
 *
 * @example
 * const counting: Telemetry = {
 *   agentRun: () => ({
 *     chat: () => ({ within: (fn) => fn(), end: () => calls++ }),
 *     tool: () => ({ traceparent: null, within: (fn) => fn(), end: () => {} }),
 *     event: () => {},
 *     end: () => {},
 *   }),
 * };
 * runtime.instrument(counting);
 */
export interface Telemetry {
  /**
   * A root agent is being created. Returns the trace context (a W3C `traceparent`) to store with it, so that every
   * stretch of its work, in this process or the next, joins the same trace; or null.
   */
  agentCreated?(agent: AgentRow, info: AgentCreatedInfo): string | null;
  /** An agent got a run slot in this process: observes its work until it gives the slot up. */
  agentRun(agent: AgentRow, info: AgentRunInfo): RunTelemetry;
  /** An agent's status changed (anywhere in this process, running or not). */
  statusChanged?(agent: AgentRow, previous: AgentStatus): void;
}

/** One stretch of an agent's work (an `invoke_agent` span). */
export interface RunTelemetry {
  chat(request: ModelRequest, info: ChatInfo): ChatTelemetry;
  tool(use: ToolUseBlock, info: ToolInfo): ToolTelemetry;
  /** Something that happened to the agent meanwhile: a credit wait, a pause, a crash recovery. */
  event(name: string, attributes?: TelemetryAttributes): void;
  end(): void;
}

export interface ChatInfo extends ModelInfo {
  /** Micro-credits held for the call. */
  reservedMicros: number;
}

export interface ToolInfo {
  /** The tool as registered, or undefined when the model named no tool the agent has. */
  registered: boolean;
  /** `gen_ai.tool.type`: `function` for the runtime's and custom tools, `extension` for MCP servers' tools. */
  type: 'function' | 'extension';
  reservedMicros: number;
}

export interface ChatTelemetry {
  /** Runs the provider call with this call's span as the active context (HTTP instrumentation nests under it). */
  within<T>(fn: () => Promise<T>): Promise<T>;
  end(outcome: { response?: ModelResponse; error?: unknown; chargedMicros?: number }): void;
}

export interface ToolTelemetry {
  /** The W3C `traceparent` of this call, stored with the children it spawns and sent to MCP servers; or null. */
  readonly traceparent: string | null;
  within<T>(fn: () => Promise<T>): Promise<T>;
  end(outcome: {
    isError: boolean;
    error?: unknown;
    suspended?: boolean;
    chargedMicros: number;
    result?: string;
  }): void;
}

/**
 * Runs a model call observed by `run`, when there is one: the call's telemetry starts now and ends with the answer
 * (and what it cost) or the error.
 */
export async function observeChat(
  run: RunTelemetry | undefined,
  request: ModelRequest,
  info: ChatInfo,
  costOf: (response: ModelResponse) => number,
  generate: () => Promise<ModelResponse>,
): Promise<ModelResponse> {
  const chat = run?.chat(request, info);
  // Nothing observes the call: no wrapper, and its cost is not worked out for nobody.
  if (!chat || chat === noChatTelemetry) return generate();
  try {
    const response = await chat.within(generate);
    chat.end({ response, chargedMicros: costOf(response) });
    return response;
  } catch (error) {
    chat.end({ error });
    throw error;
  }
}

/**
 * The telemetry of a model call that nobody observes. An observer returns this very object for a call it does not
 * record (a span its sampler dropped): {@link observeChat} then runs the call bare.
 */
export const noChatTelemetry: ChatTelemetry = { within: (fn) => fn(), end: () => undefined };
const noTool: ToolTelemetry = { traceparent: null, within: (fn) => fn(), end: () => undefined };
const noRun: RunTelemetry = {
  chat: () => noChatTelemetry,
  tool: () => noTool,
  event: () => undefined,
  end: () => undefined,
};

/** The default: observes nothing. */
export const noTelemetry: Telemetry = { agentRun: () => noRun };

/**
 * Several observers as one (tracing and metrics side by side). Observers can be added and removed while the runtime
 * runs; a stretch of work keeps the observers it started with.
 */
export class TelemetryHub implements Telemetry {
  private observers: Telemetry[] = [];
  /** Agents that were running when the last process stopped, until their first stretch here starts. */
  private recovered = new Set<string>();

  /** Marks agents whose next stretch of work is a crash recovery (a span event says so). */
  markRecovered(ids: readonly string[]): void {
    if (this.observers.length === 0) return;
    for (const id of ids) this.recovered.add(id);
  }

  wasRecovered(agentId: string): boolean {
    return this.recovered.size > 0 && this.recovered.delete(agentId);
  }

  get empty(): boolean {
    return this.observers.length === 0;
  }

  add(observer: Telemetry): () => void {
    this.observers = [...this.observers, observer];
    return () => {
      this.observers = this.observers.filter((o) => o !== observer);
    };
  }

  agentCreated(agent: AgentRow, info: AgentCreatedInfo): string | null {
    let traceparent: string | null = null;
    for (const o of this.observers) traceparent = o.agentCreated?.(agent, info) ?? traceparent;
    return traceparent;
  }

  agentRun(agent: AgentRow, info: AgentRunInfo): RunTelemetry {
    const obs = this.observers;
    if (obs.length === 0) return noRun;
    if (obs.length === 1) return obs[0]!.agentRun(agent, info);
    const runs = obs.map((o) => o.agentRun(agent, info));
    return {
      chat: (request, chatInfo) => combineCalls(runs.map((r) => r.chat(request, chatInfo))),
      tool: (use, toolInfo) => combineCalls(runs.map((r) => r.tool(use, toolInfo))),
      event: (name, attributes) => runs.forEach((r) => r.event(name, attributes)),
      end: () => runs.forEach((r) => r.end()),
    };
  }

  statusChanged(agent: AgentRow, previous: AgentStatus): void {
    for (const o of this.observers) o.statusChanged?.(agent, previous);
  }
}

/** Calls observed by several observers: the first trace context wins, and `within` nests them. */
function combineCalls<C extends ChatTelemetry | ToolTelemetry>(calls: C[]): C & { traceparent: string | null } {
  const traceparent = calls.map((c) => ('traceparent' in c ? c.traceparent : null)).find((t) => t !== null) ?? null;
  return {
    traceparent,
    within: <T>(fn: () => Promise<T>) => calls.reduceRight<() => Promise<T>>((inner, c) => () => c.within(inner), fn)(),
    end: (outcome: never) => calls.forEach((c) => c.end(outcome)),
  } as unknown as C & { traceparent: string | null };
}
