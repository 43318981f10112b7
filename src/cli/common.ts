/**
 * @module cli/common
 * What every command shares: argument parsing on `node:util` (with a "did you mean" for a mistyped flag), where the
 * database is (`--db`, else `AGENTRY_DB`, else `./agentry.db`) and how it is shown (a URL's password masked), which
 * account the admin commands act on, and how failures are printed.
 *
 * The account: `agentry serve` creates one account, with the fixed id `serve`, on its first start against a database.
 * `keys`, `credits`, `subscription` and `agents` act on that account unless `--account <id>` names another one (an
 * account created by an application through `runtime.accounts.create()`).
 */
import { existsSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import { parseArgs as parseNodeArgs, type ParseArgsConfig } from 'node:util';
import { Accounts, AgentryError, AgentRuntime, readMcpConfigFile, sqliteStorage, systemClock } from '../index.js';
import type { StorageAdapter } from '../index.js';
import type PgModule from 'pg';

/** The id of the account `agentry serve` creates and the admin commands act on by default. */
export const SERVE_ACCOUNT_ID = 'serve';

/**
 * A mistake in how the command was called: printed with a hint, exit code 2. With `showUsage`, the command's usage
 * follows the message's one line.
 */
export class UsageError extends Error {
  override name = 'UsageError';
  readonly showUsage: boolean;
  constructor(message: string, options: { showUsage?: boolean } = {}) {
    super(message);
    this.showUsage = options.showUsage ?? false;
  }
}

/**
 * A failure the person at the terminal can act on (a port in use, no database where one was looked for, a database
 * server that does not answer): printed as its one line, without a stack, exit code 1.
 */
export class CommandFailure extends Error {
  override name = 'CommandFailure';
}

/** Levenshtein distance: how many single-character edits turn `a` into `b`. */
export function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length]!;
}

/**
 * The known name closest to a mistyped one, if one is close enough to be what was meant: a prefix of it, or within
 * a third of its length in edits (at least 2, so a swapped pair of letters is found).
 *
 * @example didYouMean('--prot', ['--port', '--host']) // ' (did you mean --port?)'
 */
export function didYouMean(input: string, known: readonly string[]): string {
  let best: { name: string; distance: number } | undefined;
  for (const name of known) {
    const distance = name.startsWith(input) && input.replace(/^-+/, '').length >= 2 ? 1 : editDistance(input, name);
    if (!best || distance < best.distance) best = { name, distance };
  }
  const limit = Math.max(2, Math.ceil(input.replace(/^-+/, '').length / 3));
  return best && best.distance <= limit ? ` (did you mean ${best.name}?)` : '';
}

/** The error for a missing or unknown subcommand, with the command's usage (and the closest of `known`). */
export function subcommandError(sub: string | undefined, usage: string, known: readonly string[] = []): UsageError {
  return new UsageError(
    sub === undefined
      ? `missing subcommand\n\n${usage}`
      : `unknown subcommand ${JSON.stringify(sub)}${didYouMean(sub, known)}\n\n${usage}`,
  );
}

/** One command group: `agentry <name> ...`. */
export interface CommandModule {
  /** Runs the command with the arguments after its name; resolves with the exit code. */
  run(args: string[]): Promise<number>;
  /** Usage text for `agentry <name> --help`. */
  usage: string;
}

type Options = NonNullable<ParseArgsConfig['options']>;

