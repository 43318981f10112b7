/**
 * @module http/poll-thread
 * The HTTP server's thread (see server.ts). It owns the listening socket. Polls — `GET {basePath}/api/agents/{id}` —
 * are answered here, from a read-only connection to the runtime's SQLite file, so they stay fast while the runtime's
 * thread is busy stepping agents. Every other request is handed to the runtime's thread whole (method, URL, headers,
 * body) and its response comes back, streamed for Server-Sent Events.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parentPort, workerData } from 'node:worker_threads';
import { Accounts } from '../core/accounts.js';
import { systemClock } from '../core/clock.js';
import { statusExtras, toAgentWithMessages } from '../core/records.js';
import { notFound } from '../errors.js';
import { sqliteStorage } from '../storage/sqlite/index.js';
import { headerOf, plainPollPath, writePlain } from './node-handler.js';
import { createPollResponder } from './poll.js';
import { keptUntilChange } from './poll-cache.js';
import { TokenBuckets, type RateLimitOptions } from './rate-limit.js';
import { newRequestId, plainError } from './responses.js';

export interface PollThreadData {
  sqlitePath: string;
  port: number;
  host: string;
  basePath: string;
  rateLimit: RateLimitOptions | false;
  bodyLimitBytes: number;
  /** With CORS on, polls go to the router too (it owns the CORS answers). */
  answerPolls: boolean;
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
    }
  | { kind: 'cancel'; id: number }
  | { kind: 'error'; message: string; stack?: string; request_id: string }
  | { kind: 'closed' };

const port = parentPort!;
const data = workerData as PollThreadData;
const post = (m: FromPollThread) => port.postMessage(m);

const storage = sqliteStorage({ path: data.sqlitePath, readonly: true });
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
let nextId = 1;

async function forward(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const id = nextId++;
  forwarded.set(id, res);
  res.once('close', () => {
    if (forwarded.delete(id)) post({ kind: 'cancel', id });
  });
  const method = (req.method ?? 'GET').toUpperCase();
  let body: Uint8Array | null = null;
  if (method !== 'GET' && method !== 'HEAD') {
    // Up to one byte past the limit: enough for the router to answer 413, and no more is held.
    const chunks: Buffer[] = [];
    let size = 0;
    // Not destroyed on break: the rest is discarded and the connection stays usable for the answer (413).
    for await (const chunk of req.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>) {
      chunks.push(chunk);
      size += chunk.byteLength;
      if (size > data.bodyLimitBytes) break;
    }
    if (!req.readableEnded) req.resume();
    body = Buffer.concat(chunks).subarray(0, data.bodyLimitBytes + 1);
  }
  if (!forwarded.has(id)) return; // the client left while its body was read
  post({ kind: 'request', id, method, url: req.url ?? '/', host: req.headers.host, rawHeaders: req.rawHeaders, body });
}

const server = createServer((req, res) => {
  const path = data.answerPolls ? plainPollPath(req) : null;
  const answered = path === null ? Promise.resolve(null) : answerPoll(path, (name) => headerOf(req, name));
  answered
    .then((plain) => (plain ? writePlain(res, plain) : forward(req, res)))
    .catch((error: unknown) => {
      post({ kind: 'error', message: String(error), request_id: 'none' });
      if (res.headersSent) res.destroy();
      else writePlain(res, plainError('internal_error', 'Internal server error', newRequestId()));
    });
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
    res.writeHead(m.status, m.headers.flat());
    if (m.stream) res.flushHeaders();
  } else if (m.kind === 'chunk') res.write(m.data);
  else {
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
