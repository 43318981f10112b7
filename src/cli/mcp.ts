/**
 * @module cli/mcp
 * `agentry mcp`: agentry as an MCP server on stdio, for Claude Desktop, Claude Code, Cursor or any MCP client. It
 * runs agents in this process on the SQLite file (`--db`), for one account (`--account`, default the local one), with
 * the tools `create_agent`, `get_agent`, `list_agents`, `pause_agent`, `resume_agent` and `delete_agent`
 * (`src/mcp/agentry-server.ts`). stdout carries the protocol: everything else goes to stderr. It exits when the client
 * closes stdin, or on SIGINT / SIGTERM; agents still running stay ACTIVE and continue on the next start.
 */
import { AgentRuntime, anthropicProvider, createAgentryMcpServer, hasAnthropicCredentials } from '../index.js';
import { COMMON_OPTIONS, mcpServersOption, openStorage, parseCommandArgs, positionals, resolveDb } from './common.js';

export const usage = `Usage: agentry mcp [--db ./agentry.db] [--account <id>] [--mcp-config <file>]

Serves agentry as an MCP server on stdio: create_agent, get_agent, list_agents, pause_agent, resume_agent,
delete_agent. Agents run in this process (one process per database: not beside \`agentry serve\` on the same file).

Options:
  --db <path>           SQLite file or postgres:// URL (default $AGENTRY_DB, else ./agentry.db)
  --account <id>        the account whose agents it creates and sees (default: the local account)
  --mcp-config <file>   MCP servers whose tools the agents may use ({"mcpServers": {...}}; else $AGENTRY_MCP_CONFIG)

In Claude Desktop's claude_desktop_config.json:
  {"mcpServers": {"agentry": {"command": "npx", "args": ["agentry", "mcp", "--db", "/path/to/agentry.db"],
                              "env": {"ANTHROPIC_API_KEY": "sk-ant-..."}}}}

The agents' model reads ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL for a server that speaks the Messages API).`;

export async function run(args: string[]): Promise<number> {
  const { values, positionals: rest } = parseCommandArgs(args, {
    ...COMMON_OPTIONS,
    account: { type: 'string' },
    'mcp-config': { type: 'string' },
  });
  positionals(rest, [], usage);
  if (!hasAnthropicCredentials()) {
    process.stderr.write(
      'agentry mcp: warning: ANTHROPIC_API_KEY is not set, so agents will fail at their first step. Set it (or ' +
        'ANTHROPIC_BASE_URL) in the env of this server in your MCP client config.\n',
    );
  }
  const runtime = await AgentRuntime.open({
    storage: await openStorage(resolveDb(values.db)),
    model: anthropicProvider(),
    ...mcpServersOption(values['mcp-config']),
  });
  try {
    const accountId = values.account ?? runtime.defaultAccountId;
    await runtime.accounts.get(accountId); // not_found, with its id, before the client connects
    const { StdioServerTransport } = await import('@modelcontextprotocol/sdk/server/stdio.js');
    const server = await createAgentryMcpServer(runtime, { accountId });
    const transport = new StdioServerTransport();
    const ended = new Promise<string>((resolve) => {
      process.stdin.once('end', () => resolve('stdin closed'));
      transport.onclose = () => resolve('transport closed');
      process.once('SIGINT', () => resolve('SIGINT'));
      process.once('SIGTERM', () => resolve('SIGTERM'));
    });
    await server.connect(transport);
    await ended;
    await server.close().catch(() => undefined);
    return 0;
  } finally {
    await runtime.close();
  }
}
