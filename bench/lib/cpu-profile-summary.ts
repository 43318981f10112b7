/**
 * Summarises a V8 CPU profile (`node --cpu-prof`) as text: self time by function and by module as fractions of the
 * busy samples (idle left out); by owning module (node's internals and native code counted to their JavaScript
 * caller); and the share of samples with a chosen module anywhere on the stack (inclusive: that counts what runs
 * inside a callback it wraps too). On a loaded machine absolute times drift; the fractions are what compare.
 *
 *   node --cpu-prof --cpu-prof-dir=/tmp/prof .build/scenarios/agentry-fanout.js --n 10000 --lane 64
 *   node --import tsx lib/cpu-profile-summary.ts /tmp/prof/*.cpuprofile --top 15 --inclusive otel,@opentelemetry
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: Node[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** The module a frame belongs to: an npm package, agentry's own file, node's internals, or V8's pseudo-frames. */
export function moduleOf(url: string, functionName: string): string {
  if (url === '') return functionName.startsWith('(') ? functionName : '(native)';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url);
  if (pkg) return pkg[1]!;
  if (url.startsWith('node:')) return url.split('/').slice(0, 2).join('/');
  const own = /\/(dist|src)\/(.+)$/.exec(url);
  if (own) return `agentry ${own[2]}`;
  const bench = /\/\.build\/(.+)$/.exec(url);
  if (bench) return `bench ${bench[1]}`;
  return url;
}

/** Frames that work for a caller (node's internals, native code): their time belongs to whoever called them. */
const isPlumbing = (mod: string) => mod.startsWith('node:') || mod === '(native)';

export function summarise(profile: Profile, top: number, inclusive: string[]): string {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const selfFn = new Map<string, number>();
  const selfMod = new Map<string, number>();
  /** Self time given to the nearest caller that is JavaScript of a package or of agentry (not node's or V8's). */
  const owned = new Map<string, number>();
  const incl = new Map<string, number>(inclusive.map((m) => [m, 0]));
  let busy = 0;
  let idle = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    const node = byId.get(profile.samples[i]!)!;
    const dt = profile.timeDeltas[i] ?? 0;
    const { functionName, url, lineNumber } = node.callFrame;
    if (functionName === '(idle)') {
      idle += dt;
      continue;
    }
    busy += dt;
    const mod = moduleOf(url, functionName);
    const fn = `${functionName || '(anonymous)'} ${url ? `${mod}:${lineNumber + 1}` : ''}`.trim();
    selfFn.set(fn, (selfFn.get(fn) ?? 0) + dt);
    selfMod.set(mod, (selfMod.get(mod) ?? 0) + dt);
    let owner = mod;
    for (let id = parent.get(node.id); isPlumbing(owner) && id !== undefined; id = parent.get(id)) {
      owner = moduleOf(byId.get(id)!.callFrame.url, byId.get(id)!.callFrame.functionName);
    }
    owned.set(owner, (owned.get(owner) ?? 0) + dt);
    if (inclusive.length > 0) {
      const seen = new Set<string>();
      for (let id: number | undefined = node.id; id !== undefined; id = parent.get(id)) {
        const m = moduleOf(byId.get(id)!.callFrame.url, byId.get(id)!.callFrame.functionName);
        for (const want of inclusive) if (m.includes(want)) seen.add(want);
      }
      for (const want of seen) incl.set(want, incl.get(want)! + dt);
    }
  }
  const pct = (x: number) => `${((100 * x) / busy).toFixed(1).padStart(5)} %`;
  const ranked = (m: Map<string, number>) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([k, v]) => `  ${pct(v)}  ${k}`);
  const lines = [
    `samples ${profile.samples.length}, busy ${Math.round(busy / 1000)} ms, idle ${Math.round(idle / 1000)} ms ` +
      `(absolute times are inflated by the machine's load; compare the fractions)`,
    `self time by function (top ${top}), % of busy:`,
    ...ranked(selfFn),
    `self time by module (top ${top}), % of busy:`,
    ...ranked(selfMod),
    `self time by owning module (node's internals and native code counted to the JavaScript that called them; ` +
      `garbage collection stays apart), top ${top}, % of busy:`,
    ...ranked(owned),
  ];
  if (inclusive.length > 0) {
    lines.push('inclusive (the module anywhere on the stack), % of busy:');
    for (const [m, v] of incl) lines.push(`  ${pct(v)}  ${m}  (${Math.round(v / 1000)} ms)`);
  }
  return lines.join('\n');
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({
    options: { top: { type: 'string', default: '15' }, inclusive: { type: 'string', default: '' } },
    allowPositionals: true,
  });
  for (const file of positionals) {
    const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
    const wanted = values.inclusive ? values.inclusive.split(',') : [];
    console.log(`== ${file}\n${summarise(profile, Number(values.top), wanted)}\n`);
  }
}
