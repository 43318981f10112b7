/**
 * @module http/console/sessions
 * The console's sign-in sessions: server-side rows in the runtime's storage, reached through
 * `runtime.accounts.consoleSessions` (so a restarted server keeps them), of
 * which the browser holds only a random id in an `HttpOnly; SameSite=Strict` cookie and storage only that id's
 * SHA-256. The API key a session was traded for is never stored, only which key it was (its hash and id); every
 * request checks again that this key still exists and its account is still subscribed, so deleting the key or a lapsed
 * subscription ends the session at its next request, and the session remembers why, to say so.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { AgentRuntime } from '../../core/agent-runtime.js';
import { isoTime } from '../../base/clock.js';
import { AgentryError, type ErrorCode } from '../../errors.js';
import type { ConsoleSessionRow } from '../../storage/adapter.js';

/** The name of the session cookie over plain HTTP (scoped to the console's path). */
export const SESSION_COOKIE = 'agentry_console';
/**
 * The name over TLS: `__Host-` makes the browser take it only with `Secure`, `Path=/` and no `Domain`, so a sibling
 * subdomain (or a plain-HTTP page of this host) cannot plant one.
 */
export const SECURE_SESSION_COOKIE = `__Host-${SESSION_COOKIE}`;

/** Live sessions an account may have; a sign-in past it ends the oldest. */
export const MAX_SESSIONS_PER_ACCOUNT = 20;

/** Expired sessions are deleted at most this often (on a sign-in). */
const SWEEP_EVERY_MS = 3600_000;

/** A signed-in browser. */
export interface ConsoleSession {
  row: ConsoleSessionRow;
  /** Aborted when the session ends in this process: its event streams close with it. */
  ended: AbortController;
}

/** Who a console request acts for. */
export interface ConsoleIdentity {
  accountId: string;
  /** The session, or null when the embedding app's `authenticate` answered. */
  session: ConsoleSession | null;
  /** The signal that ends this identity's event streams. */
  signal: AbortSignal;
}

/** What storage keeps of a session id (the cookie's value): its SHA-256. */
export const sessionIdHash = (sessionId: string) => createHash('sha256').update(sessionId).digest('hex');
const hashOf = sessionIdHash;
const signIn = () => new AgentryError('unauthorized', 'Sign in to use the console');
const keyDeleted = () =>
  new AgentryError('unauthorized', 'The API key this session signed in with was deleted: sign in again');

/** The sessions of one runtime, as one process sees them. */
export class SessionStore {
  /** Sessions this process has served, by id hash: their streams end when they do. */
  private readonly live = new Map<string, ConsoleSession>();
  private lastSweep = 0;

  constructor(
    private readonly runtime: AgentRuntime,
    private readonly now: () => number,
  ) {}

  /**
   * Signs in with an API key: `unauthorized` or `subscription_inactive` as the API would answer it. Returns the new
   * session id (the cookie's value, never kept) and the session.
   */
  async signIn(
    apiKey: string,
    ttlMs: number,
    beforeCreate: (accountId: string) => void = () => {},
  ): Promise<{ id: string; session: ConsoleSession }> {
    const { account, keyHash } = await this.runtime.accounts.authenticateKey(apiKey);
    beforeCreate(account.account_id);
    const key = await this.runtime.accounts.apiKeyByHash(account.account_id, keyHash);
    if (!key) throw new AgentryError('unauthorized', 'Unknown API key');
    await this.sweep();
    const id = randomBytes(32).toString('base64url');
    const row: ConsoleSessionRow = {
      id_hash: hashOf(id),
      account_id: account.account_id,
      key_hash: keyHash,
      key_id: key.key_id,
      expires_at: isoTime(this.now() + ttlMs),
      ended: null,
    };
    await this.runtime.accounts.consoleSessions.put(row);
    // The cap: the sessions that expire soonest (the oldest sign-ins) end, so a flood of sign-ins keeps no rows.
    const live = await this.runtime.accounts.consoleSessions.listLive(account.account_id, isoTime(this.now()));
    const over = live
      .filter((s) => s.id_hash !== row.id_hash)
      .slice(0, Math.max(0, live.length - MAX_SESSIONS_PER_ACCOUNT));
    for (const old of over) {
      await this.end(old, new AgentryError('unauthorized', 'Signed out: this account signed in too many times since'));
    }
    return { id, session: this.track(row) };
  }

