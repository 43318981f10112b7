/**
 * @module http/node-handler
 * Node's `(req, res, next?)` on top of the fetch handler. It only converts: the request becomes a WHATWG `Request`
 * whose body streams from `req` on demand (so the fetch handler's size limit stops reading an oversized upload), and
 * the `Response` is written back with backpressure. Paths that are not agentry's go to `next()` when there is one
 * (Express, Connect), else they get the fetch handler's 404. The returned promise never rejects.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';
import type { AgentRuntime } from '../core/agent-runtime.js';
import {
  createFetchHandler,
  isUnmatchedResponse,
  type FetchHandler,
  type FetchHandlerOptions,
} from './fetch-handler.js';
import { withClientAddress } from './client-address.js';
import { errorResponse, newRequestId, type PlainResponse } from './responses.js';

/** A Node request listener / Connect middleware. Never rejects, never throws into the host server. */
export type NodeHandler = (
  req: IncomingMessage,
  res: ServerResponse,
  next?: (error?: unknown) => void,
) => Promise<void>;

const SANE_HOST = /^[A-Za-z0-9.-]+(?::\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](?::\d{1,5})?$/;
/** Methods undici refuses to put in a `Request`; they can only be refused. */
const FORBIDDEN_METHODS = new Set(['CONNECT', 'TRACE', 'TRACK']);

/**
 * Serves agentry's routes from any Node HTTP server. Takes the options of {@link createFetchHandler}.
 *
 * @example
 * import { createServer } from 'node:http';
 * import express from 'express';
 * import { createNodeHandler } from 'agentry-runtime/http';
 *
 * createServer(createNodeHandler(runtime)).listen(8787); // node:http: other paths get 404
 * express().use(createNodeHandler(runtime)).listen(8787); // Express: other paths go to next()
 */
export function createNodeHandler(runtime: AgentRuntime, options: FetchHandlerOptions = {}): NodeHandler {
  return nodeHandlerFor(createFetchHandler(runtime, options));
}

/**
 * Wraps an existing fetch handler, for when one router serves both a fetch-based and a Node server (they then share
 * one rate limiter and one set of in-flight idempotency keys).
 *
 * @example
 * const agentry = createFetchHandler(runtime, { basePath: '/v1' });
 * createServer(nodeHandlerFor(agentry)).listen(8787);
 */
export function nodeHandlerFor(fetchHandler: FetchHandler): NodeHandler {
  return async (req, res, next) => {
    try {
      // The route clients poll skips the WHATWG Request and Response, which cost several times the route itself.
      const path = plainPollPath(req);
      if (path !== null) {
        const plain = await fetchHandler.plainGet(path, (name) => headerOf(req, name), req.socket?.remoteAddress);
        if (plain) return writePlain(res, plain);
      }
      const request = toRequest(req, res, fetchHandler);
      if (request instanceof Refusal) {
        if (request.allow === null && next) return next();
        await writeResponse(req, res, refusalResponse(request));
        return;
      }
      const response = await fetchHandler(request.request);
      if (next && isUnmatchedResponse(response)) {
        await response.body?.cancel().catch(() => {});
        next();
        return;
      }
      await writeResponse(req, res, response);
    } catch (error) {
      // The fetch handler does not throw; this is a broken socket or a bug in the conversion. Never let it escape.
      if (!res.headersSent) {
        try {
          const id = newRequestId();
          const response = errorResponse('internal_error', 'Internal server error', id);
          response.headers.set('x-request-id', id);
          await writeResponse(req, res, response);
          return;
        } catch {
          // fall through
        }
      }
      res.destroy(error instanceof Error ? error : undefined);
    }
  };
}

/**
 * Origin-form paths the fast path takes: plain segments only (no percent-escapes, dot segments or empty segments, which
 * the router normalises through `URL`), so that both paths see the same path.
 */
const PLAIN_PATH = /^(?:\/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)+\/?(?:\?[^#]*)?$/;

/** The path of a GET the poll fast path may take, or null. */
export function plainPollPath(req: IncomingMessage): string | null {
  if (req.method !== 'GET' || req.url === undefined || !PLAIN_PATH.test(req.url)) return null;
  return req.url.split('?', 1)[0]!;
}

export function writePlain(res: ServerResponse, plain: PlainResponse): void {
  plain.headers['content-length'] = String(Buffer.byteLength(plain.body));
  res.writeHead(plain.status, plain.headers);
  res.end(plain.body);
}

/** A header as `Headers.get` would give it: repeated values joined with ", ". */
export function headerOf(req: IncomingMessage, name: string): string | null {
  const value = req.headers[name];
  if (value === undefined) return null;
  return Array.isArray(value) ? value.join(', ') : value;
}

/** A request that cannot become a `Request` (an unusable URL or method). */
export class Refusal {
  constructor(
    readonly method: string,
    /** Methods of the route, or null when the path is not agentry's. */
    readonly allow: readonly string[] | null,
  ) {}
}

export function refusalResponse(refusal: Refusal): Response {
  const id = newRequestId();
  const response =
    refusal.allow === null
      ? errorResponse('not_found', 'No such route', id)
      : errorResponse(
          'method_not_allowed',
          `${refusal.method} is not allowed here; use ${refusal.allow.join(', ')}`,
          id,
          {
            headers: { allow: refusal.allow.join(', ') },
          },
        );
  response.headers.set('x-request-id', id);
  return response;
}

function toRequest(
  req: IncomingMessage,
  res: ServerResponse,
  fetchHandler: FetchHandler,
): { request: Request } | Refusal {
  const method = (req.method ?? 'GET').toUpperCase();
  const aborted = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) aborted.abort(new Error('client disconnected'));
  });
  return buildRequest(
    {
      method,
      url: req.url ?? '/',
      host: req.headers.host,
      encrypted: (req.socket as TLSSocket | undefined)?.encrypted === true,
      rawHeaders: req.rawHeaders,
      body: method !== 'GET' && method !== 'HEAD' ? bodyOf(req) : null,
      remoteAddress: req.socket?.remoteAddress,
    },
    aborted.signal,
    fetchHandler,
  );
}

