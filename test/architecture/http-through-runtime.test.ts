/**
 * The HTTP layer reads through the runtime, never around it to the storage (docs/architecture.md, "HTTP"): no file of
 * src/http reaches `runtime.storage`, by property, by index or by destructuring. dependency-cruiser sees imports, not
 * property reads, so this reads the sources. The poll thread opens its own read-only storage by design
 * (`openSharedReader`) and names it `storage`, a variable, which this does not flag.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const HTTP = fileURLToPath(new URL('../../src/http/', import.meta.url));

/** Ways to reach an object's `storage`: `x.storage`, `x?.storage`, `x['storage']`, `const { storage } = x`. */
const STORAGE_READS = [/\??\.storage\b/, /\[\s*['"`]storage['"`]\s*\]/, /\{[^{}]*\bstorage\b[^{}]*\}\s*=\s*[\w.]+/];

/** The lines of a source that read a `storage` property, as `file:line: text`. */
function storageReads(file: string, text: string): string[] {
  return text.split('\n').flatMap((line, i) => {
    return STORAGE_READS.some((re) => re.test(line)) ? [`${file}:${i + 1}: ${line.trim()}`] : [];
  });
}

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const full = path.join(dir, e.name);
    if (e.isDirectory()) return sources(full);
    return e.name.endsWith('.ts') ? [full] : [];
  });
}

describe('src/http reads through the runtime', () => {
  it('catches each way of reaching the storage (the check itself works)', () => {
    expect(storageReads('a.ts', 'const page = await runtime.storage.searchAgents(q);')).toHaveLength(1);
    expect(storageReads('a.ts', 'await this.runtime.storage.getConsoleSession(h);')).toHaveLength(1);
    expect(storageReads('a.ts', "const s = runtime['storage'];")).toHaveLength(1);
    expect(storageReads('a.ts', 'const { storage, accounts } = runtime;')).toHaveLength(1);
    expect(storageReads('a.ts', 'const rows = await storage.listMessages(id);')).toEqual([]);
    expect(storageReads('a.ts', "import { openSharedReader } from '../storage/shared-reader.js';")).toEqual([]);
  });

  it('no file of src/http reads a `storage` property', () => {
    const files = sources(HTTP);
    expect(files.length).toBeGreaterThan(10);
    const found = files.flatMap((file) => storageReads(path.relative(HTTP, file), readFileSync(file, 'utf8')));
    expect(found).toEqual([]);
  });
});
