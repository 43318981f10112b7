/**
 * enrich-1k: one root agent calls `enrich` for `--n` entities × 3 fields under the zero-latency scripted model, on a
 * SQLite file. Each research child takes 3 model turns (web_search, read_page, submit_result): the search provider is
 * an in-process fake, the pages (one small HTML page per entity) are served on loopback and read through the real
 * guarded fetch and page reader, and every citation goes through the citation check. Prints wall time, peak RSS and
 * the cost per child (µs), to be read next to fanout-1k's (2 model turns and one trivial tool per child). The page
 * reader's own cost per page is measured after the run (`read_page_us`, one page at a time) and taken out of the
 * per-child figure (`us_per_child_without_page_reads`): what is left is the runtime's (3 model turns, 3 tool calls,
 * the research child's spec and result schema, the page record, the citation check).
 *
 *   node .build/scenarios/enrich.js --n 1000 --lane 64
 */
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentRuntime, sqliteStorage, type ModelRequest, type SearchProvider } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { createGuardedFetch, readPage } from 'agentry-runtime/web';
import { peakRssMb, report, scenarioArgs } from '../lib/measure.js';

const TOWNS = ['Brightwater', 'Cobble Reach', 'Hollin', 'Saltmere', 'Fennick', 'Gullsway'];
const fact = (i: number) => ({
  founded: 1800 + (i % 200),
  town: TOWNS[i % TOWNS.length]!,
  staff: 20 + ((i * 37) % 900),
});
const entityName = (i: number) => `Bench Company ${i}`;
/** Pages read again after the run, one at a time, to tell the page reader's cost from the runtime's. */
const READ_SAMPLE = 200;

function pageHtml(i: number): string {
  const f = fact(i);
  const name = entityName(i);
  return `<!doctype html><html><head><title>${name}</title></head><body>
<nav><a href="/">Bench wiki</a></nav>
<article><h1>${name}</h1>
<p>${name} was founded in ${f.founded} by a group of fishermen.</p>
<p>It is headquartered in ${f.town} and sells rope, nets and sails.</p>
<p>${name} employs ${f.staff} people across the islands.</p>
</article><footer>Bench wiki</footer></body></html>`;
}

const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
const lastResult = (req: ModelRequest) =>
  (req.messages.at(-1)!.content as Array<{ type: string; content?: string }>).find((b) => b.type === 'tool_result')!
    .content!;

