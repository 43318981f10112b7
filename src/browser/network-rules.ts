/**
 * @module browser/network-rules
 * Every request a browser page makes obeys the guarded fetch's address rules (README.md#tools): each browser context
 * talks to the network only through a forward proxy of its own, on 127.0.0.1, which resolves the target, checks every
 * address with `web/address-policy.ts` (and the same allow list as the guarded fetch), and connects to the address it
 * checked — never to a second DNS answer.
 *
 * Why a proxy and not Playwright's request interception (`route`): a route handler is called only for the first URL
 * of a redirect chain ("The handler will only be called for the first url if the response is a redirect", Playwright's
 * docs of `page.route`), so a public page that answers `302 Location: http://10.0.0.5/` would reach the private address;
 * the browser also resolves host names itself after the handler has looked, which leaves DNS rebinding open. Through
 * the proxy each redirect hop is a request of its own, checked from scratch; navigations, subresources, fetch/XHR,
 * service workers and WebSockets (Chromium tunnels `ws:` and `wss:` through an HTTP proxy with CONNECT) all pass it.
 * Playwright adds `<-loopback>` to the context's bypass list, so Chromium sends even loopback requests to the proxy.
 *
 * A refused request fails in the page as a network error: a plain-HTTP one gets its connection closed without an
 * answer (`net::ERR_EMPTY_RESPONSE`; a 403 would be a *response*, which a same-origin `fetch()` resolves with), a
 * CONNECT gets `403` (`net::ERR_TUNNEL_CONNECTION_FAILED`). Each refusal is recorded, so a blocked navigation can be
 * reported to the model with its reason.
 */
