/**
 * @module web/page-reader/charset
 * Which character encoding a fetched body is in, and its text. The order follows what browsers do (WHATWG
 * "encoding sniffing"), so a page reads the same here as on screen: a byte order mark wins, then the `charset` of the
 * `Content-Type` header, then for HTML a `<meta charset>` or `<meta http-equiv="content-type">` in the first bytes,
 * then UTF-8. Node 20 ships full ICU, so `TextDecoder` knows Shift_JIS, GBK, KOI8-R and the rest; windows-1252 alone
 * is decoded here (see {@link decodeWindows1252}).
 */
import { Buffer } from 'node:buffer';

/** How far into an HTML body a `<meta>` charset declaration is looked for. Browsers look at 1 KB; heads often run longer. */
export const META_SNIFF_BYTES = 2048;

/** The encoding a byte order mark at the start of `bytes` names, and the mark's length. */
export function bomEncoding(bytes: Uint8Array): { encoding: string; length: number } | undefined {
  if (bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf) return { encoding: 'utf-8', length: 3 };
  if (bytes[0] === 0xfe && bytes[1] === 0xff) return { encoding: 'utf-16be', length: 2 };
  if (bytes[0] === 0xff && bytes[1] === 0xfe) return { encoding: 'utf-16le', length: 2 };
  return undefined;
}

/** The `charset` parameter of a `Content-Type` value, e.g. `text/html; charset="ISO-8859-1"` → `iso-8859-1`. */
export function charsetFromContentType(contentType: string | null): string | undefined {
  if (!contentType) return undefined;
  const match = /;\s*charset\s*=\s*("?)([^";,\s]+)\1/i.exec(contentType);
  return match?.[2]?.toLowerCase();
}

/**
 * The charset an HTML document declares in a `<meta>` within its first {@link META_SNIFF_BYTES} bytes. The bytes
 * are read as Latin-1, which maps every byte to one character, so the ASCII markup is found whatever the encoding.
 */
export function sniffMetaCharset(bytes: Uint8Array): string | undefined {
  const head = new TextDecoder('latin1').decode(bytes.subarray(0, META_SNIFF_BYTES)).replace(/<!--[\s\S]*?-->/g, '');
  for (const [tag] of head.matchAll(/<meta\b[^>]*>/gi)) {
    const direct = /\bcharset\s*=\s*["']?\s*([\w.:-]+)/i.exec(tag);
    if (direct?.[1]) return direct[1].toLowerCase();
  }
  return undefined;
}

/** The canonical name TextDecoder gives `label`, or undefined when it knows no such encoding. */
function supportedEncoding(label: string | undefined): string | undefined {
  if (!label) return undefined;
  try {
    return new TextDecoder(label).encoding;
  } catch {
    return undefined;
  }
}

/** What the bytes 0x80-0x9F are in windows-1252 (WHATWG index); every other byte is its own code point. */
const WINDOWS_1252_C1 = [
  0x20ac, 0x81, 0x201a, 0x192, 0x201e, 0x2026, 0x2020, 0x2021, 0x2c6, 0x2030, 0x160, 0x2039, 0x152, 0x8d, 0x17d, 0x8f,
  0x90, 0x2018, 0x2019, 0x201c, 0x201d, 0x2022, 0x2013, 0x2014, 0x2dc, 0x2122, 0x161, 0x203a, 0x153, 0x9d, 0x17e, 0x178,
].map((code) => String.fromCharCode(code));

/**
 * windows-1252, which is also what the labels `iso-8859-1`, `latin1` and `us-ascii` mean on the web. Node 20.18.3+
 * and 22.13+ decode it as ISO-8859-1, turning “smart quotes”, dashes and € into invisible C1 controls
 * (nodejs/node#60888), so the 32 bytes where the two differ are mapped here, on every Node version alike.
 */
export function decodeWindows1252(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
    .toString('latin1')
    .replace(/[\x80-\x9f]/g, (c) => WINDOWS_1252_C1[c.charCodeAt(0) - 0x80]!);
}

/** Options of {@link decodeBody}. */
export interface DecodeOptions {
  /** The response's `Content-Type` header, whose `charset` is used when present and known. */
  contentType: string | null;
  /** Whether to look for a `<meta>` declaration (HTML only). */
  html: boolean;
}

/**
 * Decodes a body to text, choosing the encoding as described in the module comment. Invalid bytes become U+FFFD
 * rather than failing: a page with one bad byte is still worth reading.
 *
 * @example
 * decodeBody(bytes, { contentType: 'text/html; charset=iso-8859-1', html: true }) // { text: 'café …', encoding: 'windows-1252' }
 */
export function decodeBody(bytes: Uint8Array, options: DecodeOptions): { text: string; encoding: string } {
  const bom = bomEncoding(bytes);
  let encoding = bom?.encoding ?? supportedEncoding(charsetFromContentType(options.contentType));
  if (!encoding && options.html) {
    encoding = supportedEncoding(sniffMetaCharset(bytes));
    // A document whose markup could be read as ASCII cannot really be UTF-16; browsers read it as UTF-8 (WHATWG).
    if (encoding?.startsWith('utf-16')) encoding = 'utf-8';
    else if (encoding === 'x-user-defined') encoding = 'windows-1252';
  }
  encoding ??= 'utf-8';
  const body = bom ? bytes.subarray(bom.length) : bytes;
  const text =
    encoding === 'windows-1252' ? decodeWindows1252(body) : new TextDecoder(encoding, { ignoreBOM: true }).decode(body);
  return { text, encoding };
}
