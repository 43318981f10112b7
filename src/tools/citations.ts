/**
 * @module tools/citations
 * The citation check shared by the research tools (deep_research, find_all, enrich). A research child's citation
 * `{url, excerpt}` reaches the caller only if a child of the same tool call read that URL with `read_page` during the
 * call and the excerpt occurs in the page's stored plain text, both sides passed through {@link normaliseForMatch}
 * (NFKC, lower case, one quote character per kind, one dash, whitespace collapsed, invisible characters removed).
 * Anything else is dropped with a {@link DropReason}. A kept citation carries the page's `content_sha256`,
 * `retrieved_at` and the excerpt's span in the stored text, so {@link recheckCitation} can confirm it later, offline,
 * from the stored text alone. The matching is pure: the caller loads the pages ({@link loadPageReads} does it from
 * storage) and hands them to a {@link CitationChecker}.
 *
 * @example
 * import { CitationChecker, loadPageReads } from './tools/citations.js';
 * const checker = new CitationChecker(await loadPageReads(storage, childIds));
 * const { kept, dropped } = checker.checkAll(result.citations);
 * return { report, citations: kept, dropped_citations: dropped.length };
 */
import type { StorageAdapter } from '../storage/adapter.js';

/** A page a research child read with `read_page`, with the stored plain text citations are checked against. */
export interface PageRead {
  /** The URL as asked. */
  url: string;
  /** The URL after redirects. */
  final_url: string;
  title: string;
  /** SHA-256 (hex) of `text`: pages with the same hash share one normalised copy. */
  content_sha256: string;
  /** ISO 8601 time of the read. */
  retrieved_at: string;
  /** The stored plain text (markup removed, whitespace collapsed, cut at the reader's cap). */
  text: string;
}

/** A citation as a research child submits it. Other fields (`n`, …) are carried through to the kept citation. */
export interface CitationInput {
  url: string;
  excerpt: string;
  [extra: string]: unknown;
}

/** Why a citation was dropped. */
export type DropReason =
  'url_not_read' | 'excerpt_not_found' | 'excerpt_too_short' | 'excerpt_too_long' | 'invalid_url';

/** A character range `[start, end)` in a stored page text. */
export interface TextSpan {
  start: number;
  end: number;
}

/** A citation that passed the check: the input's fields, with the checked ones replaced by what was read. */
export type CheckedCitation<C> = C & {
  /** The URL as read: the page's `url`, or its `final_url` when the citation matched that. */
  url: string;
  /** The page's title (not the child's). */
  title: string;
  /** The page's own words: `text.slice(span.start, span.end)` of the stored text. */
  excerpt: string;
  retrieved_at: string;
  content_sha256: string;
  /** Offsets into the stored page text. */
  span: TextSpan;
};

/** A citation that failed the check, and why. */
export interface DroppedCitation<C> {
  citation: C;
  reason: DropReason;
  /** One sentence for logs and the child's transcript. */
  detail: string;
}

/** Shortest excerpt accepted, in characters (code points) after normalisation. */
export const MIN_EXCERPT_CHARS = 12;
/** Longest excerpt accepted, in characters (code points) after normalisation. */
export const MAX_EXCERPT_CHARS = 500;

// ---------------------------------------------------------------------------------------------------------------
// Text normalisation
// ---------------------------------------------------------------------------------------------------------------

const SINGLE_QUOTES = "'‘’‚‛‹›′‵`´ʹʻʼʽʾʿˈˊˋ＇｀❛❜❮❯";
const DOUBLE_QUOTES = '"“”„‟«»″‶˝〝〞〟＂❝❞״';
// \p{Pd} covers the dash punctuation (‐ ‑ ‒ – — ― ⸺ ⸻ ﹘ ﹣ － …); these are the minus signs and bullets outside it.
const OTHER_DASHES = '−⁃⁻₋';
const COMBINING_MARK = /^\p{M}$/u;
const DASH = /^\p{Pd}$/u;
const INVISIBLE = /^\p{Cf}$/u;
const WHITESPACE = /^\s$/u;

