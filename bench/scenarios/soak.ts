/**
 * soak: `--n` root agents (default 50,000) created and completed in `--waves` waves on a SQLite file with retention on
 * (finished trees forgotten `--keep-ms` after they finish, swept every second in the background; with `--delete-trees`
 * deleted, so that only their ledger rows stay). Each agent takes two
 * model turns (a tool call, then a 1 KB answer). After each wave (and a pause of two sweep intervals) it records the
 * database file with its WAL, the pages on the free list, the RSS and the heap: with retention they plateau instead of
 * growing with every wave. Prints one RESULT line with the figures of every wave.
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from '../lib/library-zod.js';
import { AgentRuntime, defineTool, sqliteStorage, type ModelRequest } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import type Database from 'better-sqlite3';
import { childAnswer, peakRssMb, report } from '../lib/measure.js';

const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '50000' },
    waves: { type: 'string', default: '10' },
    lane: { type: 'string', default: '64' },
    'keep-ms': { type: 'string', default: '1000' },
    'delete-trees': { type: 'boolean', default: false },
  },
  strict: false,
});
const n = Number(values.n);
const waves = Number(values.waves);
const lane = Number(values.lane);
const keepMs = Number(values['keep-ms']);
const perWave = Math.ceil(n / waves);
const SWEEP_MS = 1000;

const dir = mkdtempSync(join(tmpdir(), 'agentry-soak-'));
const path = join(dir, 'soak.db');
const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
const filler = 'x'.repeat(1000);

const lookup = defineTool({
  name: 'lookup',
  description: 'Looks an item up',
  input: z.object({ item: z.number() }),
  idempotent: true,
  run: ({ item }) => childAnswer(item),
});
const runtime = await AgentRuntime.open({
  storage: sqliteStorage({ path }),
  model: scriptedModel({
    record: false,
    turns: (req, { turnIndex }): ScriptedTurn => {
      const i = Number(/^task (\d+)$/.exec(goalOf(req))![1]);
      return turnIndex === 0
        ? { toolCalls: [{ name: 'lookup', input: { item: i } }] }
        : { text: `${childAnswer(i)} ${filler}` };
    },
  }),
  tools: [lookup],
  builtinTools: false,
  defaultAccount: { id: 'local', credits: 1e9 },
  concurrency: { models: lane, tools: lane },
  retention: {
    completedAfter: keepMs,
    failedAfter: keepMs,
    intervalMs: SWEEP_MS,
    batchSize: 500,
    deleteTrees: values['delete-trees'] === true,
  },
});

const fileMb = () => {
  let bytes = 0;
  for (const f of [path, `${path}-wal`]) {
    try {
      bytes += statSync(f).size;
    } catch {
      // no WAL right now
    }
  }
  return Math.round((bytes / 1024 / 1024) * 10) / 10;
};
/**
 * Figures from the runtime's own connection, between waves (better-sqlite3 is synchronous: nothing else runs
 * meanwhile). A second connection to the file in this process, opened and closed while the runtime writes, ended the
 * process with SIGBUS on this machine; the runtime's connection is the one that sees the file as it is anyway.
 */
const inspect = () => {
  const db = (runtime.storage as unknown as { c: { db: Database.Database } }).c.db;
  {
    return {
      pages: db.pragma('page_count', { simple: true }) as number,
      free_pages: db.pragma('freelist_count', { simple: true }) as number,
      turns: (db.prepare('SELECT count(*) AS c FROM turns').get() as { c: number }).c,
      agents: (db.prepare('SELECT count(*) AS c FROM agents').get() as { c: number }).c,
      ledger: (db.prepare('SELECT count(*) AS c FROM ledger').get() as { c: number }).c,
    };
  }
};

const perWaveFigures: Array<Record<string, number>> = [];
const t0 = performance.now();
let created = 0;
for (let w = 1; w <= waves; w++) {
  const tw = performance.now();
  // Waited for from the start: an agent that finishes early is deleted by the sweep (with --delete-trees) a second
  // later, long before the wave's last agent is created.
  const waits: Array<Promise<{ status: string }>> = [];
  for (let i = 0; i < perWave && created < n; i++, created++) {
    const { agent_id } = await runtime.create({ goal: `task ${created}` });
    waits.push(runtime.waitFor(agent_id));
  }
  const finals = await Promise.all(waits);
  if (finals.some((a) => a.status !== 'COMPLETED')) throw new Error(`wave ${w}: not every agent completed`);
  const waveMs = performance.now() - tw;
  await sleep(keepMs + 2 * SWEEP_MS); // the background sweep catches up with this wave
  global.gc?.();
  const mem = process.memoryUsage();
  perWaveFigures.push({
    wave: w,
    agents_done: created,
    wave_s: Math.round(waveMs / 100) / 10,
    agents_per_s: Math.round(waits.length / (waveMs / 1000)),
    db_mb: fileMb(),
    rss_mb: Math.round(mem.rss / 1024 / 1024),
    heap_mb: Math.round(mem.heapUsed / 1024 / 1024),
    ...inspect(),
  });
  process.stderr.write(`soak ${JSON.stringify(perWaveFigures.at(-1))}\n`);
}
const wallMs = performance.now() - t0;
await runtime.close();
rmSync(dir, { recursive: true, force: true });
report({
  name: 'soak',
  n: created,
  delete_trees: values['delete-trees'] === true,
  wall_ms: Math.round(wallMs),
  peak_rss_mb: peakRssMb(),
  waves: perWaveFigures,
});
