/**
 * The conformance suite against the examples: the routes mounted on node:http, Express 5, Fastify 5 and Hono, each
 * in-process over its own runtime whose model is the Anthropic provider pointed at a fake Messages API server.
 */
import { afterAll, beforeAll, expect } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { AgentRuntime, anthropicProvider, memoryStorage, sqliteStorage } from 'agentry-runtime';
import { startServer } from 'agentry-runtime/http';
import type { FakeAnthropic } from 'agentry-runtime/testing';
import { start as startExpress } from '../../examples/http-express.js';
import { start as startFastify } from '../../examples/http-fastify.js';
import { start as startHono } from '../../examples/http-hono.js';
import { start as startNode } from '../../examples/http-node.js';
import { describeConformance } from './conformance.js';
import { startGoalDrivenAnthropic } from './helpers.js';

type Started = Awaited<ReturnType<typeof startNode>>;
const RATE_LIMIT = { capacity: 200, refillPerSecond: 100 };

let fake: FakeAnthropic;
beforeAll(async () => {
  fake = await startGoalDrivenAnthropic();
});
afterAll(async () => {
  await fake?.close();
});

/** `startServer` over a SQLite file: polls answered on the server's thread, everything else forwarded. */
const startPollThread: typeof startNode = async (options) => {
  const runtime = options!.runtime!;
  const { account, apiKey } = await runtime.accounts.create({ name: 'poll thread', credits: 100, subscribe: true });
  const server = await startServer(runtime, { ...options!.http, port: 0 });
  expect(server.pollThread).toBe(true);
  return { runtime, url: server.url, apiKey: apiKey!.key, accountId: account.account_id, close: () => server.close() };
};

const mounts: Array<[string, typeof startNode, 'memory' | 'sqlite']> = [
  ['startServer (poll thread, SQLite)', startPollThread, 'sqlite'],
  ['node:http', startNode, 'memory'],
  ['Express 5', startExpress, 'memory'],
  ['Fastify 5', startFastify, 'memory'],
  ['Hono (basePath /v1)', startHono, 'memory'],
];

for (const [name, start, storage] of mounts) {
  let server: Started;
  let dir: string | undefined;
  beforeAll(async () => {
    dir = storage === 'sqlite' ? fs.mkdtempSync(path.join(os.tmpdir(), 'agentry-poll-thread-')) : undefined;
    const runtime = await AgentRuntime.open({
      storage: dir ? sqliteStorage({ path: path.join(dir, 'agentry.db') }) : memoryStorage(),
      model: anthropicProvider({ baseURL: fake.url, apiKey: 'test-key', maxRetries: 0 }),
    });
    server = await start({ runtime, http: { rateLimit: RATE_LIMIT, onError: () => {} } });
  });
  afterAll(async () => {
    await server?.close();
    await server?.runtime.close();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  describeConformance(name, () => ({
    baseUrl: server.url,
    apiKey: server.apiKey,
    rateLimit: RATE_LIMIT,
    admin: {
      addCredits: async (credits) => void (await server.runtime.accounts.addCredits(server.accountId, credits)),
      setSubscription: async (active) =>
        void (active
          ? await server.runtime.accounts.subscribe(server.accountId)
          : await server.runtime.accounts.unsubscribe(server.accountId)),
      createKey: async () => {
        const key = await server.runtime.accounts.createApiKey(server.accountId);
        return { key: key.key, keyId: key.key_id };
      },
      deleteKey: (keyId) => server.runtime.accounts.deleteApiKey(server.accountId, keyId),
      breakCreate: async () => {
        const runtime = server.runtime;
        const original = runtime.create;
        runtime.create = async () => {
          throw new Error('boom: /secret/path.ts:12');
        };
        return async () => {
          runtime.create = original;
        };
      },
    },
  }));
}
