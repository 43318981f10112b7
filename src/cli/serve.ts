/**
 * @module cli/serve
 * `agentry serve`: the HTTP API (README.md#http-service) on node:http, over SQLite or PostgreSQL. On its first start
 * against a database it creates the `serve` account (active subscription, some credits) and prints its API key once, on
 * a line of its own: `API key: agk_…`; later starts (and the other processes of a simultaneous start) print
 * `Database ready: …`. Those lines and the other words for people go to stderr: stdout carries the JSON log lines only
 * (logging.ts). On PostgreSQL every `serve` is also a worker, so N of them are N workers behind N stateless HTTP front
 * ends. SIGINT or SIGTERM closes the server and the runtime (agents in flight stay ACTIVE in the database and continue
 * on the next start), then exits 0. `--demo` puts the scripted stand-in of `npm run demo` in the model's place (see
 * `demo-model.ts`), so the API can be tried offline.
 */
import { resolvedModelIds, unlistedModelWarnings } from './model-ids.js';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { LevelWithSilent, Logger } from 'pino';
import { AgentRuntime } from '../index.js';
import { runtimeMetrics } from '../observability/metrics.js';
import { startTraceExportFromEnv } from '../observability/otel-sdk.js';
import { createServeLogger, flushLogAtExit, LOG_LEVELS } from './logging.js';
import { startServer, type FetchHandlerOptions, type RunningServer } from '../http/index.js';
import { commandModel, untilSignal } from './lifecycle.js';
import {
  CommandFailure,
  COMMON_OPTIONS,
  displayDb,
  concurrencySettings,
  formatCredits,
  mcpServersOption,
  openStorage,
  parseCommandArgs,
  positionals,
  resolveDb,
  SERVE_ACCOUNT_ID,
  storageSettings,
  UsageError,
  WORKER_OPTIONS,
  WORKER_OPTIONS_USAGE,
} from './common.js';

/** Credits the serve account starts with. */
export const INITIAL_CREDITS = 100;

export const usage = `Usage: agentry serve [--port 8787] [--host 127.0.0.1] [--db ./agentry.db] [--rate-limit 120:20|off] [--cors <origins>] [--mcp-config <file>] [--no-console] [--demo] [--metrics-port <n>] [--metrics-host 127.0.0.1] [--log-level info] [--exclusive] [--lease-ms <ms>] [--heartbeat-ms <ms>] [--gone-after-ms <ms>] [--max-connections <n>] [--run-slots <n>] [--claim-ahead <n>]

Serves the agent API (POST/GET /api/agents, GET /api/agents/{id}, pause, resume, DELETE) with x-api-key auth,
and the same tools as \`agentry mcp\` to MCP clients at /mcp (Streamable HTTP, same x-api-key), and the console (settings
and a live dashboard, signed in with an API key) at /console.
On the first start against a database it creates an account with ${INITIAL_CREDITS} credits and prints its API key once
(later starts print "Database ready").
On PostgreSQL, start it as many times as you like (any ports, any machines): each process is a worker that steps
agents and an HTTP front end that answers for any agent of the database. \`agentry worker\` steps agents without HTTP.

Options:
  --port <n>            port to listen on; 0 picks a free one (default $PORT, else 8787)
  --host <address>      address to bind (default 127.0.0.1)
  --db <path>           SQLite file or postgres:// URL (default $AGENTRY_DB, else ./agentry.db)
  --rate-limit <c:r>    token bucket per API key: burst c, r per second; "off" disables (default 120:20)
  --cors <origins>      comma-separated origins allowed to call from a browser, or "*" (default: no CORS)
  --mcp-config <file>   MCP servers whose tools agents may use ({"mcpServers": {...}}; else $AGENTRY_MCP_CONFIG)
  --no-console          do not serve the console at /console
  --demo                a scripted stand-in plays the model (as in \`npm run demo\`): offline, no key; every agent
                        plans, takes a few seconds, and completes with an answer that says it is a stand-in's
  --metrics-port <n>    serve Prometheus metrics at /metrics on this port too (no API key; nothing else there)
  --metrics-host <addr> address of the metrics listener (default 127.0.0.1)
  --log-level <level>   fatal, error, warn, info, debug, trace or silent (default info); JSON lines on stdout,
                        one per request (every route, polls and /console included) and per event; the lines above,
                        the API key among them, go to stderr
${WORKER_OPTIONS_USAGE}

GET /healthz and /readyz answer without a key. Traces are exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT
(or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set: OTEL_EXPORTER_OTLP_PROTOCOL http/protobuf (default) or http/json,
service name OTEL_SERVICE_NAME (default agentry).

The model provider reads ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL for any server that speaks the Messages API).
AGENTRY_MODEL_LITE and AGENTRY_MODEL_ULTRA pick the upstream models (checked against the server's GET /v1/models at
start: an unlisted one is warned about); AGENTRY_PROMPT_CACHE=off turns prompt caching off.`;

