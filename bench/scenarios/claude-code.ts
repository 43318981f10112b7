/**
 * claude-code: what one run of spawn_claude_code_agent's `claude-agent-sdk` backend costs, less the model. The real
 * Claude Code binary (the root's devDependency `@anthropic-ai/claude-agent-sdk`) runs in the bubblewrap sandbox and its
 * model turns go through the model bridge to a scripted `generate` that answers at once, so what is left is the
 * sandbox, Claude Code's startup, the bridge and the exit. Two kinds of run, `--n` times each after a warm-up, one
 * after another, each with its own bridge, workspace, HOME and session, timed around `startModelBridge` +
 * `runClaudeCode` (as the backend does per call):
 *
 * - `one_turn`: the model answers "Done." at once (`one_turn_median_ms`, `one_turn_p95_ms`);
 * - `four_turns`: the model asks for Write (a file), Bash (`python3 -c 'print(1)'`), then `mcp__agentry__submit_result`,
 *   then answers "Done." (`four_turns_median_ms`, `four_turns_p95_ms`). `turn_overhead_ms` is
 *   (four_turns - one_turn) / 3 of the medians: what one more bridged turn costs, its tool included;
 *   `gap_after_{write,bash,submit}_median_ms` is the time from one answer of the bridge to the next request, i.e. Claude
 *   Code reading the answer, running that tool and sending the conversation back.
 *
 * `cpu_ms_*` is the sandbox's CPU time (`outcome.cpuMs`), median; `side_requests` counts model requests outside the
 * main conversation over all runs (a title, say; none expected). Every run is checked: the answer, the written file,
 * Bash's output as Claude Code sent it back, the submitted result.
 *
 *   node .build/scenarios/claude-code.js --n 20        (after `npm run build`: loads dist/)
 *   node --import tsx bench/scenarios/claude-code.ts    (loads the sources)
 *
 * Needs bwrap, setpriv and prlimit and the SDK (installed at the repository root); says which is missing otherwise.
 */
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { peakRssMb, report } from '../lib/measure.js';

const { values } = parseArgs({ options: { n: { type: 'string', default: '20' } }, strict: false });
const runs = Number(values.n);
const WARMUP = 1;

type Block =
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id: string; name: string; input: unknown }
  | { type: 'tool_result'; tool_use_id: string; content: string; is_error?: boolean };
interface Turn {
  system: string;
  messages: Array<{ role: 'user' | 'assistant'; content: Block[] }>;
  tools: Array<{ name: string }>;
}
interface Answer {
  content: Block[];
  usage: { inputTokens: number; outputTokens: number };
  stopReason: 'end_turn' | 'tool_use';
}
interface SandboxModule {
  bubblewrapSandbox(): { probe(): Promise<{ ok: true } | { ok: false; reason: string }> };
}
interface WorkspaceModule {
  chownToSandbox(path: string): Promise<void>;
}
interface BridgeModule {
  startModelBridge(o: {
    socketPath: string;
    apiKey: string;
    generate(turn: Turn, signal: AbortSignal): Promise<Answer>;
  }): Promise<{ stats(): { turns: number; firstError: Error | undefined }; close(): Promise<void> }>;
}
interface Outcome {
  submitted?: { summary: string; files?: string[] };
  result: string;
  isError: boolean;
  turns: number;
  cpuMs?: number;
  timedOut: boolean;
  stderrTail: string;
}
interface RunModule {
  runClaudeCode(run: Record<string, unknown>): Promise<Outcome>;
}

/** Says what is missing and exits: a missing tool is not a crash. */
function missing(reason: string): never {
  process.stderr.write(`claude-code: ${reason}\n`);
  process.exit(1);
}

/** The repository root: the sources' parent, or where dist/ is found walking up from .build/. */
function repoRoot(): string {
  const here = fileURLToPath(import.meta.url);
  if (here.endsWith('.ts')) return join(dirname(here), '..', '..');
  for (let dir = dirname(here); ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'dist', 'tools', 'builtin', 'code-agent', 'claude-sdk', 'run-claude-code.js'))) return dir;
    if (dirname(dir) === dir) {
      missing('dist/tools/builtin/code-agent/claude-sdk/run-claude-code.js not found: run `npm run build` at the root');
    }
  }
}

