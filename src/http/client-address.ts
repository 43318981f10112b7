/**
 * @module http/client-address
 * Who sent a request, as far as the server adapter can tell: the peer address of its connection. A WHATWG `Request`
 * has no such field, so the adapters (`createNodeHandler`, `startServer`) attach it, and the router reads it for the
 * per-address limit on failed authentication (auth-guard.ts). Behind a reverse proxy every request shares the proxy's
 * address; the limit is built so that this does not lock out clients whose keys work.
 */
import { UNKNOWN_ADDRESS } from './auth-guard.js';

const addresses = new WeakMap<Request, string>();

/**
 * Tells the router the client address of a request, for adapters of other servers (Hono, Bun, Deno) that know it.
 *
 * @example
 * // Hono on Node (@hono/node-server)
 * app.all('*', (c) => agentry(withClientAddress(c.req.raw, c.env.incoming.socket.remoteAddress)));
 */
export function withClientAddress(request: Request, address: string | undefined): Request {
  if (typeof address === 'string' && address.length > 0 && address.length <= 100) addresses.set(request, address);
  return request;
}

/** The client address of a request, or `'unknown'` when no adapter said. */
export function clientAddressOf(request: Request): string {
  return addresses.get(request) ?? UNKNOWN_ADDRESS;
}
