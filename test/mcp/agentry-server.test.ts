/**
 * agentry as an MCP server:
 * - `agentry mcp` (the real CLI, stdio) driven by the official Inspector CLI (`@modelcontextprotocol/inspector`,
 *   `mcp-inspector --cli`): it lists the six tools with honest annotations, and runs `create_agent` then
 *   `get_agent` until the agent is COMPLETED against a fake Messages API server;
 * - the HTTP service's `/mcp` mount (Streamable HTTP) with the SDK's client: a request without a key is refused, and
 *   an account never sees another account's agents.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentRuntime, sqliteStorage } from 'agentry-runtime';
import { startServer, type RunningServer } from 'agentry-runtime/http';
import { scriptedModel, startFakeAnthropic, type FakeAnthropic } from 'agentry-runtime/testing';
import { ROOT } from './support.js';

const run = promisify(execFile);
// 0.15.0, the last release that runs on Node 20 by its engines field (package.json pins it; see docs/decisions.md)
const INSPECTOR = join(ROOT, 'node_modules/@modelcontextprotocol/inspector/cli/build/cli.js');
const CLI = join(ROOT, 'src/cli/index.ts');

describe('agentry mcp under the official Inspector CLI', () => {
  let dir: string;
  let fake: FakeAnthropic;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'agentry-mcp-inspector-'));
    fake = await startFakeAnthropic({
      handler: () => ({ text: 'The answer is 42.', usage: { input_tokens: 50, output_tokens: 5 } }),
    });
  });
  afterAll(async () => {
    await fake.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** One Inspector CLI run against a fresh `agentry mcp` process on the test's database. */
  async function inspector(method: string, extra: string[] = []): Promise<Record<string, unknown>> {
    const { stdout } = await run(
      process.execPath,
      [
        INSPECTOR,
        '--cli',
        '-e',
        `ANTHROPIC_BASE_URL=${fake.url}`,
        '-e',
        'ANTHROPIC_API_KEY=sk-test',
        // `--method` after the tool options: 0.15's `--tool-arg` is variadic and would take the command as an argument
        ...extra,
        '--method',
        method,
        '--',
        process.execPath,
        '--import',
        'tsx',
        CLI,
        'mcp',
        '--db',
        join(dir, 'agents.db'),
      ],
      { cwd: ROOT, timeout: 60_000, maxBuffer: 10 * 1024 * 1024 },
    );
    return JSON.parse(stdout) as Record<string, unknown>;
  }

  it('lists the six tools with honest annotations', async () => {
    const { tools } = (await inspector('tools/list')) as {
      tools: Array<{ name: string; annotations?: Record<string, boolean> }>;
    };
    const byName = new Map(tools.map((t) => [t.name, t.annotations ?? {}]));
    expect([...byName.keys()].sort()).toEqual([
      'create_agent',
      'delete_agent',
      'get_agent',
      'list_agents',
      'pause_agent',
      'resume_agent',
    ]);
    expect(byName.get('delete_agent')).toMatchObject({ destructiveHint: true, readOnlyHint: false });
    expect(byName.get('get_agent')).toMatchObject({ readOnlyHint: true });
    expect(byName.get('list_agents')).toMatchObject({ readOnlyHint: true });
    expect(byName.get('pause_agent')).toMatchObject({ idempotentHint: true, destructiveHint: false });
    expect(byName.get('create_agent')).toMatchObject({ readOnlyHint: false, openWorldHint: true });
  });

  it('create_agent, then get_agent until COMPLETED against the fake model', async () => {
    const created = (
      await inspector('tools/call', ['--tool-name', 'create_agent', '--tool-arg', 'goal=What is 6 x 7?'])
    ).structuredContent as { agent_id: string; status: string };
    expect(created.status).toBe('ACTIVE');
    let got: { agent: { status: string }; messages: Array<{ role: string; text: string }> } | undefined;
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      got = (await inspector('tools/call', ['--tool-name', 'get_agent', '--tool-arg', `agent_id=${created.agent_id}`]))
        .structuredContent as typeof got;
      if (got!.agent.status !== 'ACTIVE') break;
    }
    expect(got!.agent.status).toBe('COMPLETED');
    expect(got!.messages.map((m) => [m.role, m.text])).toEqual([
      ['USER', 'What is 6 x 7?'],
      ['ASSISTANT', 'The answer is 42.'],
    ]);
    expect(fake.requests.length).toBeGreaterThanOrEqual(1);
  });
});

