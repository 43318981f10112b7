/**
 * @module tools/builtin/monitor/check
 * One check of a monitored page: a conditional GET through the guarded fetch (`If-None-Match` / `If-Modified-Since`,
 * so an unchanged page answers 304 and costs a header), the text of the selector's elements or of the page's main
 * content with `ignore_selectors` removed, the volatile noise normalised away (normalise.ts), a SHA-256 of what is
 * left, and on a change a line diff (the `diff` package) with a short summary.
 */
import { createHash } from 'node:crypto';
import { diffArrays } from 'diff';
import { parseHTML } from 'linkedom';
import { SELECTOR_STEPS, selectBounded, SelectorTooCostly, type StepBudget } from './select.js';
import { markupDepth } from '../../../web/page-reader/dom.js';
import { normaliseLines } from './normalise.js';
import { MonitorCheckError } from './check-error.js';

/** The largest body a check reads. */
const MAX_BYTES = 2 * 1024 * 1024;
/** Deeper markup is refused: linkedom's parse time grows with the square of the depth. */
const MAX_DEPTH = 2_000;
/** The text kept per monitor to diff the next change against. */
export const MAX_TEXT_CHARS = 200_000;
const SUMMARY_CHARS = 400;

export { MonitorCheckError };

export interface WatchSpec {
  url: string;
  selector: string | null;
  ignoreSelectors: readonly string[];
}

/** What a check saw. */
export type FetchedPage =
  /** 304: the page is as it was (validators unchanged). */
  | { notModified: true }
  | { notModified: false; text: string; sha256: string; etag: string | null; lastModified: string | null };

export type CheckFetch = (
  url: string,
  init: RequestInit & { maxBytes?: number; timeoutMs?: number },
) => Promise<Response>;

/**
 * Fetches the page (conditionally, when validators are known) and answers its watched text, normalised and hashed.
 * Throws {@link MonitorCheckError}.
 */
export async function fetchWatchedText(
  fetch: CheckFetch,
  spec: WatchSpec,
  validators: { etag: string | null; lastModified: string | null },
  signal?: AbortSignal,
): Promise<FetchedPage> {
  const headers: Record<string, string> = { accept: 'text/html, text/plain;q=0.9, */*;q=0.5' };
  if (validators.etag) headers['if-none-match'] = validators.etag;
  if (validators.lastModified) headers['if-modified-since'] = validators.lastModified;
  let response: Response;
  try {
    response = await fetch(spec.url, { headers, maxBytes: MAX_BYTES, ...(signal ? { signal } : {}) });
  } catch (err) {
    throw new MonitorCheckError(
      `could not fetch ${spec.url}: ${err instanceof Error ? err.message : String(err)}`,
      'network',
    );
  }
  if (response.status === 304) {
    await response.body?.cancel();
    return { notModified: true };
  }
  if (!response.ok) {
    await response.body?.cancel();
    throw new MonitorCheckError(`${spec.url} answered HTTP ${response.status}`, 'http');
  }
  let body: string;
  try {
    body = await response.text();
  } catch (err) {
    throw new MonitorCheckError(
      `could not read ${spec.url}: ${err instanceof Error ? err.message : String(err)}`,
      'network',
    );
  }
  const type = response.headers.get('content-type') ?? '';
  const lines = /html|xml/i.test(type) || (!type && /^\s*</.test(body)) ? htmlLines(body, spec) : body.split(/\r?\n/);
  const text = normaliseLines(lines).join('\n').slice(0, MAX_TEXT_CHARS);
  return {
    notModified: false,
    text,
    sha256: createHash('sha256').update(text).digest('hex'),
    etag: response.headers.get('etag'),
    lastModified: response.headers.get('last-modified'),
  };
}

/** Tags whose start and end break a line of text. */
const BLOCKS = new Set(
  (
    'address article aside blockquote br dd details div dl dt fieldset figcaption figure footer form h1 h2 h3 h4 h5 ' +
    'h6 header hr li main nav ol p pre section summary table tbody td tfoot th thead tr ul'
  ).split(' '),
);
const NEVER_TEXT = 'script, style, noscript, template, svg, head, iframe, object';