const charMap = new Map<string, string>([['…', '...']]);
for (const q of SINGLE_QUOTES) charMap.set(q, "'");
for (const q of DOUBLE_QUOTES) charMap.set(q, '"');
for (const d of OTHER_DASHES) charMap.set(d, '-');
// Lower-casing a lone capital sigma gives σ, never the word-final ς: fold both to σ.
charMap.set('ς', 'σ');

/**
 * One code point to its matching form. Whitespace becomes a single ' ' (runs collapse later), invisible format
 * characters (zero-width spaces and joiners, soft hyphens, BOM, direction marks) become ''.
 */
function mapChar(ch: string): string {
  const mapped = charMap.get(ch);
  if (mapped !== undefined) return mapped;
  if (INVISIBLE.test(ch)) return '';
  if (WHITESPACE.test(ch)) return ' ';
  if (DASH.test(ch)) return '-';
  return ch;
}

function mapChars(s: string): string {
  let out = '';
  for (const ch of s) out += mapChar(ch);
  return out;
}

/**
 * A segment (one code point and the combining marks after it) to its matching form. Quotes and dashes are mapped
 * before NFKC as well as after, because NFKC turns some of them into something else (″ into two primes, ´ into a
 * space and a combining accent).
 */
function normaliseSegment(segment: string): string {
  return mapChars(mapChars(segment).normalize('NFKC').toLowerCase());
}

// Most non-ASCII text is single code points (accented letters, CJK): worth remembering.
const segmentCache = new Map<string, string>();
const SEGMENT_CACHE_LIMIT = 50_000;

function cachedSegment(segment: string): string {
  let out = segmentCache.get(segment);
  if (out === undefined) {
    out = normaliseSegment(segment);
    if (segmentCache.size < SEGMENT_CACHE_LIMIT) segmentCache.set(segment, out);
  }
  return out;
}

/** Normalised text with, for each of its UTF-16 units, the original range `[starts[i], ends[i])` it came from. */
interface NormalisedText {
  text: string;
  starts: Int32Array;
  ends: Int32Array;
}

const utf16 = new TextDecoder('utf-16le');

// Answers for the Basic Multilingual Plane, filled in as met: 0 not yet asked, 1 combining, 2 not.
const bmpCombining = new Uint8Array(0x10000);

function isCombiningAt(text: string, i: number): boolean {
  const cp = text.codePointAt(i);
  // Nothing below U+0300 is a combining mark: keeps the test off the common path.
  if (cp === undefined || cp < 0x300) return false;
  if (cp > 0xffff) return COMBINING_MARK.test(String.fromCodePoint(cp));
  let known = bmpCombining[cp];
  if (!known) {
    known = COMBINING_MARK.test(String.fromCharCode(cp)) ? 1 : 2;
    bmpCombining[cp] = known;
  }
  return known === 1;
}

function codePointLength(text: string, i: number): number {
  const cp = text.codePointAt(i);
  return cp !== undefined && cp > 0xffff ? 2 : 1;
}

/**
 * The normaliser behind {@link normaliseForMatch}, keeping both ends of each unit's source range so a match maps back
 * to a span that starts at its first character and ends after its last. Works per segment (a code point plus its
 * combining marks), so a unit never straddles two segments and a slice cut on segment boundaries normalises to the
 * same units as the whole. ASCII followed by ASCII takes a short path: it is most of most pages.
 */
