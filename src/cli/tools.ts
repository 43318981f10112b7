/**
 * @module cli/tools
 * `agentry tools`: every tool an agent can use, whether it is ready, and what backs it or what to set. Configuration
 * comes from the environment (README.md#tools), as for `agentry run` and `agentry serve`.
 */
import { AgentRuntime, anthropicProvider, memoryStorage, type ToolStatus } from '../index.js';
import { COMMON_OPTIONS, mcpServersOption, parseCommandArgs, positionals } from './common.js';
import { formatModelIds, resolvedModelIds } from './model-ids.js';

export const usage = `Usage: agentry tools [--json] [--mcp-config <file>]

  Lists each tool agents can use — the runtime's own, the built-in tools and their backends — ready or not, and
  why. Built-in tools are configured from the environment: BRAVE_API_KEY, TAVILY_API_KEY, EXA_API_KEY or
  SEARXNG_URL for web_search; AGENTRY_FETCH_ALLOW for the addresses read_page may reach although private.
  Below the tools: the upstream model behind svc-1-lite and svc-1-ultra (AGENTRY_MODEL_LITE, AGENTRY_MODEL_ULTRA)
  and whether the server lists it (GET /v1/models).
  MCP servers (--mcp-config, else AGENTRY_MCP_CONFIG) are started to list their tools, or why they failed.`;

export async function run(args: string[]): Promise<number> {
  const { values, positionals: rest } = parseCommandArgs(args, {
    ...COMMON_OPTIONS,
    json: { type: 'boolean' },
    'mcp-config': { type: 'string' },
  });
  positionals(rest, [], usage);
  // Nothing runs: a runtime in memory, with no scheduler, only to ask which tools it would offer.
  const model = anthropicProvider();
  const runtime = await AgentRuntime.open({
    storage: memoryStorage(),
    model,
    scheduler: 'manual',
    ...mcpServersOption(values['mcp-config']),
  });
  try {
    await runtime.startTools();
    const tools = runtime.toolStatus();
    if (values.json) console.log(JSON.stringify(tools, null, 2));
    else {
      console.log(formatToolTable(tools));
      // The upstream model behind each public model, checked against the server's list when one is configured.
      const ids = await resolvedModelIds(model);
      if (ids.length > 0) console.log(`\nModels:\n${formatModelIds(ids)}`);
    }
    return 0;
  } finally {
    await runtime.close();
  }
}

export function formatToolTable(tools: ToolStatus[]): string {
  const width = Math.max(...tools.map((t) => t.name.length));
  return tools
    .map((t) => {
      const state = t.ready ? 'ready    ' : 'not ready';
      const where = t.offered ? t.source : `${t.source}, not offered`;
      return `${t.name.padEnd(width)}  ${state}  ${`(${where})`.padEnd(24)} ${t.detail}`.trimEnd();
    })
    .join('\n');
}
