/**
 * @module observability/metrics
 * Prometheus metrics of a runtime, on prom-client: the GenAI client histograms of the OpenTelemetry conventions in
 * their Prometheus spelling (`gen_ai_client_token_usage`, `gen_ai_client_operation_duration_seconds`), agents by
 * status, model turns, tool calls and their durations by tool, credits charged by model and by tool, credit waits,
 * lane queue depth and calls in flight, run slots, `agentry_build_info` (agentry's version), and Node's own metrics
 * (event-loop lag among them). `gen_ai_request_model` is the provider's own model id, as in traces.
 *
 * A tool call is counted once, when it ends (`ok` or `error`): a call that waits for its sub-agents (a spawn) runs in
 * two stretches, and only the last, which gives its result, counts; its duration is that stretch's.
 *
 * Labels take only bounded values: statuses, model ids the provider serves, names of registered tools (a tool name the
 * model made up is `_unknown`), lane names, token types and error types. Never an agent id.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { AgentRuntime } from '../core/agent-runtime.js';
import type { RunTelemetry, Telemetry } from '../core/telemetry.js';
import { ModelError } from '../models/provider.js';
import { packageVersion } from '../version.js';

/** The semantic conventions' bucket boundaries. */
const TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864];
const DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];
const TOOL_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

/** The metrics of one runtime. */
export interface RuntimeMetrics {
  readonly registry: Registry;
  /** `text/plain; version=0.0.4; charset=utf-8` */
  readonly contentType: string;
  /** The exposition text (reads the agents' counts from storage). */
  render(): Promise<string>;
  /** Stops observing the runtime. */
  close(): void;
}

const byRuntime = new WeakMap<AgentRuntime, RuntimeMetrics>();

function errorType(error: unknown): string {
  if (error instanceof ModelError && error.status !== undefined) return String(error.status);
  if (error instanceof ModelError) return 'ModelError';
  if (error instanceof Error && error.name === 'AbortError') return 'AbortError';
  return '_OTHER';
}

const seconds = (startedAt: number) => (performance.now() - startedAt) / 1000;

/**
 * The Prometheus metrics of a runtime; one set per runtime (a second call returns the same). `createFetchHandler(…,
 * { metrics: true })` serves them at `/metrics`; `agentry serve --metrics-port` on a port of their own.
 *
 * @example
 * const metrics = runtimeMetrics(runtime);
 * app.get('/metrics', async (_req, res) => res.type(metrics.contentType).send(await metrics.render()));
 */
