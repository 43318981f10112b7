/**
 * @module cli/mcp
 * `agentry mcp`: agentry as an MCP server on stdio, for Claude Desktop, Claude Code, Cursor or any MCP client. It
 * runs agents in this process on the SQLite file (`--db`), for one account (`--account`, default the local one), with
 * the tools `create_agent`, `get_agent`, `list_agents`, `pause_agent`, `resume_agent` and `delete_agent`
 * (`src/mcp/agentry-server.ts`). stdout carries the protocol: everything else goes to stderr.
 *
 * It exits within a second when the client closes stdin, or on SIGINT / SIGTERM, even while agents wait on their
 * model (clients kill a server that lingers): what runs is handed over, not paused — a model request in flight is
 * cancelled, the agents stay ACTIVE and continue from their last saved step when `agentry mcp` (or `agentry serve`)
 * next opens the database. A line on stderr says so, with how many agents were running.
 */
import { AgentRuntime, anthropicProvider, createAgentryMcpServer, hasAnthropicCredentials } from '../index.js';
import { refuseMalformedToolCalls } from '../mcp/agentry-server.js';
import { COMMON_OPTIONS, mcpServersOption, openStorage, parseCommandArgs, positionals, resolveDb } from './common.js';

export const usage = `Usage: agentry mcp [--db ./agentry.db] [--account <id>] [--mcp-config <file>]

Serves agentry as an MCP server on stdio: create_agent, get_agent, list_agents, pause_agent, resume_agent,
delete_agent. Agents run in this process (one process per database: not beside \`agentry serve\` on the same file).

Options:
  --db <path>           SQLite file or postgres:// URL (default $AGENTRY_DB, else ./agentry.db)
  --account <id>        the account whose agents it creates and sees (default: the local account)
  --mcp-config <file>   MCP servers whose tools the agents may use ({"mcpServers": {...}}; else $AGENTRY_MCP_CONFIG)

In Claude Desktop's claude_desktop_config.json:
  {"mcpServers": {"agentry": {"command": "npx", "args": ["-y", "agentry-runtime", "mcp", "--db", "/path/to/agentry.db"],
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
  const db = resolveDb(values.db);
  const runtime = await AgentRuntime.open({
    storage: await openStorage(db),
    model: anthropicProvider(),
    // Steps in flight get this long to finish at exit, then are cancelled: the whole close fits in EXIT_WITHIN_MS.
    closeTimeoutMs: CLOSE_GRACE_MS,
    ...mcpServersOption(values['mcp-config']),
  });
  try {
    const accountId = values.account ?? runtime.defaultAccountId;
    await runtime.accounts.get(accountId); // not_found, with its id, before the client connects
    const { StdioServerTransport } = await import('@modelcontextprotocol/sdk/server/stdio.js');
    const server = await createAgentryMcpServer(runtime, { accountId });
    const transport = new StdioServerTransport();
    const end = new Promise<string>((resolve) => {
      process.stdin.once('end', () => resolve('stdin closed'));
      transport.onclose = () => resolve('the client closed the connection');
      process.once('SIGINT', () => resolve('SIGINT'));
      process.once('SIGTERM', () => resolve('SIGTERM'));
    });
    await server.connect(transport);
    refuseMalformedToolCalls(transport);
    const reason = await end;
    // Whatever takes longer (an MCP server of the agents that is slow to stop) does not keep the client waiting.
    setTimeout(() => {
      process.stderr.write(`agentry mcp: not closed within ${EXIT_WITHIN_MS} ms; exiting now\n`);
      process.exit(0);
    }, EXIT_WITHIN_MS).unref();
    const running = (await runtime.list({ status: 'ACTIVE', limit: 100 })).data.length;
    process.stderr.write(`agentry mcp: ${reason}; ${handOverLine(running, db)}\n`);
    await server.close().catch(() => undefined);
    return 0;
  } finally {
    await runtime.close();
  }
}

/** How long exiting may take in all: MCP clients kill a server that lingers after closing its stdin. */
const EXIT_WITHIN_MS = 900;
/** How long a step in flight gets to finish at exit before it is cancelled. */
const CLOSE_GRACE_MS = 200;

/** The stderr line that says what happens to the agents that were running. */
function handOverLine(running: number, db: string): string {
  if (running === 0) return 'no agent was running; closed.';
  const agents = running === 1 ? '1 agent was' : `${running >= 100 ? '100 or more' : running} agents were`;
  return (
    `${agents} running: handed over, not paused — a model request in flight is cancelled, and they stay ACTIVE ` +
    `and continue from their last saved step when agentry mcp (or agentry serve) next opens ` +
    // A postgres:// URL may carry a password.
    `${/^postgres/i.test(db) ? 'this database' : db}.`
  );
}
