/**
 * @module cli/serve
 * `agentry serve`: the HTTP API of DESIGN §10 on node:http, over SQLite. On its first start against a database it
 * creates the `serve` account (active subscription, some credits) and prints its API key once, on a line of its own:
 * `API key: agk_…`. SIGINT or SIGTERM closes the server and the runtime (agents in flight stay ACTIVE in the database
 * and continue on the next start), then exits 0. `--demo` puts the scripted stand-in of `npm run demo` in the model's
 * place (see `demo-model.ts`), so the API can be tried offline.
 */
import { AgentRuntime, anthropicProvider, hasAnthropicCredentials } from '../index.js';
import { startServer, type FetchHandlerOptions, type RunningServer } from '../http/index.js';
import { demoModel } from './demo-model.js';
import {
  COMMON_OPTIONS,
  formatCredits,
  mcpServersOption,
  openStorage,
  parseCommandArgs,
  positionals,
  resolveDb,
  SERVE_ACCOUNT_ID,
  UsageError,
} from './common.js';

/** Credits the serve account starts with. */
export const INITIAL_CREDITS = 100;

export const usage = `Usage: agentry serve [--port 8787] [--host 127.0.0.1] [--db ./agentry.db] [--rate-limit 120:20|off] [--cors <origins>] [--mcp-config <file>] [--no-console] [--demo]

Serves the agent API (POST/GET /api/agents, GET /api/agents/{id}, pause, resume, DELETE) with x-api-key auth,
and the same tools as \`agentry mcp\` to MCP clients at /mcp (Streamable HTTP, same x-api-key), and the console (settings
and a live dashboard, signed in with an API key) at /console.
On the first start against a database it creates an account with ${INITIAL_CREDITS} credits and prints its API key once.

Options:
  --port <n>            port to listen on; 0 picks a free one (default 8787)
  --host <address>      address to bind (default 127.0.0.1)
  --db <path>           SQLite file or postgres:// URL (default $AGENTRY_DB, else ./agentry.db)
  --rate-limit <c:r>    token bucket per API key: burst c, r per second; "off" disables (default 120:20)
  --cors <origins>      comma-separated origins allowed to call from a browser, or "*" (default: no CORS)
  --mcp-config <file>   MCP servers whose tools agents may use ({"mcpServers": {...}}; else $AGENTRY_MCP_CONFIG)
  --no-console          do not serve the console at /console
  --demo                a scripted stand-in plays the model (as in \`npm run demo\`): offline, no key; every agent
                        plans, takes a few seconds, and completes with an answer that says it is a stand-in's

The model provider reads ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL for any server that speaks the Messages API).`;

export async function run(args: string[]): Promise<number> {
  const { values, positionals: rest } = parseCommandArgs(args, {
    ...COMMON_OPTIONS,
    port: { type: 'string', default: '8787' },
    host: { type: 'string', default: '127.0.0.1' },
    'rate-limit': { type: 'string' },
    cors: { type: 'string' },
    'mcp-config': { type: 'string' },
    'no-console': { type: 'boolean', default: false },
    demo: { type: 'boolean', default: false },
  });
  positionals(rest, [], usage);
  const port = Number(values.port);
  if (!/^\d{1,5}$/.test(values.port) || port > 65535)
    throw new UsageError(`--port must be 0..65535, got ${values.port}`);
  const handlerOptions: FetchHandlerOptions = { mcp: true, console: !values['no-console'] };
  if (values['rate-limit'] !== undefined) handlerOptions.rateLimit = parseRateLimit(values['rate-limit']);
  if (values.cors !== undefined) {
    handlerOptions.cors = {
      origins:
        values.cors.trim() === '*'
          ? '*'
          : values.cors
              .split(',')
              .map((o) => o.trim())
              .filter(Boolean),
    };
  }

  const db = resolveDb(values.db);
  if (values.demo) {
    console.log(
      'Demo mode: a scripted stand-in plays the model (no key, no network). Agents complete with a canned answer ' +
        'after a few seconds; run without --demo, with ANTHROPIC_API_KEY set, for real work.',
    );
  } else if (!hasAnthropicCredentials()) {
    console.error(
      'warning: ANTHROPIC_API_KEY is not set, so agents will fail at their first step. Set it (or ANTHROPIC_BASE_URL ' +
        'for a server that speaks the Messages API) and restart.',
    );
  }
  const runtime = await AgentRuntime.open({
    storage: await openStorage(db),
    model: values.demo ? demoModel() : anthropicProvider(),
    ...mcpServersOption(values['mcp-config']),
  });
  let server: RunningServer;
  try {
    await ensureServeAccount(runtime);
    // HTTP on a thread of its own: polls are answered there while this thread steps the agents.
    server = await startServer(runtime, { ...handlerOptions, port, host: values.host });
  } catch (error) {
    await runtime.close();
    throw error;
  }
  console.log(`agentry listening on ${server.url} (database: ${db})`);
  if (handlerOptions.console) console.log(`Console: ${server.url}/console (sign in with one of the account’s keys)`);

  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: NodeJS.Signals) => {
      if (stopping) {
        console.error(`agentry: ${signal} again, exiting without waiting`);
        process.exit(130);
      }
      stopping = true;
      console.error(`agentry: ${signal}, shutting down`);
      server
        .close()
        .then(() => runtime.close())
        .then(
          () => {
            resolve(0);
            process.exit(0);
          },
          (error: unknown) => {
            console.error('agentry: shutdown failed:', error);
            resolve(1);
            process.exit(1);
          },
        );
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
}

/** First start against this database: create the serve account and print its key, once. */
async function ensureServeAccount(runtime: AgentRuntime): Promise<void> {
  const existing = await runtime.accounts.list();
  if (existing.some((a) => a.account_id === SERVE_ACCOUNT_ID)) return;
  const { account, apiKey } = await runtime.accounts.create({
    id: SERVE_ACCOUNT_ID,
    name: 'agentry serve',
    credits: INITIAL_CREDITS,
    subscribe: true,
  });
  console.log(
    `Created account "${account.account_id}" with ${formatCredits(account.balance)} credits and an active subscription.`,
  );
  console.log(`API key: ${apiKey?.key ?? ''}`);
  console.log('Store the key now: it is not shown again (`agentry keys create` makes another).');
}

function parseRateLimit(value: string): false | { capacity: number; refillPerSecond: number } {
  if (value === 'off') return false;
  const match = /^(\d+):(\d+(?:\.\d+)?)$/.exec(value);
  const capacity = Number(match?.[1]);
  const refillPerSecond = Number(match?.[2]);
  if (!match || capacity < 1 || !(refillPerSecond > 0)) {
    throw new UsageError(`--rate-limit must look like 120:20 (burst:per-second) or "off", got ${value}`);
  }
  return { capacity, refillPerSecond };
}
