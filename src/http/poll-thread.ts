/**
 * @module http/poll-thread
 * The HTTP server's thread (see server.ts). It owns the listening socket. Polls — `GET {basePath}/api/agents/{id}` —
 * are answered here, from a read-only connection to the runtime's SQLite file (`runtime.sharedStorageLocation()`,
 * opened by the storage layer's `openSharedReader`), so they stay fast while the runtime's thread is busy stepping
 * agents. Every other request is handed to the runtime's thread whole (method, URL, headers, body) and its response
 * comes back, streamed for Server-Sent Events.
 *
 * It is also the edge that strangers reach first, so it spends nothing on them:
 * - a body is read only for a request whose `x-api-key` authenticates (or that carries a live console session's
 *   cookie); any other is handed on without it (the router
 *   then answers 401, or 404/405, which it decides before reading a body) and its connection is closed after the
 *   answer, so a slow upload without a key holds neither memory nor a socket;
 * - the bodies being read, all together, hold at most {@link PollThreadData.bodyBytesInFlight} bytes; past that a
 *   request gets 429 `rate_limited` with `Retry-After`;
 * - at most {@link PollThreadData.maxUnauthenticatedConnections} connections wait without having sent a key that
 *   works; a new one beyond that closes the oldest of them;
 * - an event stream is relayed only as fast as its client takes it (`pause` / `resume` to the runtime's thread, whose
 *   stream then drops a reader that stays behind); one that gets 4 × {@link PollThreadData.slowReaderBytes} behind
 *   anyway is dropped here (the client reconnects and resumes with `Last-Event-ID`);
 * - an upload the client abandons is logged as one line, without a stack.
 *
 * With an access log (`onResponse`), what this thread answers itself is told to the runtime's thread, which logs it:
 * the polls, and the refusals made here. They go over in one message per turn of the event loop.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { parentPort, workerData } from 'node:worker_threads';
import { Accounts } from '../core/accounts.js';
import { systemClock } from '../base/clock.js';
import { statusExtras, toAgentWithMessages } from '../core/records.js';
import { notFound } from '../errors.js';
import type { SharedLocation } from '../storage/adapter.js';
import { openSharedReader } from '../storage/shared-reader.js';
import { cookieValue, SESSION_COOKIE, sessionIdHash } from './console/sessions.js';
import { headerOf, plainPollPath, writePlain } from './node-handler.js';
import { createPollResponder } from './poll.js';
import { keptUntilChange } from './poll-cache.js';
import { FailedAuthGuard } from './auth-guard.js';
import { TokenBuckets, type RateLimitOptions } from './rate-limit.js';
import { newRequestId, plainError } from './responses.js';
import type { ResponseInfo } from './fetch-handler.js';

export interface PollThreadData {
  /** Where the runtime's data is (`runtime.sharedStorageLocation()`): this thread opens it read-only. */
  location: SharedLocation;
  port: number;
  host: string;
  basePath: string;
  rateLimit: RateLimitOptions | false;
  failedAuthLimit: RateLimitOptions | false;
  bodyLimitBytes: number;
  /** Most bytes of request bodies held at once, all requests together. */
  bodyBytesInFlight: number;
  /** Most connections open at once that have not yet sent a working key. */
  maxUnauthenticatedConnections: number;
  /** Unsent bytes of an event stream past which its reader counts as too slow and is dropped. */
  slowReaderBytes: number;
  /** With CORS on, polls go to the router too (it owns the CORS answers). */
  answerPolls: boolean;
  /** Whether the runtime's thread logs requests: then this thread tells it of those it answers itself. */
  logAccess: boolean;
}

/** Runtime's thread to this one. */
export type ToPollThread =
  | { kind: 'head'; id: number; status: number; headers: Array<[string, string]>; stream: boolean }
  | { kind: 'chunk'; id: number; data: Uint8Array }
  | { kind: 'end'; id: number; data?: Uint8Array }
  | { kind: 'close' };