/** The built modules (dist/), or the sources when this file runs as TypeScript. */
async function load(root: string): Promise<[SandboxModule, WorkspaceModule, BridgeModule, RunModule]> {
  const ts = fileURLToPath(import.meta.url).endsWith('.ts');
  const base = join(root, ts ? 'src' : 'dist');
  const at = (path: string) => import(pathToFileURL(join(base, `${path}.${ts ? 'ts' : 'js'}`)).href) as Promise<never>;
  return Promise.all([
    at('sandbox/bubblewrap'),
    at('sandbox/workspace'),
    at('tools/builtin/code-agent/claude-sdk/model-bridge'),
    at('tools/builtin/code-agent/claude-sdk/run-claude-code'),
  ]);
}

/** The SDK from the root's node_modules (a devDependency of agentry, never of the bench package). */
async function loadSdk(root: string): Promise<unknown> {
  let entry: string;
  try {
    entry = createRequire(join(root, 'package.json')).resolve('@anthropic-ai/claude-agent-sdk');
  } catch {
    missing('@anthropic-ai/claude-agent-sdk is not installed at the repository root: run `npm ci` there');
  }
  return import(pathToFileURL(entry).href);
}

const quantile = (sorted: number[], q: number) =>
  sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
const round = (ms: number) => Math.round(ms * 100) / 100;
const stats = (xs: number[]) => {
  const sorted = [...xs].sort((a, b) => a - b);
  return { median: round(quantile(sorted, 0.5)), p95: round(quantile(sorted, 0.95)) };
};

const root = repoRoot();
const [{ bubblewrapSandbox }, { chownToSandbox }, { startModelBridge }, { runClaudeCode }] = await load(root);
const sdk = await loadSdk(root);
const sandbox = bubblewrapSandbox();
const probe = await sandbox.probe();
if (!probe.ok) missing(`no sandbox: ${probe.reason}`);

const MARKER = `bench ${process.pid}`;
const answer = (content: Block[]): Answer => ({
  content,
  usage: { inputTokens: 1, outputTokens: 1 },
  stopReason: content.some((b) => b.type === 'tool_use') ? 'tool_use' : 'end_turn',
});
const done = () => answer([{ type: 'text', text: 'Done.' }]);
const use = (name: string, input: Record<string, unknown>) =>
  answer([{ type: 'tool_use', id: `toolu_${randomUUID().replaceAll('-', '')}`, name, input }]);

/** The four turns, chosen by how many the conversation already holds (so a retried request gets the same answer). */
const FOUR: Array<(turn: Turn) => Answer> = [
  () => use('Write', { file_path: '/workspace/note.txt', content: `${MARKER}\n` }),
  () => use('Bash', { command: `python3 -c 'print(1)'`, description: 'print 1' }),
  (turn) => {
    const bash = turn.messages.at(-1)!.content.find((b) => b.type === 'tool_result');
    if (bash?.type !== 'tool_result' || bash.is_error || bash.content.trim() !== '1') {
      throw new Error(`Bash did not print 1: ${JSON.stringify(bash)}`);
    }
    return use('mcp__agentry__submit_result', { summary: 'note.txt written, python3 printed 1', files: ['note.txt'] });
  },
  done,
];

const dataDir = await mkdtemp(join(tmpdir(), 'agentry-bench-cc-'));
await chmod(dataDir, 0o711);
await chownToSandbox(dataDir);

interface Measured {
  ms: number;
  cpuMs: number | undefined;
  /** From each answer of the bridge to the next request of the main conversation. */
  gaps: number[];
  /** Requests outside the main conversation (none expected: non-essential traffic is off). */
  side: number;
}

