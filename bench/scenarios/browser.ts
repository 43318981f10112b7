/**
 * browser: what a browser agent's context costs. One Chromium is launched (its launch time is reported),
 * then `--n` times, one after another after a warm-up: a fresh context with its guard proxy is opened, a local page
 * loaded through the proxy, and its ai-mode snapshot taken — median and p95 of that sum (`open_page_snapshot_*_ms`),
 * and of each part. Then 4 contexts are opened in parallel, each on a page, and the memory of the browser's processes is
 * read from /proc (the sum of RSS overcounts shared pages; PSS splits them): `browser_rss_mb` / `browser_pss_mb` with 4
 * contexts, `idle_*` with none, and the growth per context.
 *
 *   node .build/scenarios/browser.js --n 50        (after `npm run build`: loads dist/browser/*.js)
 *   node --import tsx bench/scenarios/browser.ts   (loads the sources)
 *
 * Needs Chromium (AGENTRY_CHROMIUM_PATH or chromium on PATH); fails naming what to install otherwise.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { peakRssMb, report } from '../lib/measure.js';

const { values } = parseArgs({ options: { n: { type: 'string', default: '50' } }, strict: false });
const runs = Number(values.n);
const WARMUP = 3;
const PARALLEL = 4;

interface Session {
  page: { goto(url: string): Promise<unknown> };
}
interface PoolModule {
  BrowserPool: new (options: Record<string, unknown>) => {
    open(key: string): Promise<Session>;
    release(key: string): Promise<void>;
    close(): Promise<void>;
    home: string | undefined;
  };
}
interface SnapshotModule {
  snapshotPage(page: unknown): Promise<{ full: string }>;
}
interface PolicyModule {
  parseAllowList(entries: string[]): unknown;
}

/** The built modules (dist/, found by walking up), or the sources when this file runs as TypeScript. */
async function load(): Promise<[PoolModule, SnapshotModule, PolicyModule]> {
  const here = fileURLToPath(import.meta.url);
  let root: string;
  let ext: string;
  if (here.endsWith('.ts')) {
    root = join(dirname(here), '..', '..', 'src');
    ext = 'ts';
  } else {
    for (let dir = dirname(here); ; dir = dirname(dir)) {
      if (existsSync(join(dir, 'dist', 'browser', 'browser-pool.js'))) {
        root = join(dir, 'dist');
        break;
      }
      if (dirname(dir) === dir)
        throw new Error('dist/browser/browser-pool.js not found: run `npm run build` at the root');
    }
    ext = 'js';
  }
  const mod = <T>(path: string) => import(pathToFileURL(join(root, `${path}.${ext}`)).href) as Promise<T>;
  return Promise.all([
    mod<PoolModule>('browser/browser-pool'),
    mod<SnapshotModule>('browser/snapshot'),
    mod<PolicyModule>('web/address-policy'),
  ]);
}

const quantile = (sorted: number[], q: number) =>
  sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
const round = (ms: number) => Math.round(ms * 10) / 10;
const stats = (times: number[]) => {
  const sorted = [...times].sort((a, b) => a - b);
  return { median: round(quantile(sorted, 0.5)), p95: round(quantile(sorted, 0.95)) };
};

const cmdlineOf = (pid: string) => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'latin1').replace(/\0/g, ' ');
  } catch {
    return '';
  }
};
const hasHome = (pid: string, home: string) => {
  try {
    return readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0').includes(`HOME=${home}`);
  } catch {
    return false;
  }
};

/**
 * RSS and PSS (MB) summed over the pool's browser processes: the main one carries HOME=<pool home>; its
 * zygote-forked children (renderers, GPU, utilities) do not, but all carry its --user-data-dir.
 */
function browserMemory(home: string): { rss: number; pss: number; processes: number } {
  const pids = readdirSync('/proc').filter((p) => /^\d+$/.test(p));
  const dirs = pids
    .filter((pid) => hasHome(pid, home))
    .map((pid) => /--user-data-dir=(\S+)/.exec(cmdlineOf(pid))?.[1])
    .filter((d): d is string => d !== undefined);
  let rss = 0;
  let pss = 0;
  let processes = 0;
  for (const pid of pids) {
    const cmd = cmdlineOf(pid);
    if (!dirs.some((d) => cmd.includes(`--user-data-dir=${d}`)) && !hasHome(pid, home)) continue;
    try {
      const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
      rss += Number(/^Rss:\s+(\d+)/m.exec(rollup)?.[1] ?? 0);
      pss += Number(/^Pss:\s+(\d+)/m.exec(rollup)?.[1] ?? 0);
      processes++;
    } catch {
      // gone
    }
  }
  return { rss: Math.round(rss / 102.4) / 10, pss: Math.round(pss / 102.4) / 10, processes };
}

// A local page of the size of a small real one: a form, a list, a paragraph or two.
const PAGE = `<!doctype html><html><head><title>Bench page</title></head><body><main><h1>Catalogue</h1>
<form action="/search"><label>Search <input name="q"></label><button>Go</button></form>
<ul>${Array.from({ length: 30 }, (_, i) => `<li><a href="/item/${i}">Item ${i}</a> — a short description ${i}</li>`).join('')}</ul>
<p>${'Some text of the page. '.repeat(40)}</p></main></body></html>`;
const server = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(PAGE));
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;

const [{ BrowserPool }, { snapshotPage }, { parseAllowList }] = await load();
const pool = new BrowserPool({ allow: parseAllowList(['127.0.0.1/32']), maxContexts: PARALLEL, idleMs: 600_000 });
const wallStarted = performance.now();
try {
  let started = performance.now();
  await pool.open('launch');
  const launchMs = round(performance.now() - started);
  await pool.release('launch');
  const idle = browserMemory(pool.home!);

  const total: number[] = [];
  const open: number[] = [];
  const load: number[] = [];
  const snap: number[] = [];
  let snapshotChars = 0;
  for (let i = 0; i < WARMUP + runs; i++) {
    started = performance.now();
    const session = await pool.open(`run-${i}`);
    const opened = performance.now();
    await session.page.goto(url);
    const loaded = performance.now();
    snapshotChars = (await snapshotPage(session.page)).full.length;
    const done = performance.now();
    if (i >= WARMUP) {
      total.push(done - started);
      open.push(opened - started);
      load.push(loaded - opened);
      snap.push(done - loaded);
    }
    await pool.release(`run-${i}`);
  }

  const keys = Array.from({ length: PARALLEL }, (_, i) => `parallel-${i}`);
  await Promise.all(
    keys.map(async (key) => {
      const session = await pool.open(key);
      await session.page.goto(url);
      await snapshotPage(session.page);
    }),
  );
  const busy = browserMemory(pool.home!);
  await Promise.all(keys.map((key) => pool.release(key)));

  const t = stats(total);
  report({
    name: 'browser',
    n: runs,
    wall_ms: Math.round(performance.now() - wallStarted),
    peak_rss_mb: peakRssMb(),
    launch_ms: launchMs,
    open_page_snapshot_median_ms: t.median,
    open_page_snapshot_p95_ms: t.p95,
    context_open_median_ms: stats(open).median,
    page_load_median_ms: stats(load).median,
    snapshot_median_ms: stats(snap).median,
    snapshot_chars: snapshotChars,
    idle_browser_rss_mb: idle.rss,
    idle_browser_pss_mb: idle.pss,
    browser_rss_mb: busy.rss,
    browser_pss_mb: busy.pss,
    browser_processes: busy.processes,
    pss_per_context_mb: Math.round(((busy.pss - idle.pss) / PARALLEL) * 10) / 10,
  });
} finally {
  await pool.close();
  server.close();
}
