/**
 * read_page on real reference manuals: 12 pages of Python's documentation (Sphinx) and 13 of PostgreSQL's (DocBook),
 * copied unchanged from their Debian packages (test/fixtures/manuals/README.md) and served on loopback, read through
 * `readPage` with the global fetch as the tool reads them with the guarded one.
 *
 * What each page must keep is worked out here from the page itself, with the selectors those generators are known
 * to use for the main content (Sphinx's `div[role=main]`, DocBook's body between its navigation header and footer),
 * independently of how the reader finds it: its headings, at least 90 % of its words, every code block with the
 * language the page gives it. And what it must not carry: permalink anchors, navigation, needless escapes.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseHTML } from 'linkedom';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_MAX_CHARS, readPage, type PageContent } from '../../src/web/page-reader.js';
import { plainText } from '../../src/web/page-reader/dom.js';

const ROOT = new URL('../fixtures/manuals/', import.meta.url);
type Family = 'python' | 'postgresql';
const FAMILIES: Family[] = ['python', 'postgresql'];
const pages = FAMILIES.flatMap((family) =>
  readdirSync(new URL(`${family}/`, ROOT))
    .filter((name) => name.endsWith('.html'))
    .map((name) => ({ family, name, path: `${family}/${name}` })),
);

const collapse = (s: string) => s.replace(/\s+/g, ' ').trim();

/** What the page's main content is, by the generator's own markup. */
interface Expected {
  text: string;
  /** Section headings, in order (h1–h3; admonition titles such as "Note" left out). */
  headings: string[];
  /** The fence info string each code block must get, in order ('' where the page names no language). */
  codeLanguages: string[];
}

/** Sphinx's and Pygments' names as fences carry them; `default` names no language. */
const FENCE_NAMES: Record<string, string> = { python3: 'python', none: 'text', default: '' };

function expected(family: Family, html: string): Expected {
  const { document } = parseHTML(html) as unknown as { document: Document };
  let root: Element;
  if (family === 'python') {
    root = document.querySelector('div[role="main"]')!;
  } else {
    root = document.body;
    for (const nav of Array.from(root.querySelectorAll('.navheader, .navfooter'))) nav.remove();
  }
  for (const permalink of Array.from(root.querySelectorAll('a.headerlink'))) permalink.remove();
  const headings = Array.from(root.querySelectorAll('h1, h2, h3'))
    .filter((h) => !h.closest('.admonition, .note, .tip, .warning, .caution, .important, .sidebar'))
    .map((h) => collapse(h.textContent ?? ''))
    .filter(Boolean);
  const codeLanguages = Array.from(root.querySelectorAll('pre')).map((pre) => {
    const wrapper = pre.closest('[class*="highlight-"]')?.getAttribute('class') ?? '';
    const name = /highlight-([\w+#.-]+)/.exec(wrapper)?.[1] ?? '';
    return FENCE_NAMES[name] ?? name;
  });
  return { text: plainText(root, Infinity), headings, codeLanguages };
}

const words = (s: string) => s.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [];

/** Share of the words of `reference` (counted with repeats) that `output` has. */
function coverage(reference: string, output: string): number {
  const available = new Map<string, number>();
  for (const w of words(output)) available.set(w, (available.get(w) ?? 0) + 1);
  let found = 0;
  const all = words(reference);
  for (const w of all) {
    const n = available.get(w) ?? 0;
    if (n > 0) {
      found++;
      available.set(w, n - 1);
    }
  }
  return found / all.length;
}

/** Heading lines of Markdown, as plain text: `## [`json`](…) — JSON` becomes `json — JSON`. */
function markdownHeadings(markdown: string): string[] {
  const outsideFences = markdown.replace(/^( *)(`{3,})[^\n]*\n[\s\S]*?\n\1\2$/gm, '');
  return [...outsideFences.matchAll(/^#{1,6} (.*)$/gm)].map(([, line]) =>
    collapse(
      line!
        .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
        .replace(/[`*]/g, '')
        .replace(/\\(.)/g, '$1')
        .replace(/(^|\s)_([^_]+)_(?=\s|$)/g, '$1$2'),
    ),
  );
}