import { promises as dns } from 'node:dns';
import http from 'node:http';
import { connect as netConnect, isIP, type AddressInfo, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { classifyAddress, describeRange, type AllowList } from '../web/address-policy.js';

/** Resolves a host name to all its addresses, as the guarded fetch's `lookup` option. */
export type BrowserLookup = (hostname: string) => Promise<Array<{ address: string; family: 4 | 6 }>>;

/** A request the proxy refused. */
export interface BlockedRequest {
  /** `http://host:port/path` for plain HTTP; `https://host:port` (or a WebSocket) for a CONNECT tunnel. */
  url: string;
  host: string;
  reason: string;
}

/** Options of {@link startNetworkGuard}. */
export interface NetworkGuardOptions {
  /** The parsed allow list (`builtinTools.fetch.allow` + `AGENTRY_FETCH_ALLOW`). */
  allow: AllowList;
  /** @default dns.promises.lookup with `all: true` */
  lookup?: BrowserLookup;
  /** Called for every refusal (also kept in {@link NetworkGuard.blocked}, the last 100). */
  onBlocked?: (blocked: BlockedRequest) => void;
}

/** A running guard proxy; give `server` to `browser.newContext({ proxy: { server } })`. */
export interface NetworkGuard {
  server: string;
  /** The most recent refusals, oldest first (at most 100). */
  blocked: BlockedRequest[];
  /** Closes the listener and every connection it carries. */
  close(): Promise<void>;
}

const MAX_BLOCKED_KEPT = 100;
// Headers meant for the proxy itself, never forwarded to the target.
const PROXY_HEADERS = new Set(['proxy-connection', 'proxy-authorization', 'proxy-authenticate']);

const systemLookup: BrowserLookup = async (hostname) =>
  (await dns.lookup(hostname, { all: true, verbatim: true })).map((a) => ({
    address: a.address,
    family: a.family === 6 ? 6 : 4,
  }));

/**
 * Decides whether `host` may be reached: the address to connect to, or why not. A name the allow list names is
 * trusted whatever it resolves to (as in the guarded fetch); otherwise every address it resolves to must be public or
 * inside an allowed network.
 */
export async function checkBrowserTarget(
  host: string,
  allow: AllowList,
  lookup: BrowserLookup = systemLookup,
): Promise<{ ok: true; address: string } | { ok: false; reason: string }> {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  let addresses: string[];
  if (isIP(bare)) addresses = [bare];
  else {
    try {
      addresses = (await lookup(bare)).map((a) => a.address);
    } catch {
      return { ok: false, reason: `${bare} could not be resolved` };
    }
    if (addresses.length === 0) return { ok: false, reason: `${bare} resolved to no address` };
    if (allow.allowsHost(bare)) return { ok: true, address: addresses[0]! };
  }
  for (const address of addresses) {
    if (allow.allowsAddress(address)) continue;
    const range = classifyAddress(address);
    if (range === null) continue;
    const subject = isIP(bare) ? `${bare} is` : `${bare} resolves to ${address},`;
    return {
      ok: false,
      reason: `${subject} ${describeRange(range)}; allow it with AGENTRY_FETCH_ALLOW or builtinTools.fetch.allow`,
    };
  }
  return { ok: true, address: addresses[0]! };
}

/** Splits `host:port` of a CONNECT request (`[::1]:443` included). */
function splitAuthority(authority: string): { host: string; port: number } | undefined {
  const m = /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(authority);
  if (!m) return undefined;
  const port = Number(m[2]);
  return port > 0 && port < 65536 ? { host: m[1]!, port } : undefined;
}

/**
 * Starts a guard proxy on 127.0.0.1 (an ephemeral port).
 *
 * @example
 * const guard = await startNetworkGuard({ allow: parseAllowList(['127.0.0.1/32']) });
 * const context = await browser.newContext({ proxy: { server: guard.server } });
 * // … later
 * await context.close();
 * await guard.close();
 */
export async function startNetworkGuard(options: NetworkGuardOptions): Promise<NetworkGuard> {
  const lookup = options.lookup ?? systemLookup;
  const blocked: BlockedRequest[] = [];
  const sockets = new Set<Duplex>();
  const track = (s: Duplex) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  };
  const refuse = (entry: BlockedRequest) => {
    blocked.push(entry);
    if (blocked.length > MAX_BLOCKED_KEPT) blocked.shift();
    options.onBlocked?.(entry);
  };

  const server = http.createServer({ keepAlive: true }, (req, res) => {
    void forward(req, res);
  });
  server.on('connection', track);

  async function forward(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    let target: URL;
    try {
      target = new URL(req.url ?? '');
    } catch {
      res.writeHead(400).end();
      return;
    }
    if (target.protocol !== 'http:') {
      refuse({ url: target.href, host: target.hostname, reason: `${target.protocol} is not http(s)` });
      req.socket.destroy();
      return;
    }
    const verdict = await checkBrowserTarget(target.hostname, options.allow, lookup);
    if (!verdict.ok) {
      refuse({ url: target.href, host: target.hostname, reason: verdict.reason });
      // No answer at all: the page sees a network error, not a response it could read.
      req.socket.destroy();
      return;
    }
    const headers: http.OutgoingHttpHeaders = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (!PROXY_HEADERS.has(name) && value !== undefined) headers[name] = value;
    }
    const upstream = http.request({
      // The checked address, with the Host header the page meant: the connection is pinned.
      host: verdict.address,
      port: target.port === '' ? 80 : Number(target.port),
      method: req.method,
      path: `${target.pathname}${target.search}`,
      headers,
      setHost: false,
    });
    upstream.on('response', (up) => {
      res.writeHead(up.statusCode ?? 502, up.statusMessage, up.rawHeaders);
      up.pipe(res);
    });
    upstream.on('error', () => {
      if (!res.headersSent) res.writeHead(502).end();
      else res.destroy();
    });
    // The page went away (its context closed, a fetch aborted): so does the request it made.
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy();
    });
    req.pipe(upstream);
  }

  async function tunnel(authority: string, client: Duplex, head: Buffer, requestBytes?: Buffer): Promise<void> {
    const parsed = splitAuthority(authority);
    if (!parsed) {
      client.end('HTTP/1.1 400 Bad Request\r\n\r\n');
      return;
    }
    const verdict = await checkBrowserTarget(parsed.host, options.allow, lookup);
    if (!verdict.ok) {
      const scheme = parsed.port === 80 ? 'http' : 'https';
      refuse({ url: `${scheme}://${authority}`, host: parsed.host, reason: verdict.reason });
      if (requestBytes) client.destroy();
      else client.end('HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n');
      return;
    }
    const upstream: Socket = netConnect(parsed.port, verdict.address);
    track(upstream);
    upstream.once('connect', () => {
      if (requestBytes) upstream.write(requestBytes);
      else client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length > 0) upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    upstream.on('error', () => client.destroy());
    client.on('error', () => upstream.destroy());
  }

  server.on('connect', (req: http.IncomingMessage, client: Duplex, head: Buffer) => {
    void tunnel(req.url ?? '', client, head);
  });
  // A WebSocket upgrade sent to the proxy in absolute form (Chromium uses CONNECT; other clients may not).
  server.on('upgrade', (req: http.IncomingMessage, client: Duplex, head: Buffer) => {
    let target: URL;
    try {
      target = new URL(req.url ?? '');
    } catch {
      client.destroy();
      return;
    }
    const lines = [`${req.method} ${target.pathname}${target.search} HTTP/1.1`];
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      if (!PROXY_HEADERS.has(req.rawHeaders[i]!.toLowerCase()))
        lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
    }
    const bytes = Buffer.from(`${lines.join('\r\n')}\r\n\r\n`);
    void tunnel(`${target.hostname}:${target.port || 80}`, client, head, bytes);
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    server: `http://127.0.0.1:${port}`,
    blocked,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
