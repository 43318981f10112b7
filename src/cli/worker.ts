/**
 * @module cli/worker
 * `agentry worker`: a process that steps agents and serves nothing. On PostgreSQL it is one worker among any number
 * (`serve` processes are workers too): it claims runnable agents with a lease, steps them, and continues those of a
 * worker that died once its leases expire (README, "Several processes"). On SQLite it is the one process that drives
 * the file's agents (agents an application created with a `scheduler: 'manual'` runtime, say); a `serve` on the same
 * file is then refused, as a second runner always is on SQLite.
 *
 * It prints one line when it is up, on stderr (stdout carries the JSON log lines only) —
 * `agentry worker ready (database: …, worker …)` — and on SIGINT or SIGTERM gives
 * up its leases, closes the runtime (agents in flight stay ACTIVE and another worker continues them) and exits 0.
 */
import type { LevelWithSilent } from 'pino';
import { AgentRuntime } from '../index.js';
import { startTraceExportFromEnv } from '../observability/otel-sdk.js';
import {
  COMMON_OPTIONS,
  displayDb,
  concurrencySettings,
  mcpServersOption,
  openStorage,
  parseCommandArgs,
  positionals,
  resolveDb,
  storageSettings,
  UsageError,
  WORKER_OPTIONS,
  WORKER_OPTIONS_USAGE,
} from './common.js';
import { commandModel, untilSignal } from './lifecycle.js';
import { createServeLogger, flushLogAtExit, LOG_LEVELS } from './logging.js';

export const usage = `Usage: agentry worker [--db ./agentry.db] [--mcp-config <file>] [--demo] [--log-level info] [--exclusive] [--lease-ms <ms>] [--heartbeat-ms <ms>] [--gone-after-ms <ms>] [--max-connections <n>] [--run-slots <n>] [--claim-ahead <n>]

Steps agents without serving HTTP. On a postgres:// database, start as many as you like beside \`agentry serve\`
processes: each is a worker that claims runnable agents with a lease (see README, "Several processes"). On a SQLite
file it is the one process that steps the file's agents. It never creates an account: \`agentry serve\` does.
Prints "agentry worker ready" once it is up; SIGINT or SIGTERM stops it (its agents continue in another worker).

Options:
  --db <path>           SQLite file or postgres:// URL (default $AGENTRY_DB, else ./agentry.db)
  --mcp-config <file>   MCP servers whose tools agents may use ({"mcpServers": {...}}; else $AGENTRY_MCP_CONFIG)
  --demo                a scripted stand-in plays the model (as in \`agentry serve --demo\`): offline, no key
  --log-level <level>   fatal, error, warn, info, debug, trace or silent (default info); JSON lines on stdout
                        (the ready line goes to stderr)
${WORKER_OPTIONS_USAGE}

Traces are exported over OTLP/HTTP as by \`agentry serve\` (OTEL_EXPORTER_OTLP_ENDPOINT).
The model provider reads ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL for any server that speaks the Messages API).`;

export async function run(args: string[]): Promise<number> {
  const { values, positionals: rest } = parseCommandArgs(args, {
    ...COMMON_OPTIONS,
    ...WORKER_OPTIONS,
    'mcp-config': { type: 'string' },
    demo: { type: 'boolean', default: false },
    'log-level': { type: 'string', default: 'info' },
  });
  positionals(rest, [], usage);
  const logLevel = values['log-level'] as LevelWithSilent;
  if (!LOG_LEVELS.includes(logLevel)) {
    throw new UsageError(`--log-level must be one of ${LOG_LEVELS.join(', ')}, got ${values['log-level']}`);
  }
  const db = resolveDb(values.db);
  const settings = storageSettings(db, values);
  const traces = await startTraceExportFromEnv();
  const logger = createServeLogger(logLevel, process.env, traces ? { activeSpan: traces.activeSpan } : {});
  flushLogAtExit(logger);
  const model = commandModel(values.demo);
  let runtime: AgentRuntime;
  try {
    runtime = await AgentRuntime.open({
      storage: await openStorage(db, settings),
      model,
      ...mcpServersOption(values['mcp-config']),
      ...concurrencySettings(db, values),
      logger,
    });
  } catch (error) {
    await traces?.shutdown();
    throw error;
  }
  const workerId = runtime.storage.workers?.workerId;
  const mode = workerId !== undefined ? `worker ${workerId}` : 'the only process driving this database';
  // SIGINT and SIGTERM are handled before the line that says it is up: a supervisor may stop it at once.
  const stopped = untilSignal(logger, async () => {
    await runtime.close();
    await traces?.shutdown();
  });
  console.error(`agentry worker ready (database: ${displayDb(db)}, ${mode})`);
  logger.info({ worker_id: workerId ?? null, traces: traces?.protocol ?? null }, 'agentry worker started');
  return stopped;
}
