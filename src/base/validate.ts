/**
 * @module base/validate
 * One way to check arguments at the door: zod, and one error shape (`invalid_request` with the issues as details).
 */
import { z } from 'zod';
import { AgentryError } from '../errors.js';

/** Parses `value` with `schema` or throws `invalid_request` naming `what`. */
export function parseArgs<S extends z.ZodType>(schema: S, value: unknown, what: string): z.output<S> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  throw new AgentryError('invalid_request', `Invalid ${what}: ${z.prettifyError(parsed.error)}`, {
    details: parsed.error.issues.map((i) => ({ path: i.path.map(String).join('.'), message: i.message, code: i.code })),
  });
}