/** The info strings of the fenced code blocks, in order (indented ones in list items too). */
function fenceLanguages(markdown: string): string[] {
  return [...markdown.matchAll(/^( *)(`{3,})([^\n`]*)\n[\s\S]*?\n\1\2$/gm)].map(([, , , info]) => info!.trim());
}

let server: Server;
let base: string;
/** Each page read whole (a limit no page reaches) and with the tool's default limit. */
const read = new Map<string, { whole: PageContent; capped: PageContent }>();

beforeAll(async () => {
  server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname).slice(1);
    const page = pages.find((p) => p.path === path);
    if (!page) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
      return;
    }
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(readFileSync(new URL(path, ROOT)));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  for (const page of pages) {
    const url = `${base}/${page.path}`;
    read.set(page.path, {
      whole: await readPage(fetch, url, { maxChars: 10_000_000 }),
      capped: await readPage(fetch, url),
    });
  }
}, 180_000);

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

describe('read_page on real manual pages (Python: Sphinx, PostgreSQL: DocBook)', () => {
  it('has at least 10 pages of each generator', () => {
    for (const family of FAMILIES) expect(pages.filter((p) => p.family === family).length).toBeGreaterThanOrEqual(10);
  });

  describe.each(pages)('$path', ({ family, path }) => {
    const want = () => expected(family, readFileSync(new URL(path, ROOT), 'utf8'));
    const got = () => read.get(path)!.whole;

    it('keeps the first heading first, and the other section headings in order', () => {
      const { headings } = want();
      const have = markdownHeadings(got().content);
      expect(have[0]).toBe(headings[0]);
      // in order: each heading kept is found after the previous one. Readability may drop a closing "See Also" that
      // is only a list of links (sql-delete.html), so one heading in ten (rounded up) may be missing.
      let at = 0;
      const missing: string[] = [];
      for (const heading of headings) {
        const found = have.indexOf(heading, at);
        if (found < 0) missing.push(heading);
        else at = found + 1;
      }
      expect(missing.length, `missing: ${missing.join(', ')}`).toBeLessThanOrEqual(Math.ceil(headings.length / 10));
    });

    it('keeps at least 90 % of the words of the main content, in the text and in the Markdown', () => {
      const { text } = want();
      expect(coverage(text, got().text)).toBeGreaterThanOrEqual(0.9);
      expect(coverage(text, got().content)).toBeGreaterThanOrEqual(0.9);
    });

    it('keeps every code block, with the language the page gives it', () => {
      expect(fenceLanguages(got().content)).toEqual(want().codeLanguages);
    });

    it('carries no permalink anchors, navigation or needless escapes', () => {
      const { content } = got();
      expect(content).not.toContain('¶');
      expect(content).not.toMatch(/Permalink to this/i);
      // DocBook's Prev | Up | Home | Next tables; Sphinx's sidebar and related-pages bar
      expect(content).not.toMatch(/\[Prev\]\(|\[Next\]\(|\| Prev |Previous topic|Next topic|Report a Bug|Show Source/);
      // `indent=4`, `-32768`, `--sort-keys`, `4. Heading` need no backslash where they stand
      expect(content).not.toMatch(/\\=|\\-(?=[\w-])|^#+ \d+\\\./m);
    });

    it('says truthfully whether the content was cut', () => {
      const { whole, capped } = read.get(path)!;
      expect(whole.truncated).toBe(false);
      expect(capped.truncated).toBe(whole.content.length > DEFAULT_MAX_CHARS);
      expect(capped.content.length).toBeLessThanOrEqual(DEFAULT_MAX_CHARS);
      expect(whole.content.startsWith(capped.content.replace(/…$/, '').slice(0, 1000))).toBe(true);
    });
  });
});
