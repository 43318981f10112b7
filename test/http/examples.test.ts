/**
 * The HTTP examples as programs: each starts on its own (PORT=0), prints its URL and API key, and serves the app's
 * own routes next to agentry's. Paths that are not agentry's reach the host framework (Express/Fastify/Hono) or get
 * agentry's 404 (plain node:http).
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cliEnv, ROOT } from './helpers.js';

function runExample(file: string): Promise<{ url: string; apiKey: string; stop(): void }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'examples', file)], {
      cwd: ROOT,
      env: cliEnv({ PORT: '0' }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${file} did not start\n${out}\n${err}`));
    }, 30_000);
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString();
      const url = /^Listening on (\S+)$/m.exec(out)?.[1];
      const apiKey = /^API key: (\S+)$/m.exec(out)?.[1];
      if (url && apiKey) {
        clearTimeout(timer);
        resolve({ url, apiKey, stop: () => child.kill('SIGTERM') });
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${file} exited with ${code}\n${out}\n${err}`));
    });
  });
}

describe('HTTP examples', () => {
  it.each([
    ['http-node.ts', null],
    ['http-server.ts', null],
    ['http-express.ts', 'Not one of this app'],
    ['http-fastify.ts', '"statusCode":404'],
    ['http-hono.ts', '404 Not Found'],
  ])('%s runs on its own and shares the server with the app', async (file, foreign404) => {
    const example = await runExample(file);
    try {
      const list = await fetch(`${example.url}/api/agents`, { headers: { 'x-api-key': example.apiKey } });
      expect(list.status).toBe(200);
      expect(await list.json()).toEqual({ data: [], has_more: false, next_cursor: null });
      const origin = new URL(example.url).origin;
      const elsewhere = await fetch(`${origin}/not-agentry`);
      expect(elsewhere.status).toBe(404);
      const text = await elsewhere.text();
      if (foreign404 === null) expect(JSON.parse(text).error.code).toBe('not_found');
      else expect(text).toContain(foreign404);
      if (foreign404 !== null) expect(await (await fetch(`${origin}/health`)).json()).toEqual({ ok: true });
    } finally {
      example.stop();
    }
  });
});
