/**
 * `agentry tools` and ripgrep: the coding child's `Grep` is ripgrep, so without `rg` where the
 * sandbox finds programs the list says Grep is not ready and names ripgrep, instead of calling the coding tool ready
 * while its Grep cannot start. ripgrep's absence is simulated with a `PATH` that lacks it.
 */
import { execFile } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ToolStatus } from 'agentry-runtime';
import { ripgrepReadiness } from '../../src/tools/builtin/code-agent/ripgrep.js';

const exec = promisify(execFile);
const ROOT = join(import.meta.dirname, '../..');
const CLI = join(ROOT, 'src/cli/index.ts');

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'agentry-tools-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function toolsJson(path: string): Promise<ToolStatus[]> {
  const env: NodeJS.ProcessEnv = { ...process.env, PATH: path };
  for (const k of ['ANTHROPIC_API_KEY', 'ANTHROPIC_BASE_URL', 'AGENTRY_DB', 'AGENTRY_MCP_CONFIG']) delete env[k];
  const { stdout } = await exec(process.execPath, ['--import', 'tsx', CLI, 'tools', '--json'], {
    cwd: ROOT,
    env,
    timeout: 60_000,
  });
  return JSON.parse(stdout) as ToolStatus[];
}

describe('agentry tools and ripgrep', () => {
  it('without rg on PATH, the coding child’s Grep is listed not ready, naming ripgrep', async () => {
    const empty = join(dir, 'empty-bin');
    const tools = await toolsJson(empty);
    expect(tools.find((t) => t.name === 'spawn_claude_code_agent/Grep')).toEqual({
      name: 'spawn_claude_code_agent/Grep',
      source: 'builtin',
      ready: false,
      offered: true,
      detail: "the coding child's Grep: ripgrep (rg) was not found on PATH: install the ripgrep package",
    });
  });

  it('an rg outside the directories the sandbox searches is not ready either, and says where it is', () => {
    const own = join(dir, 'own-bin');
    mkdirSync(own);
    writeFileSync(join(own, 'rg'), '#!/bin/sh\n');
    chmodSync(join(own, 'rg'), 0o755);
    expect(ripgrepReadiness(own)).toEqual({
      ready: false,
      detail: expect.stringMatching(
        new RegExp(`^ripgrep \\(rg\\) is at ${own}/rg, outside the directories the sandbox`),
      ),
    });
    // Where the sandbox looks (/usr/bin, …): ready when it is there.
    const system = ['/usr/local/bin', '/usr/bin', '/bin'];
    const installed = ripgrepReadiness(system.join(':'));
    expect(installed.ready).toBe(system.some((d) => existsSync(join(d, 'rg'))));
  });
});