describe('the /mcp mount of the HTTP service', () => {
  let runtime: AgentRuntime;
  let server: RunningServer;
  let keyA: string;
  let keyB: string;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'agentry-mcp-mount-'));
    runtime = await AgentRuntime.open({
      // SQLite, as `agentry serve`: the server runs on its own thread and relays /mcp to the runtime's.
      storage: sqliteStorage({ path: join(dir, 'agents.db') }),
      model: scriptedModel({ turns: [{ text: 'Done.' }] }),
      builtinTools: false,
    });
    keyA = (await runtime.accounts.create({ id: 'acme', credits: 10, subscribe: true })).apiKey!.key;
    keyB = (await runtime.accounts.create({ id: 'globex', credits: 10, subscribe: true })).apiKey!.key;
    server = await startServer(runtime, { port: 0, mcp: true });
  });
  afterAll(async () => {
    await server.close();
    await runtime.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function connect(key: string): Promise<Client> {
    const client = new Client({ name: 'test', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), {
        requestInit: { headers: { 'x-api-key': key } },
      }),
    );
    return client;
  }

  it('refuses a request without a key (401) or with an unknown one', async () => {
    const body = JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
    });
    const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
    const none = await fetch(`${server.url}/mcp`, { method: 'POST', headers, body });
    expect(none.status).toBe(401);
    expect(((await none.json()) as { error: { code: string } }).error.code).toBe('unauthorized');
    const bad = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...headers, 'x-api-key': 'agk_nope' },
      body,
    });
    expect(bad.status).toBe(401);
    await expect(connect('agk_nope')).rejects.toThrow();
    // Stateless: no stream to GET.
    expect((await fetch(`${server.url}/mcp`, { headers: { 'x-api-key': keyA } })).status).toBe(405);
  });

  it('runs the tools for the key’s account and never shows another account’s agents', async () => {
    const a = await connect(keyA);
    const b = await connect(keyB);
    try {
      const created = (await a.callTool({ name: 'create_agent', arguments: { goal: 'Say done' } }))
        .structuredContent as {
        agent_id: string;
      };
      const other = (await b.callTool({ name: 'create_agent', arguments: { goal: 'Globex work' } }))
        .structuredContent as {
        agent_id: string;
      };
      await runtime.waitFor(created.agent_id);
      await runtime.waitFor(other.agent_id);

      const got = (await a.callTool({ name: 'get_agent', arguments: { agent_id: created.agent_id } }))
        .structuredContent as {
        agent: { status: string };
      };
      expect(got.agent.status).toBe('COMPLETED');
      const listA = (await a.callTool({ name: 'list_agents', arguments: {} })).structuredContent as {
        data: Array<{ agent_id: string }>;
      };
      expect(listA.data.map((x) => x.agent_id)).toEqual([created.agent_id]);

      // Another account's agent does not exist, for every tool.
      for (const name of ['get_agent', 'pause_agent', 'resume_agent', 'delete_agent']) {
        const refused = await a.callTool({ name, arguments: { agent_id: other.agent_id } });
        expect(refused.isError, name).toBe(true);
        expect(JSON.stringify(refused.content)).toContain('not found');
      }
      expect((await runtime.get(other.agent_id)).agent.status).toBe('COMPLETED');
      const deleted = await a.callTool({ name: 'delete_agent', arguments: { agent_id: created.agent_id } });
      expect(deleted.structuredContent).toEqual({ agent_id: created.agent_id, deleted: true });
    } finally {
      await a.close();
      await b.close();
    }
  });
});
