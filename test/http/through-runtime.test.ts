/**
 * What the HTTP layer reads goes through the runtime: API keys through `runtime.accounts.findByKeyHash`, the
 * `Idempotency-Key` results through `runtime.idempotentResult` / `storeIdempotentResult`, and the poll thread's data
 * through `runtime.sharedStorageLocation()`, opened by the storage layer's `openSharedReader`.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentRuntime, hashApiKey, memoryStorage, sqliteStorage } from 'agentry-runtime';
import { scriptedModel } from 'agentry-runtime/testing';
import { openSharedReader } from '../../src/storage/shared-reader.js';
import { tempDir } from './helpers.js';

let tmp: ReturnType<typeof tempDir>;
let runtime: AgentRuntime;

beforeAll(async () => {
  tmp = tempDir('agentry-through-runtime-');
  runtime = await AgentRuntime.open({
    storage: sqliteStorage({ path: join(tmp.dir, 'agentry.db') }),
    model: scriptedModel({ turns: [{ text: 'Done.' }] }),
    builtinTools: false,
  });
});

afterAll(async () => {
  await runtime.close();
  tmp.remove();
});

describe('the runtime answers what the HTTP layer asks', () => {
  it('finds an account by its key hash, active or not, and null for an unknown key', async () => {
    const { account, apiKey } = await runtime.accounts.create({ id: 'through', credits: 1 });
    const found = await runtime.accounts.findByKeyHash(hashApiKey(apiKey!.key));
    expect(found).toMatchObject({ account_id: account.account_id, subscription_active: true });
    await runtime.accounts.unsubscribe(account.account_id);
    expect(await runtime.accounts.findByKeyHash(hashApiKey(apiKey!.key))).toMatchObject({
      subscription_active: false,
    });
    expect(await runtime.accounts.findByKeyHash(hashApiKey('agk_unknown'))).toBeNull();
  });

  it('keeps the first result stored under an Idempotency-Key', async () => {
    expect(await runtime.idempotentResult(runtime.defaultAccountId, 'key-1')).toBeNull();
    const record = {
      account_id: runtime.defaultAccountId,
      key: 'key-1',
      request_hash: 'a'.repeat(64),
      response: '{"agent_id":"first"}',
      status: 201,
      created_at: new Date(0).toISOString(),
    };
    await runtime.storeIdempotentResult(record);
    await runtime.storeIdempotentResult({ ...record, response: '{"agent_id":"second"}' });
    expect(await runtime.idempotentResult(runtime.defaultAccountId, 'key-1')).toEqual(record);
    await expect(runtime.idempotentResult(runtime.defaultAccountId, '')).rejects.toMatchObject({
      code: 'invalid_request',
    });
  });

  it('names where another thread finds its data, which the storage layer opens read-only', async () => {
    const location = runtime.sharedStorageLocation();
    expect(location).toEqual({ kind: 'sqlite', path: join(tmp.dir, 'agentry.db') });
    const { agent_id } = await runtime.create({ goal: 'Say done' });
    const reader = openSharedReader(location!);
    await reader.init();
    try {
      expect((await reader.getAgent(agent_id))?.goal).toBe('Say done');
      expect(typeof reader.changeCounter()).toBe('number');
    } finally {
      await reader.close();
    }
    const inMemory = await AgentRuntime.open({
      storage: memoryStorage(),
      model: scriptedModel({ turns: [{ text: 'Done.' }] }),
      builtinTools: false,
    });
    expect(inMemory.sharedStorageLocation()).toBeNull();
    await inMemory.close();
  });
});
