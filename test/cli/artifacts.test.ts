/**
 * `agentry agents artifacts <id> [--out DIR]`, run from source as a child process against a SQLite file a runtime in
 * this test wrote: it lists what the agent's tools kept, and writes each artifact byte for byte inside DIR whatever
 * its name (`../../etc/passwd` included), never following a link out of it.
 */
import { existsSync, lstatSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { AgentRuntime, defineTool, sqliteStorage, type Tool } from 'agentry-runtime';
import { scriptedModel } from 'agentry-runtime/testing';
import { safeFileName } from '../../src/cli/agents.js';
import { cliEnv, runCli, tempDir } from '../http/helpers.js';

const PNG = new Uint8Array([
  0x89,
  0x50,
  0x4e,
  0x47,
  0x0d,
  0x0a,
  0x1a,
  0x0a,
  ...Array.from({ length: 256 }, (_, i) => i),
]);

/** Name -> bytes, in the order the tool keeps them. */
const KEPT: Array<[string, Uint8Array | string]> = [
  ['chart.png', PNG],
  ['résumé 📄.txt', 'Curriculum vitæ ✓\n'],
  ['../../etc/passwd', 'root:x:0:0::/root:/bin/sh\n'],
  ['report.txt', 'first report'],
  ['report.txt', 'second report'],
  ['REPORT.txt', 'third report'],
  ['..', 'dot dot'],
  ['', 'no name'],
  ['a/b\\c.txt', 'separators'],
  ['bell\u0007\u001b[31mred.txt', 'escape sequences'],
  ['.bashrc', 'hidden'],
];
/** The file each lands in, in the same order. */
const EXPECTED_FILES = [
  'chart.png',
  'résumé 📄.txt',
  '__.._etc_passwd',
  'report.txt',
  'report-2.txt',
  'REPORT-3.txt',
  '_',
  'artifact',
  'a_b_c.txt',
  'bell[31mred.txt',
  '_bashrc',
];

const keepAll = defineTool({
  name: 'keep_all',
  description: 'Keeps files with awkward names.',
  input: z.object({}),
  idempotent: false,
  async run(_input, ctx) {
    for (const [name, data] of KEPT) await ctx.artifacts.put({ name, mime_type: 'application/octet-stream', data });
    return 'kept';
  },
});

let tmp: ReturnType<typeof tempDir>;
let db: string;
let accountId: string;
let otherAccountId: string;
let agentId: string;
let bareAgentId: string;

const cli = (...args: string[]) => runCli(['agents', ...args, '--db', db, '--account', accountId], cliEnv());

beforeAll(async () => {
  tmp = tempDir('agentry-cli-artifacts-');
  db = join(tmp.dir, 'agentry.db');
  const runtime = await AgentRuntime.open({
    storage: sqliteStorage({ path: db }),
    tools: [keepAll as Tool],
    model: scriptedModel({
      turns: (request, { turnIndex }) =>
        JSON.stringify(request.messages[0]).includes('Keep') && turnIndex === 0
          ? { toolCalls: [{ name: 'keep_all', input: {} }] }
          : { text: 'Done.' },
    }),
  });
  try {
    const { account } = await runtime.accounts.create({ name: 'cli', credits: 100 });
    accountId = account.account_id;
    otherAccountId = (await runtime.accounts.create({ name: 'other', credits: 1 })).account.account_id;
    agentId = (await runtime.create({ goal: 'Keep files', accountId })).agent_id;
    bareAgentId = (await runtime.create({ goal: 'Say done', accountId })).agent_id;
    expect((await runtime.waitFor(agentId)).status).toBe('COMPLETED');
    expect((await runtime.waitFor(bareAgentId)).status).toBe('COMPLETED');
  } finally {
    await runtime.close();
  }
});

afterAll(() => tmp?.remove());

describe('agentry agents artifacts', () => {
  it('lists the artifacts as a table and as JSON, with names made safe for the terminal', async () => {
    const table = await cli('artifacts', agentId);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(/^ID\s+SIZE\s+TYPE\s+CREATED\s+NAME$/m);
    expect(table.stdout).toContain('résumé 📄.txt');
    expect(table.stdout).toContain('bell??[31mred.txt');
    expect(table.stdout).not.toContain('\u001b');
    expect(table.stdout.trim().split('\n')).toHaveLength(1 + KEPT.length);

    const json = await cli('artifacts', agentId, '--json');
    expect(json.code, json.stderr).toBe(0);
    const { artifacts } = JSON.parse(json.stdout) as { artifacts: Array<{ name: string; size: number }> };
    expect(artifacts.map((a) => a.name)).toEqual(KEPT.map(([name]) => name));
    expect(artifacts[0]!.size).toBe(PNG.byteLength);

    const none = await cli('artifacts', bareAgentId);
    expect(none.code).toBe(0);
    expect(none.stdout.trim()).toBe(`Agent ${bareAgentId} has no artifacts.`);
  });

  it('--out writes every artifact byte for byte inside DIR, one line per file', async () => {
    const out = join(tmp.dir, 'out', 'nested');
    const r = await cli('artifacts', agentId, '--out', out);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines).toHaveLength(KEPT.length);
    expect(lines[0]).toBe(`Wrote ${join(out, 'chart.png')} (${PNG.byteLength} bytes)`);
    expect(readdirSync(out).sort()).toEqual([...EXPECTED_FILES].sort());
    KEPT.forEach(([, data], i) => {
      const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : data;
      expect(new Uint8Array(readFileSync(join(out, EXPECTED_FILES[i]!)))).toEqual(bytes);
    });
    // Nothing landed beside DIR or above it.
    expect(readdirSync(join(tmp.dir, 'out'))).toEqual(['nested']);
    expect(
      readdirSync(tmp.dir)
        .filter((n) => !n.startsWith('agentry.db'))
        .sort(),
    ).toEqual(['out']);
    expect(existsSync(join(tmp.dir, 'etc'))).toBe(false);
  });

  it('--out replaces files of an earlier run, and replaces a symbolic link instead of writing through it', async () => {
    const out = join(tmp.dir, 'linked');
    const outside = join(tmp.dir, 'outside.txt');
    writeFileSync(outside, 'untouched');
    const first = await cli('artifacts', agentId, '--out', out, '--json');
    expect(first.code, first.stderr).toBe(0);
    const written = (JSON.parse(first.stdout) as { artifacts: Array<{ path: string; artifact_id: string }> }).artifacts;
    expect(written.map((a) => a.path)).toEqual(EXPECTED_FILES.map((name) => join(out, name)));

    const target = join(out, 'report.txt');
    writeFileSync(target, 'stale');
    const link = join(out, 'chart.png');
    rmSync(link);
    symlinkSync(outside, link);

    const again = await cli('artifacts', agentId, '--out', out);
    expect(again.code, again.stderr).toBe(0);
    expect(readFileSync(outside, 'utf8')).toBe('untouched');
    expect(lstatSync(link).isSymbolicLink()).toBe(false);
    expect(new Uint8Array(readFileSync(link))).toEqual(PNG);
    expect(readFileSync(target, 'utf8')).toBe('first report');
    expect(readdirSync(out).sort()).toEqual([...EXPECTED_FILES].sort()); // no temporary file left behind
  });

  it("refuses --out elsewhere, an empty --out, and another account's agent", async () => {
    const misplaced = await cli('show', agentId, '--out', tmp.dir);
    expect(misplaced.code).toBe(2);
    expect(misplaced.stderr).toMatch(/--out goes with `agents artifacts`/);
    const empty = await cli('artifacts', agentId, '--out', '');
    expect(empty.code).toBe(2);
    const out = join(tmp.dir, 'foreign');
    const foreign = await runCli(
      ['agents', 'artifacts', agentId, '--out', out, '--db', db, '--account', otherAccountId],
      cliEnv(),
    );
    expect(foreign.code).toBe(1);
    expect(foreign.stderr).toMatch(/^agentry agents: Agent "[0-9a-f-]+" was not found/);
    expect(existsSync(out)).toBe(false);
  });
});

describe('safeFileName', () => {
  it('keeps ordinary names and makes hostile ones one harmless segment', () => {
    expect(safeFileName('résumé 📄.txt')).toBe('résumé 📄.txt');
    expect(safeFileName('re\u0301sume\u0301.txt')).toBe('résumé.txt'); // NFC
    expect(safeFileName('../../etc/passwd')).toBe('__.._etc_passwd');
    expect(safeFileName('..\\..\\windows\\system32')).toBe('__.._windows_system32');
    expect(safeFileName('.')).toBe('_');
    expect(safeFileName('   ')).toBe('artifact');
    expect(safeFileName('name. . ')).toBe('name');
    expect(safeFileName('CON.txt')).toBe('_CON.txt');
    expect(safeFileName('what?<>:|*".md')).toBe('what_______.md');
    expect(safeFileName('cod\u202Egnp.exe')).toBe('codgnp.exe');
    expect(safeFileName('\ud800lone.txt')).toBe('\ufffdlone.txt');
    const long = safeFileName(`${'é'.repeat(300)}.tar.gz`);
    expect(Buffer.byteLength(long)).toBeLessThanOrEqual(200);
    expect(long.endsWith('.gz')).toBe(true);
  });
});
