/**
 * @module agentry-runtime/http
 * The HTTP service (README.md#http-service) on any server: {@link createFetchHandler} is the router
 * (`Request -> Response`, for Hono, Bun, Deno, workers) and {@link createNodeHandler} mounts it on node:http, Express,
 * Fastify or Connect.
 *
 * @example
 * import { createServer } from 'node:http';
 * import { AgentRuntime } from 'agentry-runtime';
 * import { createNodeHandler } from 'agentry-runtime/http';
 *
 * const runtime = await AgentRuntime.open();
 * const { apiKey } = await runtime.accounts.create({ name: 'me', credits: 100 });
 * createServer(createNodeHandler(runtime)).listen(8787);
 * console.log(`curl -H 'x-api-key: ${apiKey?.key}' http://127.0.0.1:8787/api/agents`);
 */
export {
  createFetchHandler,
  isUnmatchedResponse,
  DEFAULT_BODY_LIMIT_BYTES,
  DEFAULT_RATE_LIMIT,
} from './fetch-handler.js';
export type { ConsoleOptions } from './console/index.js';
export type { FetchHandler, FetchHandlerOptions, ResponseInfo } from './fetch-handler.js';
export type { StreamEndReason, StreamInfo } from './event-streams.js';
export { runtimeMetrics } from '../observability/metrics.js';
export type { RuntimeMetrics } from '../observability/metrics.js';
export { createNodeHandler, nodeHandlerFor } from './node-handler.js';
export type { NodeHandler } from './node-handler.js';
export { buildOpenApiDocument } from './openapi.js';
export type { OpenApiOptions } from './openapi.js';
export type { RateLimitOptions } from './rate-limit.js';
export { withClientAddress } from './client-address.js';
export { DEFAULT_FAILED_AUTH_LIMIT } from './auth-guard.js';
export { DEFAULT_EVENT_STREAM_LIMITS } from './event-streams.js';
export type { EventStreamLimits } from './event-streams.js';
export { startServer } from './server.js';
export type { RunningServer, ServerOptions } from './server.js';
