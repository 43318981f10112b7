/**
 * @module web/page-reader/formats
 * Which reader a body goes to, by its declared media type or, when the server declares none (or only
 * `application/octet-stream`), by its first bytes; and the readers of text that is passed through as it is
 * (plain text, Markdown, JSON, XML feeds, source code).
 */

/** The readers a body can go to. */
export type PageFormat = 'html' | 'pdf' | 'json' | 'markdown' | 'text';

/** `Text/HTML; charset=utf-8` → `text/html`; empty when there is no header. */
export function mediaTypeOf(contentType: string | null): string {
  return (contentType ?? '').split(';')[0]!.trim().toLowerCase();
}

/** Text types outside `text/*` worth passing through. */
const TEXT_APPLICATION_TYPES = new Set([
  'application/xml',
  'application/javascript',
  'application/ecmascript',
  'application/x-javascript',
  'application/yaml',
  'application/x-yaml',
  'application/toml',
  'application/x-ndjson',
  'application/sql',
  'application/x-sh',
  'application/x-tex',
]);

/**
 * The format of a declared media type: undefined when the type is missing or says nothing (octet-stream), `null` when
 * it is a type that is never read (images, audio, video, fonts, archives, office files…).
 */
export function formatOfType(mediaType: string): PageFormat | null | undefined {
  if (mediaType === '' || mediaType === 'application/octet-stream' || mediaType === 'binary/octet-stream') {
    return undefined;
  }
  if (mediaType === 'text/html' || mediaType === 'application/xhtml+xml') return 'html';
  if (mediaType === 'application/pdf' || mediaType === 'application/x-pdf') return 'pdf';
  if (mediaType === 'application/json' || mediaType === 'text/json' || mediaType.endsWith('+json')) return 'json';
  if (mediaType === 'text/markdown' || mediaType === 'text/x-markdown') return 'markdown';
  if (mediaType.startsWith('text/') || mediaType.endsWith('+xml') || TEXT_APPLICATION_TYPES.has(mediaType)) {
    return 'text';
  }
  return null;
}

/** The media type of an undeclared body, from its first bytes; undefined for binary data. */
export function sniffMediaType(body: Uint8Array): string | undefined {
  const head = new TextDecoder('latin1').decode(body.subarray(0, 1024));
  if (head.startsWith('%PDF-')) return 'application/pdf';
  // NUL bytes do not occur in text in any ASCII-compatible encoding; UTF-16 text starts with a byte order mark.
  if (head.includes('\0') && !/^(\xfe\xff|\xff\xfe)/.test(head)) return undefined;
  if (/^(\xef\xbb\xbf)?\s*(<!doctype\s+html|<html|<head|<body|<!--|<(p|div|h1|title|meta)\b)/i.test(head)) {
    return 'text/html';
  }
  return 'text/plain';
}

const collapse = (s: string) => s.replace(/\s+/g, ' ').trim();

/** The first Markdown heading (`# Title` or an underlined one) in the first lines of a text, or ''. */
export function firstHeading(text: string): string {
  const head = text.slice(0, 4096);
  const atx = /^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$/m.exec(head);
  const setext = /^(\S[^\n]*)\n {0,3}(=+|-+)[ \t]*$/m.exec(head);
  if (atx && (!setext || atx.index < setext.index)) return collapse(atx[1]!);
  return setext ? collapse(setext[1]!) : '';
}

/** JSON pretty-printed with two spaces; text that does not parse is passed through as it came. */
export function prettyJson(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

/**
 * The words of a Markdown text without its markup (heading marks, emphasis, link and image syntax, code fences,
 * table pipes), whitespace collapsed: what a citation's excerpt is checked against.
 */
export function markdownToText(markdown: string): string {
  return collapse(
    markdown
      .replace(/^ {0,3}(`{3,}|~{3,}).*$/gm, ' ')
      .replace(/!\[([^\]]*)\]\([^)]*\)/g, '$1')
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .replace(/^ {0,3}#{1,6}[ \t]+/gm, '')
      .replace(/^ {0,3}(>[ \t]?)+/gm, '')
      .replace(/^ {0,3}([-*+]|\d+[.)])[ \t]+/gm, '')
      .replace(/^\s*\|?[ \t]*:?-{3,}:?[ \t]*(\|[ \t]*:?-{3,}:?[ \t]*)*\|?\s*$/gm, ' ')
      .replace(/\|/g, ' ')
      .replace(/(\*\*|__|\*|`+)/g, ''),
  );
}

/** The last path segment of a URL, decoded, or its host: the title of last resort. */
export function titleFromUrl(url: string): string {
  try {
    const parsed = new URL(url);
    const segment = parsed.pathname.split('/').filter(Boolean).pop();
    if (!segment) return parsed.hostname;
    try {
      return decodeURIComponent(segment);
    } catch {
      return segment;
    }
  } catch {
    return url;
  }
}

/** `text` cut at about `max` characters, at a paragraph or line end when one is near, never inside a surrogate pair. */
export function truncate(text: string, max: number): { text: string; truncated: boolean } {
  if (text.length <= max) return { text, truncated: false };
  let cut = text.slice(0, max);
  const paragraph = cut.lastIndexOf('\n\n');
  const line = cut.lastIndexOf('\n');
  if (paragraph >= max * 0.8) cut = cut.slice(0, paragraph);
  else if (line >= max * 0.9) cut = cut.slice(0, line);
  else if (/[\ud800-\udbff]$/.test(cut)) cut = cut.slice(0, -1);
  return { text: cut.trimEnd(), truncated: true };
}