/** The watched text of an HTML page, one line per block. */
export function htmlLines(html: string, spec: Pick<WatchSpec, 'selector' | 'ignoreSelectors'>): string[] {
  if (markupDepth(html) > MAX_DEPTH) {
    throw new MonitorCheckError(`the page nests deeper than ${MAX_DEPTH} elements`, 'content');
  }
  const { document } = parseHTML(html.includes('<html') ? html : `<html><body>${html}</body></html>`) as unknown as {
    document: Document;
  };
  const root = document.documentElement;
  if (!root) throw new MonitorCheckError('the page has no content', 'content');
  for (const el of Array.from(root.querySelectorAll(NEVER_TEXT))) el.remove();
  // One budget for all the model's selectors of this check (see select.ts).
  const budget: StepBudget = { left: SELECTOR_STEPS };
  for (const selector of spec.ignoreSelectors) {
    for (const el of Array.from(querySelectorAll(root, selector, 'ignore_selectors', budget))) el.remove();
  }
  let roots: Element[];
  if (spec.selector) {
    roots = Array.from(querySelectorAll(root, spec.selector, 'selector', budget));
    // Never a diff of everything: a selector that matches nothing is an error, not an empty (or whole) page.
    if (roots.length === 0) {
      throw new MonitorCheckError(
        `the selector ${JSON.stringify(spec.selector)} matches nothing on the page`,
        'selector',
      );
    }
  } else {
    const main = root.querySelector('main') ?? root.querySelector('article') ?? root.querySelector('body') ?? root;
    roots = [main];
  }
  const lines: string[] = [];
  let line = '';
  const flush = () => {
    if (line.trim()) lines.push(line);
    line = '';
  };
  const walk = (node: Node): void => {
    if (node.nodeType === 3) {
      line += node.nodeValue ?? '';
      return;
    }
    if (node.nodeType !== 1) return;
    const block = BLOCKS.has((node as Element).localName);
    if (block) flush();
    for (const child of Array.from(node.childNodes)) walk(child);
    if (block) flush();
  };
  for (const r of roots) {
    walk(r);
    flush();
  }
  return lines;
}

/** A model's selector on the page, its work bounded (`select.ts`): a selector too costly here is an error. */
function querySelectorAll(root: Element, selector: string, what: string, budget: StepBudget): ArrayLike<Element> {
  try {
    return selectBounded(root, selector, budget);
  } catch (error) {
    if (error instanceof SelectorTooCostly) {
      throw new MonitorCheckError(
        `${what}: ${JSON.stringify(selector)} takes too many steps to match on this page; use a simpler selector`,
        'selector',
      );
    }
    throw new MonitorCheckError(`${what}: ${JSON.stringify(selector)} is not a valid CSS selector`, 'selector');
  }
}

/** A change between two watched texts: the lines removed and added, and a short summary for people and the model. */
export interface TextDiff {
  removed: string[];
  added: string[];
  summary: string;
}

/**
 * Diffs two watched texts line by line.
 *
 * @example
 * diffText('Widget\nPrice: $59', 'Widget\nPrice: $45').summary // 'Changed: "Price: $59" → "Price: $45"'
 */
export function diffText(before: string, after: string): TextDiff {
  const parts = diffArrays(before ? before.split('\n') : [], after ? after.split('\n') : []);
  const removed: string[] = [];
  const added: string[] = [];
  for (const part of parts) {
    if (part.removed) removed.push(...part.value);
    else if (part.added) added.push(...part.value);
  }
  return { removed, added, summary: summarise(removed, added) };
}

function summarise(removed: string[], added: string[]): string {
  const q = (s: string) => JSON.stringify(clip(s, 120));
  let text: string;
  if (removed.length === 1 && added.length === 1) text = `Changed: ${q(removed[0]!)} → ${q(added[0]!)}`;
  else {
    const parts: string[] = [];
    if (added.length > 0) parts.push(`Added ${added.slice(0, 3).map(q).join(', ')}${more(added.length, 3)}`);
    if (removed.length > 0) parts.push(`removed ${removed.slice(0, 3).map(q).join(', ')}${more(removed.length, 3)}`);
    text = parts.join('; ') || 'Changed';
    text = text.charAt(0).toUpperCase() + text.slice(1);
  }
  return clip(text, SUMMARY_CHARS);
}

const more = (n: number, shown: number) => (n > shown ? ` (+${n - shown} more lines)` : '');

function clip(s: string, max: number): string {
  return s.length <= max ? s : `${s.slice(0, max - 1)}…`;
}
