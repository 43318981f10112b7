/**
 * The CLI with an MCP config file (`--mcp-config`, `AGENTRY_MCP_CONFIG`): `agentry tools` lists each server and its
 * tools, ready or failed and why; `agentry run` gives its agent a server's tools (the real Anthropic SDK against a
 * fake Messages API server).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ToolStatus } from 'agentry-runtime';
import { startFakeAnthropic } from 'agentry-runtime/testing';
import { FIXTURE, mcpServerProcesses, ROOT } from './support.js';

const exec = promisify(execFile);
const CLI = join(ROOT, 'src/cli/index.ts');

function cli(args: string[], env: Record<string, string> = {}) {
  const clean = { ...process.env };
  for (const k of ['ANTHROPIC_API_KEY', 'ANTHROPIC_BASE_URL', 'AGENTRY_DB', 'AGENTRY_MCP_CONFIG']) delete clean[k];
  return exec(process.execPath, ['--import', 'tsx', CLI, ...args], {
    cwd: ROOT,
    env: { ...clean, ...env },
    timeout: 60_000,
  });
}

let dir: string;
let config: string;
let before: number[];
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'agentry-mcp-cli-'));
  before = mcpServerProcesses();
  config = join(dir, 'mcp.json');
  writeFileSync(
    config,
    JSON.stringify({
      mcpServers: {
        counting: { type: 'stdio', command: process.execPath, args: [FIXTURE], allowed_tools: ['echo', 'add'] },
        broken: { command: process.execPath, args: [FIXTURE], env: { MCP_MODE: 'crash' } },
        missing: { command: process.execPath, args: [join(dir, 'no-such-server.js')] },
      },
    }),
  );
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  expect(mcpServerProcesses()).toEqual(before);
});

describe('the CLI with MCP servers', () => {
  it('agentry tools lists each server and its tools, ready or failed and why', async () => {
    const { stdout } = await cli(['tools', '--json', '--mcp-config', config]);
    const mcp = (JSON.parse(stdout) as ToolStatus[]).filter((t) => t.source === 'mcp');
    expect(mcp.map((t) => [t.name, t.ready])).toEqual([
      ['mcp__counting', true],
      ['mcp__counting__echo', true],
      ['mcp__counting__add', true],
      ['mcp__broken', false],
      ['mcp__missing', false],
    ]);
    expect(mcp[0]!.detail).toMatch(/^stdio: .*counting-server\.mjs — ready, 2 tools$/);
    expect(mcp[3]!.detail).toMatch(/failed: did not start: .*\(exit code 1\); stderr: counting-server: boom/);
    // The stderr line that says why, not Node's first line (`node:internal/modules/cjs/loader:…`); one line.
    expect(mcp[4]!.detail).toMatch(
      /failed: did not start: .*\(exit code 1\); stderr: Error: Cannot find module '.*no-such-server\.js'$/,
    );

    // The same from the environment, as a table.
    const table = (await cli(['tools'], { AGENTRY_MCP_CONFIG: config })).stdout;
    expect(table).toMatch(/mcp__counting__echo +ready +\(mcp\) +MCP server counting, read-only or idempotent/);
    expect(table).toMatch(/mcp__broken +not ready +\(mcp\) +stdio: .* — failed: did not start/);
    expect(table).toMatch(/mcp__missing +not ready .* stderr: Error: Cannot find module '.*no-such-server\.js'\n/);
  });

  it('a bad config file is refused with its path, the server and the field (exit 2)', async () => {
    const bad = join(dir, 'bad.json');
    writeFileSync(bad, JSON.stringify({ mcpServers: { crm: { type: 'http', url: 'not a url' } } }));
    const failed = await cli(['run', 'x', '--db', join(dir, 'bad.db'), '--mcp-config', bad], {
      ANTHROPIC_API_KEY: 'sk-test',
    }).catch((e: { code: number; stderr: string }) => e);
    expect((failed as { code: number }).code).toBe(2);
    expect((failed as { stderr: string }).stderr).toContain(`${bad}: mcpServers.crm.url: must be an http(s) URL`);
  });

  it('agentry run --mcp-config: the agent calls a server tool and sees its result', async () => {
    const fake = await startFakeAnthropic({
      handler: (body) => {
        const last = body.messages.at(-1)!;
        const result = Array.isArray(last.content)
          ? (last.content as Array<{ type: string; content?: unknown }>).find((b) => b.type === 'tool_result')
          : undefined;
        if (!result) {
          expect(body.tools?.map((t) => t.name)).toEqual(expect.arrayContaining(['mcp__counting__add']));
          return { content: [{ type: 'tool_use', name: 'mcp__counting__add', input: { a: 20, b: 22 } }] };
        }
        return { text: `The server says: ${JSON.stringify(result.content)}` };
      },
    });
    try {
      const { stdout } = await cli(['run', 'Add 20 and 22', '--db', join(dir, 'run.db'), '--mcp-config', config], {
        ANTHROPIC_BASE_URL: fake.url,
        ANTHROPIC_API_KEY: 'sk-test',
      });
      expect(stdout).toContain('The server says: "20 + 22 = 42"');
      expect(stdout).toContain('COMPLETED');
    } finally {
      await fake.close();
    }
  });
});