function normaliseWithSpans(input: string): NormalisedText {
  const n = input.length;
  let capacity = n + 16;
  let buf = new Uint16Array(capacity);
  let starts = new Int32Array(capacity);
  let ends = new Int32Array(capacity);
  let len = 0;
  // Start and end of the whitespace run not yet written (-1: none). Written only before a later visible character.
  let spaceStart = -1;
  let spaceEnd = -1;

  const grow = (needed: number) => {
    if (len + needed <= capacity) return;
    capacity = Math.max(capacity * 2, len + needed);
    const b = new Uint16Array(capacity);
    b.set(buf.subarray(0, len));
    buf = b;
    const s = new Int32Array(capacity);
    s.set(starts.subarray(0, len));
    starts = s;
    const e = new Int32Array(capacity);
    e.set(ends.subarray(0, len));
    ends = e;
  };
  const emit = (unit: number, from: number, to: number) => {
    if (spaceStart >= 0) {
      if (len > 0) {
        grow(2);
        buf[len] = 0x20;
        starts[len] = spaceStart;
        ends[len] = spaceEnd;
        len++;
      }
      spaceStart = -1;
    }
    grow(1);
    buf[len] = unit;
    starts[len] = from;
    ends[len] = to;
    len++;
  };
  const space = (from: number, to: number) => {
    if (spaceStart < 0) spaceStart = from;
    spaceEnd = to;
  };

  let i = 0;
  while (i < n) {
    const c = input.charCodeAt(i);
    if (c < 0x80 && (i + 1 === n || input.charCodeAt(i + 1) < 0x300)) {
      if (c === 0x20 || (c >= 0x09 && c <= 0x0d)) space(i, i + 1);
      else if (c >= 0x41 && c <= 0x5a) emit(c + 0x20, i, i + 1);
      else if (c === 0x60)
        emit(0x27, i, i + 1); // ` to '
      else emit(c, i, i + 1);
      i++;
      continue;
    }
    let j = i + codePointLength(input, i);
    while (j < n && isCombiningAt(input, j)) j += codePointLength(input, j);
    const out = cachedSegment(input.slice(i, j));
    for (let k = 0; k < out.length; k++) {
      const unit = out.charCodeAt(k);
      if (unit === 0x20) space(i, j);
      else emit(unit, i, j);
    }
    i = j;
  }
  return { text: utf16.decode(buf.subarray(0, len)), starts: starts.subarray(0, len), ends: ends.subarray(0, len) };
}

/**
 * The form both a page text and an excerpt take before one is looked for in the other: Unicode NFKC (ligatures like
 * "ﬁ" become "fi", full-width letters ASCII, "…" becomes "..."), lower case, every single-quote variant (‘ ’ ‚ ‛ ′ ‹ ›
 * ` ´ ʼ …) as `'` and every double-quote variant (“ ” „ ‟ ″ « » …) as `"`, every dash and minus (‐ ‑ ‒ – — ― − ⁃ ﹘ ﹣
 * －, all of Unicode's dash punctuation) as `-`, invisible format characters (zero-width space and joiners, soft
 * hyphen, BOM, direction marks) removed, and each run of whitespace (NBSP and the other Unicode spaces included) as
 * one space, trimmed.
 *
 * `map[i]` is the offset in `text`'s argument of the character that produced normalised character `i` (the start of
 * a whitespace run for a space); `map[result.text.length]` is the argument's length.
 *
 * @example
 * normaliseForMatch('“Café”  —\u00a0ﬁne').text; // '"café" - fine'
 * normaliseForMatch('A  b').map; // [0, 1, 3, 4]
 */
export function normaliseForMatch(text: string): { text: string; map: number[] } {
  const normalised = normaliseWithSpans(text);
  const map = Array.from(normalised.starts);
  map.push(text.length);
  return { text: normalised.text, map };
}

function codePointCount(s: string): number {
  let count = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    // A high surrogate followed by a low one is one character.
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
    count++;
  }
  return count;
}

// ---------------------------------------------------------------------------------------------------------------
// URL normalisation
// ---------------------------------------------------------------------------------------------------------------

/**
 * The key two URLs of the same page share, or null for a string that is not an absolute http(s) URL. Parsed with
 * WHATWG `URL` (which already lower-cases the scheme and host, punycodes the host and drops the scheme's default
 * port); then the fragment is dropped, a trailing slash of the path dropped, percent-escapes upper-cased, and the
 * query kept as is. The scheme is left out: `http://` and `https://` of the same host and path are one page, since
 * sites serve both and models drop or add the `s`.
 *
 * @example
 * normaliseUrlForMatch('HTTPS://Example.com:443/a/#top'); // 'example.com/a'
 * normaliseUrlForMatch('http://example.com/a?x=1');       // 'example.com/a?x=1'
 * normaliseUrlForMatch('example.com/a');                  // null: no scheme
 */