export async function run(args: string[]): Promise<number> {
  const { values, positionals: rest } = parseCommandArgs(args, {
    ...COMMON_OPTIONS,
    ...WORKER_OPTIONS,
    port: { type: 'string' },
    host: { type: 'string', default: '127.0.0.1' },
    'rate-limit': { type: 'string' },
    cors: { type: 'string' },
    'mcp-config': { type: 'string' },
    'no-console': { type: 'boolean', default: false },
    demo: { type: 'boolean', default: false },
    'metrics-port': { type: 'string' },
    'metrics-host': { type: 'string', default: '127.0.0.1' },
    'log-level': { type: 'string', default: 'info' },
  });
  positionals(rest, [], usage);
  const logLevel = values['log-level'] as LevelWithSilent;
  if (!LOG_LEVELS.includes(logLevel)) {
    throw new UsageError(`--log-level must be one of ${LOG_LEVELS.join(', ')}, got ${values['log-level']}`);
  }
  const metricsPort = values['metrics-port'] === undefined ? undefined : Number(values['metrics-port']);
  if (metricsPort !== undefined && (!/^\d{1,5}$/.test(values['metrics-port']!) || metricsPort > 65535)) {
    throw new UsageError(`--metrics-port must be 0..65535, got ${values['metrics-port']}`);
  }
  // The flag, else PORT (as platforms that start the process set it), else 8787.
  const portText = values.port ?? (process.env.PORT?.trim() || '8787');
  const port = Number(portText);
  if (!/^\d{1,5}$/.test(portText) || port > 65535) {
    throw new UsageError(`${values.port === undefined ? 'PORT' : '--port'} must be 0..65535, got ${portText}`);
  }
  const traces = await startTraceExportFromEnv();
  const logger = createServeLogger(logLevel, process.env, traces ? { activeSpan: traces.activeSpan } : {});
  flushLogAtExit(logger);
  const handlerOptions: FetchHandlerOptions = {
    mcp: true,
    console: !values['no-console'],
    onResponse: (info) => logger.info(info, 'request'),
    onStream: (info) => logger.info(info, info.event === 'open' ? 'event stream opened' : 'event stream closed'),
    onError: (err, { request_id }) => logger.error({ err, request_id }, 'request failed'),
  };
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
  const settings = storageSettings(db, values);
  const model = commandModel(values.demo);
  const runtime = await AgentRuntime.open({
    storage: await openStorage(db, settings),
    model,
    ...mcpServersOption(values['mcp-config']),
    ...concurrencySettings(db, values),
    logger,
  });
  let server: RunningServer | undefined;
  let metricsServer: Server | undefined;
  try {
    await ensureServeAccount(runtime);
    // HTTP on a thread of its own: polls are answered there while this thread steps the agents.
    server = await startServer(runtime, { ...handlerOptions, port, host: values.host }).catch((error: unknown) => {
      throw listenFailure(error, values.host, port, 'the API');
    });
    if (metricsPort !== undefined) {
      metricsServer = await startMetricsListener(runtime, metricsPort, values['metrics-host'], logger).catch(
        (error: unknown) => {
          throw listenFailure(error, values['metrics-host'], metricsPort, 'metrics');
        },
      );
    }
  } catch (error) {
    // Everything that started stops, so the process ends: a supervisor must see it exit, not a half-started server.
    await server?.close();
    await runtime.close();
    await traces?.shutdown();
    throw error;
  }
  // SIGINT and SIGTERM are handled before the lines that say all is up: a supervisor may stop it at once.
  const running = server;
  const stopped = untilSignal(logger, async () => {
    metricsServer?.closeAllConnections();
    metricsServer?.close();
    await running.close();
    await runtime.close();
    await traces?.shutdown();
  });
  // The metrics line comes first: "listening" is the line that tells a supervisor (or a test) that all is up.
  if (metricsServer) {
    const { port: boundPort } = metricsServer.address() as AddressInfo;
    console.error(`agentry metrics on http://${hostForUrl(values['metrics-host'])}:${boundPort}/metrics`);
  }
  console.error(`agentry listening on ${server.url} (database: ${displayDb(db)})`);
  if (handlerOptions.console) console.error(`Console: ${server.url}/console (sign in with one of the account’s keys)`);
  logger.info(
    { url: server.url, metrics: metricsServer !== undefined, traces: traces?.protocol ?? null },
    'agentry serve started',
  );
  // Checked once at start, in the background: an upstream id the server does not list would fail every agent of
  // that model at its first call.
  void resolvedModelIds(model).then((ids) => {
    for (const line of unlistedModelWarnings(ids)) console.warn(line);
  });
  return stopped;
}

