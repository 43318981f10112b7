/**
 * @module tools/builtin/code-agent/ripgrep
 * Whether the coding child's `Grep` can start: it is ripgrep (`rg`, Debian package `ripgrep`), run by the file helper
 * inside the sandbox, which looks for programs in a fixed list of system directories. `agentry tools` says so before
 * a call fails with "ripgrep could not start".
 */
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { sandboxEnv } from '../../../sandbox/bubblewrap-argv.js';

/** The directories the sandbox's commands search for programs (its fixed `PATH`). */
const SANDBOX_PATH_DIRS = sandboxEnv().PATH!.split(':');

/**
 * Ready when `rg` is in a directory of `path` (the runtime's `PATH`) that the sandbox also searches; otherwise why not,
 * naming ripgrep and where it was found if it was.
 *
 * @example
 * ripgrepReadiness('/usr/bin:/bin'); // { ready: true, detail: 'ripgrep at /usr/bin/rg' } where ripgrep is installed
 */
export function ripgrepReadiness(path: string | undefined = process.env.PATH): { ready: boolean; detail: string } {
  const dirs = (path ?? '').split(delimiter).filter((d) => d.startsWith('/'));
  const found = dirs.map((d) => join(d, 'rg')).filter((p) => existsSync(p));
  const visible = found.find((p) => SANDBOX_PATH_DIRS.some((d) => join(d, 'rg') === p));
  if (visible) return { ready: true, detail: `ripgrep at ${visible}` };
  if (found.length > 0) {
    return {
      ready: false,
      detail:
        `ripgrep (rg) is at ${found[0]}, outside the directories the sandbox searches (${SANDBOX_PATH_DIRS.join(':')}): ` +
        'install the ripgrep package',
    };
  }
  return { ready: false, detail: 'ripgrep (rg) was not found on PATH: install the ripgrep package' };
}
