/**
 * sandbox: what one sandboxed command costs from start to exit. Runs `true` and `node -e 0` in the bubblewrap sandbox
 * (setpriv → bwrap → prlimit → the command, as `spawn_claude_code_agent` will) `--n` times each after a warm-up, one
 * after another, and reports the median and p95 of each (`true_median_ms`, `true_p95_ms`, `node_median_ms`,
 * `node_p95_ms`), measured around `sandbox.run()`, so the spawn, the namespaces, the mounts and the reaping are in.
 * Then one coding child file-tool call, a `Read` of a small file, as the tools make it (the file helper run
 * by node inside the sandbox, `workspace-files.ts`): `file_read_median_ms`, `file_read_p95_ms`.
 *
 *   node .build/scenarios/sandbox.js --n 50         (after `npm run build`: loads dist/sandbox/*.js)
 *   node --import tsx bench/scenarios/sandbox.ts    (loads the sources)
 *
 * Needs bwrap, setpriv and prlimit; fails with the probe's reason otherwise.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { peakRssMb, report } from '../lib/measure.js';

const { values } = parseArgs({ options: { n: { type: 'string', default: '50' } }, strict: false });
const runs = Number(values.n);
const WARMUP = 3;

interface SandboxModule {
  bubblewrapSandbox(): {
    probe(): Promise<{ ok: true } | { ok: false; reason: string }>;
    run(command: Record<string, unknown>): Promise<{ exitCode: number | null; stderr: string }>;
  };
}
interface WorkspaceModule {
  createWorkspace(dataDir: string, agentId: string): Promise<string>;
}
interface FilesModule {
  workspaceFileOperation(sandbox: unknown, root: string, operation: Record<string, unknown>): Promise<unknown>;
}

/** The built modules (dist/sandbox/, found by walking up), or the sources when this file runs as TypeScript. */
async function load(): Promise<[SandboxModule, WorkspaceModule, FilesModule]> {
  const here = fileURLToPath(import.meta.url);
  if (here.endsWith('.ts')) {
    const src = join(dirname(here), '..', '..', 'src');
    return Promise.all([
      import(pathToFileURL(join(src, 'sandbox', 'bubblewrap.ts')).href) as Promise<SandboxModule>,
      import(pathToFileURL(join(src, 'sandbox', 'workspace.ts')).href) as Promise<WorkspaceModule>,
      import(pathToFileURL(join(src, 'tools/builtin/code-agent/workspace-files.ts')).href) as Promise<FilesModule>,
    ]);
  }
  for (let dir = dirname(here); ; dir = dirname(dir)) {
    const built = join(dir, 'dist');
    if (existsSync(join(built, 'sandbox', 'bubblewrap.js'))) {
      return Promise.all([
        import(pathToFileURL(join(built, 'sandbox', 'bubblewrap.js')).href) as Promise<SandboxModule>,
        import(pathToFileURL(join(built, 'sandbox', 'workspace.js')).href) as Promise<WorkspaceModule>,
        import(pathToFileURL(join(built, 'tools/builtin/code-agent/workspace-files.js')).href) as Promise<FilesModule>,
      ]);
    }
    if (dirname(dir) === dir) throw new Error('dist/sandbox/bubblewrap.js not found: run `npm run build` at the root');
  }
}

const quantile = (sorted: number[], q: number) =>
  sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
const round = (ms: number) => Math.round(ms * 100) / 100;

const [{ bubblewrapSandbox }, { createWorkspace }, { workspaceFileOperation }] = await load();
const sandbox = bubblewrapSandbox();
const probe = await sandbox.probe();
if (!probe.ok) throw new Error(`no sandbox: ${probe.reason}`);

const dataDir = await mkdtemp(join(tmpdir(), 'agentry-bench-sandbox-'));
const workspace = await createWorkspace(dataDir, 'bench');

async function measure(argv: string[]): Promise<{ median: number; p95: number }> {
  const times: number[] = [];
  for (let i = 0; i < WARMUP + runs; i++) {
    const started = performance.now();
    const r = await sandbox.run({ argv, workspace, timeoutMs: 30_000, maxOutputBytes: 65536 });
    const ms = performance.now() - started;
    if (r.exitCode !== 0) throw new Error(`${argv.join(' ')} exited with ${r.exitCode}: ${r.stderr}`);
    if (i >= WARMUP) times.push(ms);
  }
  times.sort((a, b) => a - b);
  return { median: round(quantile(times, 0.5)), p95: round(quantile(times, 0.95)) };
}

/** A `Read` of a small file as the coding child's tool makes it: one run of the file helper in the sandbox. */
async function measureRead(): Promise<{ median: number; p95: number }> {
  const write = { op: 'write', path: 'notes.txt', label: 'notes.txt', content: 'hello\n', encoding: 'utf8' };
  await workspaceFileOperation(sandbox, workspace, write);
  const read = { op: 'read', path: 'notes.txt', label: 'notes.txt', max_bytes: 5_000_000, encoding: 'utf8' };
  const times: number[] = [];
  for (let i = 0; i < WARMUP + runs; i++) {
    const started = performance.now();
    await workspaceFileOperation(sandbox, workspace, read);
    if (i >= WARMUP) times.push(performance.now() - started);
  }
  times.sort((a, b) => a - b);
  return { median: round(quantile(times, 0.5)), p95: round(quantile(times, 0.95)) };
}

const wallStarted = performance.now();
try {
  const t = await measure(['true']);
  const node = await measure(['node', '-e', '0']);
  const fileRead = await measureRead();
  report({
    name: 'sandbox',
    n: runs,
    wall_ms: Math.round(performance.now() - wallStarted),
    peak_rss_mb: peakRssMb(),
    true_median_ms: t.median,
    true_p95_ms: t.p95,
    node_median_ms: node.median,
    node_p95_ms: node.p95,
    file_read_median_ms: fileRead.median,
    file_read_p95_ms: fileRead.p95,
  });
} finally {
  await rm(dataDir, { recursive: true, force: true });
}