export function normaliseUrlForMatch(url: string): string | null {
  let parsed: URL;
  try {
    parsed = new URL(url.trim());
  } catch {
    return null;
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') return null;
  if (!parsed.hostname) return null;
  let path = parsed.pathname;
  while (path.endsWith('/')) path = path.slice(0, -1);
  const upperEscapes = (s: string) => s.replace(/%[0-9a-f]{2}/gi, (escape) => escape.toUpperCase());
  // An explicit port that is not the default of the URL's scheme stays: http://h:8080 and https://h are not one site.
  const host = parsed.port ? `${parsed.hostname}:${parsed.port}` : parsed.hostname;
  return `${host}${upperEscapes(path)}${upperEscapes(parsed.search)}`;
}

// ---------------------------------------------------------------------------------------------------------------
// The checker
// ---------------------------------------------------------------------------------------------------------------

interface IndexedRead {
  page: PageRead;
  /** The URL as read that the citation matched: `url`, else `final_url`. */
  urlFor(key: string): string;
}

/**
 * Checks citations against the pages the children of one tool call read. Each page's text is normalised once, on the
 * first citation that needs it, and shared between reads with the same `content_sha256`.
 *
 * @example
 * const checker = new CitationChecker(pages);
 * const one = checker.check({ n: 1, url: 'https://example.com/a', excerpt: 'the quick brown fox' });
 * if ('kept' in one) console.log(one.kept.span, one.kept.content_sha256);
 * else console.log(one.dropped.reason, one.dropped.detail);
 */
export class CitationChecker {
  /** Reads by URL key, newest first. */
  private readonly byUrl = new Map<string, IndexedRead[]>();
  private readonly normalised = new Map<string, NormalisedText>();

  constructor(pages: readonly PageRead[]) {
    const order = pages.map((page, index) => ({ page, index, time: Date.parse(page.retrieved_at) }));
    // Newest first; an unparseable time or a tie keeps the later-recorded read first.
    order.sort((a, b) => {
      const byTime = (Number.isNaN(b.time) ? 0 : b.time) - (Number.isNaN(a.time) ? 0 : a.time);
      return byTime !== 0 ? byTime : b.index - a.index;
    });
    for (const { page } of order) {
      const urlKey = normaliseUrlForMatch(page.url);
      const finalKey = normaliseUrlForMatch(page.final_url);
      const read: IndexedRead = { page, urlFor: (key) => (key === urlKey ? page.url : page.final_url) };
      for (const key of new Set([urlKey, finalKey])) {
        if (key === null) continue;
        const list = this.byUrl.get(key);
        if (list) list.push(read);
        else this.byUrl.set(key, [read]);
      }
    }
  }

  /**
   * Checks one citation. Checked in this order: the URL parses as http(s) (`invalid_url`), the excerpt's length
   * (`excerpt_too_short`, `excerpt_too_long`), the URL was read (`url_not_read`), the excerpt occurs in one of its
   * reads, newest first (`excerpt_not_found`). A kept citation takes the first occurrence in the newest read that
   * has one.
   */
  check<C extends CitationInput>(citation: C): { kept: CheckedCitation<C> } | { dropped: DroppedCitation<C> } {
    const drop = (reason: DropReason, detail: string) => ({ dropped: { citation, reason, detail } });
    const url: unknown = citation.url;
    const key = typeof url === 'string' ? normaliseUrlForMatch(url) : null;
    if (key === null) return drop('invalid_url', `${JSON.stringify(url)} is not an absolute http(s) URL`);

    const rawExcerpt: unknown = citation.excerpt;
    const excerpt = typeof rawExcerpt === 'string' ? normaliseWithSpans(rawExcerpt).text : '';
    const chars = codePointCount(excerpt);
    if (chars < MIN_EXCERPT_CHARS) {
      return drop(
        'excerpt_too_short',
        `the excerpt has ${chars} characters; at least ${MIN_EXCERPT_CHARS} are needed to tell where it comes from`,
      );
    }
    if (chars > MAX_EXCERPT_CHARS) {
      return drop('excerpt_too_long', `the excerpt has ${chars} characters; at most ${MAX_EXCERPT_CHARS} are accepted`);
    }

    const reads = this.byUrl.get(key);
    if (!reads) return drop('url_not_read', `${url as string} was not read with read_page during this call`);

    for (const read of reads) {
      const page = this.normalisedText(read.page);
      const at = page.text.indexOf(excerpt);
      if (at < 0) continue;
      const span = { start: page.starts[at] ?? 0, end: page.ends[at + excerpt.length - 1] ?? 0 };
      return {
        kept: {
          ...citation,
          url: read.urlFor(key),
          title: read.page.title,
          excerpt: read.page.text.slice(span.start, span.end),
          retrieved_at: read.page.retrieved_at,
          content_sha256: read.page.content_sha256,
          span,
        },
      };
    }
    const times = reads.length === 1 ? 'read once' : `read ${reads.length} times`;
    return drop('excerpt_not_found', `the excerpt does not occur in the text of ${url as string} (${times})`);
  }

  /**
   * Checks citations in order.
   *
   * @example
   * const { kept, dropped } = new CitationChecker(pages).checkAll(citations);
   */
  checkAll<C extends CitationInput>(
    citations: readonly C[],
  ): { kept: CheckedCitation<C>[]; dropped: DroppedCitation<C>[] } {
    const kept: CheckedCitation<C>[] = [];
    const dropped: DroppedCitation<C>[] = [];
    for (const citation of citations) {
      const result = this.check(citation);
      if ('kept' in result) kept.push(result.kept);
      else dropped.push(result.dropped);
    }
    return { kept, dropped };
  }

  private normalisedText(page: PageRead): NormalisedText {
    let normalised = this.normalised.get(page.content_sha256);
    if (!normalised) {
      normalised = normaliseWithSpans(page.text);
      this.normalised.set(page.content_sha256, normalised);
    }
    return normalised;
  }
}

/**
 * Re-checks a kept citation against a stored page text, offline: true when the span lies in `text` and the text there
 * normalises to the excerpt (from the span's first character to its last, nothing more). False when the stored text
 * changed under the span, or the span or excerpt is not one the checker could have produced.
 *
 * @example
 * const text = await storage.getPageText(citation.content_sha256);
 * const ok = text !== null && recheckCitation(text, citation);
 */
export function recheckCitation(text: string, citation: { excerpt: string; span: TextSpan }): boolean {
  const { span } = citation;
  if (typeof citation.excerpt !== 'string' || typeof span !== 'object' || span === null) return false;
  const { start, end } = span;
  if (!Number.isInteger(start) || !Number.isInteger(end) || start < 0 || end > text.length || start >= end) {
    return false;
  }
  const excerpt = normaliseWithSpans(citation.excerpt).text;
  const chars = codePointCount(excerpt);
  if (chars < MIN_EXCERPT_CHARS || chars > MAX_EXCERPT_CHARS) return false;
  const slice = normaliseWithSpans(text.slice(start, end));
  // The excerpt must cover the span exactly; it may start or end inside one segment's expansion (the "f" of "ﬁ").
  for (let at = slice.text.indexOf(excerpt); at >= 0; at = slice.text.indexOf(excerpt, at + 1)) {
    if (slice.starts[at] === 0 && slice.ends[at + excerpt.length - 1] === end - start) return true;
  }
  return false;
}

/**
 * The pages the given agents (the children of one tool call) read, with their stored texts, ready for a
 * {@link CitationChecker}. A read whose text is missing from storage is left out: nothing could be checked against it.
 *
 * @example
 * const pages = await loadPageReads(storage, children.map((c) => c.id));
 */
export async function loadPageReads(
  storage: Pick<StorageAdapter, 'listPageReads' | 'getPageText'>,
  agentIds: readonly string[],
): Promise<PageRead[]> {
  const rows = await storage.listPageReads(agentIds);
  const texts = new Map<string, string | null>();
  for (const row of rows) {
    if (!texts.has(row.content_sha256)) texts.set(row.content_sha256, await storage.getPageText(row.content_sha256));
  }
  const pages: PageRead[] = [];
  for (const row of rows) {
    const text = texts.get(row.content_sha256);
    if (typeof text !== 'string') continue;
    pages.push({
      url: row.url,
      final_url: row.final_url,
      title: row.title,
      content_sha256: row.content_sha256,
      retrieved_at: row.retrieved_at,
      text,
    });
  }
  return pages;
}
