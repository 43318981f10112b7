/**
 * Safe to expose (docs/decisions.md#safe-to-expose-http-event-streams-storage): what a tenant or a local user could
 * reach that they should not.
 * - the SQLite database, its -wal and -shm are owner-only (0600), also when an earlier run left them 0644;
 * - artifact download names lose bidi and other invisible characters (U+202E makes `x\u202Etxt.exe` look like
 *   `xexe.txt`);
 * - an idempotent replay after its agent was deleted answers 404, never 201 with the dead agent;
 * - a deactivated subscription pauses its running agents at their next step, resume is refused until it is active
 *   again, and works after;
 * - `agentry mcp` over stdio checks the account's subscription for every tool, like the HTTP routes.
 */
import { chmodSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { AgentRuntime, defineTool, memoryStorage, sqliteStorage, type Tool } from 'agentry-runtime';
import { createFetchHandler } from 'agentry-runtime/http';
import { scriptedModel } from 'agentry-runtime/testing';
import { contentDisposition } from '../../src/http/artifacts.js';
import { CLI, cliEnv, ROOT, tempDir } from './helpers.js';

let dir: { dir: string; remove(): void };
beforeAll(() => {
  dir = tempDir('agentry-exposed-');
});
afterAll(() => dir.remove());

const modeOf = (path: string) => statSync(path).mode & 0o777;

describe('storage file modes', () => {
  it('creates the database, -wal and -shm 0600', async () => {
    const path = join(dir.dir, 'fresh.db');
    const runtime = await AgentRuntime.open({
      storage: sqliteStorage({ path }),
      model: scriptedModel({ turns: [{ text: 'Done.' }] }),
    });
    try {
      const { account } = await runtime.accounts.create({ credits: 10 });
      const { agent_id } = await runtime.create({ goal: 'x', accountId: account.account_id });
      await runtime.waitFor(agent_id);
      for (const file of [path, `${path}-wal`, `${path}-shm`]) expect([file, modeOf(file)]).toEqual([file, 0o600]);
    } finally {
      await runtime.close();
    }
  });

  it('tightens files an earlier run left readable by others', async () => {
    const path = join(dir.dir, 'old.db');
    const first = await AgentRuntime.open({ storage: sqliteStorage({ path }), scheduler: 'manual' });
    await first.close();
    chmodSync(path, 0o644);
    const again = await AgentRuntime.open({ storage: sqliteStorage({ path }), scheduler: 'manual' });
    try {
      expect(modeOf(path)).toBe(0o600);
      expect(modeOf(`${path}-wal`)).toBe(0o600);
    } finally {
      await again.close();
    }
  });
});

describe('artifact download names', () => {
  it.each([
    ['invoice\u202Egpj.exe', 'invoicegpj.exe'],
    ['a\u2066b\u2069c\u200Fd\u200Ee\u061Cf.txt', 'abcdef.txt'],
    ['zero\u200Bwidth\uFEFF.txt', 'zerowidth.txt'],
    ['line\u2028break\u2029.txt', 'linebreak.txt'],
    ['tab\tnull\u0000c1\u0085.txt', 'tabnullc1.txt'],
  ])('%j is served as %j', (name, shown) => {
    const header = contentDisposition(name);
    expect(header).toBe(`attachment; filename="${shown}"`);
    // Nothing outside printable ASCII reaches the header in any form.
    expect(header).toMatch(/^[\x20-\x7e]+$/);
  });

  it('keeps ordinary non-ASCII letters in filename*', () => {
    expect(contentDisposition('r\u00e9sum\u00e9\u202E.txt')).toBe(
      `attachment; filename="r_sum_.txt"; filename*=UTF-8''r%C3%A9sum%C3%A9.txt`,
    );
  });
});

describe('an idempotent replay after the agent was deleted', () => {
  it('answers 404 and creates nothing; a new key creates anew', async () => {
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model: scriptedModel({ turns: [{ text: 'Done.' }] }),
    });
    try {
      const { account, apiKey } = await runtime.accounts.create({ credits: 10 });
      const handle = createFetchHandler(runtime, { rateLimit: false });
      const create = (key: string) =>
        handle(
          new Request('http://x/api/agents', {
            method: 'POST',
            headers: { 'x-api-key': apiKey!.key, 'content-type': 'application/json', 'idempotency-key': key },
            body: JSON.stringify({ goal: 'Say done' }),
          }),
        );
      const first = await create('k-1');
      expect(first.status).toBe(201);
      const { agent_id } = (await first.json()) as { agent_id: string };
      const replay = await create('k-1');
      expect(replay.status).toBe(201);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');

      await runtime.delete(agent_id, { accountId: account.account_id });
      const afterDelete = await create('k-1');
      expect(afterDelete.status).toBe(404);
      expect(((await afterDelete.json()) as { error: { code: string; message: string } }).error).toMatchObject({
        code: 'not_found',
        message: expect.stringContaining('was deleted') as string,
      });
      expect((await runtime.list({ accountId: account.account_id })).data).toEqual([]);
      expect((await create('k-2')).status).toBe(201);
    } finally {
      await runtime.close();
    }
  });
});

