/**
 * A newcomer's first minutes, as CI can replay them offline: the tarball `npm pack` makes in a fresh copy of the
 * repository (its `prepack` builds that copy's dist/; the checkout's dist/ is never rebuilt) installed into a fresh
 * `npm init -y` project (see offline-install.ts for how without the network), then
 *
 * - what the registry would publish: the manifest without install-time scripts (no `prepare`), a LICENSE, no source
 *   maps pointing at sources it does not ship;
 * - the README's embed snippet, copied from README.md as written, run as an ES module without a key: it must say
 *   the agent FAILED and why, and the runtime must warn once that no model is configured;
 * - the README's CommonJS TypeScript example compiled with the README's `tsconfig.json` and run;
 * - a CommonJS consumer in TypeScript that imports agentry-runtime (compiled by tsc to `require()` calls) and runs an
 *   agent on the scripted model to COMPLETED.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cleanEnv, exec, installOffline, packFromCopy, sh } from './offline-install.js';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
let dir: string;
let project: string;
let packedFiles: string[];
/** The checkout's dist/ before packing: the same file, unchanged, afterwards. */
let distBefore: { ino: number; mtimeMs: number } | undefined;

/** The code blocks of the README's "## Embed it" section, with their language. */
function embedBlocks(): { lang: string; code: string }[] {
  const readme = readFileSync(join(REPO, 'README.md'), 'utf8');
  const start = readme.indexOf('## Embed it');
  const section = readme.slice(start, readme.indexOf('\n## ', start + 3));
  return [...section.matchAll(/^```(\w*)\n([\s\S]*?)\n```$/gm)].map(([, lang, code]) => ({ lang: lang!, code: code! }));
}

/** The README's embed snippet: the first code block under "## Embed it" that imports agentry-runtime. */
function readmeSnippet(): string {
  const block = embedBlocks().find((b) => /^(?:js|ts)$/.test(b.lang) && b.code.includes("from 'agentry-runtime'"));
  if (!block) throw new Error('README.md has no embed snippet under "## Embed it"');
  return `${block.code}\n`;
}

/** The README's CommonJS TypeScript example and the tsconfig.json it shows for it. */
function readmeTypeScript(): { tsconfig: string; index: string } {
  const blocks = embedBlocks();
  const tsconfig = blocks.find((b) => b.lang === 'json' && b.code.includes('compilerOptions'));
  const index = blocks.find((b) => b.lang === 'ts' && b.code.startsWith('// index.ts'));
  if (!tsconfig || !index) throw new Error('README.md shows no tsconfig.json and index.ts under "## Embed it"');
  return { tsconfig: tsconfig.code, index: `${index.code}\n` };
}

