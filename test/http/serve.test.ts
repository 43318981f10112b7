/**
 * The conformance suite against `agentry serve` running as a child process (fresh SQLite database, ephemeral port,
 * the model pointed at a fake Anthropic server in this process). Admin steps go through the CLI, against the same
 * database, while the server runs.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, expect } from 'vitest';
import type { FakeAnthropic } from 'agentry-runtime/testing';
import { describeConformance } from './conformance.js';
import { cliEnv, runCli, startGoalDrivenAnthropic, startServe, tempDir, type ServeProcess } from './helpers.js';

let fake: FakeAnthropic;
let serve: ServeProcess;
let tmp: ReturnType<typeof tempDir>;
let db: string;
let env: NodeJS.ProcessEnv;

async function cli(args: string[]): Promise<string> {
  const result = await runCli([...args, '--db', db], env);
  expect(result.code, result.stderr).toBe(0);
  return result.stdout;
}

beforeAll(async () => {
  fake = await startGoalDrivenAnthropic();
  tmp = tempDir('agentry-serve-');
  db = join(tmp.dir, 'agentry.db');
  env = cliEnv({ ANTHROPIC_BASE_URL: fake.url, ANTHROPIC_API_KEY: 'test-key' });
  serve = await startServe(['--db', db, '--rate-limit', '200:100'], env);
  expect(serve.apiKey).toMatch(/^agk_/);
});

afterAll(async () => {
  const code = await serve?.stop();
  await fake?.close();
  tmp?.remove();
  expect(code).toBe(0);
});

describeConformance('agentry serve (child process)', () => ({
  baseUrl: serve.url,
  apiKey: serve.apiKey!,
  rateLimit: { capacity: 200 },
  admin: {
    addCredits: async (credits) => void (await cli(['credits', 'add', String(credits)])),
    setSubscription: async (active) => void (await cli(['subscription', active ? 'activate' : 'deactivate'])),
    createKey: async () => {
      const key = JSON.parse(await cli(['keys', 'create', '--json'])) as { key: string; key_id: string };
      return { key: key.key, keyId: key.key_id };
    },
    deleteKey: async (keyId) => void (await cli(['keys', 'delete', keyId])),
    // Another connection holds SQLite's write lock: the server's next write times out and fails unexpectedly.
    breakCreate: async () => {
      const lock = new Database(db);
      lock.exec('BEGIN EXCLUSIVE');
      return async () => {
        lock.exec('ROLLBACK');
        lock.close();
      };
    },
  },
}));
