/**
 * @module cli
 * The `agentry` command. A small dispatcher: each command group lives in its own file (`serve.ts`, `keys.ts`, …),
 * loaded only when it runs. To add a command, add one line to {@link COMMANDS} and one file.
 */
import { readFileSync } from 'node:fs';
import { AgentryError } from '../index.js';
import { CommandFailure, didYouMean, UsageError, type CommandModule } from './common.js';

/** Command name -> one-line summary and its module. */
export const COMMANDS: Record<string, { summary: string; load: () => Promise<CommandModule> }> = {
  run: {
    summary: 'run one agent here until it completes (live progress; Ctrl-C pauses)',
    load: () => import('./run.js'),
  },
  serve: { summary: 'serve the HTTP API (SQLite at ./agentry.db by default)', load: () => import('./serve.js') },
  worker: {
    summary: 'step agents without HTTP (on PostgreSQL: one more worker beside the serve processes)',
    load: () => import('./worker.js'),
  },
  keys: { summary: 'create, list or delete API keys', load: () => import('./keys.js') },
  credits: { summary: 'add credits or show the balance', load: () => import('./credits.js') },
  subscription: { summary: 'activate or deactivate the subscription', load: () => import('./subscription.js') },
  agents: {
    summary: 'list, show, pause, resume or delete agents; download their artifacts; see their outbox',
    load: () => import('./agents.js'),
  },
  tools: { summary: 'list the tools agents can use, ready or not, and why', load: () => import('./tools.js') },
  gc: {
    summary: "forget (or delete) finished agents' work older than a duration; the ledger stays",
    load: () => import('./gc.js'),
  },
  mcp: {
    summary: 'serve agentry as an MCP server on stdio (for Claude Desktop, Claude Code, …)',
    load: () => import('./mcp.js'),
  },
};

/** The package's version, from its package.json (two levels up from both src/cli and dist/cli). */
export function version(): string {
  const manifest = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  return manifest.version;
}

function usage(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((n) => n.length));
  const lines = Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`);
  return [
    'Usage: agentry <command> [options]',
    '',
    'Commands:',
    ...lines,
    '',
    'Every command takes --db <path or postgres:// URL> (default: $AGENTRY_DB, else ./agentry.db).',
    'On PostgreSQL, `serve` and `worker` may run many times at once: each process is a worker that steps agents under a',
    'lease; --exclusive, --lease-ms ($AGENTRY_LEASE_MS), --heartbeat-ms ($AGENTRY_HEARTBEAT_MS), --gone-after-ms',
    '($AGENTRY_GONE_AFTER_MS), --run-slots ($AGENTRY_RUN_SLOTS), --claim-ahead ($AGENTRY_CLAIM_AHEAD) and',
    '--max-connections ($AGENTRY_PG_MAX_CONNECTIONS) set how (`agentry worker --help`).',
    'Run `agentry <command> --help` for its options, `agentry --version` for the version.',
  ].join('\n');
}

/** Runs the CLI with `argv` (without `node` and the script); resolves with the exit code. */
export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    console.log(usage());
    return name === undefined ? 2 : 0;
  }
  if (name === '--version' || name === '-v' || name === 'version') {
    console.log(version());
    return 0;
  }
  const command = Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined;
  if (!command) {
    const known = [...Object.keys(COMMANDS), 'help', 'version'];
    const what = name.startsWith('-') ? 'option' : 'command';
    const hint = didYouMean(name, name.startsWith('-') ? ['--help', '--version'] : known);
    console.error(`agentry: unknown ${what} ${JSON.stringify(name)}${hint}\n\n${usage()}`);
    return 2;
  }
  const module = await command.load();
  if (rest.includes('--help') || rest.includes('-h')) {
    console.log(module.usage);
    return 0;
  }
  try {
    return await module.run(rest);
  } catch (error) {
    if (error instanceof UsageError) {
      console.error(`agentry ${name}: ${error.message}${error.showUsage ? `\n\n${module.usage}` : ''}`);
      return 2;
    }
    if (error instanceof CommandFailure) {
      console.error(`agentry ${name}: ${error.message}`);
      return 1;
    }
    if (AgentryError.isInstance(error)) {
      console.error(`agentry ${name}: ${error.message}`);
      return 1;
    }
    console.error(`agentry ${name}: unexpected error:`, error);
    return 1;
  }
}

process.exitCode = await main(process.argv.slice(2));
