/**
 * `agentry mcp` (the real CLI on stdio) while an agent waits on its model:
 * it exits within 1 s of its stdin closing and of SIGTERM, says on stderr that the running agent was handed over, and
 * the agent is still ACTIVE in the database (the next start continues it); a malformed `tools/call` is answered
 * JSON-RPC -32602 with one short line.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentRuntime, memoryStorage, sqliteStorage } from 'agentry-runtime';
import { scriptedModel, startFakeAnthropic, type FakeAnthropic } from 'agentry-runtime/testing';
import { handleAgentryMcpRequest } from '../../src/mcp/agentry-server.js';
import { ROOT } from './support.js';

const CLI = join(ROOT, 'src/cli/index.ts');
/** How soon the server must exit: MCP clients kill a server that lingers after closing its stdin. */
const EXIT_BOUND_MS = 1_000;

let dir: string;
let fake: FakeAnthropic;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'agentry-mcp-exit-'));
  // The model never answers in time: the agent is waiting on it when the client goes away.
  fake = await startFakeAnthropic({ handler: () => ({ text: 'too late', delayMs: 120_000 }) });
});
afterAll(async () => {
  await fake.close();
  rmSync(dir, { recursive: true, force: true });
});

/** `agentry mcp` on the test's database, with JSON-RPC over its stdio. */
function startAgentryMcp(db: string) {
  const clean = { ...process.env };
  for (const k of ['ANTHROPIC_API_KEY', 'ANTHROPIC_BASE_URL', 'AGENTRY_DB', 'AGENTRY_MCP_CONFIG']) delete clean[k];
  const child = spawn(process.execPath, ['--import', 'tsx', CLI, 'mcp', '--db', db], {
    cwd: ROOT,
    env: { ...clean, ANTHROPIC_BASE_URL: fake.url, ANTHROPIC_API_KEY: 'sk-test' },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  const replies = new Map<number, (reply: Record<string, unknown>) => void>();
  let buffered = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    buffered += chunk;
    let nl: number;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      const message = JSON.parse(line) as { id?: number };
      if (typeof message.id === 'number') replies.get(message.id)?.(message);
    }
  });
  const exited = new Promise<{ code: number | null; at: number }>((resolve) =>
    child.once('exit', (code) => resolve({ code, at: Date.now() })),
  );
  let id = 0;
  const request = (method: string, params: unknown) =>
    new Promise<Record<string, unknown>>((resolve) => {
      const n = ++id;
      replies.set(n, resolve);
      child.stdin!.write(`${JSON.stringify({ jsonrpc: '2.0', id: n, method, params })}\n`);
    });
  const notify = (method: string) => child.stdin!.write(`${JSON.stringify({ jsonrpc: '2.0', method })}\n`);
  return { child, request, notify, exited, stderr: () => stderr };
}

async function initialize(mcp: ReturnType<typeof startAgentryMcp>) {
  await mcp.request('initialize', {
    protocolVersion: '2025-06-18',
    capabilities: {},
    clientInfo: { name: 'exit-test', version: '1' },
  });
  mcp.notify('notifications/initialized');
}

async function until(check: () => boolean, what: string, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function agentStatus(db: string, agentId: string): Promise<string | undefined> {
  const storage = sqliteStorage({ path: db });
  await storage.init();
  try {
    return (await storage.getAgent(agentId))?.status;
  } finally {
    await storage.close();
  }
}

function ensureGone(child: ChildProcess) {
  if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
}

describe('agentry mcp exits at once while an agent waits on its model', () => {
  const db = () => join(dir, 'agents.db');
  let agentId: string;

  it('stdin closed: exits within 1 s, the agent handed over (still ACTIVE); -32602 for malformed params', async () => {
    const mcp = startAgentryMcp(db());
    try {
      await initialize(mcp);

      // Item 7: malformed params get -32602 and one short line, not -32603 with a validation dump.
      for (const params of [{ arguments: { goal: 'x' } }, { name: 'create_agent', arguments: 'a string' }, undefined]) {
        const reply = (await mcp.request('tools/call', params)) as { error?: { code: number; message: string } };
        expect(reply.error?.code).toBe(-32602);
        expect(reply.error!.message).toMatch(/^Invalid params for tools\/call: params(\.name|\.arguments)? /);
        expect(reply.error!.message.length).toBeLessThan(120);
        expect(reply.error!.message).not.toContain('\n');
      }

      const created = (await mcp.request('tools/call', {
        name: 'create_agent',
        arguments: { goal: 'Think for a long time' },
      })) as { result: { structuredContent: { agent_id: string } } };
      agentId = created.result.structuredContent.agent_id;
      const requestsBefore = fake.requests.length;
      await until(() => fake.requests.length > requestsBefore, 'the agent to wait on its model');

      const closedAt = Date.now();
      mcp.child.stdin!.end();
      const { code, at } = await mcp.exited;
      const took = at - closedAt;
      console.log(`agentry mcp exited ${took} ms after its stdin closed, while an agent waited on its model`);
      expect(code).toBe(0);
      expect(took).toBeLessThan(EXIT_BOUND_MS);
      expect(mcp.stderr()).toContain(
        'agentry mcp: stdin closed; 1 agent was running: handed over, not paused — a model request in flight is ' +
          'cancelled, and they stay ACTIVE',
      );
    } finally {
      ensureGone(mcp.child);
    }
    expect(await agentStatus(db(), agentId)).toBe('ACTIVE');
  });

  it('SIGTERM: the next start continued the agent; it exits within 1 s again', async () => {
    const mcp = startAgentryMcp(db());
    try {
      const requestsBefore = fake.requests.length;
      await initialize(mcp);
      // The agent handed over is taken up again: it waits on its model in this process now.
      await until(() => fake.requests.length > requestsBefore, 'the recovered agent to wait on its model');
      const signalledAt = Date.now();
      mcp.child.kill('SIGTERM');
      const { at } = await mcp.exited;
      const took = at - signalledAt;
      console.log(`agentry mcp exited ${took} ms after SIGTERM`);
      expect(took).toBeLessThan(EXIT_BOUND_MS);
      expect(mcp.stderr()).toContain('agentry mcp: SIGTERM; 1 agent was running: handed over');
    } finally {
      ensureGone(mcp.child);
    }
    expect(await agentStatus(db(), agentId)).toBe('ACTIVE');
  });
});

describe('malformed tools/call params on the HTTP /mcp mount', () => {
  it('answer -32602 with one short line', async () => {
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model: scriptedModel({ turns: [{ text: 'x' }] }),
      builtinTools: false,
    });
    try {
      const body = { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'get_agent', arguments: [1, 2] } };
      const response = await handleAgentryMcpRequest(
        runtime,
        { accountId: runtime.defaultAccountId },
        new Request('http://127.0.0.1/mcp', {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
          body: JSON.stringify(body),
        }),
        body,
      );
      expect(await response.json()).toEqual({
        jsonrpc: '2.0',
        id: 7,
        error: { code: -32602, message: 'Invalid params for tools/call: params.arguments must be an object' },
      });
    } finally {
      await runtime.close();
    }
  });
});
