/**
 * @module http/server
 * {@link startServer}: agentry's HTTP service on a port of its own, as `agentry serve` runs it. Over a SQLite file the
 * server lives on a thread of its own (poll-thread.ts): polls are answered there from a read-only connection, so a
 * runtime busy with 10,000 sub-agents still answers them in milliseconds; every other request is handed to the
 * runtime's thread and served by the same router as {@link createNodeHandler}. Over in-memory storage, which another
 * thread cannot open, it is a plain node:http server with {@link createNodeHandler}.
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { z } from 'zod';
import type { AgentRuntime } from '../core/agent-runtime.js';
import { parseArgs } from '../base/validate.js';
import { AgentryError } from '../errors.js';
import {
  createFetchHandler,
  DEFAULT_BODY_LIMIT_BYTES,
  DEFAULT_RATE_LIMIT,
  type FetchHandler,
  type FetchHandlerOptions,
} from './fetch-handler.js';
import { DEFAULT_FAILED_AUTH_LIMIT } from './auth-guard.js';
import { DEFAULT_EVENT_STREAM_LIMITS } from './event-streams.js';
import { buildRequest, nodeHandlerFor, Refusal, refusalResponse } from './node-handler.js';
import type { FromPollThread, PollThreadData, ToPollThread } from './poll-thread.js';

export interface ServerOptions extends FetchHandlerOptions {
  /** Port to listen on; 0 picks a free one. @default 8787 */
  port?: number;
  /** Address to bind. @default '127.0.0.1' */
  host?: string;
  /**
   * Serve HTTP on a thread of its own and answer polls there (SQLite files only). `false` serves everything on the
   * runtime's thread. Polls on the thread have a token bucket of their own per API key (same settings), apart from
   * the other routes'.
   * @default true
   */
  pollThread?: boolean;
  /**
   * Most connections open at once that have not yet sent a working API key (strangers, slow or not); one more closes
   * the oldest of them. With the poll thread only.
   * @default 1024
   */
  maxUnauthenticatedConnections?: number;
  /**
   * Most bytes of request bodies being received at once, all requests together; past it a request gets 429
   * `rate_limited` with `Retry-After: 1`. Bodies are read only for requests whose key works. With the poll thread only.
   * @default the larger of 64 MiB and 8 × `bodyLimitBytes`
   */
  bodyBytesInFlight?: number;
}

/** A running server. */
export interface RunningServer {
  /** `http://host:port`, with the port actually bound. */
  readonly url: string;
  readonly port: number;
  /** Whether polls are answered on the server's own thread. */
  readonly pollThread: boolean;
  /** Stops listening and drops open connections (event streams included). The runtime stays open. */
  close(): Promise<void>;
}

const ServerOnlySchema = z
  .object({
    port: z.number().int().min(0).max(65535).optional(),
    host: z.string().min(1).optional(),
    pollThread: z.boolean().optional(),
    maxUnauthenticatedConnections: z.number().int().positive().optional(),
    bodyBytesInFlight: z.number().int().positive().optional(),
  })
  .passthrough();

/**
 * Starts agentry's HTTP service (the routes of `createFetchHandler`) on a port.
 *
 * @example
 * import { AgentRuntime, sqliteStorage } from 'agentry-runtime';
 * import { startServer } from 'agentry-runtime/http';
 *
 * const runtime = await AgentRuntime.open({ storage: sqliteStorage({ path: './agentry.db' }) });
 * const server = await startServer(runtime, { port: 8787 });
 * console.log(`listening on ${server.url}`);
 * // later: await server.close(); await runtime.close();
 */
