/**
 * @module cli/logging
 * `agentry serve`'s (and `agentry worker`'s) log: JSON lines on stdout through pino, and nothing else on stdout (the
 * commands' words for people go to stderr). Secrets never reach it: known fields are redacted by path, and as a last
 * line of defence every line is scrubbed of API keys (`agk_…`) and of the secret values the process was configured
 * with (the provider and search keys, the SMTP password, Twilio's token), wherever a message or an error's text
 * carried them.
 *
 * Lines are written as they come, without waiting for a buffer to fill: the destination writes asynchronously (a
 * request never waits for stdout) with no minimum length, so a line is out within milliseconds, and lines that arrive
 * while a write is in flight go out together in the next one. {@link flushLogAtExit} writes what is still pending
 * synchronously when the process exits, on SIGINT/SIGTERM and on an uncaught exception (logged at fatal first), so a
 * process that is killed outright (SIGKILL) loses at most the write in flight.
 */
import { pino, type Logger, type LevelWithSilent } from 'pino';

export const LOG_LEVELS: readonly LevelWithSilent[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/** Environment variables whose values are secrets. */
const SECRET_VARIABLES = [
  'ANTHROPIC_API_KEY',
  'ANTHROPIC_AUTH_TOKEN',
  'BRAVE_API_KEY',
  'TAVILY_API_KEY',
  'EXA_API_KEY',
  'TWILIO_AUTH_TOKEN',
  'AGENTRY_SESSION_SECRET',
];

/** The secret values of this environment: whole values, and the password of every URL-valued variable (SMTP_URL). */
export function secretsOf(env: NodeJS.ProcessEnv): string[] {
  const secrets = new Set<string>();
  for (const name of SECRET_VARIABLES) {
    const value = env[name]?.trim();
    if (value && value.length >= 6) secrets.add(value);
  }
  for (const [name, value] of Object.entries(env)) {
    if (!value || !/_URL$/.test(name) || !value.includes('@')) continue;
    try {
      const password = decodeURIComponent(new URL(value).password);
      if (password.length >= 4) {
        secrets.add(password);
        secrets.add(encodeURIComponent(password));
      }
    } catch {
      // not a URL: nothing to take from it
    }
  }
  return [...secrets].sort((a, b) => b.length - a.length);
}

const API_KEY_PATTERN = /agk_[A-Za-z0-9_-]{8,}/g;

/** A function that blanks secrets out of a text (a whole serialised log line). */
export function secretScrubber(secrets: readonly string[]): (text: string) => string {
  const escaped = secrets.map((s) => JSON.stringify(s).slice(1, -1)); // as they appear inside a JSON string
  const all = [...new Set([...secrets, ...escaped])].filter((s) => s.length > 0);
  return (text) => {
    let out = text.replace(API_KEY_PATTERN, 'agk_[redacted]');
    for (const s of all) if (out.includes(s)) out = out.split(s).join('[redacted]');
    return out;
  };
}

/**
 * The serve logger. `trace_id` and `span_id` of the active span join every line written inside one (when trace
 * export is on).
 */
export function createServeLogger(
  level: LevelWithSilent,
  env: NodeJS.ProcessEnv = process.env,
  options: {
    /** The ids of the active span, when tracing is on. */
    activeSpan?: () => { trace_id: string; span_id: string } | null;
    destination?: NodeJS.WritableStream;
  } = {},
): Logger {
  const activeSpan = options.activeSpan;
  const scrub = secretScrubber(secretsOf(env));
  return pino(
    {
      level,
      base: { service: env.OTEL_SERVICE_NAME?.trim() || 'agentry' },
      timestamp: pino.stdTimeFunctions.isoTime,
      serializers: { err: pino.stdSerializers.err },
      redact: {
        paths: [
          'headers["x-api-key"]',
          'headers.authorization',
          'headers.cookie',
          '*.apiKey',
          '*.api_key',
          '*.password',
          '*.pass',
          '*.token',
          'apiKey',
          'api_key',
          'password',
        ],
        censor: '[redacted]',
      },
      hooks: { streamWrite: scrub },
      ...(activeSpan ? { mixin: () => activeSpan() ?? {} } : {}),
    },
    options.destination ?? pino.destination({ fd: 1, sync: false, minLength: 0 }),
  );
}

/** Writes the log's pending lines now, synchronously (a destination that cannot: nothing). Never throws. */
export function flushLogNow(logger: Logger): void {
  const stream = (logger as unknown as Record<symbol, unknown>)[pino.symbols.streamSym] as
    { flushSync?: () => void } | undefined;
  try {
    stream?.flushSync?.();
  } catch {
    // not ready yet, or already closed: nothing more can be written
  }
}

/**
 * Makes the end of the process flush the log: at exit (whatever called `process.exit`), and on an uncaught exception,
 * which is logged at `fatal` with its stack, written out, told on stderr, and ends the process with exit code 1 (as
 * Node would). SIGINT and SIGTERM end through `untilSignal` (lifecycle.ts), whose exit lands here too.
 *
 * @example
 * const logger = createServeLogger('info');
 * flushLogAtExit(logger);
 */
export function flushLogAtExit(logger: Logger): void {
  process.once('exit', () => flushLogNow(logger));
  process.on('uncaughtException', (err, origin) => {
    logger.fatal({ err, origin }, 'uncaught exception');
    flushLogNow(logger);
    console.error('agentry: uncaught exception:', err);
    process.exit(1);
  });
}
