/**
 * @module errors
 * One error class for everything agentry throws on purpose, and one table from error code to HTTP status.
 * The HTTP layer never decides a status on its own: it asks {@link httpStatusOf}.
 */

/** Every error code agentry uses, with the HTTP status it maps to (README.md#http-service). */
export const ERROR_STATUS = {
  invalid_request: 400,
  unauthorized: 401,
  subscription_inactive: 401,
  /** A console request from another origin (the console's CSRF check). */
  forbidden: 403,
  insufficient_credits: 402,
  not_found: 404,
  method_not_allowed: 405,
  invalid_state: 409,
  idempotency_conflict: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  rate_limited: 429,
  internal_error: 500,
  not_configured: 500,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

const MARKER = Symbol.for('agentry.error');

/** Options of {@link AgentryError}. */
export interface AgentryErrorOptions {
  /** Structured details, e.g. the list of validation issues. Sent to HTTP clients. */
  details?: unknown;
  /** The underlying error, kept for logs; never sent to HTTP clients. */
  cause?: unknown;
}

/**
 * The error agentry throws for every expected failure. `code` is stable and machine-readable.
 *
 * @example
 * try { await runtime.get(id) } catch (err) {
 *   if (AgentryError.isInstance(err) && err.code === 'not_found') { ... }
 * }
 */
export class AgentryError extends Error {
  readonly code: ErrorCode;
  readonly details: unknown;
  /** Marker so that {@link AgentryError.isInstance} works across duplicate installs of the package. */
  readonly [MARKER] = true;

  constructor(code: ErrorCode, message: string, options: AgentryErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.details = options.details;
  }

  /** The HTTP status this error maps to. */
  get status(): number {
    return ERROR_STATUS[this.code];
  }

  /** True for any AgentryError, even one thrown by another copy of the package. */
  static isInstance(value: unknown): value is AgentryError {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[MARKER] === true;
  }
}

/** The HTTP status of an error code. */
export function httpStatusOf(code: ErrorCode): number {
  return ERROR_STATUS[code];
}

/** Shorthand for the most common refusal. */
export function notFound(what: string, id: string): AgentryError {
  return new AgentryError('not_found', `${what} ${JSON.stringify(id)} was not found`);
}
