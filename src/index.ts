/**
 * @module agentry-runtime
 * An embeddable, in-process agent runtime: give it a goal, an agent works on it with tools and sub-agents on a credit
 * budget; poll or subscribe to its status, progress and transcript; pause, resume or delete it.
 *
 * @example
 * import { AgentRuntime } from 'agentry-runtime';
 * const runtime = await AgentRuntime.open(); // SQLite at ./agentry.db, Claude from ANTHROPIC_API_KEY
 * const { agent_id } = await runtime.create({ goal: 'Summarise the three latest Node.js releases' });
 * console.log(await runtime.waitFor(agent_id));
 */
import { createBuiltinPlatform } from './builtins.js';
import { provideToolPlatform } from './tools/platform.js';
import { provideMcpToolSource } from './tools/tool-source.js';
import { createMcpToolSource } from './mcp/tool-source.js';
import { provideRuntimeDefaults } from './core/runtime-defaults.js';
import { packageDefaults } from './defaults.js';

// The entry point is the composition root: it gives the core its built-in tools (the core imports no backend).
provideToolPlatform(createBuiltinPlatform);
// …and the MCP client behind the `mcpServers` option.
provideMcpToolSource(createMcpToolSource);
// …and what AgentRuntime.open() uses when it is not given a storage, a model or `tracing: false` (src/defaults.ts).
provideRuntimeDefaults(packageDefaults);

export { AgentRuntime, DEFAULT_SYSTEM_PROMPT } from './core/agent-runtime.js';
export type { RuntimeOptions, AccountScope, RuntimeLogger } from './core/agent-runtime.js';
export type {
  Telemetry,
  RunTelemetry,
  ChatTelemetry,
  ToolTelemetry,
  ChatInfo,
  ToolInfo,
  TelemetryAttributes,
} from './core/telemetry.js';
export { parseDuration } from './core/retention.js';
export type { RetentionOptions, SweepResult } from './core/retention.js';
export { Accounts, API_KEY_PREFIX, hashApiKey } from './core/accounts.js';
export type { AccountInfo, ApiKeyInfo, CreatedApiKey, LedgerEntry } from './core/accounts.js';
export { AgentryError, ERROR_STATUS, httpStatusOf } from './errors.js';
export type { ErrorCode } from './errors.js';
export {
  AGENT_STATUSES,
  TRANSITIONS,
  TERMINAL_STATUSES,
  assertTransition,
  nextStatus,
  isTerminal,
} from './base/status.js';
export type { AgentStatus, StatusTrigger } from './base/status.js';
export * from './core/schemas.js';
export { DEFAULT_PRICES, modelCost } from './core/credits.js';
export type { PriceTable, ModelPrice } from './core/credits.js';
export type { AgentEvents, AgentEventName } from './core/events.js';
export { systemClock } from './base/clock.js';
export type { Clock } from './base/clock.js';
export { defineTool, ToolCompletion } from './tools/define-tool.js';
export type {
  Tool,
  ToolDefinition,
  ToolContext,
  ToolOutput,
  ChildTask,
  SubAgentTask,
  PageContent,
} from './tools/define-tool.js';
export type { BuiltinToolsOptions, ToolStatus } from './tools/platform.js';
// monitor: what a `wait` returns, and the durable timers lent to tools that work between calls.
export type { MonitorChange } from './tools/builtin/monitor/index.js';
export type { Timers, TimerSpec, TimerHandler } from './tools/platform.js';
export type {
  ToolSource,
  McpElicitationHandler,
  McpElicitationRequest,
  McpElicitationResult,
} from './tools/tool-source.js';
// MCP: the config file format, and agentry's own tools as an MCP server (the SDK loads on first use).
export { parseMcpServers, readMcpConfigFile } from './mcp/config.js';
export type { McpServerConfig } from './mcp/config.js';
export { createAgentryMcpServer, registerAgentryTools } from './mcp/agentry-server.js';
export type { AgentryMcpScope } from './mcp/agentry-server.js';
export { readPageTool } from './tools/builtin/read-page.js';
export { webSearchTool } from './tools/builtin/web-search.js';
// message_person: its transport interface and the two defaults, for custom transports and tests.
export { MessageSendError } from './messaging/message-transport.js';
export type {
  MessageChannel,
  MessageSendFailure,
  MessageTransport,
  OutgoingMessage,
  SentMessage,
} from './messaging/message-transport.js';
export { smtpTransport } from './messaging/smtp.js';
export type { SmtpTransportOptions } from './messaging/smtp.js';
export { twilioTransport } from './messaging/twilio.js';
export type { TwilioTransportOptions } from './messaging/twilio.js';
export type { MessagingOptions } from './messaging/message-transport.js';
export { DEFAULT_MESSAGING_LIMITS } from './messaging/outbox.js';
export type { MessagingLimits } from './messaging/outbox.js';
// The web layer (guarded fetch, page reading, search clients) is the subpath `agentry-runtime/web`: it loads on first use.
export type { SearchProvider, SearchQuery, SearchResult } from './web/search-provider.js';
export { ModelError } from './models/provider.js';
export type * from './models/provider.js';
export { anthropicProvider, DEFAULT_ANTHROPIC_MODELS, hasAnthropicCredentials } from './models/anthropic.js';
export type { AnthropicProviderOptions } from './models/anthropic.js';
export { DEFAULT_THINKING } from './models/thinking.js';
export type { ThinkingSetting, ThinkingEffort } from './models/thinking.js';
export type { ResolvedModelId } from './models/model-ids.js';
export { memoryStorage } from './storage/memory.js';
export { sqliteStorage } from './storage/sqlite/index.js';
export type { SqliteStorageAdapter, SqliteStorageOptions } from './storage/sqlite/index.js';
export type * from './storage/adapter.js';
export { LeaseLostError } from './storage/workers.js';
export type { WorkerBus, WorkerCoordination, WorkerHooks, WorkerTopic } from './storage/workers.js';
