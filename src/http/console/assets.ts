/**
 * @module http/console/assets
 * The console's static files: `assets/console/` of the package (beside `dist/` and `src/`, so the same relative path
 * finds it from both), read once and served from memory. Only names of that folder's listing are served, so no path
 * from a request ever reaches the file system.
 */
import { readdirSync, readFileSync } from 'node:fs';

const FOLDER = new URL('../../../assets/console/', import.meta.url);

const TYPES: Record<string, string> = {
  js: 'text/javascript; charset=utf-8',
  css: 'text/css; charset=utf-8',
  html: 'text/html; charset=utf-8',
  svg: 'image/svg+xml',
  txt: 'text/plain; charset=utf-8',
};

export interface Asset {
  type: string;
  body: Uint8Array;
}

let files: Map<string, Asset> | undefined;

function load(): Map<string, Asset> {
  const out = new Map<string, Asset>();
  const walk = (dir: URL, prefix: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (entry.isDirectory()) walk(new URL(`${entry.name}/`, dir), `${prefix}${entry.name}/`);
      else {
        const type = TYPES[entry.name.split('.').pop() ?? ''];
        if (type) out.set(`${prefix}${entry.name}`, { type, body: readFileSync(new URL(entry.name, dir)) });
      }
    }
  };
  walk(FOLDER, '');
  return out;
}

/** The file of the console's folder at this relative path (`app.js`, `pages/agent.js`), or null. */
export function consoleAsset(path: string): Asset | null {
  files ??= load();
  return files.get(path) ?? null;
}
