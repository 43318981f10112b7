/**
 * @module web/page-reader
 * What the `read_page` tool gives the model: the main content of a web page as Markdown, its title and outbound
 * links, and the plain text that research citations are later checked against. {@link readPage} fetches (through
 * whatever fetch it is given: the runtime passes its guarded one) and {@link extractPage} turns bytes into a
 * {@link PageContent} without any I/O, so it can be tested and benchmarked on stored pages. HTML goes through
 * Readability and turndown; PDF through the optional peer `pdfjs-dist`; plain text, Markdown and JSON pass through.
 *
 * @example
 * import { readPage } from './web/page-reader.js';
 * const page = await readPage(fetch, 'https://example.com/post', { maxChars: 10_000 });
 * console.log(page.title, page.content, page.links.length, page.truncated);
 */
import { AgentryError } from '../errors.js';
import { decodeBody } from './page-reader/charset.js';
import { PageReadError } from './page-reader/errors.js';
import {
  firstHeading,
  formatOfType,
  markdownToText,
  mediaTypeOf,
  prettyJson,
  sniffMediaType,
  titleFromUrl,
  truncate,
  type PageFormat,
} from './page-reader/formats.js';
import { readBody } from './page-reader/body.js';
import { extractHtml } from './page-reader/html.js';
import { pdfText } from './page-reader/pdf.js';

export { PageReadError, type PageReadFailure } from './page-reader/errors.js';

/** Characters of Markdown `content` kept by default: about 5,000 tokens. */
export const DEFAULT_MAX_CHARS = 20_000;
/** Bytes of a body read by default; the rest is not downloaded. */
export const DEFAULT_MAX_BYTES = 5 * 1024 * 1024;
/** Characters of plain `text` kept whatever `maxChars` is: enough for a book, bounded for memory. */
export const MAX_TEXT_CHARS = 2_000_000;
/** Distinct links listed at most. */
export const MAX_LINKS = 100;

/** A page as the model and the citation check see it. Field names are the tool's wire names. */
export interface PageContent {
  /** The URL as asked. */
  url: string;
  /** The URL after redirects. */
  final_url: string;
  /** From the page itself (Readability, `<title>`, first `<h1>`, PDF info, first Markdown heading), else the URL. */
  title: string;
  /** The main content as Markdown, cut at `maxChars`. */
  content: string;
  /** Outbound links of the main content: absolute http(s) URLs, each once, at most {@link MAX_LINKS}. */
  links: Array<{ text: string; url: string }>;
  /** True when `content` was cut at `maxChars` or the body at `maxBytes`. */
  truncated: boolean;
  /** The media type the body was read as, e.g. `text/html` (sniffed when the server sent none). */
  content_type: string;
  /**
   * Plain text of the whole extracted main content (not cut at `maxChars`; at most {@link MAX_TEXT_CHARS}), markup
   * removed, whitespace collapsed: the text that citations are checked against later.
   */
  text: string;
}

/** The input of {@link extractPage}: a response already read. */
export interface ExtractPageInput {
  /** The URL as asked. */
  url: string;
  /** The URL after redirects: relative links resolve against it (or the page's `<base href>`). */
  finalUrl: string;
  /** The `Content-Type` header, charset included; null when the server sent none. */
  contentType: string | null;
  body: Uint8Array;
  /**
   * Characters of Markdown kept in `content`.
   * @default 20_000
   */
  maxChars?: number;
}

/** Options of {@link readPage}. */
export interface ReadPageOptions {
  /**
   * Characters of Markdown kept in `content`.
   * @default 20_000
   */
  maxChars?: number;
  /**
   * Bytes of the body read; past them the download is cancelled and the page marked truncated.
   * @default 5_242_880 (5 MB)
   */
  maxBytes?: number;
  /** Cancels the fetch and the body read. */
  signal?: AbortSignal;
}

/** The fetch function {@link readPage} is given; the global `fetch` fits, as does the runtime's guarded fetch. */
export type PageFetch = (url: string, init?: RequestInit) => Promise<Response>;

const ACCEPT =
  'text/html,application/xhtml+xml,application/pdf;q=0.9,text/plain;q=0.8,application/json;q=0.8,*/*;q=0.5';

function positiveInteger(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new PageReadError('invalid_request', `Expected \`${name}\` to be a positive integer, got \`${value}\``);
  }
  return value;
}

/** `fetch failed (connect ECONNREFUSED 127.0.0.1:9)`: undici puts the reason in `cause`. */
function describeFailure(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  return err.cause instanceof Error ? `${err.message} (${err.cause.message})` : err.message;
}

function unsupported(url: string, mediaType: string): PageReadError {
  return new PageReadError(
    'unsupported_type',
    `${url} is ${mediaType ? `of type ${mediaType}` : 'binary data'}, which read_page does not read; ` +
      'it reads HTML, PDF, JSON, Markdown and plain text',
    { url },
  );
}

/** What each format yields before truncation. */
interface Extracted {
  title: string;
  markdown: string;
  /** The Markdown covers only the start of the content (HTML converts only what `maxChars` keeps). */
  partial?: boolean;
  text: string;
  links: PageContent['links'];
}

