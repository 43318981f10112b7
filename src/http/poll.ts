/**
 * @module http/poll
 * The route clients poll, `GET {basePath}/api/agents/{id}`, as a function of a path and a header lookup that answers
 * plain data ({@link PlainResponse}) instead of WHATWG `Request`/`Response` objects, which cost several times the
 * route itself. The router (fetch-handler.ts) serves it this way on the Node fast path, and the HTTP server's poll
 * thread (poll-thread.ts) serves it from a read-only connection of its own. Checks, answers and error bodies are the
 * router's: 401/403 for the key, 429 from the caller's token buckets, 404 for an unknown or foreign agent.
 */
import type { AccountInfo } from '../core/accounts.js';
import { AgentryError } from '../errors.js';
import { isAuthFailure, UNKNOWN_ADDRESS, type FailedAuthGuard } from './auth-guard.js';
import type { TokenBuckets } from './rate-limit.js';
import { newRequestId, plainError, plainForError, plainJson, type PlainResponse } from './responses.js';

/** An API key's account and the key's hash (see `Accounts.authenticateKey`). */
export interface KeyAuthentication {
  account: AccountInfo;
  keyHash: string;
}

/** What the poll route reads: an API key's account, and an agent of that account with its messages. */
export interface PollSource {
  /** Called once per poll before its reads: a caching source checks here whether what it keeps is still current. */
  begin?(): void;
  authenticate(key: string | null): Promise<KeyAuthentication>;
  /** The agent with its messages (`AgentWithMessages`) as the JSON text the route answers. */
  getJson(agentId: string, scope: { accountId: string }): Promise<string>;
}

export interface PollOptions {
  basePath: string;
  /** Token buckets per API key, or null when rate limiting is off. */
  buckets: TokenBuckets | null;
  /** The limit on failed authentication per client address, or null when it is off. */
  guard: FailedAuthGuard | null;
  onError: (error: unknown, context: { request_id: string }) => void;
}

/** Answers the poll route; resolves to null for any other path. */
export type PollResponder = (
  pathname: string,
  header: (name: string) => string | null,
  /** The client's address (see client-address.ts). @default 'unknown' */
  address?: string,
) => Promise<PlainResponse | null>;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const SANE_REQUEST_ID = /^[A-Za-z0-9._:/+=@-]{1,128}$/;

/** The request id a response carries: the caller's `x-request-id` when it is sane, else a fresh one. */
export function requestIdOf(incoming: string | null): string {
  return incoming !== null && SANE_REQUEST_ID.test(incoming) ? incoming : newRequestId();
}

/** The agent id of a path segment; malformed ids are refused like unknown ones, so 404 says nothing of what exists. */
export function agentIdOf(segment: string): string {
  let id: string;
  try {
    id = decodeURIComponent(segment);
  } catch {
    id = segment;
  }
  if (!UUID.test(id)) throw new AgentryError('not_found', `Agent ${JSON.stringify(id.slice(0, 100))} was not found`);
  return id.toLowerCase();
}

/**
 * The caller's account, or a 429 when its key's bucket is empty or its address failed to authenticate too often
 * (auth-guard.ts). Unknown keys throw (401) before any key bucket is touched, so a flood of bad keys cannot fill the
 * bucket table; they take from their address's bucket instead, one per address.
 */
/** The rate-limit bucket of an account: the API, its polls and the console all draw on it. */
export const accountBucket = (accountId: string) => `account:${accountId}`;

export async function authenticate(
  source: Pick<PollSource, 'authenticate'>,
  buckets: TokenBuckets | null,
  key: string | null,
  requestId: string,
  guard: FailedAuthGuard | null = null,
  address: string = UNKNOWN_ADDRESS,
): Promise<KeyAuthentication | PlainResponse> {
  const refusal = guard ? guard.refusal(address, key) : 0;
  if (refusal > 0) {
    return plainError(
      'rate_limited',
      `Too many failed authentications from this address; retry after ${refusal} s`,
      requestId,
      { headers: { 'retry-after': String(refusal) } },
    );
  }
  let authenticated: KeyAuthentication;
  try {
    authenticated = await source.authenticate(key);
  } catch (error) {
    if (guard && isAuthFailure(error)) guard.failed(address);
    throw error;
  }
  const { account, keyHash } = authenticated;
  guard?.succeeded(keyHash);
  if (buckets) {
    // One bucket per account, whatever key it comes with: 30 keys get the burst of one, so minting keys cannot multiply
    // the limit.
    const retryAfter = buckets.take(accountBucket(account.account_id));
    if (retryAfter > 0) {
      return plainError('rate_limited', `Too many requests for this account; retry after ${retryAfter} s`, requestId, {
        headers: { 'retry-after': String(retryAfter) },
      });
    }
  }
  return { account, keyHash };
}

export function createPollResponder(source: PollSource, o: PollOptions): PollResponder {
  const prefix = `${o.basePath}/api/agents/`;
  return async (pathname, header, address) => {
    if (!pathname.startsWith(prefix)) return null;
    let segment = pathname.slice(prefix.length);
    if (segment.endsWith('/')) segment = segment.slice(0, -1); // one trailing slash is forgiven, as by the router
    if (segment === '' || segment.includes('/')) return null;
    const requestId = requestIdOf(header('x-request-id'));
    let response: PlainResponse;
    try {
      source.begin?.();
      const auth = await authenticate(source, o.buckets, header('x-api-key'), requestId, o.guard, address);
      if ('status' in auth) response = auth;
      else {
        const json = await source.getJson(agentIdOf(segment), { accountId: auth.account.account_id });
        response = plainJson(200, json);
      }
    } catch (error) {
      response = plainForError(error, requestId, o.onError);
    }
    response.headers['x-request-id'] = requestId;
    return response;
  };
}
