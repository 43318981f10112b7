/**
 * @module web/page-reader/errors
 * The one error page reading throws on purpose. It lives apart from `page-reader.ts` so the format readers
 * (`pdf.ts`, `html.ts`) can throw it without importing the entry file that imports them.
 */
import { AgentryError } from '../../errors.js';

/** Why a page could not be read. */
export type PageReadFailure =
  /** The URL or an option is malformed. */
  | 'invalid_request'
  /** The server answered with a status outside 200-299. */
  | 'status'
  /** The fetch itself failed (DNS, connection, TLS) for a reason the fetch function did not already explain. */
  | 'network'
  /** The body is of a type that is not read (images, audio, video, archives, `application/octet-stream`, …). */
  | 'unsupported_type'
  /** A PDF was served and the optional peer `pdfjs-dist` is not installed. */
  | 'pdf_unavailable'
  /** The body could not be parsed as what it claimed to be (e.g. a damaged PDF). */
  | 'unreadable'
  /** The body was read and holds no text (an empty body, or an app shell that renders with JavaScript). */
  | 'empty';

/**
 * A page that cannot be read. Its code is `invalid_request`: the URL the model asked for is what is wrong, and the
 * message says how, so the model can pick another source. `reason` tells the cases apart for code.
 *
 * @example
 * try { await readPage(fetch, url) } catch (err) {
 *   if (err instanceof PageReadError && err.reason === 'status') console.log(err.httpStatus)
 * }
 */
export class PageReadError extends AgentryError {
  readonly reason: PageReadFailure;
  /** The upstream HTTP status, for `reason: 'status'`. */
  readonly httpStatus: number | undefined;

  constructor(
    reason: PageReadFailure,
    message: string,
    options: { url?: string; httpStatus?: number; cause?: unknown } = {},
  ) {
    super('invalid_request', message, {
      details: { reason, url: options.url, http_status: options.httpStatus },
      cause: options.cause,
    });
    this.reason = reason;
    this.httpStatus = options.httpStatus;
  }
}
