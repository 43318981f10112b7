/**
 * @module browser/chromium-path
 * Which Chromium spawn_browser_agent drives. agentry never downloads a browser: it takes the one the operator
 * installed, found in this order — the `browser.executablePath` option, `AGENTRY_CHROMIUM_PATH`, then `chromium`,
 * `chromium-browser` and `google-chrome` on `PATH`. None found is an answer that says what to install, not an error:
 * the tool is still offered and fails its calls with that message, so a missing browser never passes for a working one.
 */
import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, isAbsolute, join } from 'node:path';

/** Names looked up on `PATH`, in order. */
export const CHROMIUM_NAMES = ['chromium', 'chromium-browser', 'google-chrome'] as const;

/** What to do when no browser is found; part of every "not ready" message. */
export const CHROMIUM_INSTALL_HINT =
  'install Chromium (Debian/Ubuntu: apt-get install chromium) or set AGENTRY_CHROMIUM_PATH to a Chromium or Chrome executable';

export type ChromiumLocation =
  { found: true; path: string; source: 'option' | 'AGENTRY_CHROMIUM_PATH' | 'PATH' } | { found: false; reason: string };

function executable(path: string): boolean {
  try {
    if (!statSync(path).isFile()) return false;
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * Finds the browser. An explicit path (option or variable) that is not an executable file is reported as such rather
 * than silently replaced by one from `PATH`: the operator asked for that one.
 *
 * @example
 * const where = findChromium({ env: process.env });
 * if (where.found) console.log(`Chromium at ${where.path}`);
 * else console.log(where.reason); // "no Chromium found on PATH (chromium, chromium-browser, google-chrome): install …"
 */
export function findChromium(options: { executablePath?: string; env?: NodeJS.ProcessEnv } = {}): ChromiumLocation {
  const env = options.env ?? process.env;
  const explicit: Array<[string | undefined, 'option' | 'AGENTRY_CHROMIUM_PATH']> = [
    [options.executablePath, 'option'],
    [env['AGENTRY_CHROMIUM_PATH']?.trim() || undefined, 'AGENTRY_CHROMIUM_PATH'],
  ];
  for (const [path, source] of explicit) {
    if (path === undefined) continue;
    if (executable(path)) return { found: true, path, source };
    const named = source === 'option' ? 'builtinTools.browser.executablePath' : 'AGENTRY_CHROMIUM_PATH';
    return { found: false, reason: `${named} is ${path}, which is not an executable file: ${CHROMIUM_INSTALL_HINT}` };
  }
  const dirs = (env['PATH'] ?? '').split(delimiter).filter((d) => isAbsolute(d));
  for (const name of CHROMIUM_NAMES) {
    for (const dir of dirs) {
      const path = join(dir, name);
      if (executable(path)) return { found: true, path, source: 'PATH' };
    }
  }
  return { found: false, reason: `no Chromium found on PATH (${CHROMIUM_NAMES.join(', ')}): ${CHROMIUM_INSTALL_HINT}` };
}