  /**
   * The live session of a cookie value. Throws `unauthorized` (no session, expired, signed out, its key deleted) or
   * `subscription_inactive`, saying which; a session found dead is ended, so later requests are told the same.
   */
  async check(sessionId: string | null): Promise<ConsoleSession> {
    if (sessionId === null || sessionId.length > 100) throw signIn();
    const row = await this.runtime.accounts.consoleSessions.get(hashOf(sessionId));
    if (!row) throw signIn();
    if (row.ended !== null) {
      this.live.get(row.id_hash)?.ended.abort();
      throw errorOf(row.ended);
    }
    if (row.expires_at <= isoTime(this.now())) {
      this.untrack(row.id_hash);
      throw new AgentryError('unauthorized', 'Your session expired: sign in again');
    }
    const session = this.track(row);
    await this.checkStillAllowed(session);
    return session;
  }

  /** Checks again that a session's key exists and its account is subscribed; ends the session when not. */
  async checkStillAllowed(session: ConsoleSession): Promise<void> {
    const account = await this.runtime.accounts.findByKeyHash(session.row.key_hash);
    const error = !account
      ? keyDeleted()
      : !account.subscription_active
        ? new AgentryError('subscription_inactive', 'The subscription of this account is not active')
        : null;
    if (error) {
      await this.end(session.row, error);
      throw error;
    }
  }

  /** Signs out the session of this cookie value (nothing when there is none). */
  async signOut(sessionId: string | null): Promise<void> {
    if (sessionId === null || sessionId.length > 100) return;
    const row = await this.runtime.accounts.consoleSessions.get(hashOf(sessionId));
    if (row && row.ended === null) await this.end(row, new AgentryError('unauthorized', 'You signed out.'));
  }

  /** Ends the sessions this process serves that signed in with this key (just deleted); others end at their next request. */
  async endSessionsOfKey(accountId: string, keyId: string): Promise<void> {
    for (const s of [...this.live.values()]) {
      if (s.row.account_id === accountId && s.row.key_id === keyId) await this.end(s.row, keyDeleted());
    }
  }

  private async end(row: ConsoleSessionRow, why: AgentryError): Promise<void> {
    await this.runtime.accounts.consoleSessions.put({
      ...row,
      ended: JSON.stringify({ code: why.code, message: why.message }),
    });
    this.untrack(row.id_hash);
  }

  private track(row: ConsoleSessionRow): ConsoleSession {
    let session = this.live.get(row.id_hash);
    if (!session) this.live.set(row.id_hash, (session = { row, ended: new AbortController() }));
    return session;
  }

  private untrack(idHash: string): void {
    const session = this.live.get(idHash);
    this.live.delete(idHash);
    session?.ended.abort(new Error('session ended'));
  }

  /** Drops expired sessions, so abandoned ones do not pile up. */
  private async sweep(): Promise<void> {
    const now = this.now();
    if (now - this.lastSweep < SWEEP_EVERY_MS) return;
    this.lastSweep = now;
    const at = isoTime(now);
    for (const [idHash, s] of this.live) if (s.row.expires_at <= at) this.untrack(idHash);
    await this.runtime.accounts.consoleSessions.deleteExpired(at);
  }
}

/** The error a session ended with, from its stored `{code, message}`. */
function errorOf(ended: string): AgentryError {
  try {
    const { code, message } = JSON.parse(ended) as { code: ErrorCode; message: string };
    if (code === 'unauthorized' || code === 'subscription_inactive') return new AgentryError(code, message);
  } catch {
    // an unreadable reason is still an ended session
  }
  return signIn();
}

const stores = new WeakMap<AgentRuntime, SessionStore>();

/** The session store of a runtime: one per runtime, shared by every handler built on it. */
export function sessionStoreOf(runtime: AgentRuntime, now: () => number): SessionStore {
  let store = stores.get(runtime);
  if (!store) stores.set(runtime, (store = new SessionStore(runtime, now)));
  return store;
}

/** The values of every cookie of this name in a `Cookie` header, in order. */
export function cookieValues(header: string | null, name: string): string[] {
  if (header === null) return [];
  const values: string[] = [];
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) values.push(part.slice(eq + 1).trim());
  }
  return values;
}

/**
 * The value of the one cookie of this name, or null when there is none. Two of the same name are refused: a cookie
 * planted for a wider path or a parent domain arrives beside the real one, and taking either would be a guess
 * (taking the planted one signs the victim into the attacker's account).
 */
export function cookieValue(header: string | null, name: string): string | null {
  const values = cookieValues(header, name);
  if (values.length > 1) {
    throw new AgentryError('unauthorized', `Two ${name} cookies came with this request: sign in again`);
  }
  return values[0] ?? null;
}
