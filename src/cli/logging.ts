/**
 * @module cli/logging
 * `agentry serve`'s log: JSON lines on stdout through pino. Secrets never reach it: known fields are redacted by
 * path, and as a last line of defence every line is scrubbed of API keys (`agk_…`) and of the secret values the
 * process was configured with (the provider and search keys, the SMTP password, Twilio's token), wherever a message
 * or an error's text carried them.
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
    options.destination ?? pino.destination({ fd: 1, sync: false, minLength: 4096 }),
  );
}