/** One line naming the address a listener could not take, and why in words (`EADDRINUSE` is "already in use"). */
function listenFailure(error: unknown, host: string, port: number, what: string): CommandFailure {
  const text = String((error as Error)?.message ?? error);
  // startServer's error carries the socket's code in its text (the listener is on the HTTP thread).
  const code = [(error as { code?: unknown })?.code, /\b(EADDRINUSE|EACCES|EADDRNOTAVAIL)\b/.exec(text)?.[1]].find(
    (c) => typeof c === 'string' && /^E[A-Z]+$/.test(c),
  );
  const reason =
    code === 'EADDRINUSE'
      ? 'the port is already in use'
      : code === 'EACCES'
        ? 'permission denied'
        : code === 'EADDRNOTAVAIL'
          ? 'no such address on this machine'
          : text.split('\n')[0]!;
  return new CommandFailure(`cannot listen on ${hostForUrl(host)}:${port} (${what}): ${reason}`);
}

/** The metrics listener: only `GET /metrics`, never behind an API key; anything else is 404. */
async function startMetricsListener(
  runtime: AgentRuntime,
  port: number,
  host: string,
  logger: Logger,
): Promise<Server> {
  const metrics = runtimeMetrics(runtime);
  const server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if (path !== '/metrics' || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('Not found\n');
      return;
    }
    metrics.render().then(
      (text) => res.writeHead(200, { 'content-type': metrics.contentType, 'cache-control': 'no-store' }).end(text),
      (err: unknown) => {
        logger.error({ err }, 'metrics failed');
        res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end('Metrics failed\n');
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return server;
}

function hostForUrl(host: string): string {
  return host.includes(':') ? `[${host}]` : host;
}

/**
 * First start against this database: create the serve account and print its key, once. When several processes start
 * on one empty database at the same moment, the account's insert decides which one creates it
 * (`accounts.createIfAbsent`): that one prints the key, the others that the database is ready.
 */
async function ensureServeAccount(runtime: AgentRuntime): Promise<void> {
  const { account, apiKey, created } = await runtime.accounts.createIfAbsent({
    id: SERVE_ACCOUNT_ID,
    name: 'agentry serve',
    credits: INITIAL_CREDITS,
    subscribe: true,
  });
  if (!created) {
    console.error(`Database ready: account "${account.account_id}" exists (\`agentry keys create\` makes a key).`);
    return;
  }
  console.error(
    `Created account "${account.account_id}" with ${formatCredits(account.balance)} credits and an active subscription.`,
  );
  console.error(`API key: ${apiKey?.key ?? ''}`);
  console.error('Store the key now: it is not shown again (`agentry keys create` makes another).');
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
