/**
 * @module browser/snapshot
 * What a browser child sees of a page: Playwright's accessibility snapshot in its "ai" mode (`page.ariaSnapshot({
 * mode: 'ai' })`, a public API since 1.5x), which is the text Playwright MCP shows models — a YAML-like tree with
 * `[ref=eN]` on every element one can act on. A ref resolves to a locator as `aria-ref=eN` until the next snapshot
 * replaces it, so refs are as stable as Playwright MCP's.
 *
 * Size cap: a page's snapshot can be megabytes. Above `maxChars` the child gets, in order of preference, the subtree of
 * the page's main region (`- main`), the lines that changed since its last snapshot of the same URL (via `diff`), or the
 * first `maxChars` characters with a note. The full text is kept for resolving refs and for the loop detector.
 */
import { createHash } from 'node:crypto';
import type { Locator, Page } from 'playwright-core';

/** Characters of snapshot a tool result carries at most. */
export const DEFAULT_SNAPSHOT_CHARS = 12_000;

/** A page as the child sees it. */
export interface PageSnapshot {
  url: string;
  title: string;
  /** The whole ai-mode snapshot. */
  full: string;
  /** What is shown: the full text, or a part of it (see `shown`). */
  text: string;
  shown: 'full' | 'main' | 'diff' | 'cut';
}

/** Takes the snapshot of `page`, capped at `maxChars` (see the module comment). */
export async function snapshotPage(
  page: Page,
  options: { maxChars?: number; previous?: { url: string; full: string } | undefined; timeoutMs?: number } = {},
): Promise<PageSnapshot> {
  const maxChars = options.maxChars ?? DEFAULT_SNAPSHOT_CHARS;
  const full = await page.ariaSnapshot({ mode: 'ai', timeout: options.timeoutMs ?? 10_000 });
  const url = page.url();
  const title = await page.title().catch(() => '');
  const base = { url, title, full };
  if (full.length <= maxChars) return { ...base, text: full, shown: 'full' };
  const main = mainRegion(full);
  if (main !== undefined && main.length <= maxChars) return { ...base, text: main, shown: 'main' };
  if (options.previous && options.previous.url === url) {
    const changed = await changedLines(options.previous.full, full);
    if (changed.length <= maxChars) return { ...base, text: changed, shown: 'diff' };
  }
  const cut = (main ?? full).slice(0, maxChars);
  return { ...base, text: cut.slice(0, cut.lastIndexOf('\n') > 0 ? cut.lastIndexOf('\n') : cut.length), shown: 'cut' };
}

/** The snapshot as the model reads it: where it is, then the tree, with a word on what was left out. */
export function renderSnapshot(s: PageSnapshot): string {
  const note = {
    full: '',
    main: `(The page is large: only its main region is shown, ${s.text.length} of ${s.full.length} characters.)\n`,
    diff: '(The page is large: only the lines that changed since your last snapshot are shown.)\n',
    cut: `(The page is large: the first ${s.text.length} of ${s.full.length} characters are shown.)\n`,
  }[s.shown];
  return `- Page URL: ${s.url}\n- Page Title: ${s.title}\n- Page Snapshot:\n${note}${s.text}`;
}

/** The subtree of the first `- main` node, or undefined when the page has no main region. */
export function mainRegion(full: string): string | undefined {
  const lines = full.split('\n');
  const start = lines.findIndex((l) => /^\s*- main\b/.test(l));
  if (start < 0) return undefined;
  const indent = lines[start]!.search(/\S/);
  let end = start + 1;
  while (end < lines.length && lines[end]!.search(/\S/) > indent) end++;
  return lines.slice(start, end).join('\n');
}

/**
 * Lines added or changed in `next` compared with `previous`, with `…` where unchanged lines were left out. `diff` is
 * loaded on first use: most pages never need it, and importing agentry stays light.
 */
export async function changedLines(previous: string, next: string): Promise<string> {
  const { diffLines } = await import('diff');
  const out: string[] = [];
  for (const part of diffLines(previous, next)) {
    if (part.removed) continue;
    if (part.added) out.push(part.value.replace(/\n$/, ''));
    else if (out.at(-1) !== '…') out.push('…');
  }
  return out.join('\n');
}

/** What a ref stands for in the snapshot: its role and accessible name, when the line gives them. */
export function describeRef(full: string, ref: string): { role: string; name?: string } | undefined {
  const line = full.split('\n').find((l) => l.includes(`[ref=${ref}]`));
  if (!line) return undefined;
  const m = /^\s*- ([a-z]+)(?: "((?:[^"\\]|\\.)*)")?/.exec(line);
  if (!m) return undefined;
  return m[2] !== undefined ? { role: m[1]!, name: JSON.parse(`"${m[2]}"`) as string } : { role: m[1]! };
}

/** The locator of a ref of the last snapshot. */
export function refLocator(page: Page, ref: string): Locator {
  return page.locator(`aria-ref=${ref}`);
}

/** A short digest of a page's state (URL and full snapshot): equal digests mean the page did not change. */
export function pageDigest(url: string, full: string): string {
  // Focus moves with every click; a page whose only change is its focused element has not changed.
  const content = full.replace(/ \[active\]/g, '');
  return createHash('sha256').update(url).update('\0').update(content).digest('hex').slice(0, 16);
}