/** This thread to the runtime's. */
export type FromPollThread =
  | { kind: 'listening'; port: number; address: string; family: string }
  | { kind: 'failed'; message: string }
  | {
      kind: 'request';
      id: number;
      method: string;
      url: string;
      host: string | undefined;
      rawHeaders: string[];
      body: Uint8Array | null;
      remoteAddress: string | undefined;
    }
  | { kind: 'cancel'; id: number }
  /** An event stream's client socket is full (`pause`) or drained (`resume`): the relay reads on only after. */
  | { kind: 'pause' | 'resume'; id: number }
  | { kind: 'error'; message: string; stack?: string; request_id: string }
  /** Requests this thread answered itself, for the access log. */
  | { kind: 'access'; lines: ResponseInfo[] }
  | { kind: 'closed' };

const port = parentPort!;
const data = workerData as PollThreadData;
const post = (m: FromPollThread) => port.postMessage(m);

/** Access lines not yet told to the runtime's thread: they go in one message at the end of this turn. */
let accessLines: ResponseInfo[] = [];
const sendAccessLines = () => {
  const lines = accessLines;
  accessLines = [];
  post({ kind: 'access', lines });
};
/** Tells the runtime's thread of a request answered here (when it keeps an access log). */
function logAnswered(method: string | undefined, route: string, status: number, requestId: string, startedAt: number) {
  if (!data.logAccess) return;
  if (accessLines.length === 0) setImmediate(sendAccessLines);
  accessLines.push({
    request_id: requestId,
    method: (method ?? 'GET').toUpperCase(),
    route,
    status,
    duration_ms: Math.round((performance.now() - startedAt) * 100) / 100,
    thread: 'poll',
  });
}

const storage = openSharedReader(data.location);
const accounts = new Accounts(storage, systemClock);
/**
 * The file's change counter as of the start of this turn of the event loop. Reading it starts a read transaction,
 * which, while the runtime's thread commits, costs as much as the rest of a poll answered from the cache: read once
 * per poll instead of once per turn, 20–25 % fewer polls were served during the fan-out benchmark. So a poll is
 * answered as of the start of the turn it is read in. The polls of a turn arrived before it began: libuv gathers them
 * in one `epoll_wait`, and waits again within the turn only after one that returned 1,024 ready sockets.
 * A response relayed from the runtime's thread may follow a commit (a pause, say), so relaying one forgets the
 * counter: a client that polls after its pause is acknowledged sees the pause.
 */
let turnCounter: number | undefined;
const forgetTurnCounter = () => (turnCounter = undefined);
function changeCounter(): number {
  if (turnCounter === undefined) {
    turnCounter = storage.changeCounter();
    setImmediate(forgetTurnCounter);
  }
  return turnCounter;
}

// The runtime's thread commits to the file; until it does again, a poll can be answered from what was read last.
const source = keptUntilChange(
  {
    authenticate: (key) => accounts.authenticateKey(key),
    async getJson(agentId, { accountId }) {
      const row = await storage.getAgent(agentId);
      if (!row || row.account_id !== accountId) throw notFound('Agent', agentId);
      return JSON.stringify(
        toAgentWithMessages(row, await storage.listMessages(agentId), await statusExtras(storage, row)),
      );
    },
  },
  changeCounter,
);
const answerPoll = createPollResponder(source, {
  basePath: data.basePath,
  buckets: data.rateLimit === false ? null : new TokenBuckets(data.rateLimit, Date.now),
  guard: data.failedAuthLimit === false ? null : new FailedAuthGuard(data.failedAuthLimit, Date.now),
  onError: (error, { request_id }) =>
    post({
      kind: 'error',
      message: String(error),
      ...(error instanceof Error && error.stack ? { stack: error.stack } : {}),
      request_id,
    }),
});

/** Requests handed to the runtime's thread, by id, until their response has ended. */
const forwarded = new Map<number, ServerResponse>();
/** Relayed streams whose client socket is full, told to the runtime's thread (`pause`) until it drains. */
const paused = new Set<number>();
/** Forwarded requests whose connection closes after the answer: their body was not read. */
const closeAfter = new Set<number>();
let nextId = 1;
/** Bytes of request bodies held now, all requests together. */
let bodyBytes = 0;