/** Options every command takes. */
export const COMMON_OPTIONS = {
  db: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const satisfies Options;

/** Options of the commands that act on an account. */
export const ACCOUNT_OPTIONS = {
  ...COMMON_OPTIONS,
  account: { type: 'string' },
  json: { type: 'boolean' },
} as const satisfies Options;

/**
 * One line for a `node:util` parseArgs error, in the CLI's words: an unknown flag with the closest known one (Node's
 * own text suggests `-- "--flag"`, with an unbalanced quote), a flag without its value, a value given to a switch.
 */
export function describeParseError(error: unknown, options: Options): string {
  const { code, message } = error as { code?: string; message: string };
  const flags = Object.entries(options).flatMap(([name, o]) => [`--${name}`, ...(o.short ? [`-${o.short}`] : [])]);
  const option = /^Unknown option '([^']+)'/.exec(message)?.[1] ?? /^Option '([^' ]+)/.exec(message)?.[1];
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && option) return `unknown option ${option}${didYouMean(option, flags)}`;
  if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && option) {
    return /does not take an argument/.test(message) ? `${option} takes no value` : `${option} needs a value`;
  }
  if (code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') return message.replace(/\.$/, '');
  return message;
}

/** `node:util` parseArgs, strict, with its errors turned into {@link UsageError}s that show the command's usage. */
export function parseCommandArgs<O extends Options>(
  args: string[],
  options: O,
): ReturnType<typeof parseNodeArgs<{ args: string[]; options: O; allowPositionals: true; strict: true }>> {
  try {
    return parseNodeArgs({ args, options, allowPositionals: true, strict: true });
  } catch (error) {
    throw new UsageError(describeParseError(error, options), { showUsage: true });
  }
}

const URL_SCHEME = /^([a-z][a-z0-9+.-]*):\/\//i;

/**
 * The database: `--db`, else `AGENTRY_DB`, else `./agentry.db`. A URL of any other scheme than `postgres://` or
 * `postgresql://` is refused rather than taken for a SQLite file name (`mysql://…` would otherwise become a file).
 */
export function resolveDb(db: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  const target = db ?? env.AGENTRY_DB;
  if (target === undefined || target.trim() === '') return './agentry.db';
  const scheme = URL_SCHEME.exec(target)?.[1];
  if (scheme !== undefined && !isPostgres(target)) {
    throw new UsageError(
      `${db === undefined ? 'AGENTRY_DB' : '--db'} ${displayDb(target)}: unsupported database ${scheme}:// ` +
        '(a SQLite file path, or a postgres:// URL)',
    );
  }
  return target;
}

/**
 * A database as it may be printed: a URL's password (in its user part, or a `password=` parameter) masked as `***`.
 *
 * @example displayDb('postgres://app:s3cret@db:5432/app') // 'postgres://app:***@db:5432/app'
 */