let seq = 0;
async function once(kind: 'one' | 'four'): Promise<Measured> {
  const dir = join(dataDir, String(seq++));
  const workspace = join(dir, 'ws');
  const home = join(dir, 'home');
  for (const d of [dir, workspace, home]) {
    await mkdir(d, { mode: d === dir ? 0o711 : 0o700 });
    await chownToSandbox(d);
  }
  const apiKey = randomUUID();
  const gaps: number[] = [];
  let side = 0;
  let answeredAt: number | undefined;
  let error: Error | undefined;
  const generate = async (turn: Turn): Promise<Answer> => {
    // Requests other than the main conversation's (a title, a summary) have no tools: they get a short text.
    if (!turn.tools.some((t) => t.name === 'Bash')) {
      side += 1;
      return answer([{ type: 'text', text: 'Bench' }]);
    }
    if (answeredAt !== undefined) gaps.push(performance.now() - answeredAt);
    try {
      const step = turn.messages.filter((m) => m.role === 'assistant').length;
      return kind === 'one' ? done() : (FOUR[step] ?? done)(turn);
    } catch (e) {
      error ??= e as Error;
      throw e;
    } finally {
      answeredAt = performance.now();
    }
  };

  const started = performance.now();
  const bridge = await startModelBridge({ socketPath: join(dir, 'm.sock'), apiKey, generate });
  let outcome: Outcome;
  try {
    outcome = await runClaudeCode({
      sdk,
      sandbox,
      workspace,
      home,
      bridgeSocket: join(dir, 'm.sock'),
      bridgeKey: apiKey,
      prompt: kind === 'one' ? 'Say done.' : 'Write note.txt, run python3, submit.',
      instructions: 'You are measured by a benchmark.',
      sessionId: randomUUID(),
      resume: false,
      maxTurns: 20,
      timeoutMs: 120_000,
      signal: AbortSignal.timeout(150_000),
    });
  } finally {
    await bridge.close();
  }
  const ms = performance.now() - started;

  const fail = (why: string) => {
    throw new Error(`${kind} run ${seq}: ${why}; result: ${outcome.result}; stderr: ${outcome.stderrTail.slice(-500)}`);
  };
  if (error) fail(error.message);
  if (outcome.isError || outcome.timedOut || outcome.result !== 'Done.') fail('did not answer "Done."');
  if (kind === 'four') {
    if (outcome.submitted?.files?.[0] !== 'note.txt') fail(`submitted ${JSON.stringify(outcome.submitted)}`);
    const note = await readFile(join(workspace, 'note.txt'), 'utf8').catch(() => '');
    if (note !== `${MARKER}\n`) fail(`note.txt holds ${JSON.stringify(note)}`);
    if (gaps.length !== 3) fail(`${gaps.length + 1} main turns, not 4`);
  }
  await rm(dir, { recursive: true, force: true });
  return { ms, cpuMs: outcome.cpuMs, gaps, side };
}

async function measure(kind: 'one' | 'four'): Promise<Measured[]> {
  const out: Measured[] = [];
  for (let i = 0; i < WARMUP + runs; i++) {
    const m = await once(kind);
    if (i >= WARMUP) out.push(m);
  }
  return out;
}

const wallStarted = performance.now();
try {
  const one = await measure('one');
  const four = await measure('four');
  const oneMs = stats(one.map((m) => m.ms));
  const fourMs = stats(four.map((m) => m.ms));
  const cpu = (ms: Measured[]) => {
    const known = ms.map((m) => m.cpuMs).filter((c): c is number => c !== undefined);
    return known.length > 0 ? stats(known).median : null;
  };
  const gap = (i: number) => stats(four.map((m) => m.gaps[i]!)).median;
  report({
    name: 'claude-code',
    n: runs,
    wall_ms: Math.round(performance.now() - wallStarted),
    peak_rss_mb: peakRssMb(),
    one_turn_median_ms: oneMs.median,
    one_turn_p95_ms: oneMs.p95,
    four_turns_median_ms: fourMs.median,
    four_turns_p95_ms: fourMs.p95,
    turn_overhead_ms: round((fourMs.median - oneMs.median) / 3),
    gap_after_write_median_ms: gap(0),
    gap_after_bash_median_ms: gap(1),
    gap_after_submit_median_ms: gap(2),
    cpu_ms_one_turn_median: cpu(one),
    cpu_ms_four_turns_median: cpu(four),
    side_requests: [...one, ...four].reduce((sum, m) => sum + m.side, 0),
  });
} catch (error) {
  // a failed check, said in one line (the workspace is removed below)
  process.stderr.write(`claude-code: ${(error as Error).message}\n`);
  process.exitCode = 1;
} finally {
  await rm(dataDir, { recursive: true, force: true });
}