export function runtimeMetrics(runtime: AgentRuntime): RuntimeMetrics {
  const existing = byRuntime.get(runtime);
  if (existing) return existing;
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });

  const tokenUsage = new Histogram({
    name: 'gen_ai_client_token_usage',
    help: 'Tokens used per model call (gen_ai.client.token.usage), by token type.',
    labelNames: ['gen_ai_operation_name', 'gen_ai_provider_name', 'gen_ai_request_model', 'gen_ai_token_type'],
    buckets: TOKEN_BUCKETS,
    registers: [registry],
  });
  const operationDuration = new Histogram({
    name: 'gen_ai_client_operation_duration_seconds',
    help: 'Duration of model calls (gen_ai.client.operation.duration).',
    labelNames: ['gen_ai_operation_name', 'gen_ai_provider_name', 'gen_ai_request_model', 'error_type'],
    buckets: DURATION_BUCKETS,
    registers: [registry],
  });
  const steps = new Counter({
    name: 'agentry_steps_total',
    help: 'Model turns agents took (answered model calls).',
    labelNames: ['model'],
    registers: [registry],
  });
  const toolCalls = new Counter({
    name: 'agentry_tool_calls_total',
    help: 'Tool calls by tool and outcome (ok, error), each counted once when it ends.',
    labelNames: ['tool', 'outcome'],
    registers: [registry],
  });
  const toolDuration = new Histogram({
    name: 'agentry_tool_call_duration_seconds',
    help: 'Duration of tool calls by tool and outcome (ok, error), from the lane slot to the result.',
    labelNames: ['tool', 'outcome'],
    buckets: TOOL_BUCKETS,
    registers: [registry],
  });
  const creditsCharged = new Counter({
    name: 'agentry_credits_charged_total',
    help: 'Credits debited, by kind (model, tool) and item (the model or tool).',
    labelNames: ['kind', 'item'],
    registers: [registry],
  });
  const creditWaits = new Counter({
    name: 'agentry_credit_waits_total',
    help: "Credit reservations that waited for other calls' holds.",
    registers: [registry],
  });
  new Gauge({
    name: 'agentry_build_info',
    help: "agentry's version: always 1, the version as a label.",
    labelNames: ['version'],
    registers: [registry],
  }).set({ version: packageVersion() }, 1);
  new Gauge({
    name: 'agentry_agents',
    help: 'Agents by status (the whole database).',
    labelNames: ['status'],
    registers: [registry],
    async collect() {
      this.reset();
      const counts = await runtime.storage.countAgentsByStatus();
      for (const [status, n] of Object.entries(counts)) this.set({ status }, n ?? 0);
    },
  });
  new Gauge({
    name: 'agentry_lane_queue_depth',
    help: 'Calls waiting for a slot in a lane (models, tools, and the named tool lanes).',
    labelNames: ['lane'],
    registers: [registry],
    collect() {
      this.reset();
      for (const l of runtime.load().lanes) this.set({ lane: l.lane }, l.waiting);
    },
  });
  new Gauge({
    name: 'agentry_lane_in_flight',
    help: 'Calls running in a lane.',
    labelNames: ['lane'],
    registers: [registry],
    collect() {
      this.reset();
      for (const l of runtime.load().lanes) this.set({ lane: l.lane }, l.active);
    },
  });
  new Gauge({
    name: 'agentry_run_slots_in_use',
    help: 'Agents stepping in this process.',
    registers: [registry],
    collect() {
      this.set(runtime.load().runSlots.running);
    },
  });
  new Gauge({
    name: 'agentry_run_slot_queue_depth',
    help: 'Runnable agents waiting for a run slot in this process.',
    registers: [registry],
    collect() {
      this.set(runtime.load().runSlots.waiting);
    },
  });

  const observer: Telemetry = {
    agentRun(): RunTelemetry {
      return {
        chat(request, info) {
          const startedAt = performance.now();
          const base = {
            gen_ai_operation_name: 'chat',
            gen_ai_provider_name: info.providerName,
            gen_ai_request_model: info.upstreamModel,
          };
          return {
            within: (fn) => fn(),
            end({ response, error }) {
              operationDuration.observe(
                { ...base, error_type: error === undefined ? '' : errorType(error) },
                seconds(startedAt),
              );
              if (!response) return;
              steps.inc({ model: request.model });
              const u = response.usage;
              const input = u.inputTokens + (u.cacheReadInputTokens ?? 0) + (u.cacheCreationInputTokens ?? 0);
              tokenUsage.observe({ ...base, gen_ai_token_type: 'input' }, input);
              tokenUsage.observe({ ...base, gen_ai_token_type: 'output' }, u.outputTokens);
            },
          };
        },
        tool(use, info) {
          const startedAt = performance.now();
          const tool = info.registered ? use.name : '_unknown';
          return {
            traceparent: null,
            within: (fn) => fn(),
            end({ isError, suspended }) {
              // Waiting for its sub-agents, the call is not over: it counts once, when its last stretch ends.
              if (suspended) return;
              const outcome = isError ? 'error' : 'ok';
              toolCalls.inc({ tool, outcome });
              toolDuration.observe({ tool, outcome }, seconds(startedAt));
            },
          };
        },
        event(name) {
          if (name === 'agentry.credit_wait') creditWaits.inc();
        },
        end() {},
      };
    },
  };
  const removeObserver = runtime.instrument(observer);
  const removeListener = runtime.on('credits.charged', (e) =>
    creditsCharged.inc({ kind: e.kind, item: e.item }, e.credits),
  );

  const metrics: RuntimeMetrics = {
    registry,
    contentType: registry.contentType,
    render: () => registry.metrics(),
    close() {
      removeObserver();
      removeListener();
      byRuntime.delete(runtime);
    },
  };
  byRuntime.set(runtime, metrics);
  return metrics;
}
