/**
 * The console over plain HTTP (no browser): every page, call and stream needs a session; sessions are HttpOnly,
 * SameSite=Strict cookies that sign-out, key deletion and a lapsed subscription end; unsafe methods need the console's
 * own Origin; another account's agent, artifact, children and stream are 404; the full key is shown once; the CSP
 * allows no inline script or style; an embedding app can sign users in itself.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentRuntime, memoryStorage } from 'agentry-runtime';
import { createFetchHandler } from 'agentry-runtime/http';
import { scriptedModel } from 'agentry-runtime/testing';
import { eventually, insertTree, openConsoleBed, signIn, type ConsoleBed } from './support.js';

let bed: ConsoleBed;
beforeAll(async () => {
  bed = await openConsoleBed();
});
afterAll(async () => {
  await bed.close();
});

const get = (path: string, cookie?: string, headers: Record<string, string> = {}) =>
  fetch(`${bed.origin}/console${path}`, { headers: { ...(cookie ? { cookie } : {}), ...headers }, redirect: 'manual' });
const send = (
  method: string,
  path: string,
  cookie: string | null,
  body?: unknown,
  origin: string | null = bed.origin,
) =>
  fetch(`${bed.origin}/console${path}`, {
    method,
    redirect: 'manual',
    headers: {
      ...(cookie ? { cookie } : {}),
      ...(origin ? { origin } : {}),
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });

describe('console without a session', () => {
  it('sends every page but sign-in to sign-in, and refuses every call and stream with 401', async () => {
    const agent = await bed.runtime.create({ goal: 'done at once', accountId: bed.a.id });
    for (const page of ['', '/', '/agents', '/settings', `/agents/${agent.agent_id}`]) {
      const response = await get(page);
      expect(response.status, page).toBe(303);
      expect(response.headers.get('location')).toBe('/console/sign-in');
      expect(await response.text()).toBe('');
    }
    expect((await get('/sign-in')).status).toBe(200);
    const calls = [
      'session',
      'keys',
      'credits',
      'models',
      'agents',
      `agents/${agent.agent_id}`,
      `agents/${agent.agent_id}/children`,
      `agents/${agent.agent_id}/events`,
    ];
    for (const call of calls) {
      const response = await get(`/api/${call}`);
      expect(response.status, call).toBe(401);
      expect(((await response.json()) as { error: { code: string } }).error.code).toBe('unauthorized');
    }
    for (const [method, path] of [
      ['POST', '/api/agents'],
      ['POST', `/api/agents/${agent.agent_id}/pause`],
      ['DELETE', `/api/agents/${agent.agent_id}`],
      ['POST', '/api/keys'],
    ] as const) {
      expect((await send(method, path, null, method === 'POST' ? {} : undefined)).status, path).toBe(401);
    }
    // A made-up cookie is no session either.
    expect((await get('/api/agents', 'agentry_console=forged')).status).toBe(401);
  });

  it('serves its static files to anyone, with the CSP on every answer (no unsafe-inline)', async () => {
    for (const path of ['/assets/app.js', '/assets/style.css', '/sign-in', '/api/agents']) {
      const csp = (await get(path)).headers.get('content-security-policy') ?? '';
      expect(csp, path).toContain("script-src 'self'");
      expect(csp).toContain("style-src 'self'");
      expect(csp).not.toContain('unsafe-inline');
      expect(csp).not.toContain('unsafe-eval');
    }
    expect((await get('/assets/app.js')).headers.get('content-type')).toMatch(/^text\/javascript/);
    expect((await get('/assets/../package.json')).status).toBe(404);
    expect((await get('/assets/index.html')).status).toBe(404);
    expect((await get('/nope')).status).toBe(404);
  });
});

describe('sessions', () => {
  it('signs in with an API key into an HttpOnly, SameSite=Strict cookie that holds no key', async () => {
    const response = await send('POST', '/api/session', null, { api_key: bed.a.key });
    expect(response.status).toBe(200);
    const cookie = response.headers.get('set-cookie')!;
    expect(cookie).toMatch(
      /^agentry_console=[A-Za-z0-9_-]{43}; Path=\/console; Max-Age=43200; HttpOnly; SameSite=Strict$/,
    );
    expect(cookie).not.toContain(bed.a.key);
    expect(JSON.stringify(await response.json())).not.toContain(bed.a.key);
    const wrong = await send('POST', '/api/session', null, { api_key: 'agk_not-a-key' });
    expect(wrong.status).toBe(401);
    expect(wrong.headers.get('set-cookie')).toBeNull();
  });

  it('refuses unsafe methods without the console’s own Origin (CSRF), sign-in included', async () => {
    const cookie = await signIn(bed.origin, bed.a.key);
    for (const origin of [null, 'http://evil.example', 'null']) {
      const created = await send('POST', '/api/agents', cookie, { goal: 'csrf' }, origin);
      expect(created.status, String(origin)).toBe(403);
      expect((await send('POST', '/api/session', null, { api_key: bed.a.key }, origin)).status).toBe(403);
      expect((await send('DELETE', '/api/session', cookie, undefined, origin)).status).toBe(403);
    }
    expect((await send('POST', '/api/agents', cookie, { goal: 'same origin' })).status).toBe(201);
  });

  it('ends on sign-out', async () => {
    const cookie = await signIn(bed.origin, bed.a.key);
    expect((await get('/api/session', cookie)).status).toBe(200);
    const out = await send('DELETE', '/api/session', cookie);
    expect(out.headers.get('set-cookie')).toMatch(/^agentry_console=; .*Max-Age=0/);
    expect((await get('/api/session', cookie)).status).toBe(401);
    expect((await get('/agents', cookie)).status).toBe(303);
  });

  it('ends when the key it signed in with is deleted (here or through the runtime), and its stream with it', async () => {
    const { key, key_id } = await bed.runtime.accounts.createApiKey(bed.a.id, { name: 'short-lived' });
    const cookie = await signIn(bed.origin, key);
    const held = await bed.runtime.create({ goal: 'stream me [hold]', accountId: bed.a.id });
    const stream = await get(`/api/agents/${held.agent_id}/events`, cookie);
    expect(stream.status).toBe(200);
    const reader = stream.body!.getReader();
    await reader.read();
    const other = await signIn(bed.origin, bed.a.key);
    const deleted = await send('DELETE', `/api/keys/${key_id}`, other);
    expect(deleted.status).toBe(200);
    // The stream of the ended session closes.
    for (;;) if ((await reader.read()).done) break;
    const after = await get('/api/agents', cookie);
    expect(after.status).toBe(401);
    expect(((await after.json()) as { error: { message: string } }).error.message).toMatch(/deleted/);
    // A session whose key is deleted by another process (the CLI) ends at its next request.
    const k2 = await bed.runtime.accounts.createApiKey(bed.a.id, { name: 'cli-deleted' });
    const c2 = await signIn(bed.origin, k2.key);
    await bed.runtime.accounts.deleteApiKey(bed.a.id, k2.key_id);
    expect((await get('/api/agents', c2)).status).toBe(401);
    await bed.runtime.delete(held.agent_id);
  });

  it('ends when the subscription lapses, saying why', async () => {
    const { account, apiKey } = await bed.runtime.accounts.create({ name: 'lapsing', credits: 10 });
    const cookie = await signIn(bed.origin, apiKey!.key);
    await bed.runtime.accounts.unsubscribe(account.account_id);
    const response = await get('/api/agents', cookie);
    expect(response.status).toBe(401);
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe('subscription_inactive');
    expect((await get('/api/agents', cookie)).status).toBe(401);
    // Signing in again is refused with the reason too.
    const again = await send('POST', '/api/session', null, { api_key: apiKey!.key });
    expect(((await again.json()) as { error: { code: string } }).error.code).toBe('subscription_inactive');
  });
});

describe('keys', () => {
  it('shows a new key in full once; lists only its last 4 characters; the key works on the API until deleted', async () => {
    const cookie = await signIn(bed.origin, bed.a.key);
    const created = await send('POST', '/api/keys', cookie, { name: 'ci deploy' });
    expect(created.status).toBe(201);
    const key = (await created.json()) as { key: string; key_id: string; masked: string; name: string };
    expect(key.key).toMatch(/^agk_/);
    expect(key.name).toBe('ci deploy');
    const list = await (await get('/api/keys', cookie)).text();
    expect(list).not.toContain(key.key);
    expect(list).toContain(`agk_…${key.key.slice(-4)}`);
    const lastUsed = async () =>
      (
        (await (await get('/api/keys', cookie)).json()) as {
          data: Array<{ key_id: string; last_used_at: string | null }>;
        }
      ).data.find((k) => k.key_id === key.key_id)!.last_used_at;
    expect(await lastUsed()).toBeNull();
    const api = await fetch(`${bed.origin}/api/agents`, { headers: { 'x-api-key': key.key } });
    expect(api.status).toBe(200);
    await eventually(async () => (await lastUsed()) !== null, 'the key marked as used');
    expect((await send('DELETE', `/api/keys/${key.key_id}`, cookie)).status).toBe(200);
    expect((await fetch(`${bed.origin}/api/agents`, { headers: { 'x-api-key': key.key } })).status).toBe(401);
    // Account B cannot delete A's keys.
    const b = await signIn(bed.origin, bed.b.key);
    const aKeys = (await (await get('/api/keys', cookie)).json()) as { data: Array<{ key_id: string }> };
    expect((await send('DELETE', `/api/keys/${aKeys.data[0]!.key_id}`, b)).status).toBe(404);
  });
});

describe('isolation between accounts', () => {
  it("answers 404 for another account's agent, its artifact, children, controls and stream", async () => {
    const xss = await bed.runtime.create({ goal: 'artifact [xss]', accountId: bed.b.id });
    await bed.runtime.waitFor(xss.agent_id);
    const { agent } = await bed.runtime.get(xss.agent_id);
    const artifact = agent.artifacts![0]!;
    const cookieB = await signIn(bed.origin, bed.b.key);
    const own = await get(`/api/agents/${xss.agent_id}/artifacts/${artifact.artifact_id}`, cookieB);
    expect(own.status).toBe(200);
    expect(own.headers.get('content-disposition')).toMatch(/^attachment/);
    // The artifact keeps its own sandboxing policy: no script of this origin runs in it, even opened in a tab.
    expect(own.headers.get('content-security-policy')).toBe("default-src 'none'; sandbox");
    const cookieA = await signIn(bed.origin, bed.a.key);
    for (const path of [
      `/api/agents/${xss.agent_id}`,
      `/api/agents/${xss.agent_id}/artifacts/${artifact.artifact_id}`,
      `/api/agents/${xss.agent_id}/children`,
      `/api/agents/${xss.agent_id}/events`,
    ]) {
      expect((await get(path, cookieA)).status, path).toBe(404);
    }
    expect((await send('POST', `/api/agents/${xss.agent_id}/pause`, cookieA)).status).toBe(404);
    expect((await send('DELETE', `/api/agents/${xss.agent_id}`, cookieA)).status).toBe(404);
    const listA = await (await get('/api/agents?limit=200', cookieA)).text();
    expect(listA).not.toContain(xss.agent_id);
    expect((await bed.runtime.get(xss.agent_id)).agent.agent_id).toBe(xss.agent_id);
  });
});

describe('agents and children', () => {
  it('pages, filters and searches agents and children on the server', async () => {
    const cookie = await signIn(bed.origin, bed.a.key);
    const parent = await insertTree(bed.runtime, bed.a.id, 250);
    const page = (await (await get(`/api/agents/${parent}/children?offset=100&limit=50`, cookie)).json()) as {
      data: Array<{ goal: string }>;
      total: number;
    };
    expect(page.total).toBe(250);
    expect(page.data.map((c) => c.goal)[0]).toBe('Child task number 101: check item 101');
    const found = (await (await get(`/api/agents/${parent}/children?q=number%20187:`, cookie)).json()) as {
      data: Array<{ goal: string }>;
      total: number;
    };
    expect(found.total).toBe(1);
    expect(found.data[0]!.goal).toContain('number 187:');
    const roots = (await (await get('/api/agents?q=Check%2010,000&status=PAUSED', cookie)).json()) as { total: number };
    expect(roots.total).toBeGreaterThanOrEqual(1);
    expect((await get('/api/agents?limit=100000', cookie)).status).toBe(400);
    await bed.runtime.delete(parent);
  });

  it('creates, pauses, resumes and deletes through the console API', async () => {
    const cookie = await signIn(bed.origin, bed.a.key);
    const created = (await (await send('POST', '/api/agents', cookie, { goal: 'api [hold]' })).json()) as {
      agent_id: string;
    };
    const control = async (action: string) =>
      (
        (await (await send('POST', `/api/agents/${created.agent_id}/${action}`, cookie)).json()) as {
          agent: { status: string };
        }
      ).agent.status;
    expect(await control('pause')).toBe('PAUSED');
    expect(await control('resume')).toBe('ACTIVE');
    expect((await send('DELETE', `/api/agents/${created.agent_id}`, cookie)).status).toBe(200);
    expect((await get(`/api/agents/${created.agent_id}`, cookie)).status).toBe(404);
  });
});

describe('console options', () => {
  it('is off unless asked for', async () => {
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model: scriptedModel({ turns: [{ text: 'x' }] }),
    });
    const handle = createFetchHandler(runtime);
    expect((await handle(new Request('http://x/console/agents'))).status).toBe(404);
    await runtime.close();
  });

  it("lets an embedding app sign users in itself (authenticate), with no sign-in or sign-out of the console's", async () => {
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model: scriptedModel({ turns: [{ text: 'x' }] }),
    });
    const { account } = await runtime.accounts.create({ name: 'embedded', credits: 5 });
    const handle = createFetchHandler(runtime, {
      console: { authenticate: (request) => (request.headers.get('x-app-user') === 'ann' ? account.account_id : null) },
    });
    const ann = { 'x-app-user': 'ann' };
    expect((await handle(new Request('http://x/console/agents', { headers: ann }))).status).toBe(200);
    expect((await handle(new Request('http://x/console/agents'))).status).toBe(401);
    const session = await handle(new Request('http://x/console/api/session', { headers: ann }));
    expect(await session.json()).toMatchObject({ account: { account_id: account.account_id }, sign_out: false });
    const signInAttempt = await handle(
      new Request('http://x/console/api/session', {
        method: 'POST',
        headers: { origin: 'http://x', 'content-type': 'application/json' },
        body: JSON.stringify({ api_key: 'agk_x' }),
      }),
    );
    expect(signInAttempt.status).toBe(400);
    await runtime.accounts.unsubscribe(account.account_id);
    const lapsed = await handle(new Request('http://x/console/api/agents', { headers: ann }));
    expect(((await lapsed.json()) as { error: { code: string } }).error.code).toBe('subscription_inactive');
    await runtime.close();
  });

  it("draws on the rate limit of the key its session came from: no way around the API's limit", async () => {
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model: scriptedModel({ turns: [{ text: 'x' }] }),
    });
    const { apiKey } = await runtime.accounts.create({ name: 'limited', credits: 5 });
    const handle = createFetchHandler(runtime, { console: true, rateLimit: { capacity: 3, refillPerSecond: 0.001 } });
    const signedIn = await handle(
      new Request('http://x/console/api/session', {
        method: 'POST',
        headers: { origin: 'http://x', 'content-type': 'application/json' },
        body: JSON.stringify({ api_key: apiKey!.key }),
      }),
    );
    const cookie = signedIn.headers.get('set-cookie')!.split(';')[0]!;
    const consoleCall = () => handle(new Request('http://x/console/api/agents', { headers: { cookie } }));
    expect((await consoleCall()).status).toBe(200);
    expect((await consoleCall()).status).toBe(200);
    const api = await handle(new Request('http://x/api/agents', { headers: { 'x-api-key': apiKey!.key } }));
    expect(api.status).toBe(200);
    const limited = await consoleCall();
    expect(limited.status).toBe(429);
    expect(limited.headers.get('retry-after')).toMatch(/^[1-9]\d*$/);
    expect((await handle(new Request('http://x/api/agents', { headers: { 'x-api-key': apiKey!.key } }))).status).toBe(
      429,
    );
    await runtime.close();
  });

  it('refuses bad console options at once', async () => {
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model: scriptedModel({ turns: [{ text: 'x' }] }),
    });
    expect(() => createFetchHandler(runtime, { console: { sessionTtlSeconds: -1 } })).toThrow(/sessionTtlSeconds/);
    expect(() => createFetchHandler(runtime, { console: 'yes' as never })).toThrow(/console/);
    await runtime.close();
  });
});