async function extractFormat(format: PageFormat, input: ExtractPageInput, maxChars: number): Promise<Extracted> {
  if (format === 'pdf') {
    const pdf = await pdfText(input.body, { maxChars: MAX_TEXT_CHARS, url: input.url });
    const text = pdf.text.replace(/\s+/g, ' ').trim().slice(0, MAX_TEXT_CHARS);
    return {
      title: pdf.title || (pdf.text.split('\n', 1)[0] ?? '').trim().slice(0, 200),
      markdown: pdf.text,
      text,
      links: [],
    };
  }
  const decoded = decodeBody(input.body, { contentType: input.contentType, html: format === 'html' }).text;
  if (format === 'html') {
    return extractHtml(decoded, input.finalUrl, {
      maxMarkdownChars: maxChars,
      maxTextChars: MAX_TEXT_CHARS,
      maxLinks: MAX_LINKS,
    });
  }
  const markdown = format === 'json' ? prettyJson(decoded) : decoded.replace(/\r\n?/g, '\n').trimEnd();
  const text = (format === 'markdown' ? markdownToText(markdown) : markdown.replace(/\s+/g, ' ').trim()).slice(
    0,
    MAX_TEXT_CHARS,
  );
  // `#` starts comments in scripts and config files: only Markdown is titled by its first heading.
  return { title: format === 'markdown' ? firstHeading(markdown) : '', markdown, text, links: [] };
}

/**
 * Reads a fetched body: bytes and headers in, {@link PageContent} out, no I/O (pdf.js aside, which is loaded on the
 * first PDF). Throws {@link PageReadError} for types it does not read, an empty body, a PDF without `pdfjs-dist`.
 *
 * @example
 * const page = await extractPage({ url, finalUrl: url, contentType: 'text/html; charset=utf-8', body: bytes });
 */
export async function extractPage(input: ExtractPageInput): Promise<PageContent> {
  const maxChars = positiveInteger('maxChars', input.maxChars, DEFAULT_MAX_CHARS);
  const declared = mediaTypeOf(input.contentType);
  let format = formatOfType(declared);
  let contentType = declared;
  if (format === undefined) {
    const sniffed = sniffMediaType(input.body);
    // A server that calls a file octet-stream is only believed wrong for PDFs, which are often served so.
    const trusted = sniffed && (declared === '' || sniffed === 'application/pdf') ? sniffed : undefined;
    format = trusted ? formatOfType(trusted) : null;
    contentType = trusted ?? declared;
  }
  if (!format) throw unsupported(input.url, contentType);
  if (input.body.byteLength === 0) {
    throw new PageReadError('empty', `${input.url} answered with an empty body`, { url: input.url });
  }
  const page = await extractFormat(format, input, maxChars);
  if (!page.text) {
    throw new PageReadError(
      'empty',
      format === 'html'
        ? `${input.url} has no readable text; it may be drawn by JavaScript (a browser agent can read such pages)`
        : format === 'pdf'
          ? `${input.url} is a PDF without a text layer (a scan, perhaps)`
          : `${input.url} has no readable text`,
      { url: input.url },
    );
  }
  const content = truncate(page.markdown, maxChars);
  return {
    url: input.url,
    final_url: input.finalUrl,
    title: page.title || titleFromUrl(input.finalUrl),
    content: content.text,
    links: page.links,
    truncated: content.truncated || page.partial === true,
    content_type: contentType,
    text: page.text,
  };
}

/**
 * Fetches a page with `fetch` and reads it with {@link extractPage}. Refuses a non-2xx answer with the status in the
 * message, and a type it does not read before downloading its body. Errors the fetch function throws on purpose
 * (the guarded fetch's refusals, aborts) pass through unchanged.
 *
 * @example
 * const page = await readPage(ctx.fetch, input.url, { maxChars: input.max_chars, signal: ctx.signal });
 */
export async function readPage(fetch: PageFetch, url: string, options: ReadPageOptions = {}): Promise<PageContent> {
  const maxChars = positiveInteger('maxChars', options.maxChars, DEFAULT_MAX_CHARS);
  const maxBytes = positiveInteger('maxBytes', options.maxBytes, DEFAULT_MAX_BYTES);
  if (!URL.canParse(url) || !/^https?:$/.test(new URL(url).protocol)) {
    throw new PageReadError('invalid_request', `Expected \`url\` to be an http(s) URL, got \`${url}\``, { url });
  }
  const { signal } = options;
  let response: Response;
  try {
    response = await fetch(url, { redirect: 'follow', headers: { accept: ACCEPT }, ...(signal ? { signal } : {}) });
  } catch (err) {
    if (AgentryError.isInstance(err) || signal?.aborted || (err instanceof Error && err.name === 'AbortError')) {
      throw err;
    }
    throw new PageReadError('network', `Could not fetch ${url}: ${describeFailure(err)}`, { url, cause: err });
  }
  const finalUrl = response.url || url;
  if (!response.ok) {
    await response.body?.cancel().catch(() => undefined);
    const where = finalUrl === url ? url : `${url} (redirected to ${finalUrl})`;
    throw new PageReadError(
      'status',
      `${where} answered HTTP ${response.status}${response.statusText ? ` ${response.statusText}` : ''}`,
      { url, httpStatus: response.status },
    );
  }
  const contentType = response.headers.get('content-type');
  if (formatOfType(mediaTypeOf(contentType)) === null) {
    await response.body?.cancel().catch(() => undefined);
    throw unsupported(url, mediaTypeOf(contentType));
  }
  const body = await readBody(response, maxBytes);
  try {
    const page = await extractPage({ url, finalUrl, contentType, body: body.bytes, maxChars });
    return body.truncated ? { ...page, truncated: true } : page;
  } catch (err) {
    if (body.truncated && err instanceof PageReadError && err.reason === 'unreadable') {
      throw new PageReadError(
        'unreadable',
        `${url} is larger than the ${maxBytes}-byte limit and cannot be read in part: ${err.message}`,
        { url, cause: err },
      );
    }
    throw err;
  }
}
