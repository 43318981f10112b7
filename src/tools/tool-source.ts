/**
 * @module tools/tool-source
 * A set of tools that changes while the runtime runs: an MCP server's tools appear when it starts and change when it
 * says so (`notifications/tools/list_changed`). The runtime's registry asks its sources for their tools at every step,
 * so a change reaches the model from the next step on. Core knows only this interface; the MCP client that implements
 * it (`src/mcp/`) is handed to the core by the package's entry point ({@link provideMcpToolSource}), as the built-in
 * tools are (`tools/platform.ts`).
 */
import { AgentryError } from '../errors.js';
import type { Tool } from './define-tool.js';
import type { PlatformServices, ToolStatus } from './platform.js';

/** Tools that come and go while the runtime runs. */
export interface ToolSource {
  /**
   * The tools offered now. Called at every step: return the same array while nothing changed (the registry keeps
   * the model's tool specs of an array it has seen).
   */
  tools(): readonly Tool[];
  /**
   * Called before a step reads {@link tools}: starts what starts on first use and waits (bounded) until it is known.
   * Returns undefined when there is nothing to wait for, so a step of a runtime with a started source costs no await.
   */
  prepare?(): Promise<void> | undefined;
  /** Readiness of the source's parts and tools (`agentry tools`, `runtime.toolStatus()`). */
  status(): ToolStatus[];
  /**
   * Called once when the runtime has opened its storage: what MCP servers' requests need while a call runs (a
   * sampling request answered by the calling agent's model, billed to it; progress shown as its status message).
   */
  attach?(services: PlatformServices): void;
  /** Stops everything the source started (processes, connections) and waits until it is gone. */
  close(): Promise<void>;
}

/**
 * The tools' part of the runtime's price table (`AgentRuntime.open({ prices })`): credits per call, by tool name. The
 * runtime's whole table (core/credits.ts) fits it; tool sources need no more of core than this.
 */
export interface ToolPrices {
  tools: Readonly<Record<string, number>>;
}

/** What the runtime gives the MCP factory besides the user's `mcpServers` option. */
export interface McpToolSourceContext {
  /** The runtime's prices: an MCP tool costs `prices.tools["mcp__<server>__<tool>"]` credits a call (default 0). */
  prices: ToolPrices;
  /** The embedding application's answer to servers that ask a person for input (`onMcpElicitation`). */
  onElicitation?: McpElicitationHandler | undefined;
}

/** What a server asks a person for (MCP `elicitation/create`, form mode). */
export interface McpElicitationRequest {
  /** The server's name in the configuration. */
  server: string;
  /** The agent whose tool call the request came with, when it is known. */
  agentId: string | undefined;
  /** The server's question, for the person. */
  message: string;
  /** JSON Schema of the answer the server wants (a flat object of plain fields). */
  requestedSchema: Record<string, unknown>;
}

/** The person's answer: `accept` with the fields, `decline`, or `cancel` (dismissed). */
export interface McpElicitationResult {
  action: 'accept' | 'decline' | 'cancel';
  content?: Record<string, string | number | boolean | string[]>;
}

/**
 * Answers servers that ask a person for input. Without one, agentry does not declare the `elicitation` capability
 * (no person is at hand), and a request a server sends anyway is declined with a message that says so.
 *
 * @example
 * AgentRuntime.open({ mcpServers, onMcpElicitation: async (req) => ({ action: 'decline' }) });
 */
export type McpElicitationHandler = (request: McpElicitationRequest) => Promise<McpElicitationResult>;

/**
 * Makes the source for the runtime's `mcpServers` option (undefined: the environment's `AGENTRY_MCP_CONFIG`), or null
 * when no server is configured.
 */
export type McpToolSourceFactory = (mcpServers: unknown, context: McpToolSourceContext) => ToolSource | null;

let mcpFactory: McpToolSourceFactory | undefined;

/** Called once by the package's entry point. */
export function provideMcpToolSource(factory: McpToolSourceFactory): void {
  mcpFactory = factory;
}

/**
 * The MCP tool source of a runtime, or null when no server is configured. Servers passed while the entry point did
 * not provide the MCP client (core used on its own) are `not_configured`.
 */
export function createMcpToolSource(mcpServers: unknown, context: McpToolSourceContext): ToolSource | null {
  if (mcpFactory) return mcpFactory(mcpServers, context);
  if (mcpServers === undefined) return null;
  throw new AgentryError(
    'not_configured',
    'mcpServers needs the MCP client of the package entry point (import { AgentRuntime } from "agentry-runtime")',
  );
}
