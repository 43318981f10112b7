/**
 * @module web/page-reader/html
 * The main content of an HTML page: parsed with linkedom, picked by Readability (Firefox's reader view), or, when
 * Readability's pick cannot be trusted, the page's whole `<main>` (else `<body>`) without its navigation, header,
 * footer and sidebars. Readability is a news-article heuristic: on reference manuals it often picks one sub-block
 * (a table, a list of parameters) and silently drops the rest, so its pick is checked against the page (see
 * {@link choosePick}). Links are made absolute before Readability runs, so the Markdown, the `links` list and the
 * text all agree.
 */
import { Readability } from '@mozilla/readability';
import { parseHTML } from 'linkedom';
import { labelCodeBlocks, mainRegion, removePermalinks } from './cleanup.js';
import { documentShape, keepLeading, markupDepth, plainText } from './dom.js';
import { PageReadError } from './errors.js';
import { MARKER_CHARS, toMarkdown } from './markdown.js';

/** What an HTML page yields. */
export interface HtmlContent {
  /** Empty when the page names no title anywhere; the caller falls back to the URL. */
  title: string;
  markdown: string;
  /** True when `markdown` covers only the leading part of the content (see `keepLeading` in `dom.ts`). */
  partial: boolean;
  text: string;
  links: Array<{ text: string; url: string }>;
}

/** Limits of {@link extractHtml}. */
export interface HtmlLimits {
  /** Characters of Markdown the caller keeps: only about that much is converted. */
  maxMarkdownChars: number;
  /** Characters of plain text kept. */
  maxTextChars: number;
  /** Distinct links kept. */
  maxLinks: number;
}

/**
 * Below this many characters of text, Readability's pick is taken to have missed the page (a landing page, a list of
 * short items, a page of link cards): the main region is read instead.
 */
const MIN_ARTICLE_CHARS = 200;

/**
 * Pages with more elements than this skip Readability and are read by the body fallback: Readability's scoring
 * passes grow faster than linearly with the element count, and a 5 MB page can hold 100,000 elements.
 */
const MAX_READABILITY_ELEMENTS = 30_000;

/**
 * Pages nested deeper than this skip Readability too. On linkedom its cost grows with depth to a power above two
 * (1,000 nested <div>s: 13 s), which a hostile page could use to stall the process; real pages rarely nest past 60.
 */
const MAX_READABILITY_DEPTH = 120;

/**
 * Deeper than this, turndown is not used and the content is the plain text: turndown recurses once per level and
 * measures the text under every element, so its cost grows with elements × depth.
 */
const MAX_MARKDOWN_DEPTH = 200;

/** Markup nested deeper than this is refused before parsing: no real page comes near it, and parsing it is slow. */
const MAX_MARKUP_DEPTH = 10_000;

const collapse = (s: string) => s.replace(/\s+/g, ' ').trim();

/**
 * A linkedom document with `<html>`, `<head>` and `<body>`. linkedom, unlike a browser, does not add missing ones:
 * `<p>hi</p>` would become a document whose root is the `<p>`. Such input is wrapped, and the head elements it
 * carried are moved back into the head.
 */
function parseDocument(html: string): Document {
  const { document } = parseHTML(html) as unknown as { document: Document };
  if (document.documentElement?.localName === 'html' && document.head && document.body) return document;
  const inner = html.replace(/<!doctype[^>]*>|<\/?(?:html|head|body)\b[^>]*>/gi, '');
  const { document: wrapped } = parseHTML(
    `<!DOCTYPE html><html><head></head><body>${inner}</body></html>`,
  ) as unknown as { document: Document };
  for (const el of Array.from(wrapped.body.querySelectorAll('title, base, meta, link'))) wrapped.head.appendChild(el);
  return wrapped;
}

function resolve(href: string, base: string): string | undefined {
  try {
    return new URL(href.trim(), base).href;
  } catch {
    return undefined;
  }
}

