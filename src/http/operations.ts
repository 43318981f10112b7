/**
 * @module http/operations
 * The routes for operators, outside the API and its keys: `GET /healthz` (the process answers), `GET /readyz` (the
 * runtime is open, not shutting down, and its storage answers) and, when mounted, `GET /metrics` (Prometheus text).
 * They reveal nothing else: no version, no counts, no reason beyond ok or unavailable.
 */
import type { AgentRuntime } from '../core/agent-runtime.js';
import { runtimeMetrics } from '../observability/metrics.js';

export type OperationsRoute = 'healthz' | 'readyz' | 'metrics';

const NO_STORE = { 'cache-control': 'no-store' };

function statusResponse(ok: boolean, method: string): Response {
  const body = method === 'HEAD' ? null : JSON.stringify({ status: ok ? 'ok' : 'unavailable' });
  return new Response(body, {
    status: ok ? 200 : 503,
    headers: { 'content-type': 'application/json; charset=utf-8', ...NO_STORE },
  });
}

/** Starts counting at once (a scrape later must see what happened before it), when `/metrics` is mounted. */
export function mountMetrics(runtime: AgentRuntime): void {
  runtimeMetrics(runtime);
}

/** Answers one of the operations routes. */
export async function operationsResponse(
  route: OperationsRoute,
  runtime: AgentRuntime,
  method: string,
): Promise<Response> {
  if (route === 'healthz') return statusResponse(true, method);
  if (route === 'readyz') return statusResponse(await runtime.ready(), method);
  const metrics = runtimeMetrics(runtime);
  const text = await metrics.render();
  return new Response(method === 'HEAD' ? null : text, {
    status: 200,
    headers: { 'content-type': metrics.contentType, ...NO_STORE },
  });
}
