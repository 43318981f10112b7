/**
 * A newcomer's first minutes, as CI can replay them offline: the packed tarball (`npm pack`, which builds dist/)
 * installed into a fresh `npm init -y` project (see offline-install.ts for how without the network), then
 *
 * - the README's embed snippet, copied from README.md as written, run as an ES module without a key: it must say
 *   the agent FAILED and why, and the runtime must warn once that no model is configured;
 * - a CommonJS consumer in TypeScript that imports agentry (compiled by tsc to `require()` calls) and runs an agent
 *   on the scripted model to COMPLETED.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cleanEnv, exec, installOffline, sh } from './offline-install.js';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
let dir: string;
let project: string;

/** The README's embed snippet: the first code block under "## Embed it" that imports agentry. */
function readmeSnippet(): string {
  const readme = readFileSync(join(REPO, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Embed it'));
  const block = [...section.matchAll(/^```(?:js|ts)\n([\s\S]*?)\n```$/gm)].find(([, code]) =>
    code!.includes("from 'agentry'"),
  );
  if (!block) throw new Error('README.md has no embed snippet under "## Embed it"');
  return `${block[1]}\n`;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'agentry-first-use-'));
  const { stdout } = await sh('npm', ['pack', '--json', '--pack-destination', dir], { cwd: REPO });
  const [{ filename }] = JSON.parse(stdout.slice(stdout.indexOf('['))) as [{ filename: string }];
  project = join(dir, 'app');
  mkdirSync(project);
  await sh('npm', ['init', '-y'], { cwd: project });
  await installOffline(REPO, project, `../${filename}`);
}, 300_000);

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('first use in a fresh `npm init -y` project, from the packed tarball, offline', () => {
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
          "import { AgentRuntime, memoryStorage, type Agent } from 'agentry';",
          "import { scriptedModel } from 'agentry/testing';",
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
      expect(compiled).toContain('require("agentry")');
      const { stdout } = await sh('node', ['out/index.js'], { cwd: project });
      expect(stdout).toContain('COMPLETED: Take an umbrella.');
      // and plain require() of every entry point from a .cjs script: none has top-level await in its module graph
      const entries = [
        'agentry',
        'agentry/http',
        'agentry/client',
        'agentry/web',
        'agentry/testing',
        'agentry/storage/postgres',
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
