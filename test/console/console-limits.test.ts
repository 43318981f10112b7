/**
 * The console is no way around the API's limits.
 * - keys: rate limits are per account (30 keys get the burst of one); the console mints keys only under a cap, and
 *   each mint and delete writes an audit entry;
 * - sign-in: wrong keys and guessed session cookies share the API's per-address failed-authentication limit (429
 *   within 50 failures); working sign-ins have a limit of their own, and an account keeps at most 20 live sessions;
 * - streams: console event streams count in the API's registry (the 17th of a key is 429) and are re-checked every
 *   second (closed within 2 s of their key's deletion);
 * - cookies: `Secure` and `__Host-` over TLS (or behind a trusted proxy that says so); two session cookies refused.
 * The router is called directly with `Request`s (no socket): every request has the same unknown address.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AgentRuntime, memoryStorage } from 'agentry-runtime';
import { createFetchHandler } from 'agentry-runtime/http';
import { scriptedModel } from 'agentry-runtime/testing';
import type { AuditEntry } from '../../src/http/audit.js';
import { MAX_CONSOLE_KEYS } from '../../src/http/console/api.js';
import { MAX_SESSIONS_PER_ACCOUNT } from '../../src/http/console/sessions.js';

const ORIGIN = 'http://console.test';
let runtime: AgentRuntime;
let account = { id: '', key: '' };

beforeEach(async () => {
  runtime = await AgentRuntime.open({
    storage: memoryStorage(),
    model: scriptedModel({ turns: () => ({ text: 'holding', delayMs: 3_600_000 }) }),
    closeTimeoutMs: 50,
  });
  const created = await runtime.accounts.create({ name: 'limits', credits: 1_000 });
  account = { id: created.account.account_id, key: created.apiKey!.key };
});

afterEach(async () => {
  for (const agent of (await runtime.list({ limit: 1000 })).data) await runtime.delete(agent.agent_id).catch(() => {});
  await runtime.close();
});

type Handler = ReturnType<typeof createFetchHandler>;

function request(path: string, init: RequestInit & { origin?: string } = {}): Request {
  const origin = init.origin ?? ORIGIN;
  const headers = new Headers(init.headers);
  if (init.method && init.method !== 'GET') headers.set('origin', origin);
  return new Request(`${origin}${path}`, { ...init, headers });
}

async function signIn(handle: Handler, key: string, origin = ORIGIN): Promise<Response> {
  return handle(request('/console/api/session', { method: 'POST', headers: { 'x-api-key': key }, origin }));
}

const cookieOf = (response: Response) => response.headers.get('set-cookie')!.split(';')[0]!;

describe('API keys and rate limits', () => {
  it('30 keys of one account share one burst, on the API and in the console', async () => {
    const handle = createFetchHandler(runtime, {
      console: true,
      rateLimit: { capacity: 10, refillPerSecond: 0.001 },
    });
    const keys = [account.key];
    for (let i = 1; i < 30; i++) keys.push((await runtime.accounts.createApiKey(account.id, { name: `k${i}` })).key);
    const statuses: number[] = [];
    for (const key of keys) {
      statuses.push((await handle(request('/api/agents', { headers: { 'x-api-key': key } }))).status);
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(10);
    expect(statuses.filter((s) => s === 429)).toHaveLength(20);
    // The console draws on the same empty bucket.
    const cookie = cookieOf(await signIn(handle, keys[5]!));
    expect((await handle(request('/console/api/agents', { headers: { cookie } }))).status).toBe(429);
  });

  it('the console mints keys only under the cap, and audits each mint and delete', async () => {
    const audit: AuditEntry[] = [];
    const handle = createFetchHandler(runtime, { console: true, rateLimit: false, audit: (e) => audit.push(e) });
    const cookie = cookieOf(await signIn(handle, account.key));
    const mint = () =>
      handle(
        request('/console/api/keys', {
          method: 'POST',
          headers: { cookie, 'content-type': 'application/json' },
          body: JSON.stringify({ name: 'minted' }),
        }),
      );
    const statuses: number[] = [];
    for (let i = 0; i < 30; i++) statuses.push((await mint()).status);
    expect(statuses.filter((s) => s === 201)).toHaveLength(MAX_CONSOLE_KEYS - 1); // the account had one key
    expect(statuses.slice(MAX_CONSOLE_KEYS - 1).every((s) => s === 409)).toBe(true);
    expect(await runtime.accounts.listApiKeys(account.id)).toHaveLength(MAX_CONSOLE_KEYS);
    const minted = audit.filter((e) => e.event === 'console.key_created');
    expect(minted).toHaveLength(MAX_CONSOLE_KEYS - 1);
    expect(minted[0]).toMatchObject({ account_id: account.id, by_key_id: expect.stringMatching(/^key_/) });
    expect(JSON.stringify(audit)).not.toContain('ak_');
    const victim = minted[0]!.key_id;
    const deleted = await handle(request(`/console/api/keys/${victim}`, { method: 'DELETE', headers: { cookie } }));
    expect(deleted.status).toBe(200);
    expect(audit.at(-1)).toMatchObject({ event: 'console.key_deleted', key_id: victim });
    expect((await mint()).status).toBe(201);
  });
});

describe('sign-in and session cookies', () => {
  it('wrong keys at sign-in hit the failed-authentication limit: a 429 within 50 failures', async () => {
    const handle = createFetchHandler(runtime, { console: true });
    expect((await signIn(handle, account.key)).status).toBe(200); // a key seen working
    const statuses: number[] = [];
    for (let i = 0; i < 50; i++) statuses.push((await signIn(handle, `ak_wrong${i}`)).status);
    expect(statuses).toContain(429);
    expect(statuses.indexOf(429)).toBeLessThanOrEqual(31);
    // The limit is the API's: the same address's wrong API keys are refused too; a key seen working is not.
    expect((await handle(request('/api/agents', { headers: { 'x-api-key': 'ak_nope' } }))).status).toBe(429);
    expect((await signIn(handle, account.key)).status).toBe(200);
  });

  it('guessed session cookies hit the same limit', async () => {
    const handle = createFetchHandler(runtime, { console: true });
    const statuses: number[] = [];
    for (let i = 0; i < 50; i++) {
      const cookie = `agentry_console=guess${i}${'x'.repeat(30)}`;
      statuses.push((await handle(request('/console/api/session', { headers: { cookie } }))).status);
    }
    expect(statuses.slice(0, 30).every((s) => s === 401)).toBe(true);
    expect(statuses).toContain(429);
    expect((await handle(request('/api/agents', { headers: { 'x-api-key': 'ak_nope' } }))).status).toBe(429);
  });

  it('a flood of working sign-ins is rate limited, and an account keeps at most 20 live sessions', async () => {
    const handle = createFetchHandler(runtime, { console: true, rateLimit: false });
    const statuses: number[] = [];
    for (let i = 0; i < 200; i++) statuses.push((await signIn(handle, account.key)).status);
    expect(statuses.slice(0, 10).every((s) => s === 200)).toBe(true);
    expect(statuses.filter((s) => s === 200).length).toBeLessThanOrEqual(12);
    expect(statuses.at(-1)).toBe(429);
    const live = await runtime.storage.listLiveConsoleSessions(account.id, new Date().toISOString());
    expect(live.length).toBeLessThanOrEqual(MAX_SESSIONS_PER_ACCOUNT);

    // With a generous limit, the 21st sign-in ends the first session.
    const roomy = createFetchHandler(runtime, {
      console: { signInLimit: { capacity: 100, refillPerSecond: 1 } },
      rateLimit: false,
    });
    const cookies: string[] = [];
    for (let i = 0; i < MAX_SESSIONS_PER_ACCOUNT + 1; i++) cookies.push(cookieOf(await signIn(roomy, account.key)));
    const first = await roomy(request('/console/api/session', { headers: { cookie: cookies[0]! } }));
    expect(first.status).toBe(401);
    expect(((await first.json()) as { error: { message: string } }).error.message).toMatch(/too many times/);
    const last = await roomy(request('/console/api/session', { headers: { cookie: cookies.at(-1)! } }));
    expect(last.status).toBe(200);
    expect(await runtime.storage.listLiveConsoleSessions(account.id, new Date().toISOString())).toHaveLength(
      MAX_SESSIONS_PER_ACCOUNT,
    );
  });
});

describe('console event streams', () => {
  it("count in the API's registry: the 17th stream of a key is 429", async () => {
    const handle = createFetchHandler(runtime, { console: true, rateLimit: false });
    const agent = await runtime.create({ goal: 'stream me', accountId: account.id });
    const cookie = cookieOf(await signIn(handle, account.key));
    const open: Response[] = [];
    const controllers: AbortController[] = [];
    for (let i = 0; i < 16; i++) {
      const c = new AbortController();
      controllers.push(c);
      const r = await handle(
        request(`/console/api/agents/${agent.agent_id}/events`, { headers: { cookie }, signal: c.signal }),
      );
      expect(r.status).toBe(200);
      open.push(r);
    }
    const extra = await handle(request(`/console/api/agents/${agent.agent_id}/events`, { headers: { cookie } }));
    expect(extra.status).toBe(429);
    // The API's streams of the same key count against the same cap.
    const api = await handle(
      request(`/api/agents/${agent.agent_id}/events`, { headers: { 'x-api-key': account.key } }),
    );
    expect(api.status).toBe(429);
    for (const r of open) await r.body?.cancel();
    for (const c of controllers) c.abort();
  });

  it("close within 2 s of their key's deletion elsewhere", async () => {
    const handle = createFetchHandler(runtime, { console: true, rateLimit: false });
    const agent = await runtime.create({ goal: 'stream me', accountId: account.id });
    const { key, key_id } = await runtime.accounts.createApiKey(account.id, { name: 'short-lived' });
    const cookie = cookieOf(await signIn(handle, key));
    const stream = await handle(request(`/console/api/agents/${agent.agent_id}/events`, { headers: { cookie } }));
    expect(stream.status).toBe(200);
    const reader = stream.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    const ended = (async () => {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return performance.now();
        text += decoder.decode(value);
      }
    })();
    const deletedAt = performance.now();
    await runtime.accounts.deleteApiKey(account.id, key_id); // through the runtime: no console call to hear of it
    const closedAt = await ended;
    expect(closedAt - deletedAt).toBeLessThanOrEqual(2_000);
    expect(text).toMatch(/event: closed/);
  });
});

describe('session cookies', () => {
  it('are Secure and __Host- prefixed over TLS, scoped to the console over plain HTTP', async () => {
    const handle = createFetchHandler(runtime, { console: true, rateLimit: false });
    const tls = (await signIn(handle, account.key, 'https://console.test')).headers.get('set-cookie')!;
    expect(tls).toMatch(/^__Host-agentry_console=[^;]+; Path=\/; Max-Age=\d+; HttpOnly; SameSite=Strict; Secure$/);
    const plain = (await signIn(handle, account.key)).headers.get('set-cookie')!;
    expect(plain).toMatch(/^agentry_console=[^;]+; Path=\/console; Max-Age=\d+; HttpOnly; SameSite=Strict$/);
    // The TLS cookie works over TLS.
    const cookie = tls.split(';')[0]!;
    const me = await handle(request('/console/api/session', { headers: { cookie }, origin: 'https://console.test' }));
    expect(me.status).toBe(200);
  });

  it('are Secure behind a TLS-terminating proxy only with trustProxy', async () => {
    const forwarded = { 'x-api-key': account.key, 'x-forwarded-proto': 'https' };
    const post = (h: Handler) => h(request('/console/api/session', { method: 'POST', headers: forwarded }));
    const trusting = createFetchHandler(runtime, { console: { trustProxy: true }, rateLimit: false });
    const behindProxy = (await post(trusting)).headers.get('set-cookie')!;
    expect(behindProxy).toMatch(/^__Host-agentry_console=.*; Secure$/);
    const cookie = behindProxy.split(';')[0]!;
    const me = await trusting(request('/console/api/session', { headers: { cookie, 'x-forwarded-proto': 'https' } }));
    expect(me.status).toBe(200);
    const wary = createFetchHandler(runtime, { console: true, rateLimit: false });
    expect((await post(wary)).headers.get('set-cookie')).not.toMatch(/Secure/);
  });

  it('two session cookies of the same name are refused, even when one is valid', async () => {
    const handle = createFetchHandler(runtime, { console: true, rateLimit: false });
    const mine = cookieOf(await signIn(handle, account.key));
    const other = await runtime.accounts.create({ name: 'planter', credits: 10 });
    const planted = cookieOf(await signIn(handle, other.apiKey!.key));
    for (const cookie of [`${planted}; ${mine}`, `${mine}; ${planted}`]) {
      const r = await handle(request('/console/api/session', { headers: { cookie } }));
      expect(r.status).toBe(401);
      expect(((await r.json()) as { error: { message: string } }).error.message).toMatch(/Two agentry_console/);
      const created = await handle(
        request('/console/api/agents', {
          method: 'POST',
          headers: { cookie, 'content-type': 'application/json' },
          body: JSON.stringify({ goal: 'my secret plan' }),
        }),
      );
      expect(created.status).toBe(401);
    }
    expect((await runtime.list({ accountId: other.account.account_id })).data).toHaveLength(0);
  });
});
