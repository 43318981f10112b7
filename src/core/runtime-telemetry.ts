/**
 * @module core/runtime-telemetry
 * How a runtime tells the outside what happens: the log line and the telemetry of every status change, where errors
 * that belong to no caller go (the `error` event, the logger, else the console), and the tracer added at open. The
 * observers themselves live elsewhere (core/telemetry.ts holds their interface; the tracer comes from the package's
 * defaults, the Prometheus metrics from `agentry-runtime/http`).
 */
import type { AgentRow } from '../storage/adapter.js';
import type { RuntimeEvents } from './events.js';
import { defaultTracing } from './runtime-defaults.js';
import type { ResolvedRuntimeOptions, RuntimeLogger } from './runtime-options.js';
import type { StatusWaiters } from './status-waiters.js';
import type { TelemetryHub } from './telemetry.js';

/** Reports an error of an agent's work (or of a background service, named in brackets: `(timers)`). */
export type ErrorReporter = (error: unknown, agentId: string) => void;

/**
 * Errors nobody awaits: to the `error` event's listeners and the logger; with neither, to `console.error`, so they
 * are never silent.
 */
export function errorReporter(events: RuntimeEvents, logger: RuntimeLogger | undefined): ErrorReporter {
  return (error, agentId) => {
    logger?.error({ err: error, agent_id: agentId }, 'agent error');
    if (events.listenerCount('error') > 0) events.emit('error', { error, agent_id: agentId });
    else if (!logger) console.error(`agentry: agent ${agentId}:`, error);
  };
}

/** Every status change: its waiters are told, the telemetry observers see it, and the logger writes a line. */
export function observeStatusChanges(
  events: RuntimeEvents,
  to: { waiters: StatusWaiters; telemetry: TelemetryHub; logger: RuntimeLogger | undefined },
): void {
  events.statusHooks.push((row: AgentRow, previous) => {
    to.waiters.notify(row.agent_id, row);
    if (!to.telemetry.empty) to.telemetry.statusChanged(row, previous);
    to.logger?.info(
      {
        agent_id: row.agent_id,
        parent_id: row.parent_id,
        status: row.status,
        previous,
        status_message: row.status_message,
        // The W3C traceparent's trace id: the line joins the agent's trace in a log search.
        ...(row.trace_context ? { trace_id: row.trace_context.slice(3, 35) } : {}),
      },
      'agent status changed',
    );
  });
}

/** Adds the tracer of the `tracing` option (the package's default one) unless it is `false` or not available. */
export async function installTracing(
  telemetry: TelemetryHub,
  tracing: ResolvedRuntimeOptions['tracing'],
): Promise<void> {
  if (tracing === false) return;
  const tracer = await defaultTracing(tracing ?? {});
  if (tracer) telemetry.add(tracer);
}
