/**
 * API keys at rest: the SQLite files (database, WAL) never contain a full key, only its SHA-256 and last 4
 * characters; listing shows the masked form; a key works until it is deleted, and not a moment after.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentRuntime, hashApiKey, sqliteStorage, API_KEY_PREFIX } from 'agentry-runtime';
import { createNodeHandler } from 'agentry-runtime/http';
import { scriptedModel } from 'agentry-runtime/testing';
import { call, expectError } from './conformance.js';
import { runCli, cliEnv, tempDir } from './helpers.js';

let tmp: ReturnType<typeof tempDir>;
let runtime: AgentRuntime;
let server: Server;
let base: string;
const fullKeys: string[] = [];
let accountId: string;

/** Every byte of every file of the database (main file, -wal, -shm). */
function databaseBytes(): Buffer {
  return Buffer.concat(readdirSync(tmp.dir).map((f) => readFileSync(join(tmp.dir, f))));
}

beforeAll(async () => {
  tmp = tempDir('agentry-keys-');
  runtime = await AgentRuntime.open({
    storage: sqliteStorage({ path: join(tmp.dir, 'agentry.db') }),
    model: scriptedModel({ turns: [{ text: 'Done.' }] }),
  });
  const created = await runtime.accounts.create({ id: 'serve', name: 'keys test', credits: 10 });
  accountId = created.account.account_id;
  fullKeys.push(created.apiKey!.key);
  for (const name of ['ci', 'laptop', 'spare'])
    fullKeys.push((await runtime.accounts.createApiKey(accountId, { name })).key);
  server = createServer(createNodeHandler(runtime, { rateLimit: false }));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve));
  await runtime?.close();
  tmp?.remove();
});

describe('API keys', () => {
  it('are random, prefixed, and each one works', async () => {
    expect(new Set(fullKeys).size).toBe(fullKeys.length);
    for (const key of fullKeys) {
      expect(key.startsWith(API_KEY_PREFIX)).toBe(true);
      expect(key.length).toBeGreaterThanOrEqual(40);
      expect((await call(base, key, 'POST', '/api/agents', { json: { goal: 'Say done' } })).status).toBe(201);
    }
  });

  it('the SQLite files never contain a full key (nor its secret part), only hashes', async () => {
    const check = () => {
      const bytes = databaseBytes();
      for (const key of fullKeys) {
        expect(bytes.includes(Buffer.from(key))).toBe(false);
        expect(bytes.includes(Buffer.from(key.slice(API_KEY_PREFIX.length, -4)))).toBe(false);
        expect(bytes.includes(Buffer.from(key.slice(-12)))).toBe(false);
      }
      return bytes;
    };
    const bytes = check(); // while the runtime has the database open (WAL not yet checkpointed)
    for (const key of fullKeys) expect(bytes.includes(Buffer.from(hashApiKey(key)))).toBe(true);
  });

  it('listing shows only the last 4 characters', async () => {
    const keys = await runtime.accounts.listApiKeys(accountId);
    expect(keys).toHaveLength(fullKeys.length);
    for (const info of keys) {
      const full = fullKeys.find((k) => k.endsWith(info.last4))!;
      expect(full).toBeDefined();
      expect(info.last4).toHaveLength(4);
      expect(info.masked).toBe(`${API_KEY_PREFIX}…${info.last4}`);
      expect(JSON.stringify(info)).not.toContain(full.slice(API_KEY_PREFIX.length, -4));
      expect(Object.keys(info).sort()).toEqual(['created_at', 'key_id', 'last4', 'masked', 'name']);
    }
    // The CLI lists the same masked forms (read from the same database by another process).
    const out = await runCli(['keys', 'list', '--db', join(tmp.dir, 'agentry.db')], cliEnv());
    expect(out.code, out.stderr).toBe(0);
    for (const key of fullKeys) {
      expect(out.stdout).toContain(`${API_KEY_PREFIX}…${key.slice(-4)}`);
      expect(out.stdout).not.toContain(key.slice(API_KEY_PREFIX.length, -4));
    }
  });

  it('a deleted key is refused at once; the others keep working', async () => {
    const [victim] = await runtime.accounts.listApiKeys(accountId);
    const key = fullKeys.find((k) => k.endsWith(victim!.last4))!;
    expect((await call(base, key, 'GET', '/api/agents')).status).toBe(200);
    await runtime.accounts.deleteApiKey(accountId, victim!.key_id);
    expectError(await call(base, key, 'GET', '/api/agents'), 401, 'unauthorized');
    for (const other of fullKeys.filter((k) => k !== key))
      expect((await call(base, other, 'GET', '/api/agents')).status).toBe(200);
  });

  it('after close, the database files still hold no full key', async () => {
    await runtime.close();
    const bytes = databaseBytes();
    for (const key of fullKeys) expect(bytes.includes(Buffer.from(key))).toBe(false);
  });
});