/**
 * Connections that have not yet sent a key that works, oldest first. A request with a working key takes its
 * connection off; a connection beyond the limit closes the oldest (a slow stranger, most likely: a client with a
 * key sends it at once).
 */
const unauthenticated = new Set<Socket>();
function trustConnection(socket: Socket): void {
  unauthenticated.delete(socket);
}

/** Whether `key` authenticates, without counting it anywhere: the router decides and counts; this only gates reads. */
async function keyWorks(key: string | null): Promise<boolean> {
  if (key === null) return false;
  try {
    source.begin?.();
    await source.authenticate(key);
    return true;
  } catch {
    return false;
  }
}

/**
 * Whether a request carries the cookie of a live console session (console/sessions.ts): the console's calls
 * authenticate by it instead of `x-api-key`. Only gates reading the body; the router checks the session in full.
 */
async function consoleSessionWorks(cookieHeader: string | null): Promise<boolean> {
  const id = cookieValue(cookieHeader, SESSION_COOKIE);
  if (id === null || id.length > 100) return false;
  const row = await storage.getConsoleSession(sessionIdHash(id)).catch(() => null);
  return row !== null && row.ended === null && row.expires_at > new Date().toISOString();
}

/** True when a request comes with a body (an empty `Content-Length: 0` one does not count). */
function declaresBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return (length !== undefined && length.trim() !== '0') || req.headers['transfer-encoding'] !== undefined;
}

/** The answer when the bodies in flight would pass their budget. */
function busy(req: IncomingMessage, res: ServerResponse, startedAt: number): void {
  const plain = plainError(
    'rate_limited',
    'Too many request bodies are being received; retry after 1 s',
    newRequestId(),
    {
      headers: { 'retry-after': '1', connection: 'close' },
    },
  );
  writePlain(res, plain);
  logAnswered(req.method, 'busy', plain.status, plain.headers['x-request-id'] ?? '', startedAt);
}

/**
 * Reads the body of an authenticated request: up to one byte past the limit (enough for the router to answer 413),
 * within the budget of bytes in flight. Resolves to null when the budget ran out (answered here) or the client left.
 */
async function readBody(req: IncomingMessage, res: ServerResponse, startedAt: number): Promise<Uint8Array | null> {
  const declared = Number(req.headers['content-length'] ?? 0);
  if (Number.isFinite(declared) && bodyBytes + Math.min(declared, data.bodyLimitBytes + 1) > data.bodyBytesInFlight) {
    busy(req, res, startedAt);
    return null;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    // Not destroyed on break: the rest is discarded and the connection stays usable for the answer (413).
    for await (const chunk of req.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>) {
      chunks.push(chunk);
      size += chunk.byteLength;
      bodyBytes += chunk.byteLength;
      if (size > data.bodyLimitBytes) break;
      if (bodyBytes > data.bodyBytesInFlight) {
        busy(req, res, startedAt);
        return null;
      }
    }
  } catch (error) {
    // The client went away mid-upload: expected on the open internet, worth a line, never a stack.
    const code = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    console.warn(
      `agentry http: an upload to ${(req.url ?? '/').slice(0, 100)} ended early (${code}) after ${size} bytes`,
    );
    return null;
  } finally {
    bodyBytes -= size;
  }
  if (!req.readableEnded) req.resume();
  return Buffer.concat(chunks).subarray(0, data.bodyLimitBytes + 1);
}

