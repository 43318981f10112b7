/**
 * @module version
 * The package's own version, read once from its package.json (one level up from both `src/` and `dist/`): the
 * `service.version` of exported traces and the `version` label of `agentry_build_info`.
 */
import { readFileSync } from 'node:fs';

let cached: string | undefined;

/**
 * The version in agentry's package.json, or `'unknown'` when the file cannot be read (a bundler that dropped it).
 *
 * @example
 * packageVersion(); // '0.1.0'
 */
export function packageVersion(): string {
  if (cached !== undefined) return cached;
  try {
    const manifest = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
      version?: unknown;
    };
    cached = typeof manifest.version === 'string' ? manifest.version : 'unknown';
  } catch {
    cached = 'unknown';
  }
  return cached;
}