/**
 * Rewrites link and image URLs as absolute ones, against `<base href>` when the page has one (itself resolved
 * against the final URL) and the final URL otherwise. Lazy-loaded images get their real source from `data-src`.
 */
function absolutize(document: Document, finalUrl: string): void {
  const declared = document.querySelector('base[href]')?.getAttribute('href');
  const base = (declared && resolve(declared, finalUrl)) || finalUrl;
  document.querySelector('base[href]')?.setAttribute('href', base);
  for (const a of Array.from(document.querySelectorAll('a[href]'))) {
    const url = resolve(a.getAttribute('href') ?? '', base);
    if (url) a.setAttribute('href', url);
  }
  for (const img of Array.from(document.querySelectorAll('img'))) {
    const src = img.getAttribute('src') ?? '';
    const real = !src || src.startsWith('data:') ? (img.getAttribute('data-src') ?? src) : src;
    const url = real && resolve(real, base);
    if (url) img.setAttribute('src', url);
  }
}

/** The distinct http(s) links inside `root`, leaving out links to a place on the page itself. */
function collectLinks(root: Element, finalUrl: string, max: number): HtmlContent['links'] {
  const page = finalUrl.replace(/#.*$/, '');
  const byUrl = new Map<string, { text: string; url: string }>();
  for (const a of Array.from(root.querySelectorAll('a[href]'))) {
    const url = resolve(a.getAttribute('href') ?? '', finalUrl);
    if (!url || !/^https?:/.test(url) || url.replace(/#.*$/, '') === page) continue;
    const text = collapse(
      a.textContent ||
        a.getAttribute('aria-label') ||
        a.getAttribute('title') ||
        a.querySelector('img')?.getAttribute('alt') ||
        '',
    );
    const known = byUrl.get(url);
    if (known) {
      if (!known.text) known.text = text;
      continue;
    }
    if (byUrl.size >= max) break;
    byUrl.set(url, { text, url });
  }
  return [...byUrl.values()];
}

/** Readability's pick, or null when it finds nothing or gives up. */
function readabilityArticle(document: Document): { title: string; root: Element } | null {
  try {
    const article = new Readability(document, {
      // Keeps `language-js` and the like on code blocks, for the fence's info string.
      keepClasses: true,
      maxElemsToParse: MAX_READABILITY_ELEMENTS,
      serializer: (node: Node) => node,
    }).parse();
    const root = article?.content as Element | null | undefined;
    if (!article || !root) return null;
    return { title: collapse(article.title ?? ''), root };
  } catch {
    return null;
  }
}

/** A parsed page with absolute links, without permalink anchors, its code blocks labelled with their language. */
function prepareDocument(html: string, finalUrl: string): Document {
  const document = parseDocument(html);
  // Before the links are made absolute: a permalink is recognised by its `#fragment` href.
  removePermalinks(document, finalUrl);
  absolutize(document, finalUrl);
  labelCodeBlocks(document);
  return document;
}

/**
 * Readability's pick is replaced by the page's main region when it holds less than this share of the region's text.
 * Found on the corpus in test/fixtures/manuals: picks that were right held over 0.9, and the wrong ones 0.34–0.72
 * (a single table of PostgreSQL's `functions-json`, the parameter list of `CREATE TABLE`).
 */
const MIN_PICK_SHARE = 0.85;

/**
 * Text before the pick's start, the page's first heading aside, past which the pick is taken to have begun
 * mid-page (the Synopsis and Description of a `sql-*.html` page lost before its Parameters).
 */
const MAX_SKIPPED_LEAD_CHARS = 300;

/** The first heading of `region`: what the page says it is about. */
function leadingHeading(region: Element): Element | null {
  return region.querySelector('h1') ?? region.querySelector('h2, h3');
}

/** Where the pick's text starts within the region's, or -1 when it cannot be found (Readability rewrote it). */
function startWithin(pickText: string, regionText: string): number {
  for (const offset of [0, 200, 1000]) {
    const probe = pickText.slice(offset, offset + 80);
    if (probe.length < 40) break;
    const at = regionText.indexOf(probe);
    if (at >= 0) return Math.max(0, at - offset);
  }
  return -1;
}

/**
 * The content to read: Readability's pick when it holds most of the page's main region and starts where the region
 * does (give or take its heading, which Readability drops when it repeats the title and which is put back), else
 * the whole region.
 */
function choosePick(article: { root: Element } | null, region: Element, maxChars: number): Element {
  if (!article) return region;
  const regionText = plainText(region, maxChars);
  if (!/\S/.test(regionText)) return article.root;
  const pickText = plainText(article.root, maxChars);
  if (pickText.length < MIN_ARTICLE_CHARS || pickText.length < MIN_PICK_SHARE * regionText.length) return region;
  const heading = leadingHeading(region);
  const headingText = collapse(heading?.textContent ?? '');
  const start = startWithin(pickText, regionText);
  if (start > 0) {
    const skipped = regionText.slice(0, start).replace(headingText, '').trim();
    if (skipped.length > MAX_SKIPPED_LEAD_CHARS) return region;
  }
  const pickHeadings = Array.from(article.root.querySelectorAll('h1, h2, h3, h4, h5, h6'));
  if (heading && headingText && !pickHeadings.some((h) => collapse(h.textContent ?? '') === headingText)) {
    const restored = article.root.ownerDocument.createElement(heading.localName);
    restored.textContent = headingText;
    article.root.insertBefore(restored, article.root.firstChild);
  }
  return article.root;
}

/** Markdown, or the plain text where the markup is too deep to convert. */
function markdownOf(root: HTMLElement, depth: number, text: string): string {
  if (depth > MAX_MARKDOWN_DEPTH) return text;
  try {
    return toMarkdown(root);
  } catch (err) {
    // turndown recurses once per level; a stack overflow here is a freak page, which still has its text
    if (err instanceof RangeError) return text;
    throw err;
  }
}

/**
 * Title, Markdown, plain text and links of the main content of an HTML page.
 *
 * @example
 * const limits = { maxMarkdownChars: 20_000, maxTextChars: 2_000_000, maxLinks: 100 };
 * extractHtml('<title>Hi</title><article><p>…</p></article>', 'https://example.com/', limits);
 */
export function extractHtml(source: string, finalUrl: string, limits: HtmlLimits): HtmlContent {
  const html = source.replace(MARKER_CHARS, ' ');
  if (markupDepth(html) > MAX_MARKUP_DEPTH) {
    throw new PageReadError('unreadable', `${finalUrl} nests its elements more than ${MAX_MARKUP_DEPTH} deep`, {
      url: finalUrl,
    });
  }
  const document = prepareDocument(html, finalUrl);
  // Read before Readability runs: it moves and rewrites elements, and the fallbacks need the page as served.
  const pageTitle = collapse(document.querySelector('title')?.textContent ?? '');
  const firstHeading = collapse(document.querySelector('h1')?.textContent ?? '');
  const shape = documentShape(document.documentElement);
  const readable = shape.elements <= MAX_READABILITY_ELEMENTS && shape.depth <= MAX_READABILITY_DEPTH;
  // Readability rewrites the document it reads: the region is taken from a copy made before (cheaper than a parse).
  const pristine = readable ? (document.cloneNode(true) as Document) : document;
  const article = readable ? readabilityArticle(document) : null;
  const region = mainRegion(pristine);
  const root = choosePick(article, region, limits.maxTextChars);
  const content = root as HTMLElement;
  const text = plainText(content, limits.maxTextChars);
  const links = collectLinks(content, finalUrl, limits.maxLinks);
  // Raw text carries source indentation that Markdown drops: three times the limit is still more than is kept.
  const partial = shape.depth <= MAX_MARKDOWN_DEPTH && keepLeading(content, 3 * limits.maxMarkdownChars + 10_000);
  return {
    title: article?.title || pageTitle || firstHeading,
    markdown: markdownOf(content, shape.depth, partial ? plainText(content, Infinity) : text),
    partial,
    text,
    links,
  };
}
