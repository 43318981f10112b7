/**
 * The layering rules (.dependency-cruiser.cjs) catch what they are for: a core module importing a storage backend and
 * an import circle are reported, on a small tree of its own in a temporary directory (the checkout is never written).
 * And docs/architecture.md's "Layers" section names exactly the rules the config enforces.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { cruise, type IForbiddenRuleType, type IReporterOutput } from 'dependency-cruiser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../', import.meta.url));
const configPath = path.join(root, '.dependency-cruiser.cjs');
const config = createRequire(import.meta.url)(configPath) as { forbidden: IForbiddenRuleType[] };

/** A few modules at the paths the rules name: each file's text, by path under the temporary root. */
const TREE: Record<string, string> = {
  'src/errors.ts': 'export class AgentryError extends Error {}\n',
  'src/storage/adapter.ts': 'export interface StorageAdapter { close(): Promise<void> }\n',
  'src/storage/sqlite/index.ts':
    "import type { StorageAdapter } from '../adapter.js';\nexport const sqliteStorage = (): StorageAdapter | null => null;\n",
  // Allowed: core uses the storage interface.
  'src/core/uses-interface.ts':
    "import type { StorageAdapter } from '../storage/adapter.js';\nexport const keep = (s: StorageAdapter) => s;\n",
  // Not allowed: core picks a backend.
  'src/core/picks-backend.ts':
    "import { sqliteStorage } from '../storage/sqlite/index.js';\nexport const storage = sqliteStorage();\n",
  // Not allowed: a circle, through type-only imports at that.
  'src/base/first.ts': "import type { Second } from './second.js';\nexport type First = { next?: Second };\n",
  'src/base/second.ts': "import type { First } from './first.js';\nexport type Second = { next?: First };\n",
};

let dir: string;
let result: IReporterOutput;

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'agentry-layers-'));
  for (const [file, text] of Object.entries(TREE)) {
    mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
    writeFileSync(path.join(dir, file), text);
  }
  result = await cruise(
    ['src'],
    { ruleSet: { forbidden: config.forbidden }, validate: true, tsPreCompilationDeps: true, baseDir: dir },
    {},
  );
});

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** The violations the cruise found, as `rule: from -> to`. */
function violations(): string[] {
  if (typeof result.output === 'string') throw new Error('expected a cruise result, got reporter output');
  return result.output.summary.violations.map((v) => `${v.rule.name}: ${v.from} -> ${v.to}`);
}

describe('the layering rules', () => {
  it('report core importing a storage backend', () => {
    expect(violations()).toContain(
      'core-imports-only-base-and-contracts: src/core/picks-backend.ts -> src/storage/sqlite/index.ts',
    );
  });

  it('report an import circle, type-only imports included', () => {
    expect(violations().filter((v) => v.startsWith('no-circular: src/base/'))).not.toEqual([]);
  });

  it('leave allowed imports alone (core may use the storage interface)', () => {
    expect(violations().filter((v) => v.includes('uses-interface'))).toEqual([]);
    expect(violations()).toHaveLength(2); // the backend import, and the circle (reported once)
  });

  it('make the depcruise command fail, as `npm run lint` runs it', () => {
    // The same command line as package.json's lint script, run on the temporary tree with the real config.
    cpSync(configPath, path.join(dir, '.dependency-cruiser.cjs'));
    writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions: { module: 'NodeNext' } }));
    const bin = path.join(root, 'node_modules', 'dependency-cruiser', 'bin', 'dependency-cruise.mjs');
    const run = spawnSync(process.execPath, [bin, 'src', '--config', '.dependency-cruiser.cjs'], {
      cwd: dir,
      encoding: 'utf8',
    });
    expect(run.status).not.toBe(0);
    expect(run.stdout).toContain('core-imports-only-base-and-contracts');
    expect(run.stdout).toContain('no-circular');
  });
});

describe('docs/architecture.md', () => {
  it('names, in its Layers section, exactly the rules the config enforces', () => {
    const doc = readFileSync(path.join(root, 'docs', 'architecture.md'), 'utf8');
    const section = /^## Layers\n([\s\S]*?)(?=^## )/m.exec(doc)?.[1];
    expect(section, 'docs/architecture.md has a "## Layers" section').toBeDefined();
    // Each rule is a list item that starts with its name in backticks.
    const named = [...section!.matchAll(/^- `([a-z0-9-]+)`/gm)].map((m) => m[1]);
    expect(named.sort()).toEqual(config.forbidden.map((r) => r.name).sort());
  });
});