/** dist/index.js of the checkout: packing must leave it as it was. */
function distStamp(): { ino: number; mtimeMs: number } | undefined {
  try {
    const { ino, mtimeMs } = statSync(join(REPO, 'dist/index.js'));
    return { ino, mtimeMs };
  } catch {
    return undefined;
  }
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'agentry-first-use-'));
  distBefore = distStamp();
  const { filename, files } = await packFromCopy(REPO, dir);
  packedFiles = files;
  project = join(dir, 'app');
  mkdirSync(project);
  await sh('npm', ['init', '-y'], { cwd: project });
  await installOffline(REPO, project, `../${filename}`);
}, 300_000);

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('first use in a fresh `npm init -y` project, from the packed tarball, offline', () => {
  it("packs from a copy: the checkout's dist/ is not rebuilt", () => {
    expect(distStamp()).toEqual(distBefore);
  });

  it('publishes no install-time script, a LICENSE, and no source maps without their sources', () => {
    const manifest = JSON.parse(readFileSync(join(project, 'node_modules/agentry-runtime/package.json'), 'utf8')) as {
      name: string;
      bin: Record<string, string>;
      scripts?: Record<string, string>;
    };
    expect(manifest.name).toBe('agentry-runtime');
    expect(Object.keys(manifest.bin)).toEqual(['agentry']);
    for (const script of ['prepare', 'preinstall', 'install', 'postinstall']) {
      expect(manifest.scripts?.[script], script).toBeUndefined();
    }
    expect(packedFiles).toContain('LICENSE');
    expect(readFileSync(join(project, 'node_modules/agentry-runtime/LICENSE'), 'utf8')).toContain(
      'Copyright (c) 2026 the agentry authors',
    );
    const maps = packedFiles.filter((f) => f.endsWith('.map'));
    const sources = packedFiles.filter((f) => f.startsWith('src/'));
    expect(maps.length === 0 || sources.length > 0, `${maps.length} maps, no sources`).toBe(true);
    expect(packedFiles.filter((f) => f.startsWith('dist/')).length).toBeGreaterThan(50);
  });

  it('is a CommonJS project, as `npm init -y` makes it', () => {
    const manifest = JSON.parse(readFileSync(join(project, 'package.json'), 'utf8')) as { type?: string };
    expect(manifest.type ?? 'commonjs').toBe('commonjs');
  });

  it(
    "runs the README's embed snippet as written (ESM): without a key it prints FAILED and why, warning once",
    { timeout: 120_000 },
    async () => {
      writeFileSync(join(project, 'agent.mjs'), readmeSnippet());
      const outcome = await exec('node', ['agent.mjs'], { cwd: project, env: cleanEnv() });
      // no key: the agent fails at its first step, and the snippet says so and exits 1
      expect(outcome.code).toBe(1);
      expect(outcome.stdout).toMatch(/^FAILED: .*ANTHROPIC_API_KEY/m);
      expect(outcome.stderr.match(/AGENTRY_NO_MODEL/g)?.length).toBe(1);
    },
  );

  it(
    "compiles the README's CommonJS TypeScript example with the README's tsconfig.json, and runs it",
    { timeout: 300_000 },
    async () => {
      const example = join(project, 'readme-ts');
      mkdirSync(example);
      const { tsconfig, index } = readmeTypeScript();
      writeFileSync(join(example, 'package.json'), '{ "type": "commonjs" }\n');
      writeFileSync(join(example, 'tsconfig.json'), tsconfig);
      writeFileSync(join(example, 'index.ts'), index);
      await sh('npx', ['tsc', '-p', '.'], { cwd: example });
      const outcome = await exec('node', ['out/index.js'], { cwd: example, env: cleanEnv() });
      expect(outcome.stderr).not.toMatch(/Error/);
      expect(outcome.code).toBe(0);
    },
  );

  it(
    'loads with require() and compiles as a typed CommonJS consumer (tsc, module nodenext)',
    { timeout: 300_000 },
    async () => {
      writeFileSync(
        join(project, 'tsconfig.json'),
        JSON.stringify({ compilerOptions: { module: 'nodenext', target: 'es2022', strict: true, outDir: 'out' } }),
      );
      writeFileSync(
        join(project, 'index.ts'),
        [
          "import { AgentRuntime, memoryStorage, type Agent } from 'agentry-runtime';",
          "import { scriptedModel } from 'agentry-runtime/testing';",
          '',
          'async function main(): Promise<void> {',
          '  const runtime = await AgentRuntime.open({',
          '    storage: memoryStorage(),',
          "    model: scriptedModel({ turns: [{ text: 'Take an umbrella.' }] }),",
          '    builtinTools: false,',
          '  });',
          "  const { agent_id } = await runtime.create({ goal: 'Umbrella in Paris today?' });",
          '  const agent: Agent = await runtime.waitFor(agent_id);',
          '  const last = (await runtime.get(agent_id)).messages.at(-1)?.text;',
          '  console.log(`${agent.status}: ${last}`);',
          '  await runtime.close();',
          '}',
          'void main();',
          '',
        ].join('\n'),
      );
      await sh('npx', ['tsc', '-p', '.'], { cwd: project });
      const compiled = readFileSync(join(project, 'out/index.js'), 'utf8');
      expect(compiled).toContain('require("agentry-runtime")');
      const { stdout } = await sh('node', ['out/index.js'], { cwd: project });
      expect(stdout).toContain('COMPLETED: Take an umbrella.');
      // and plain require() of every entry point from a .cjs script: none has top-level await in its module graph
      const entries = [
        'agentry-runtime',
        'agentry-runtime/http',
        'agentry-runtime/client',
        'agentry-runtime/web',
        'agentry-runtime/testing',
        'agentry-runtime/storage/postgres',
      ];
      writeFileSync(
        join(project, 'check.cjs'),
        `for (const e of ${JSON.stringify(entries)}) console.log(e, Object.keys(require(e)).length > 0);\n`,
      );
      const { stdout: required } = await sh('node', ['check.cjs'], { cwd: project });
      expect(required.trim().split('\n')).toEqual(entries.map((e) => `${e} true`));
    },
  );
});
