/**
 * @module tools/tool-source
 * A set of tools that changes while the runtime runs: an MCP server's tools appear when it starts and change when it
 * says so (`notifications/tools/list_changed`). The runtime's registry asks its sources for their tools at every step,
 * so a change reaches the model from the next step on. Core knows only this interface; the MCP client that implements
 * it (`src/mcp/`) is handed to the core by the package's entry point ({@link provideMcpToolSource}), as the built-in
 * tools are (`tools/platform.ts`).
 */
import type { PriceTable } from '../core/credits.js';
import { AgentryError } from '../errors.js';
import type { Tool } from './define-tool.js';
import type { ToolStatus } from './platform.js';

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
  /** Stops everything the source started (processes, connections) and waits until it is gone. */
  close(): Promise<void>;
}

/** What the runtime gives the MCP factory besides the user's `mcpServers` option. */
export interface McpToolSourceContext {
  /** The runtime's price table: an MCP tool costs `prices.tools["mcp__<server>__<tool>"]` credits a call (default 0). */
  prices: PriceTable;
}

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
    'mcpServers needs the MCP client of the package entry point (import { AgentRuntime } from "agentry")',
  );
}