export async function startServer(runtime: AgentRuntime, options: ServerOptions = {}): Promise<RunningServer> {
  const {
    port = 8787,
    host = '127.0.0.1',
    pollThread = true,
    maxUnauthenticatedConnections = 1024,
    bodyBytesInFlight,
    ...handlerOptions
  } = parseArgs(ServerOnlySchema, options, 'startServer options') as ServerOptions;
  const fetchHandler = createFetchHandler(runtime, handlerOptions);
  const location = runtime.sharedStorageLocation();
  const bodyLimitBytes = handlerOptions.bodyLimitBytes ?? DEFAULT_BODY_LIMIT_BYTES;
  if (pollThread && location !== null) {
    return startWithPollThread(fetchHandler, handlerOptions, {
      location,
      port,
      host,
      basePath: handlerOptions.basePath ?? '',
      rateLimit: handlerOptions.rateLimit ?? DEFAULT_RATE_LIMIT,
      failedAuthLimit: handlerOptions.failedAuthLimit ?? DEFAULT_FAILED_AUTH_LIMIT,
      bodyLimitBytes,
      bodyBytesInFlight: bodyBytesInFlight ?? Math.max(64 * 1024 * 1024, 8 * bodyLimitBytes),
      maxUnauthenticatedConnections,
      slowReaderBytes: handlerOptions.eventStreams?.slowReaderBytes ?? DEFAULT_EVENT_STREAM_LIMITS.slowReaderBytes,
      answerPolls: (handlerOptions.cors ?? false) === false,
      logAccess: handlerOptions.onResponse !== undefined,
    });
  }
  const server = createServer(nodeHandlerFor(fetchHandler));
  server.headersTimeout = 20_000; // a stranger gets 20 s to send its headers (Node's default is 60 s)
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  return {
    url: urlOf(address.address, address.family, address.port),
    port: address.port,
    pollThread: false,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/**
 * The Content-Length a relayed response is sent with: that of its body, except for a HEAD (no body; the length the GET
 * would have, when the router declared it) and for 204 and 304, which have none.
 */
function contentLengthOf(method: string, response: Response, body: Uint8Array): string | null {
  if (response.status === 204 || response.status === 304) return null;
  if (method.toUpperCase() === 'HEAD') return response.headers.get('content-length') ?? String(body.byteLength);
  return String(body.byteLength);
}

/** Flow control of one relayed stream: the server's thread says when its client's socket is full and when it drained. */
interface Flow {
  paused: boolean;
  resume: (() => void) | null;
}

function urlOf(address: string, family: string, port: number): string {
  return `http://${family === 'IPv6' ? `[${address}]` : address}:${port}`;
}

async function startWithPollThread(
  fetchHandler: FetchHandler,
  options: FetchHandlerOptions,
  data: PollThreadData,
): Promise<RunningServer> {
  const onError =
    options.onError ??
    ((error: unknown, { request_id }: { request_id: string }) =>
      console.error(`agentry http: request ${request_id} failed:`, error));
  const worker = spawnPollThread(data);
  const send = (m: ToPollThread, transfer?: ArrayBuffer[]) => worker.postMessage(m, transfer);
  /** Aborts the requests in flight on this thread when their client leaves. */
  const inFlight = new Map<number, AbortController>();
  /** Streams relayed to the server's thread, paused while their client's socket is full. */
  const flows = new Map<number, Flow>();
  let onClosed: (() => void) | undefined;

  async function serve(m: Extract<FromPollThread, { kind: 'request' }>): Promise<void> {
    const aborted = new AbortController();
    inFlight.set(m.id, aborted);
    try {
      const built = buildRequest(
        {
          method: m.method,
          url: m.url,
          host: m.host,
          encrypted: false,
          rawHeaders: m.rawHeaders,
          body: m.body,
          remoteAddress: m.remoteAddress,
        },
        aborted.signal,
        fetchHandler,
      );
      const response = built instanceof Refusal ? refusalResponse(built) : await fetchHandler(built.request);
      const headers: Array<[string, string]> = [];
      // Content-Length is set below, once: a response that declares one (an artifact) would otherwise send it twice,
      // which clients refuse.
      response.headers.forEach((value, name) => {
        if (name !== 'set-cookie' && name !== 'content-length') headers.push([name, value]);
      });
      for (const cookie of response.headers.getSetCookie()) headers.push(['set-cookie', cookie]);
      const stream = (response.headers.get('content-type') ?? '').startsWith('text/event-stream');
      if (!stream || response.body === null) {
        // Bytes, never text, so that binary bodies (artifacts) cross to the server's thread unchanged.
        const body = new Uint8Array(await response.arrayBuffer());
        const length = contentLengthOf(m.method, response, body);
        if (length !== null) headers.push(['content-length', length]);
        send({ kind: 'head', id: m.id, status: response.status, headers, stream: false });
        send({ kind: 'end', id: m.id, data: body }, [body.buffer as ArrayBuffer]);
        return;
      }
      send({ kind: 'head', id: m.id, status: response.status, headers, stream: true });
      const reader = response.body.getReader();
      const flow: Flow = { paused: false, resume: null };
      flows.set(m.id, flow);
      aborted.signal.addEventListener(
        'abort',
        () => {
          void reader.cancel().catch(() => {});
          flow.resume?.();
        },
        { once: true },
      );
      try {
        for (;;) {
          // Nothing is read ahead of a client that does not take what was sent: the stream itself decides when such
          // a reader is too slow (events.ts).
          while (flow.paused && !aborted.signal.aborted) await new Promise<void>((resolve) => (flow.resume = resolve));
          const { done, value } = await reader.read();
          if (done) break;
          send({ kind: 'chunk', id: m.id, data: value });
        }
      } catch {
        // cancelled: the client went away
      }
      send({ kind: 'end', id: m.id });
    } catch (error) {
      onError(error, { request_id: 'forwarded' });
      send({ kind: 'head', id: m.id, status: 500, headers: [['content-type', 'text/plain']], stream: false });
      send({ kind: 'end', id: m.id });
    } finally {
      inFlight.delete(m.id);
      flows.delete(m.id);
    }
  }

  let started = false;
  const listening = new Promise<Extract<FromPollThread, { kind: 'listening' }>>((resolve, reject) => {
    worker.on('message', (m: FromPollThread) => {
      switch (m.kind) {
        case 'listening':
          return resolve(m);
        case 'failed':
          return reject(new AgentryError('invalid_request', `The HTTP server could not start: ${m.message}`));
        case 'request':
          return void serve(m);
        case 'cancel':
          return inFlight.get(m.id)?.abort(new Error('client disconnected'));
        case 'pause':
        case 'resume': {
          const flow = flows.get(m.id);
          if (!flow) return;
          flow.paused = m.kind === 'pause';
          if (!flow.paused) flow.resume?.();
          return;
        }
        case 'error':
          return onError(Object.assign(new Error(m.message), m.stack ? { stack: m.stack } : {}), {
            request_id: m.request_id,
          });
        case 'access':
          for (const line of m.lines) options.onResponse?.(line);
          return;
        case 'closed':
          return onClosed?.();
      }
    });
    // Before it listens, a failure of the thread fails the start; after, it is reported (the server is gone).
    worker.on('error', (error) => {
      if (started) onError(error, { request_id: 'server' });
      else reject(error);
    });
    worker.once('exit', (code) => {
      const error = new AgentryError('internal_error', `The HTTP server thread exited with code ${code}`);
      if (onClosed) onClosed();
      else if (started) onError(error, { request_id: 'server' });
      else reject(error);
    });
  });
  let address: Extract<FromPollThread, { kind: 'listening' }>;
  try {
    address = await listening;
  } catch (error) {
    await worker.terminate(); // it did not start: no thread is left behind
    throw error;
  }
  started = true;
  return {
    url: urlOf(address.address, address.family, address.port),
    port: address.port,
    pollThread: true,
    async close() {
      await new Promise<void>((resolve) => {
        onClosed = resolve;
        send({ kind: 'close' });
      });
      for (const aborted of inFlight.values()) aborted.abort(new Error('server closed'));
      await worker.terminate();
    },
  };
}

/**
 * The server's thread. Built, its entry is plain JavaScript; run from source (tests, tsx) it is TypeScript, and the
 * thread registers tsx's loader before importing it (Node 20 does not pass `--import` hooks on to workers).
 */
function spawnPollThread(data: PollThreadData): Worker {
  // The thread inherits the process's flags, except one that would make it refuse its own entry file.
  const execArgv = process.execArgv.filter((flag) => !flag.startsWith('--input-type'));
  if (!import.meta.url.endsWith('.ts')) {
    return new Worker(new URL('./poll-thread.js', import.meta.url), { workerData: data, execArgv });
  }
  const entry = new URL('./poll-thread.ts', import.meta.url).href;
  const boot = `import(${JSON.stringify(tsxApiUrl())}).then((tsx) => { tsx.register(); return import(${JSON.stringify(entry)}); })`;
  return new Worker(boot, { eval: true, workerData: data, execArgv });
}

/** tsx's ESM API (`tsx/esm/api`, import condition), found through its package.json: require.resolve picks the CJS file. */
function tsxApiUrl(): string {
  const manifest = createRequire(import.meta.url).resolve('tsx/package.json');
  const { exports } = JSON.parse(readFileSync(manifest, 'utf8')) as {
    exports: Record<string, { import: { default: string } }>;
  };
  return new URL(exports['./esm/api']!.import.default, pathToFileURL(manifest)).href;
}