export function displayDb(target: string): string {
  const match = /^([a-z][a-z0-9+.-]*:\/\/)([^/?#]*)(.*)$/is.exec(target);
  if (!match) return target;
  const [, scheme, authority = '', rest = ''] = match;
  const at = authority.lastIndexOf('@');
  const colon = authority.indexOf(':');
  const userinfo = at >= 0 && colon >= 0 && colon < at ? `${authority.slice(0, colon)}:***` : authority.slice(0, at);
  const host = at >= 0 ? `${userinfo}${authority.slice(at)}` : authority;
  return `${scheme}${host}${rest.replace(/([?&]password=)[^&#]*/gi, '$1***')}`;
}

/**
 * How a process that drives agents on PostgreSQL takes part (README, "Several processes"): `serve` and `worker` take
 * these flags; each falls back to its environment variable, then to postgresStorage's default.
 */
export const WORKER_OPTIONS = {
  exclusive: { type: 'boolean', default: false },
  'lease-ms': { type: 'string' },
  'heartbeat-ms': { type: 'string' },
  'max-connections': { type: 'string' },
  'gone-after-ms': { type: 'string' },
  'run-slots': { type: 'string' },
  'claim-ahead': { type: 'string' },
} as const satisfies Options;

/** The part of `agentry <command> --help` that explains {@link WORKER_OPTIONS}. */
export const WORKER_OPTIONS_USAGE = `  --exclusive           PostgreSQL: this process alone drives the database's agents (an advisory lock refuses a
                        second); default: it is one worker among any number (serve or worker) on the database
  --lease-ms <ms>       PostgreSQL: how long a worker's claim on an agent lasts unless renewed, i.e. how long a dead
                        worker's agents wait before another worker continues them ($AGENTRY_LEASE_MS, default 15000)
  --heartbeat-ms <ms>   PostgreSQL: how often a worker renews its leases and looks for pause and delete requests
                        ($AGENTRY_HEARTBEAT_MS, default 1000, at most a third of the lease and of the grace below)
  --gone-after-ms <ms>  PostgreSQL: a worker silent this long is gone: its agents move to other workers and its
                        credit holds return then, whatever the lease ($AGENTRY_GONE_AFTER_MS, default 3000, at most
                        the lease; a worker that was only paused finds its leases taken, its late writes fenced out)
  --run-slots <n>       agents this process steps at once ($AGENTRY_RUN_SLOTS, default 128)
  --claim-ahead <n>     PostgreSQL: the most agents a worker claims beyond what its free run slots can start now; it
                        claims ahead only as fast as its slots free up, so a busy worker leaves new work to idle ones
                        ($AGENTRY_CLAIM_AHEAD, default 32)
  --max-connections <n> PostgreSQL: the size of this process's connection pool ($AGENTRY_PG_MAX_CONNECTIONS,
                        default 10)`;

/** postgresStorage's part of {@link WORKER_OPTIONS}; the ranges are checked by postgresStorage itself. */
export interface StorageSettings {
  exclusive?: boolean;
  leaseMs?: number;
  heartbeatMs?: number;
  goneAfterMs?: number;
  maxConnections?: number;
}

/** Whether a `--db` value is a PostgreSQL URL (else it is a SQLite file). */
export const isPostgres = (target: string) => /^postgres(?:ql)?:\/\//i.test(target);
/** The flags and variables of {@link WORKER_OPTIONS} read as whole numbers. */
type WorkerValues = {
  exclusive?: boolean;
  'lease-ms'?: string;
  'heartbeat-ms'?: string;
  'max-connections'?: string;
  'gone-after-ms'?: string;
  'run-slots'?: string;
  'claim-ahead'?: string;
};

/** A whole-number flag, else its environment variable, else undefined. */
function wholeNumber(
  flag: string,
  value: string | undefined,
  variable: string,
  env: NodeJS.ProcessEnv,
): number | undefined {
  const text = value ?? env[variable];
  if (text === undefined || text.trim() === '') return undefined;
  if (!/^\d{1,9}$/.test(text.trim())) {
    throw new UsageError(`${value === undefined ? variable : `--${flag}`} must be a whole number, got ${text}`);
  }
  return Number(text);
}

/**
 * The runtime's `concurrency` settings from {@link WORKER_OPTIONS} (`--run-slots`, `--claim-ahead`) and their
 * variables; `AgentRuntime.open()` checks their ranges. `--claim-ahead` is refused with a SQLite database (one process
 * claims nothing there).
 */
export function concurrencySettings(
  target: string,
  values: WorkerValues,
  env: NodeJS.ProcessEnv = process.env,
): { concurrency?: { runSlots?: number; claimAhead?: number } } {
  if (!isPostgres(target) && values['claim-ahead'] !== undefined) {
    throw new UsageError('--claim-ahead: only for a postgres:// database (a SQLite file has one process)');
  }
  const runSlots = wholeNumber('run-slots', values['run-slots'], 'AGENTRY_RUN_SLOTS', env);
  const claimAhead = isPostgres(target)
    ? wholeNumber('claim-ahead', values['claim-ahead'], 'AGENTRY_CLAIM_AHEAD', env)
    : undefined;
  if (runSlots === undefined && claimAhead === undefined) return {};
  return {
    concurrency: {
      ...(runSlots !== undefined ? { runSlots } : {}),
      ...(claimAhead !== undefined ? { claimAhead } : {}),
    },
  };
}

/**
 * {@link StorageSettings} from the parsed {@link WORKER_OPTIONS} and the environment. The flags are refused with a
 * SQLite database (one process drives a SQLite file, always); the variables, set for a whole deployment, are ignored.
 */
export function storageSettings(
  target: string,
  values: WorkerValues,
  env: NodeJS.ProcessEnv = process.env,
): StorageSettings {
  const flags = ['exclusive', 'lease-ms', 'heartbeat-ms', 'max-connections', 'gone-after-ms'].filter(
    (f) => values[f as keyof typeof values] !== undefined && values[f as keyof typeof values] !== false,
  );
  if (!isPostgres(target)) {
    if (flags.length > 0) {
      throw new UsageError(`--${flags.join(', --')}: only for a postgres:// database (a SQLite file has one process)`);
    }
    return {};
  }
  const number = (flag: string, value: string | undefined, variable: string) => wholeNumber(flag, value, variable, env);
  const settings: StorageSettings = {};
  if (values.exclusive) settings.exclusive = true;
  const leaseMs = number('lease-ms', values['lease-ms'], 'AGENTRY_LEASE_MS');
  const heartbeatMs = number('heartbeat-ms', values['heartbeat-ms'], 'AGENTRY_HEARTBEAT_MS');
  const maxConnections = number('max-connections', values['max-connections'], 'AGENTRY_PG_MAX_CONNECTIONS');
  if (leaseMs !== undefined) settings.leaseMs = leaseMs;
  if (heartbeatMs !== undefined) settings.heartbeatMs = heartbeatMs;
  if (maxConnections !== undefined) settings.maxConnections = maxConnections;
  const goneAfterMs = number('gone-after-ms', values['gone-after-ms'], 'AGENTRY_GONE_AFTER_MS');
  if (goneAfterMs !== undefined) settings.goneAfterMs = goneAfterMs;
  return settings;
}

/** Error codes of a PostgreSQL server that cannot be reached or will not let us in: the socket's, and SQLSTATE. */
const CONNECTION_FAILURE = /^(?:E[A-Z]+|08\w{3}|28\w{3}|3D000|53300|57P0[1-3])$/;

/**
 * One line for a failure to reach a PostgreSQL server, naming its host, port and database (never the password);
 * undefined for any other error.
 */
export function postgresConnectionFailure(error: unknown, target: string): CommandFailure | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || !CONNECTION_FAILURE.test(code)) return undefined;
  let where: string;
  try {
    const url = new URL(target);
    const database =
      decodeURIComponent(url.pathname.replace(/^\//, '')) || decodeURIComponent(url.username) || 'postgres';
    where = `${url.hostname || 'localhost'}:${url.port || '5432'}, database "${database}"`;
  } catch {
    where = displayDb(target);
  }
  const reason = String((error as Error).message)
    .split('\n')[0]!
    .replaceAll(target, displayDb(target));
  return new CommandFailure(`cannot connect to PostgreSQL at ${where}: ${reason}`);
}

/** Opens (and migrates) the storage behind a `--db` value. */
export async function openStorage(target: string, settings: StorageSettings = {}): Promise<StorageAdapter> {
  if (isPostgres(target)) {
    const { postgresStorage } = await import('../storage/postgres/index.js');
    const storage = postgresStorage({ connectionString: target, ...settings });
    const init = storage.init.bind(storage);
    // The first connection is made by init(): a server that does not answer is one line, not the driver's stack.
    storage.init = () =>
      init().catch((error: unknown) => {
        throw postgresConnectionFailure(error, target) ?? error;
      });
    return storage;
  }
  return sqliteStorage({ path: target });
}

/**
 * The admin commands work on a database that `agentry serve` (or an application) made; they never create one. A
 * SQLite file that is not there is refused, saying where it was looked for; so is a PostgreSQL database without
 * agentry's schema (the URL's `?schema=`, else `agentry`), which opening the storage would otherwise create.
 */
export async function requireExistingDatabase(target: string): Promise<void> {
  if (!isPostgres(target)) {
    if (existsSync(target)) return;
    throw new CommandFailure(
      `no database at ${resolvePath(target)} (--db, else $AGENTRY_DB, else ./agentry.db): ` +
        '`agentry serve` creates one on its first start, or pass --db <path>',
    );
  }
  const url = new URL(target);
  const schema = url.searchParams.get('schema') ?? 'agentry';
  url.searchParams.delete('schema');
  let pg: typeof PgModule;
  try {
    pg = (await import('pg')).default;
  } catch {
    throw new CommandFailure('a postgres:// database needs the pg package: npm install pg');
  }
  const client = new pg.Client({ connectionString: url.toString() });
  client.on('error', () => undefined);
  let found: boolean;
  try {
    await client.connect();
    const { rows } = await client.query(
      `SELECT 1 FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'schema_migrations'`,
      [schema],
    );
    found = rows.length > 0;
  } catch (error) {
    throw postgresConnectionFailure(error, target) ?? error;
  } finally {
    await client.end().catch(() => undefined);
  }
  if (!found) {
    throw new CommandFailure(
      `no agentry schema "${schema}" in ${displayDb(target)}: \`agentry serve\` creates it on its first start, ` +
        'or name another with ?schema=',
    );
  }
}

/**
 * Account management without a runtime. The admin commands use this rather than `AgentRuntime.open()` because
 * opening a runtime also recovers running agents, which is the serving process's business, not theirs.
 */
export async function openAccounts(target: string): Promise<{ accounts: Accounts; close(): Promise<void> }> {
  await requireExistingDatabase(target);
  const storage = await openStorage(target);
  await storage.init();
  return { accounts: new Accounts(storage, systemClock), close: () => storage.close() };
}

/** A runtime that never steps agents itself (`scheduler: 'manual'`), for commands that only read or change status. */
export async function openAdminRuntime(target: string): Promise<AgentRuntime> {
  await requireExistingDatabase(target);
  return AgentRuntime.open({ storage: await openStorage(target), scheduler: 'manual' });
}

/** The account a command acts on; a missing one gets a message that says how to make it. */
export async function requireAccount(accounts: Accounts, accountId: string | undefined, db: string): Promise<string> {
  const id = accountId ?? SERVE_ACCOUNT_ID;
  try {
    await accounts.get(id);
  } catch (error) {
    if (AgentryError.isInstance(error) && error.code === 'not_found') {
      throw new AgentryError(
        'not_found',
        id === SERVE_ACCOUNT_ID
          ? `No serve account in ${displayDb(db)}: run \`agentry serve --db ${displayDb(db)}\` once to create it, or pass --account <id>`
          : `No account ${JSON.stringify(id)} in ${displayDb(db)}`,
      );
    }
    throw error;
  }
  return id;
}

/**
 * The runtime's `mcpServers` option from `--mcp-config <file>` (the `{"mcpServers": {...}}` file of Claude Code and
 * Claude Desktop). Without the flag nothing is passed, and the runtime reads `AGENTRY_MCP_CONFIG` if it is set.
 */
export function mcpServersOption(file: string | undefined): { mcpServers?: Record<string, unknown> } {
  return file === undefined ? {} : { mcpServers: readMcpConfigFile(file) };
}

/** Exactly `count` positional arguments, or a usage error naming them. */
export function positionals(values: string[], names: string[], usage: string): string[] {
  if (values.length !== names.length) {
    const expected = names.length === 0 ? 'no arguments' : names.map((n) => `<${n}>`).join(' ');
    throw new UsageError(`expected ${expected}, got ${values.length === 0 ? 'none' : values.join(' ')}\n\n${usage}`);
  }
  return values;
}

/** Formats credits for people: at most 6 decimals, no trailing zeros. */
export function formatCredits(credits: number): string {
  return String(Math.round(credits * 1e6) / 1e6);
}

/** Left-aligned columns, for lists. */
export function table(rows: string[][]): string {
  const widths: number[] = [];
  for (const row of rows) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length)));
  return rows
    .map((row) => row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i] ?? 0))).join('  '))
    .join('\n');
}