async function forward(req: IncomingMessage, res: ServerResponse, startedAt: number): Promise<void> {
  const id = nextId++;
  forwarded.set(id, res);
  res.once('close', () => {
    closeAfter.delete(id);
    paused.delete(id);
    if (forwarded.delete(id)) post({ kind: 'cancel', id });
  });
  const method = (req.method ?? 'GET').toUpperCase();
  const works = (await keyWorks(headerOf(req, 'x-api-key'))) || (await consoleSessionWorks(headerOf(req, 'cookie')));
  if (works) trustConnection(req.socket);
  let body: Uint8Array | null = null;
  if (method !== 'GET' && method !== 'HEAD') {
    if (works) {
      body = await readBody(req, res, startedAt);
      if (body === null) {
        forwarded.delete(id);
        return;
      }
    } else if (declaresBody(req)) {
      // Not kept: what arrives is thrown away as it comes, the router answers without it (401 before any body), and
      // the connection closes after the answer.
      req.resume();
      closeAfter.add(id);
    }
  }
  if (!forwarded.has(id)) return; // the client left while its body was read
  post({
    kind: 'request',
    id,
    method,
    url: req.url ?? '/',
    host: req.headers.host,
    rawHeaders: req.rawHeaders,
    body,
    remoteAddress: req.socket.remoteAddress,
  });
}

const server = createServer((req, res) => {
  const startedAt = performance.now();
  const path = data.answerPolls ? plainPollPath(req) : null;
  const answered =
    path === null ? Promise.resolve(null) : answerPoll(path, (name) => headerOf(req, name), req.socket.remoteAddress);
  answered
    .then((plain) => {
      if (!plain) return forward(req, res, startedAt);
      if (plain.status !== 401 && plain.status !== 429) trustConnection(req.socket);
      writePlain(res, plain);
      logAnswered(req.method, 'get', plain.status, plain.headers['x-request-id'] ?? '', startedAt);
    })
    .catch((error: unknown) => {
      const requestId = newRequestId();
      post({
        kind: 'error',
        message: String(error),
        ...(error instanceof Error && error.stack ? { stack: error.stack } : {}),
        request_id: requestId,
      });
      logAnswered(req.method, path === null ? 'unmatched' : 'get', 500, requestId, startedAt);
      if (res.headersSent) res.destroy();
      else writePlain(res, plainError('internal_error', 'Internal server error', requestId));
    });
});
// A stranger gets 20 s to send its headers (Node's default is 60 s).
server.headersTimeout = 20_000;
server.on('connection', (socket: Socket) => {
  unauthenticated.add(socket);
  socket.once('close', () => unauthenticated.delete(socket));
  if (unauthenticated.size > data.maxUnauthenticatedConnections) {
    const oldest = unauthenticated.values().next().value!;
    unauthenticated.delete(oldest);
    oldest.destroy();
  }
});

port.on('message', (m: ToPollThread) => {
  if (m.kind === 'close') {
    server.close();
    server.closeAllConnections();
    void storage.close().then(() => {
      post({ kind: 'closed' });
      port.close();
    });
    return;
  }
  forgetTurnCounter();
  const res = forwarded.get(m.id);
  if (!res) return; // the client has gone
  if (m.kind === 'head') {
    const headers = closeAfter.has(m.id) ? [...m.headers, ['connection', 'close'] as [string, string]] : m.headers;
    res.writeHead(m.status, headers.flat());
    if (m.stream) res.flushHeaders();
  } else if (m.kind === 'chunk') {
    // Already this far behind, the relay did not stop: dropped rather than buffered for (it resumes with
    // Last-Event-ID).
    if (res.writableLength > data.slowReaderBytes * 4) {
      res.destroy();
      return;
    }
    if (!res.write(m.data) && !paused.has(m.id)) {
      // The client's socket is full: the runtime's thread stops reading the stream until it drains, and the stream
      // drops a reader that stays behind (events.ts). A chunk or two in flight may still arrive meanwhile.
      paused.add(m.id);
      post({ kind: 'pause', id: m.id });
      res.once('drain', () => {
        if (paused.delete(m.id)) post({ kind: 'resume', id: m.id });
      });
    }
  } else {
    forwarded.delete(m.id);
    res.end(m.data);
  }
});

try {
  await storage.init();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(data.port, data.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  post({ kind: 'listening', port: address.port, address: address.address, family: address.family });
} catch (error) {
  post({ kind: 'failed', message: String(error) });
}