/** What a request is made of, as it can travel between threads (see server.ts). */
export interface RequestParts {
  method: string;
  /** `req.url`: origin-form, or absolute-form from a proxy. */
  url: string;
  host: string | undefined;
  encrypted: boolean;
  rawHeaders: string[];
  body: ReadableStream<Uint8Array> | Uint8Array | null;
  /** The peer address of the connection, when known. */
  remoteAddress?: string | undefined;
}

/** The WHATWG `Request` of a Node request's parts, or a {@link Refusal} when it cannot be one. */
export function buildRequest(
  parts: RequestParts,
  signal: AbortSignal,
  fetchHandler: FetchHandler,
): { request: Request } | Refusal {
  const method = parts.method.toUpperCase();
  const url = requestUrl(parts.url, parts.host, parts.encrypted);
  if (url === null) return new Refusal(method, null);
  const headers = new Headers();
  for (let i = 0; i + 1 < parts.rawHeaders.length; i += 2) {
    try {
      headers.append(parts.rawHeaders[i]!, parts.rawHeaders[i + 1]!);
    } catch {
      // a header value undici will not carry (control characters): drop it rather than fail the request
    }
  }
  const init: RequestInit & { duplex?: 'half' } = { method, headers, signal };
  if (parts.body !== null && method !== 'GET' && method !== 'HEAD') {
    init.body = parts.body as BodyInit;
    init.duplex = 'half';
  }
  const refuse = () => new Refusal(method, fetchHandler.allowedMethods(new URL(url).pathname));
  if (FORBIDDEN_METHODS.has(method)) return refuse();
  try {
    return { request: withClientAddress(new Request(url, init), parts.remoteAddress) };
  } catch {
    return refuse();
  }
}

/** `req.url` (origin-form, or absolute-form from a proxy) as an absolute URL, or null when it is not one. */
function requestUrl(raw: string, hostHeader: string | undefined, encrypted: boolean): string | null {
  const host = hostHeader !== undefined && SANE_HOST.test(hostHeader) ? hostHeader : 'localhost';
  const scheme = encrypted ? 'https' : 'http';
  try {
    // Concatenated rather than resolved: a path like `//evil/x` must stay a path, not become a host.
    return new URL(raw.startsWith('/') ? `${scheme}://${host}${raw}` : raw).href;
  } catch {
    return null;
  }
}

/**
 * The body of `req` as a stream that reads only when the consumer pulls, so nothing is read for a request that is
 * refused or passed on to `next()` (Node discards an unread body itself). Cancelling it stops reading and discards
 * the rest, keeping the connection usable. A body a framework's parser already consumed (`express.json()`) is taken
 * from `req.body`.
 */
function bodyOf(req: IncomingMessage): ReadableStream<Uint8Array> {
  const parsed = (req as IncomingMessage & { body?: unknown }).body;
  if (req.readableEnded && parsed !== undefined) {
    const bytes =
      parsed instanceof Uint8Array
        ? parsed
        : new TextEncoder().encode(typeof parsed === 'string' ? parsed : JSON.stringify(parsed));
    return new ReadableStream<Uint8Array>({
      start(controller) {
        if (bytes.byteLength > 0) controller.enqueue(bytes);
        controller.close();
      },
    });
  }
  let iterator: AsyncIterator<unknown> | undefined;
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        iterator ??= req.iterator({ destroyOnReturn: false });
        const { done, value } = await iterator.next();
        if (done) controller.close();
        else {
          const chunk = typeof value === 'string' ? Buffer.from(value) : (value as Buffer);
          controller.enqueue(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
        }
      },
      async cancel() {
        await iterator?.return?.();
        if (!req.readableEnded) req.resume();
      },
    },
    { highWaterMark: 0 },
  );
}

export async function writeResponse(req: IncomingMessage, res: ServerResponse, response: Response): Promise<void> {
  res.statusCode = response.status;
  response.headers.forEach((value, name) => {
    if (name !== 'set-cookie') res.setHeader(name, value);
  });
  const cookies = response.headers.getSetCookie();
  if (cookies.length > 0) res.setHeader('set-cookie', cookies);
  if (response.body === null || req.method === 'HEAD') {
    await response.body?.cancel().catch(() => {});
    res.end();
    return;
  }
  if (!(response.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
    const body = Buffer.from(await response.arrayBuffer());
    res.setHeader('content-length', body.byteLength);
    res.end(body);
    return;
  }
  // A stream (Server-Sent Events): every chunk goes out as it comes, and stops when the client leaves.
  res.flushHeaders();
  const reader = response.body.getReader();
  const onClose = () => void reader.cancel().catch(() => {});
  res.once('close', onClose);
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (res.destroyed) break;
      if (!res.write(value)) {
        await new Promise<void>((resolve) => {
          const go = () => {
            res.off('drain', go);
            res.off('close', go);
            resolve();
          };
          res.on('drain', go);
          res.on('close', go);
        });
      }
    }
  } catch {
    // the stream was cancelled because the client went away
  } finally {
    res.off('close', onClose);
  }
  if (!res.destroyed) res.end();
}
