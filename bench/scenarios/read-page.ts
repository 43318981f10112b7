/**
 * read-page: what `read_page` costs in CPU once the bytes are in. A generated ~200 KB news-style page (navigation,
 * sidebar and footer around an article of sections with links, lists, code blocks and tables) goes through
 * `extractPage` — linkedom, Readability, turndown — `--n` times after a warm-up; reports median and p95 per page,
 * converting the whole page (`median_ms`, `p95_ms`, `wall_ms` for all runs) and as `read_page` does by default, keeping
 * the first 20,000 characters (`default_max_chars_*`), of which only about that much is converted to Markdown.
 *
 *   node .build/scenarios/read-page.js --n 30 --kb 200
 *
 * It loads the built library (`dist/web/page-reader.js`, found by walking up from this file, as it is not part of
 * the public entry points): run `npm run build` at the root first.
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { peakRssMb, report } from '../lib/measure.js';

const { values } = parseArgs({
  options: { n: { type: 'string', default: '30' }, kb: { type: 'string', default: '200' } },
  strict: false,
});
const runs = Number(values.n);
const targetBytes = Number(values.kb) * 1024;
const WARMUP = 3;

type ExtractPage = (input: {
  url: string;
  finalUrl: string;
  contentType: string | null;
  body: Uint8Array;
  maxChars?: number;
}) => Promise<{ content: string; text: string; links: unknown[]; title: string }>;

async function loadExtractPage(): Promise<ExtractPage> {
  for (let dir = dirname(fileURLToPath(import.meta.url)); ; dir = dirname(dir)) {
    const built = join(dir, 'dist', 'web', 'page-reader.js');
    if (existsSync(built))
      return ((await import(pathToFileURL(built).href)) as { extractPage: ExtractPage }).extractPage;
    if (dirname(dir) === dir) throw new Error('dist/web/page-reader.js not found: run `npm run build` at the root');
  }
}

const words = (
  'the council said on tuesday that the new network would connect the university campus with the central station ' +
  'and the three largest districts while traders argued that parking spaces matter more than cycle lanes for shops'
).split(' ');
let seed = 7;
const pick = () => words[(seed = (seed * 1103515245 + 12345) % 2 ** 31) % words.length]!;
const sentence = (n: number) => {
  const s = Array.from({ length: n }, pick).join(' ');
  return `${s[0]!.toUpperCase()}${s.slice(1)}.`;
};
const paragraph = (i: number) =>
  `<p>${sentence(14)} ${sentence(10)} See <a href="/related/${i}">the related report ${i}</a>, ` +
  `<em>${sentence(4)}</em> and <strong>${sentence(3)}</strong> with <code>option_${i}</code>. ${sentence(18)}</p>`;

/** A page of about `bytes` bytes shaped like a long news or docs article with its site around it. */
function generatePage(bytes: number): string {
  const nav = Array.from({ length: 30 }, (_, i) => `<li><a href="/section/${i}">Section ${i}</a></li>`).join('');
  const side = Array.from({ length: 20 }, (_, i) => `<li><a href="/most-read/${i}">${sentence(6)}</a></li>`).join('');
  const head =
    `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>A long report | Bench Herald</title>` +
    `<style>body{font:16px/1.5 serif}.ad{display:none}</style><script>window.dataLayer=[];</script></head><body>` +
    `<header><a href="/">Bench Herald</a><nav><ul>${nav}</ul></nav></header><main><article><h1>A long report</h1>`;
  const tail =
    `</article></main><aside><h3>Most read</h3><ol>${side}</ol></aside>` +
    `<footer><p>© Bench Herald</p><a href="/privacy">Privacy</a></footer></body></html>`;
  const sections: string[] = [];
  let size = head.length + tail.length;
  for (let i = 0; size < bytes; i++) {
    let s = `<section><h2>Part ${i + 1}: ${sentence(5)}</h2>${[0, 1, 2, 3].map((k) => paragraph(i * 4 + k)).join('')}`;
    if (i % 2 === 0) s += `<ul>${[1, 2, 3, 4].map(() => `<li>${sentence(8)}</li>`).join('')}</ul>`;
    if (i % 3 === 0) s += `<pre><code class="language-js">const part = ${i};\nconsole.log(part * 2);</code></pre>`;
    if (i % 4 === 0) {
      const rows = [1, 2, 3, 4, 5].map((r) => `<tr><td>Row ${r}</td><td>${r * i}</td><td>${pick()}</td></tr>`);
      s += `<table><thead><tr><th>Name</th><th>Value</th><th>Note</th></tr></thead><tbody>${rows.join('')}</tbody></table>`;
    }
    sections.push(`${s}</section>`);
    size += s.length + 10;
  }
  return head + sections.join('') + tail;
}

const extractPage = await loadExtractPage();
const html = new TextEncoder().encode(generatePage(targetBytes));
const input = {
  url: 'https://bench.example/report',
  finalUrl: 'https://bench.example/report',
  contentType: 'text/html',
};

/** Per-page times of `runs` reads after a warm-up, and the last result. */
async function measure(maxChars: number | undefined) {
  const read = () => extractPage({ ...input, body: html, ...(maxChars ? { maxChars } : {}) });
  for (let i = 0; i < WARMUP; i++) await read();
  const times: number[] = [];
  let last = await read();
  for (let i = 0; i < runs; i++) {
    const start = performance.now();
    last = await read();
    times.push(performance.now() - start);
  }
  return { times: times.sort((a, b) => a - b), last };
}

// The whole page to Markdown, then what read_page does by default: keep (and so convert) the first 20,000 characters.
const whole = await measure(10_000_000);
const capped = await measure(undefined);
const last = whole.last;
if (!last.content.includes('## Part 1:') || last.content.includes('Most read') || last.content.includes('Section 29')) {
  throw new Error('read-page: the extracted content is not the article alone');
}
const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
const round = (ms: number) => Math.round(ms * 10) / 10;
report({
  name: 'read-page',
  n: runs,
  wall_ms: Math.round(whole.times.reduce((sum, ms) => sum + ms, 0)),
  html_kb: Math.round(html.byteLength / 1024),
  markdown_chars: last.content.length,
  text_chars: last.text.length,
  links: last.links.length,
  median_ms: round(percentile(whole.times, 50)),
  p95_ms: round(percentile(whole.times, 95)),
  min_ms: round(whole.times[0]!),
  max_ms: round(whole.times[whole.times.length - 1]!),
  default_max_chars_median_ms: round(percentile(capped.times, 50)),
  default_max_chars_p95_ms: round(percentile(capped.times, 95)),
  peak_rss_mb: peakRssMb(),
});