describe('a deactivated subscription', () => {
  it('pauses the running agent at its next step; resume is refused until reactivation, then works', async () => {
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let started!: () => void;
    const toolStarted = new Promise<void>((resolve) => (started = resolve));
    const gate = defineTool({
      name: 'gate',
      description: 'Waits for the test.',
      input: z.object({}),
      idempotent: true,
      async run() {
        started();
        await released;
        return 'open';
      },
    });
    const model = scriptedModel({
      turns: (_request, { turnIndex }) =>
        turnIndex === 0 ? { toolCalls: [{ name: 'gate', input: {} }] } : { text: 'Done.' },
    });
    const runtime = await AgentRuntime.open({ storage: memoryStorage(), model, tools: [gate as Tool] });
    try {
      const { account } = await runtime.accounts.create({ credits: 10 });
      const scope = { accountId: account.account_id };
      const { agent_id } = await runtime.create({ goal: 'Open the gate', ...scope });
      await toolStarted;
      await runtime.accounts.unsubscribe(account.account_id);
      release();
      const paused = await runtime.waitFor(agent_id);
      expect(paused).toMatchObject({ status: 'PAUSED', status_message: 'Paused: subscription inactive' });
      expect(model.callCount).toBe(1); // no model call after the deactivation

      await expect(runtime.resume(agent_id, scope)).rejects.toMatchObject({ code: 'subscription_inactive' });
      await runtime.accounts.subscribe(account.account_id);
      expect((await runtime.resume(agent_id, scope)).status).toBe('ACTIVE');
      expect(await runtime.waitFor(agent_id)).toMatchObject({ status: 'COMPLETED' });
      expect(model.callCount).toBe(2);
    } finally {
      await runtime.close();
    }
  });
});

describe('agentry mcp over stdio', () => {
  it('refuses every tool while the subscription is inactive, and serves them once it is active', async () => {
    const db = join(dir.dir, 'mcp.db');
    const setup = await AgentRuntime.open({
      storage: sqliteStorage({ path: db }),
      model: scriptedModel({ turns: [{ text: 'Done.' }] }),
    });
    const { account } = await setup.accounts.create({ id: 'acme', credits: 10 });
    const { agent_id } = await setup.create({ goal: 'x', accountId: account.account_id });
    await setup.waitFor(agent_id);
    await setup.accounts.unsubscribe('acme');
    await setup.close();

    const connect = async () => {
      const client = new Client({ name: 'test', version: '1' });
      await client.connect(
        new StdioClientTransport({
          command: process.execPath,
          args: ['--import', 'tsx', CLI, 'mcp', '--db', db, '--account', 'acme'],
          cwd: ROOT,
          env: cliEnv({ ANTHROPIC_API_KEY: 'sk-test', ANTHROPIC_BASE_URL: 'http://127.0.0.1:9' }) as Record<
            string,
            string
          >,
          stderr: 'pipe',
        }),
      );
      return client;
    };
    const client = await connect();
    try {
      const calls: Array<[string, Record<string, unknown>]> = [
        ['list_agents', {}],
        ['get_agent', { agent_id }],
        ['pause_agent', { agent_id }],
        ['resume_agent', { agent_id }],
        ['delete_agent', { agent_id }],
        ['create_agent', { goal: 'y' }],
      ];
      for (const [name, args] of calls) {
        const result = (await client.callTool({ name, arguments: args })) as {
          isError?: boolean;
          content: Array<{ text: string }>;
        };
        expect([name, result.isError]).toEqual([name, true]);
        expect(result.content[0]!.text).toMatch(/subscription of this account is not active/);
      }
    } finally {
      await client.close();
    }

    const admin = await AgentRuntime.open({ storage: sqliteStorage({ path: db }), scheduler: 'manual' });
    await admin.accounts.subscribe('acme');
    await admin.close();
    const again = await connect();
    try {
      const got = (await again.callTool({ name: 'get_agent', arguments: { agent_id } })) as unknown as {
        isError?: boolean;
        structuredContent: { agent: { agent_id: string } };
      };
      expect(got.isError).toBeFalsy();
      expect(got.structuredContent.agent.agent_id).toBe(agent_id);
    } finally {
      await again.close();
    }
  });
});
