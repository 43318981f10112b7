/**
 * @module mcp/tool-source
 * The runtime's MCP servers as one {@link ToolSource}: every configured server's connection (shared by all agents),
 * their tools as `mcp__<server>__<tool>`, and their readiness for `agentry tools`. A server starts when an agent first
 * needs the tools (its first step); a step waits for a starting server at most its startup timeout, then goes on
 * without its tools.
 */
import type { Tool } from '../tools/define-tool.js';
import type { PlatformServices, ToolStatus } from '../tools/platform.js';
import type { McpElicitationHandler, McpToolSourceContext, ToolPrices, ToolSource } from '../tools/tool-source.js';
import { parseMcpServers, readMcpConfigFile, type McpServerConfig } from './config.js';
import { answerSampling } from './sampling.js';
import { McpServerConnection } from './server-connection.js';
import { toolsLeftOut, toolsOfServer, type LeftOut, type McpToolHost } from './tools.js';

export class McpToolSource implements ToolSource {
  readonly connections: McpServerConnection[];
  private toolsCache: readonly Tool[] | undefined;
  /** Per server: its tools, or why they cannot be offered (a name collision). */
  private readonly perServer = new Map<McpServerConnection, { tools: Tool[]; error?: string; left?: LeftOut[] }>();
  /** The runtime's services, once it has opened (sampling, status messages). */
  private services: PlatformServices | undefined;
  /** What the tools use of the runtime while they run. */
  private readonly toolHost: McpToolHost = {
    setStatusMessage: (agentId, message, ifStartsWith) =>
      this.services?.setStatusMessage(agentId, message, ifStartsWith) ?? Promise.resolve(),
  };

  constructor(
    servers: McpServerConfig[],
    private readonly prices: ToolPrices,
    onElicitation?: McpElicitationHandler,
  ) {
    this.connections = servers.map((config) => {
      const connection: McpServerConnection = new McpServerConnection(
        config,
        () => this.toolsChanged(connection),
        undefined,
        {
          onElicitation,
          sample: (agentId, params, signal) => {
            if (!this.services) throw new Error('agentry: the runtime is not open yet');
            return answerSampling(this.services, config.name, agentId, params, config.samplingMaxTokens, signal);
          },
        },
      );
      return connection;
    });
  }

  attach(services: PlatformServices): void {
    this.services = services;
  }

  tools(): readonly Tool[] {
    this.toolsCache ??= this.connections.flatMap((c) => this.perServer.get(c)?.tools ?? []);
    return this.toolsCache;
  }

  /**
   * Starts servers never started (awaited: the step that needs them waits for them, at most their startup timeout);
   * a failed server with no known tools is tried again in the background once its retry time has come.
   */
  prepare(): Promise<void> | undefined {
    let waits: Array<Promise<unknown>> | undefined;
    const now = Date.now();
    for (const c of this.connections) {
      if (c.state === 'idle') (waits ??= []).push(c.start().catch(() => undefined));
      else if (c.refreshing) (waits ??= []).push(c.refreshing);
      else if (c.state === 'failed' && c.tools.length === 0 && now >= c.retryAt) void c.start().catch(() => undefined);
    }
    return waits ? Promise.all(waits).then(() => undefined) : undefined;
  }

  /** Starts every server and waits until each is ready or failed (`agentry tools`). */
  async startAll(): Promise<void> {
    await Promise.all(this.connections.map((c) => c.start().catch(() => undefined)));
  }

  status(): ToolStatus[] {
    const out: ToolStatus[] = [];
    for (const c of this.connections) {
      const own = this.perServer.get(c);
      const ready = c.state === 'ready' && own?.error === undefined;
      let detail: string;
      if (own?.error !== undefined) detail = `failed: ${own.error}`;
      else if (c.state === 'idle') detail = 'not started (starts when an agent first needs its tools)';
      else if (c.state === 'ready') detail = `ready, ${own?.tools.length ?? 0} tools`;
      else if (c.state === 'failed') detail = `failed: ${c.failure ?? 'unknown'}`;
      else if (c.state === 'exited') detail = `exited (starts again on the next call): ${c.failure ?? ''}`.trimEnd();
      else detail = c.state;
      out.push({
        name: `mcp__${c.config.prefix}`,
        source: 'mcp',
        ready,
        detail: `${c.description} — ${detail}`,
        offered: true,
      });
      for (const left of own?.left ?? []) {
        out.push({ name: left.name, source: 'mcp', ready: false, detail: left.detail, offered: false });
      }
      for (const tool of own?.tools ?? []) {
        out.push({
          name: tool.name,
          source: 'mcp',
          ready,
          detail: `MCP server ${c.config.name}${tool.idempotent ? ', read-only or idempotent' : ''}`,
          offered: true,
        });
      }
    }
    return out;
  }

  async close(): Promise<void> {
    await Promise.all(this.connections.map((c) => c.close()));
  }

  private toolsChanged(connection: McpServerConnection): void {
    try {
      this.perServer.set(connection, {
        tools: toolsOfServer(connection, this.prices, this.toolHost),
        left: toolsLeftOut(connection),
      });
    } catch (err) {
      this.perServer.set(connection, { tools: [], error: err instanceof Error ? err.message : String(err) });
    }
    this.toolsCache = undefined;
  }
}

/**
 * The factory the package entry point gives the core: the `mcpServers` option, else the file `AGENTRY_MCP_CONFIG`
 * names, else none (null).
 */
export function createMcpToolSource(mcpServers: unknown, context: McpToolSourceContext): ToolSource | null {
  let servers: McpServerConfig[];
  if (mcpServers !== undefined) servers = parseMcpServers(mcpServers);
  else if (process.env.AGENTRY_MCP_CONFIG) {
    const file = process.env.AGENTRY_MCP_CONFIG;
    servers = parseMcpServers(readMcpConfigFile(file), process.env, `${file}: mcpServers`);
  } else return null;
  return servers.length === 0 ? null : new McpToolSource(servers, context.prices, context.onElicitation);
}
