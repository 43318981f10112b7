/**
 * monitor: `--n` agents (10,000) each watch a page of a local server with a monitor every `--interval` seconds (60)
 * and wait, on one runtime and one SQLite file, with the real clock. After every agent waits, the scenario watches
 * `--seconds` (150: two intervals and a half) of checks and reports checks/s, the peak RSS, and how late checks ran:
 * for each page, the gap between two consecutive checks less the interval (a check plans the next one from its own
 * time, so that gap is how late the durable timer fired plus the check's own small delay before its request).
 * The pages answer 304 to conditional requests, as an unchanged page does. `timer_late_ms_*` is the timer service's
 * own measure over the same window: how long after its due time each check's handler started.
 *
 *   node .build/scenarios/monitor.js --n 10000 --interval 60 --seconds 150
 *   npx tsx bench/scenarios/monitor.ts --n 1000 --interval 5 --seconds 12      (from the root, on the sources)
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { AgentRuntime, sqliteStorage, type ModelRequest } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { peakRssMb, report } from '../lib/measure.js';

const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '10000' },
    interval: { type: 'string', default: '60' },
    seconds: { type: 'string', default: '150' },
  },
  strict: false,
});
const n = Number(values.n);
const intervalS = Number(values.interval);
const seconds = Number(values.seconds);

/** Request times per page, milliseconds. */
const hits: number[][] = Array.from({ length: n }, () => []);
let requests = 0;
const server = http.createServer((req, res) => {
  requests++;
  const i = Number(req.url?.slice(3));
  hits[i]?.push(Date.now());
  const etag = `"p${i}"`;
  if (req.headers['if-none-match'] === etag) {
    res.writeHead(304, { etag }).end();
    return;
  }
  res
    .writeHead(200, { 'content-type': 'text/html', etag })
    .end(`<html><body><main><h1>Item ${i}</h1><p class="price">Price: $${(i % 90) + 10}.00</p></main></body></html>`);
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

const firstText = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
let waiting = 0;
const model = scriptedModel({
  record: false,
  turns: (req, { turnIndex }): ScriptedTurn => {
    if (turnIndex === 0) {
      return {
        toolCalls: [{ name: 'monitor', input: { action: 'create', url: firstText(req), interval_s: intervalS } }],
        usage: { inputTokens: 10, outputTokens: 5 },
      };
    }
    if (turnIndex === 1) waiting++;
    return { toolCalls: [{ name: 'monitor', input: { action: 'wait' } }], usage: { inputTokens: 10, outputTokens: 5 } };
  },
});

const dir = mkdtempSync(join(tmpdir(), 'agentry-bench-monitor-'));
const runtime = await AgentRuntime.open({
  storage: sqliteStorage({ path: join(dir, 'agentry.db') }),
  model,
  defaultAccount: { id: 'local', credits: 1_000_000_000 },
  concurrency: { models: 64, tools: 64 },
  builtinTools: {
    only: ['monitor'],
    fetch: { allow: ['127.0.0.1/32'] },
    env: { AGENTRY_MONITOR_MIN_INTERVAL_S: String(intervalS) },
  },
});
let errors = 0;
runtime.on('error', () => errors++);

const t0 = Date.now();
for (let i = 0; i < n; i++) await runtime.create({ goal: `${base}/p/${i}` });
while (waiting < n) await new Promise((r) => setTimeout(r, 50));
await runtime.whenIdle();
const setupMs = Date.now() - t0;
const rssAfterSetup = Math.round(process.memoryUsage().rss / 1024 / 1024);

// The runtime's timer service, read for its own measure of lateness (when each check's handler started, after due).
type TimerStats = { fired: number; maxLateMs: number; meanLateMs: number; p99LateMs: number };
const timers = (runtime as unknown as { timers: { stats(o?: { reset?: boolean }): TimerStats } }).timers;
timers.stats({ reset: true });
const start = Date.now();
const requestsAtStart = requests;
let rssMax = 0;
const sampler = setInterval(() => {
  rssMax = Math.max(rssMax, process.memoryUsage().rss);
}, 500);
await new Promise((r) => setTimeout(r, seconds * 1000));
clearInterval(sampler);
const end = Date.now();
const checks = requests - requestsAtStart;
const fired = timers.stats();

// Lateness: gaps between consecutive checks of a page inside the window, less the interval.
const late: number[] = [];
for (const times of hits) {
  for (let k = 1; k < times.length; k++) {
    if (times[k - 1]! >= start && times[k]! <= end) late.push(times[k]! - times[k - 1]! - intervalS * 1000);
  }
}
late.sort((a, b) => a - b);
const pct = (p: number) => late[Math.min(late.length - 1, Math.floor((p / 100) * late.length))] ?? null;

await runtime.close();
server.close();
rmSync(dir, { recursive: true, force: true });

report({
  name: 'monitor',
  n,
  wall_ms: end - start,
  interval_s: intervalS,
  setup_ms: setupMs,
  checks,
  checks_per_s: Math.round((checks / ((end - start) / 1000)) * 10) / 10,
  expected_checks_per_s: Math.round((n / intervalS) * 10) / 10,
  late_checks_measured: late.length,
  late_ms_p50: pct(50),
  late_ms_p99: pct(99),
  late_ms_max: late.at(-1) ?? null,
  within_1s: late.length === 0 ? null : late.filter((x) => x <= 1_000).length / late.length,
  timers_fired: fired.fired,
  timer_late_ms_mean: Math.round(fired.meanLateMs),
  timer_late_ms_p99: fired.p99LateMs,
  timer_late_ms_max: fired.maxLateMs,
  rss_after_setup_mb: rssAfterSetup,
  rss_max_watching_mb: Math.round(rssMax / 1024 / 1024),
  peak_rss_mb: peakRssMb(),
  errors,
});
