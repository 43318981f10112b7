/**
 * The zod that agentry-runtime itself imports, for the scenarios that define tools. The bench links agentry-runtime
 * from the repository (`file:..`), so the library resolves zod from the repository's node_modules while a scenario's
 * own `import 'zod'` resolves the bench's: two copies of the same version in one process, where an application's
 * install holds one (npm dedupes it). The second copy is 2.7 MB of live heap, which V8 lets grow three to four times
 * over as old-space garbage before it collects: it would count against agentry's peak RSS, and the floor holds none.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type * as Zod from 'zod';

const fromLibrary = createRequire(fileURLToPath(import.meta.resolve('agentry-runtime')));
const manifest = fromLibrary.resolve('zod/package.json');
// zod's ES module entry (what the library's `import 'zod'` loads), not its CommonJS one: those are two copies too.
const entry = (JSON.parse(readFileSync(manifest, 'utf8')) as { exports: { '.': { import: string } } }).exports['.']
  .import;

export const { z } = (await import(pathToFileURL(join(dirname(manifest), entry)).href)) as typeof Zod;
