/**
 * `agentry serve` serves the console by default (through its HTTP thread, over SQLite), prints its URL, and
 * `--no-console` turns it off.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliEnv, eventually, startServe, tempDir, type ServeProcess } from '../http/helpers.js';

let tmp: ReturnType<typeof tempDir>;
let env: NodeJS.ProcessEnv;
beforeAll(() => {
  tmp = tempDir('agentry-console-serve-');
  env = cliEnv({ ANTHROPIC_API_KEY: 'unused', ANTHROPIC_BASE_URL: 'http://127.0.0.1:9' });
});
afterAll(() => tmp.remove());

describe('agentry serve and the console', () => {
  let serve: ServeProcess;
  afterAll(async () => {
    expect(await serve?.stop()).toBe(0);
  });

  it('serves the console by default, prints where, and signs in through the server thread', async () => {
    serve = await startServe(['--db', join(tmp.dir, 'on.db')], env);
    const printed = await eventually(
      async () => /^Console: (http:\/\/\S+\/console) /m.exec(serve.stderr())?.[1],
      'the console URL',
    );
    expect(printed).toBe(`${serve.url}/console`);
    const page = await fetch(`${printed}/agents`, { redirect: 'manual' });
    expect(page.status).toBe(303);
    const signIn = await fetch(`${printed}/api/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', origin: serve.url, 'x-api-key': serve.apiKey! },
      body: '{}',
    });
    expect(signIn.status).toBe(200);
    const cookie = signIn.headers.get('set-cookie')!;
    expect(cookie).toMatch(/HttpOnly; SameSite=Strict/);
    const list = await fetch(`${printed}/api/agents`, { headers: { cookie: cookie.split(';')[0]! } });
    expect(list.status).toBe(200);
    expect(await list.json()).toMatchObject({ data: [], total: 0 });
    // A call with a body and only the session's cookie: the server thread reads its body (the cookie authenticates).
    const named = await fetch(`${printed}/api/keys`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', origin: serve.url, cookie: cookie.split(';')[0]! },
      body: JSON.stringify({ name: 'from the console' }),
    });
    expect(named.status).toBe(201);
  });

  it('does not serve it with --no-console', async () => {
    const off = await startServe(['--db', join(tmp.dir, 'off.db'), '--no-console'], env);
    try {
      expect((await fetch(`${off.url}/console/sign-in`)).status).toBe(404);
      expect(off.stderr()).not.toContain('Console:');
    } finally {
      expect(await off.stop()).toBe(0);
    }
  });
});
