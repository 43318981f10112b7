/**
 * mcp: what agentry's MCP client costs over a bare `@modelcontextprotocol/sdk` client, on the same stdio server (the
 * test fixture `test/mcp/fixtures/counting-server.mjs`, its `echo` tool).
 * - first call: spawn + initialize (+ tools/list for agentry, which needs the tool list to offer it) + one call, from
 *   nothing, `--first` times each;
 * - per call: `--n` calls on a started server, through agentry's tool (`mcp__counting__echo`: the connection, the call
 *   with its abort signal and timeout, and the result rendered for the model) against `client.callTool()`.
 * Reports median and p95 of each and the overheads (agentry − bare).
 *
 *   node .build/scenarios/mcp.js --n 200 --first 10
 *
 * It loads the built library (`dist/mcp/…`, found by walking up from this file, or `$AGENTRY_DIST`): run
 * `npm run build` at the root first.
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { ToolContext } from 'agentry-runtime';
import { peakRssMb, report } from '../lib/measure.js';
import { benchToolContext } from '../lib/tool-context.js';

const { values } = parseArgs({
  options: { n: { type: 'string', default: '200' }, first: { type: 'string', default: '10' } },
  strict: false,
});
const calls = Number(values.n);
const firsts = Number(values.first);
const WARMUP = 20;

interface Built {
  McpToolSource: new (
    servers: unknown[],
    prices: { models: Record<string, never>; tools: Record<string, number> },
  ) => {
    startAll(): Promise<void>;
    tools(): ReadonlyArray<{ name: string; run(input: unknown, ctx: ToolContext): Promise<unknown> }>;
    close(): Promise<void>;
  };
  parseMcpServers(input: unknown): unknown[];
}

/** The repository root: where `dist/` and the fixture are. */
function findRoot(): string {
  if (process.env.AGENTRY_DIST) return dirname(process.env.AGENTRY_DIST);
  for (let dir = dirname(fileURLToPath(import.meta.url)); ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'dist', 'mcp', 'tool-source.js'))) return dir;
    if (dirname(dir) === dir) throw new Error('dist/mcp/tool-source.js not found: run `npm run build` at the root');
  }
}

const root = findRoot();
const dist = process.env.AGENTRY_DIST ?? join(root, 'dist');
const fixture = join(findFixtureRoot(), 'test', 'mcp', 'fixtures', 'counting-server.mjs');
const built: Built = {
  ...((await import(pathToFileURL(join(dist, 'mcp', 'tool-source.js')).href)) as Pick<Built, 'McpToolSource'>),
  ...((await import(pathToFileURL(join(dist, 'mcp', 'config.js')).href)) as Pick<Built, 'parseMcpServers'>),
};

function findFixtureRoot(): string {
  for (let dir = dirname(fileURLToPath(import.meta.url)); ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'test', 'mcp', 'fixtures', 'counting-server.mjs'))) return dir;
    if (dirname(dir) === dir) throw new Error('test/mcp/fixtures/counting-server.mjs not found');
  }
}

const server = { command: process.execPath, args: [fixture] };
// The context a tool gets in an agent's step, as the library types it (an agent, signals that never abort).
const ctx = benchToolContext();

const stats = (ms: number[]) => {
  const s = [...ms].sort((a, b) => a - b);
  const at = (q: number) => Math.round(s[Math.min(s.length - 1, Math.floor(q * s.length))]! * 1000) / 1000;
  return { median: at(0.5), p95: at(0.95) };
};
const time = async (fn: () => Promise<unknown>): Promise<number> => {
  const t = performance.now();
  await fn();
  return performance.now() - t;
};

async function bareClient(): Promise<Client> {
  const client = new Client({ name: 'bench', version: '1' });
  await client.connect(new StdioClientTransport({ ...server, stderr: 'pipe' }));
  return client;
}

async function agentrySource() {
  const source = new built.McpToolSource(built.parseMcpServers({ counting: server }), { models: {}, tools: {} });
  await source.startAll();
  const echo = source.tools().find((t) => t.name === 'mcp__counting__echo');
  if (!echo) throw new Error('mcp__counting__echo not offered');
  return { source, echo };
}

const started = performance.now();
// First calls, alternating, so drift in the machine's speed hits both alike.
const firstBare: number[] = [];
const firstAgentry: number[] = [];
for (let i = 0; i < firsts; i++) {
  let client: Client | undefined;
  firstBare.push(
    await time(async () => {
      client = await bareClient();
      await client.callTool({ name: 'echo', arguments: { text: 'first' } });
    }),
  );
  await client!.close();
  let s: Awaited<ReturnType<typeof agentrySource>> | undefined;
  firstAgentry.push(
    await time(async () => {
      s = await agentrySource();
      await s.echo.run({ text: 'first' }, ctx);
    }),
  );
  await s!.source.close();
}

// Per call, on started servers, interleaved in blocks of 10.
const client = await bareClient();
const { source, echo } = await agentrySource();
for (let i = 0; i < WARMUP; i++) {
  await client.callTool({ name: 'echo', arguments: { text: `w${i}` } });
  await echo.run({ text: `w${i}` }, ctx);
}
const perBare: number[] = [];
const perAgentry: number[] = [];
for (let i = 0; i < calls; i += 10) {
  for (let k = i; k < Math.min(calls, i + 10); k++) {
    perBare.push(await time(() => client.callTool({ name: 'echo', arguments: { text: `c${k}` } })));
  }
  for (let k = i; k < Math.min(calls, i + 10); k++) perAgentry.push(await time(() => echo.run({ text: `c${k}` }, ctx)));
}
await client.close();
await source.close();

const fb = stats(firstBare);
const fa = stats(firstAgentry);
const pb = stats(perBare);
const pa = stats(perAgentry);
const round = (x: number) => Math.round(x * 1000) / 1000;
report({
  name: 'mcp',
  n: calls,
  wall_ms: Math.round(performance.now() - started),
  peak_rss_mb: peakRssMb(),
  first_calls: firsts,
  first_call_bare_median_ms: fb.median,
  first_call_bare_p95_ms: fb.p95,
  first_call_agentry_median_ms: fa.median,
  first_call_agentry_p95_ms: fa.p95,
  first_call_overhead_median_ms: round(fa.median - fb.median),
  per_call_bare_median_ms: pb.median,
  per_call_bare_p95_ms: pb.p95,
  per_call_agentry_median_ms: pa.median,
  per_call_agentry_p95_ms: pa.p95,
  per_call_overhead_median_ms: round(pa.median - pb.median),
  per_call_overhead_p95_ms: round(pa.p95 - pb.p95),
});
