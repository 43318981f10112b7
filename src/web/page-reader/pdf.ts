/**
 * @module web/page-reader/pdf
 * The text of a PDF, through Mozilla's pdf.js (`pdfjs-dist`), an optional peer dependency loaded on first use. The
 * legacy build is the one meant for Node; without a `workerSrc` it runs its parser in this thread ("fake worker"),
 * which is what a server wants: no worker file to ship, and one document at a time is small.
 */
import { PageReadError } from './errors.js';

/** The module pdf.js is loaded from. */
export const PDFJS_MODULE = 'pdfjs-dist/legacy/build/pdf.mjs';

/** The few parts of pdf.js used here, so its large type declarations stay out of agentry's. */
interface PdfJs {
  getDocument(params: Record<string, unknown>): { promise: Promise<PdfDocument> };
}
interface PdfDocument {
  numPages: number;
  getPage(n: number): Promise<{ getTextContent(): Promise<{ items: Array<Partial<PdfTextItem>> }> }>;
  getMetadata(): Promise<{ info?: unknown }>;
  destroy(): Promise<void>;
}
interface PdfTextItem {
  str: string;
  hasEOL: boolean;
  /** [a, b, c, d, x, y]: a change of `y` starts a new line. */
  transform: number[];
}

/** Pages read at most: past this a document is a book, and the text cap is long reached. */
const MAX_PAGES = 2_000;

let loaded: Promise<PdfJs> | undefined;

/**
 * Loads pdf.js, once. A failure is not cached, so installing the package fixes a running process.
 *
 * @param specifier where to load it from; tests pass a missing one.
 */
export async function loadPdfJs(specifier: string = PDFJS_MODULE): Promise<PdfJs> {
  if (specifier !== PDFJS_MODULE) return importPdfJs(specifier);
  loaded ??= importPdfJs(specifier).catch((err: unknown) => {
    loaded = undefined;
    throw err;
  });
  return loaded;
}

async function importPdfJs(specifier: string): Promise<PdfJs> {
  try {
    return (await import(specifier)) as PdfJs;
  } catch (err) {
    throw new PageReadError(
      'pdf_unavailable',
      'Reading PDF files needs the optional package pdfjs-dist: install it with `npm install pdfjs-dist` ' +
        `(${(err as Error).message.split('\n')[0]})`,
      { cause: err },
    );
  }
}

/** The text of one page: items in reading order, a line break where pdf.js marks one or the baseline moves. */
function pageText(items: Array<Partial<PdfTextItem>>): string {
  let out = '';
  let lastY: number | undefined;
  for (const item of items) {
    const y = item.transform?.[5];
    if (lastY !== undefined && y !== undefined && Math.abs(y - lastY) > 1 && !out.endsWith('\n')) out += '\n';
    out += item.str ?? '';
    if (item.hasEOL) out += '\n';
    if (y !== undefined) lastY = y;
  }
  return out.replace(/[ \t]+\n/g, '\n').trim();
}

/**
 * The text of a PDF, pages separated by a blank line, and its title from the document information if it has one.
 * Stops reading pages once `maxChars` characters are collected.
 *
 * @example
 * const { text, title } = await pdfText(bytes, { maxChars: 2_000_000, url })
 */
export async function pdfText(
  bytes: Uint8Array,
  options: { maxChars: number; url: string },
): Promise<{ text: string; title: string; pages: number }> {
  const pdfjs = await loadPdfJs();
  let document: PdfDocument;
  try {
    document = await pdfjs.getDocument({
      // pdf.js may take ownership of (detach) the buffer it is given; the caller's bytes stay the caller's.
      data: bytes.slice(),
      isEvalSupported: false,
      disableFontFace: true,
      useSystemFonts: false,
      verbosity: 0,
    }).promise;
  } catch (err) {
    throw new PageReadError('unreadable', `${options.url} is not a readable PDF: ${(err as Error).message}`, {
      url: options.url,
      cause: err,
    });
  }
  try {
    const pages: string[] = [];
    let length = 0;
    const count = Math.min(document.numPages, MAX_PAGES);
    for (let n = 1; n <= count && length < options.maxChars; n++) {
      const text = pageText((await (await document.getPage(n)).getTextContent()).items);
      pages.push(text);
      length += text.length + 2;
    }
    const info = (await document.getMetadata().catch(() => ({ info: undefined }))).info as
      { Title?: unknown } | undefined;
    const title = typeof info?.Title === 'string' ? info.Title.trim() : '';
    return { text: pages.filter(Boolean).join('\n\n'), title, pages: document.numPages };
  } catch (err) {
    throw new PageReadError(
      'unreadable',
      `${options.url} is a PDF whose text could not be read: ${(err as Error).message}`,
      {
        url: options.url,
        cause: err,
      },
    );
  } finally {
    await document.destroy();
  }
}
