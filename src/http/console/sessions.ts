/**
 * @module http/console/sessions
 * The console's sign-in sessions: server-side, in memory, one store per runtime (so a restarted HTTP server over the
 * same runtime keeps them; a restarted process signs everyone out). The browser holds only a random session id in an
 * `HttpOnly; SameSite=Strict` cookie; the API key it signed in with is never stored, only which key it was (its hash
 * and id), and every request checks again that this key still exists and its account is still subscribed, so deleting
 * the key or a lapsed subscription ends the session at its next request.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { AgentRuntime } from '../../core/agent-runtime.js';
import { AgentryError } from '../../errors.js';

/** The name of the session cookie. */
export const SESSION_COOKIE = 'agentry_console';

/** A signed-in browser. */
export interface ConsoleSession {
  account_id: string;
  /** SHA-256 of the API key it signed in with: checked on every request. */
  key_hash: string;
  key_id: string;
  /** Milliseconds since the epoch. */
  expires_at: number;
  /** Aborted when the session ends: its event streams close with it. */
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

const hashOf = (sessionId: string) => createHash('sha256').update(sessionId).digest('hex');

/** The sessions of one runtime. */
export class SessionStore {
  /** By the SHA-256 of the cookie's value. */
  private readonly sessions = new Map<string, ConsoleSession>();
  /**
   * Why sessions ended (by the same key), until they would have expired anyway: a browser whose session ended
   * because its key was deleted or the subscription lapsed is told so at every request, not just the first.
   */
  private readonly endings = new Map<string, { error: AgentryError; until: number }>();

  constructor(
    private readonly runtime: AgentRuntime,
    private readonly now: () => number,
  ) {}

  /**
   * Signs in with an API key: `unauthorized` or `subscription_inactive` as the API would answer it. Returns the new
   * session id (the cookie's value, never kept) and the session.
   */
  async signIn(apiKey: string, ttlMs: number): Promise<{ id: string; session: ConsoleSession }> {
    const { account, keyHash } = await this.runtime.accounts.authenticateKey(apiKey);
    const row = (await this.runtime.storage.listApiKeys(account.account_id)).find((k) => k.hash === keyHash);
    if (!row) throw new AgentryError('unauthorized', 'Unknown API key');
    this.sweep();
    const id = randomBytes(32).toString('base64url');
    const session: ConsoleSession = {
      account_id: account.account_id,
      key_hash: keyHash,
      key_id: row.id,
      expires_at: this.now() + ttlMs,
      ended: new AbortController(),
    };
    this.sessions.set(hashOf(id), session);
    return { id, session };
  }

  /**
   * The live session of a cookie value. Throws `unauthorized` (no session, expired, or its key deleted) or
   * `subscription_inactive`; a session found dead is ended, so the next request is told the same.
   */
  async check(sessionId: string | null): Promise<ConsoleSession> {
    if (sessionId === null || sessionId.length > 100)
      throw new AgentryError('unauthorized', 'Sign in to use the console');
    const key = hashOf(sessionId);
    const session = this.sessions.get(key);
    if (!session) throw this.endings.get(key)?.error ?? new AgentryError('unauthorized', 'Sign in to use the console');
    if (session.expires_at <= this.now()) {
      this.end(key, session);
      throw new AgentryError('unauthorized', 'Your session expired: sign in again');
    }
    await this.checkStillAllowed(session, (error) => this.end(key, session, error));
    return session;
  }

  /** Checks again that a session's key exists and its account is subscribed; `onDead` runs before the throw. */
  async checkStillAllowed(
    session: ConsoleSession,
    onDead: (error: AgentryError) => void = (error) => this.endSession(session, error),
  ): Promise<void> {
    const account = await this.runtime.storage.findAccountByKeyHash(session.key_hash);
    const error = !account
      ? keyDeleted()
      : !account.subscription_active
        ? new AgentryError('subscription_inactive', 'The subscription of this account is not active')
        : null;
    if (error) {
      onDead(error);
      throw error;
    }
  }

  /** Signs out the session of this cookie value (nothing when there is none). */
  signOut(sessionId: string | null): void {
    if (sessionId === null) return;
    const key = hashOf(sessionId);
    const session = this.sessions.get(key);
    if (session) this.end(key, session);
  }

  /** Ends every session signed in with this key (the key was deleted). */
  endSessionsOfKey(accountId: string, keyId: string): void {
    for (const [key, s] of this.sessions) {
      if (s.account_id === accountId && s.key_id === keyId) this.end(key, s, keyDeleted());
    }
  }

  private endSession(session: ConsoleSession, error: AgentryError): void {
    for (const [key, s] of this.sessions) if (s === session) this.end(key, s, error);
  }

  private end(key: string, session: ConsoleSession, why?: AgentryError): void {
    this.sessions.delete(key);
    if (why) this.endings.set(key, { error: why, until: session.expires_at });
    session.ended.abort(why ?? new Error('signed out'));
  }

  /** Drops expired sessions, so abandoned ones do not pile up. */
  private sweep(): void {
    const now = this.now();
    for (const [key, s] of this.sessions) if (s.expires_at <= now) this.end(key, s);
    for (const [key, e] of this.endings) if (e.until <= now) this.endings.delete(key);
  }
}

const keyDeleted = () =>
  new AgentryError('unauthorized', 'The API key this session signed in with was deleted: sign in again');

const stores = new WeakMap<AgentRuntime, SessionStore>();

/** The session store of a runtime: one per runtime, shared by every handler built on it. */
export function sessionStoreOf(runtime: AgentRuntime, now: () => number): SessionStore {
  let store = stores.get(runtime);
  if (!store) stores.set(runtime, (store = new SessionStore(runtime, now)));
  return store;
}

/** The value of one cookie in a `Cookie` header, or null. */
export function cookieValue(header: string | null, name: string): string | null {
  if (header === null) return null;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return null;
}
