/**
 * A local `node:http` server that stands in for a search provider: it records every request exactly as it arrived
 * (method, path, query string, headers, body) and answers from a script, in the provider's wire format.
 */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';

export interface RecordedRequest {
  method: string;
  pathname: string;
  query: URLSearchParams;
  headers: IncomingHttpHeaders;
  body: string;
}

export interface Reply {
  status?: number;
  headers?: Record<string, string>;
  /** Sent as JSON. */
  json?: unknown;
  /** Sent as it is (e.g. a body that is not JSON). */
  text?: string;
  /** Compress the body with gzip and say so in `Content-Encoding`. */
  gzip?: boolean;
  /** Never answer (for time limits and aborts). */
  hang?: boolean;
}

export interface FakeServer {
  url: string;
  requests: RecordedRequest[];
  close(): Promise<void>;
}

/**
 * Starts a server on an ephemeral loopback port. `script` is either a list of replies, used in order with the last
 * one repeated, or a function of the request.
 */
export async function startFakeServer(script: Reply[] | ((req: RecordedRequest) => Reply)): Promise<FakeServer> {
  const requests: RecordedRequest[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://fake');
      const recorded: RecordedRequest = {
        method: req.method ?? '',
        pathname: url.pathname,
        query: url.searchParams,
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      };
      requests.push(recorded);
      const reply =
        typeof script === 'function' ? script(recorded) : script[Math.min(requests.length, script.length) - 1]!;
      if (reply.hang) return;
      let payload = Buffer.from(reply.text ?? (reply.json === undefined ? '' : JSON.stringify(reply.json)), 'utf8');
      const headers: Record<string, string> = {
        'content-type': reply.text === undefined ? 'application/json' : 'text/html; charset=utf-8',
        ...reply.headers,
      };
      if (reply.gzip) {
        payload = gzipSync(payload);
        headers['content-encoding'] = 'gzip';
      }
      res.writeHead(reply.status ?? 200, headers);
      res.end(payload);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A port nothing listens on (bound, then released). */
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