async function main(): Promise<void> {
  const args = scenarioArgs();
  const n = args.n;
  const lane = Number(args.lane);
  const dir = mkdtempSync(join(tmpdir(), 'agentry-bench-enrich-'));

  const server = http.createServer((req, res) => {
    const m = /^\/e\/(\d+)$/.exec(req.url ?? '');
    if (!m) return void res.writeHead(404).end();
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(pageHtml(Number(m[1])));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  const search: SearchProvider = {
    name: 'bench',
    async search({ query }) {
      const i = Number(/(\d+)$/.exec(query)?.[1] ?? -1);
      return [{ title: entityName(i), url: `${base}/e/${i}`, snippet: `${entityName(i)} was founded …` }];
    },
  };

  const fields = [
    { name: 'founded', description: 'the year it was founded', type: 'number' },
    { name: 'headquarters', description: 'the town of its headquarters', type: 'string' },
    { name: 'employees', description: 'how many people it employs', type: 'number' },
  ];
  const model = scriptedModel({
    record: false,
    turns: (req, { turnIndex }): ScriptedTurn => {
      const goal = goalOf(req);
      if (goal.startsWith('enrich')) {
        if (turnIndex === 0) {
          const entities = Array.from({ length: n }, (_, i) => ({ name: entityName(i) }));
          return { toolCalls: [{ name: 'enrich', input: { entities, fields } }] };
        }
        return { text: 'table filled' };
      }
      const name = goal.split('\n\n')[1]!;
      const i = Number(/(\d+)$/.exec(name)![1]);
      if (turnIndex === 0) return { toolCalls: [{ name: 'web_search', input: { query: name } }] };
      if (turnIndex === 1) {
        const { results } = JSON.parse(lastResult(req)) as { results: Array<{ url: string }> };
        return { toolCalls: [{ name: 'read_page', input: { url: results[0]!.url } }] };
      }
      const url = (JSON.parse(lastResult(req)) as { url: string }).url;
      const f = fact(i);
      const answer = (value: string | number, excerpt: string) => ({
        value,
        citations: [{ url, excerpt }],
        confidence: 0.9,
      });
      return {
        toolCalls: [
          {
            name: 'submit_result',
            input: {
              fields: {
                founded: answer(f.founded, `${name} was founded in ${f.founded}`),
                headquarters: answer(f.town, `It is headquartered in ${f.town}`),
                employees: answer(`${f.staff} people`, `${name} employs ${f.staff} people`),
              },
            },
          },
        ],
      };
    },
  });

  const runtime = await AgentRuntime.open({
    storage: sqliteStorage({ path: join(dir, 'bench.db') }),
    model,
    builtinTools: { search, env: {}, fetch: { allow: ['127.0.0.1/32'] } },
    defaultAccount: { id: 'local', credits: 1e9 },
    concurrency: { models: lane, tools: lane },
  });
  const t0 = performance.now();
  const { agent_id } = await runtime.create({ goal: `enrich ${n} entities` });
  const final = await runtime.waitFor(agent_id);
  const wallMs = performance.now() - t0;

  // Check the work really happened: every child COMPLETED, every field filled with a checked citation, the ledger
  // balances.
  const completed = (await runtime.storage.listAgentIdsByStatus(['COMPLETED'])).length;
  if (final.status !== 'COMPLETED' || completed !== n + 1) {
    throw new Error(`expected ${n + 1} COMPLETED agents, got ${completed} (root: ${final.status})`);
  }
  type Output = {
    rows: Array<{ fields: Record<string, { value: unknown; citations: unknown[] }> }>;
    dropped_citations: number;
    artifact_id?: string;
  };
  const [call] = await runtime.storage.listToolCalls(agent_id, 1);
  const shown = JSON.parse(call!.result!) as Output;
  // 1,000 rows do not fit in one tool result: the model saw the first ones, the whole table is an artifact.
  const whole = shown.artifact_id ? await runtime.getArtifact(agent_id, shown.artifact_id) : undefined;
  const output = whole ? (JSON.parse(new TextDecoder().decode(whole.data)) as Output) : shown;
  const filled = output.rows
    .flatMap((r) => Object.values(r.fields))
    .filter((f) => f.value !== null && f.citations.length);
  if (filled.length !== n * fields.length || output.dropped_citations !== 0) {
    throw new Error(`expected ${n * fields.length} checked values, got ${filled.length}`);
  }
  const account = (await runtime.storage.getAccount('local'))!;
  const ledger = await runtime.storage.listLedger('local');
  if (ledger.reduce((s, l) => s + l.amount, 0) !== account.balance) throw new Error('ledger invariant broken');
  await runtime.close();

  // What reading one page costs by itself (guarded fetch over loopback, then linkedom, Readability and turndown), one
  // at a time on a warm process: the part of a child's cost that is the page reader's, not the runtime's.
  const fetch = createGuardedFetch({ allow: ['127.0.0.1/32'] });
  const sample = Math.min(n, READ_SAMPLE);
  const r0 = performance.now();
  for (let i = 0; i < sample; i++) await readPage(fetch, `${base}/e/${i}`);
  const readUs = ((performance.now() - r0) * 1000) / sample;
  await fetch.close();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  rmSync(dir, { recursive: true, force: true });

  report({
    name: 'enrich',
    n,
    fields: fields.length,
    wall_ms: Math.round(wallMs),
    child_steps_per_s: Math.round((3 * n) / (wallMs / 1000)),
    us_per_child: Math.round((wallMs * 1000) / n),
    read_page_us: Math.round(readUs),
    us_per_child_without_page_reads: Math.round((wallMs * 1000) / n - readUs),
    peak_rss_mb: peakRssMb(),
    rows_shown_to_model: shown.rows.length,
    table_bytes: whole?.data.byteLength ?? call!.result!.length,
    ledger_rows: ledger.length,
  });
}

await main();
