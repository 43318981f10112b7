/**
 * MCP servers' tools through a real runtime: servers the tests start — the fixture written
 * with the SDK's McpServer, over stdio and Streamable HTTP, and `@modelcontextprotocol/server-everything` — are
 * called by an agent under the scripted model, and the transcript shows each result: text, a sum, structured content,
 * an image (also saved as an artifact) and an error.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentRuntime, memoryStorage } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { parseMcpServers } from '../../src/mcp/config.js';
import { eventually } from '../support/runtime.js';
import { McpServerConnection } from '../../src/mcp/server-connection.js';
import {
  EVERYTHING,
  fixtureServer,
  mcpServerProcesses,
  playCalls,
  processesWith,
  readEvents,
  startHttpFixture,
  stopChild,
  toolResults,
} from './support.js';

let dir: string;
let before: number[];
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'agentry-mcp-'));
  before = mcpServerProcesses();
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  // No server process is left behind by this file.
  expect(mcpServerProcesses()).toEqual(before);
});

async function runAgent(
  mcpServers: Record<string, unknown>,
  calls: Array<{ name: string; input: unknown }>,
  extra: Partial<Parameters<typeof AgentRuntime.open>[0]> = {},
) {
  const model = scriptedModel({ turns: playCalls(calls) });
  const storage = memoryStorage();
  const runtime = await AgentRuntime.open({ storage, model, builtinTools: false, mcpServers, ...extra });
  try {
    const { agent_id } = await runtime.create({ goal: 'Use the MCP tools' });
    const agent = await runtime.waitFor(agent_id);
    const results = await toolResults(storage, agent_id);
    // Each call's record: the model turns that asked for them are 1, 3, 5, … (a call and its result per step).
    const calls = (await Promise.all([1, 3, 5, 7, 9].map((idx) => storage.listToolCalls(agent_id, idx)))).flat();
    const ledger = await storage.listLedger(runtime.defaultAccountId);
    return { agent, results, model, agent_id, calls, ledger, status: runtime.toolStatus() };
  } finally {
    await runtime.close();
  }
}

describe('MCP tools through an agent', () => {
  it('a stdio server written with the SDK: text, a sum with structured content, an image, an error', async () => {
    const events = join(dir, 'stdio-events.txt');
    const { tag, config } = fixtureServer({ MCP_EVENTS: events });
    const run = await runAgent({ counting: config }, [
      { name: 'mcp__counting__echo', input: { text: 'hello' } },
      { name: 'mcp__counting__add', input: { a: 2, b: 3 } },
      { name: 'mcp__counting__image', input: {} },
      { name: 'mcp__counting__fail', input: { message: 'no' } },
      { name: 'mcp__counting__add', input: { a: 'two' } },
    ]);
    expect(run.agent.status).toBe('COMPLETED');
    expect(run.results.get('call_0')).toEqual({ content: 'echo: hello', is_error: false });
    // The structured content ({"sum": 5}) adds nothing the text lacks: it is not shown twice.
    expect(run.results.get('call_1')).toEqual({ content: '2 + 3 = 5', is_error: false });
    const image = run.results.get('call_2')!;
    expect(image.is_error).toBe(false);
    expect(image.content).toMatch(/^a tiny image:\n\[image image\/png, \d+ bytes, saved as artifact [0-9a-f-]{36}\]$/);
    expect(run.results.get('call_3')).toEqual({
      content: 'Error: fail (MCP server counting) reported an error: failed on purpose: no',
      is_error: true,
    });
    // The server validates the input against its own schema; its refusal reaches the model as a tool error.
    expect(run.results.get('call_4')!.is_error).toBe(true);
    expect(run.results.get('call_4')!.content).toMatch(/MCP server counting|Input validation/);

    // The model was offered the server's tools by their mcp__ names, with the server's input schemas.
    const offered = run.model.calls[0]!.tools;
    const add = offered.find((t) => t.name === 'mcp__counting__add')!;
    expect(add.input_schema).toMatchObject({
      type: 'object',
      properties: { a: { type: 'number' }, b: { type: 'number' } },
      required: ['a', 'b'],
    });
    expect(offered.map((t) => t.name)).toEqual(
      expect.arrayContaining(['mcp__counting__echo', 'mcp__counting__count', 'mcp__counting__count_idempotent']),
    );
    // Crash safety from the annotations: read-only tools may be sent again, `count` (no hints) may not.
    const tools = new Map(run.status.map((s) => [s.name, s]));
    expect(tools.get('mcp__counting')).toMatchObject({ source: 'mcp', ready: true });
    expect(tools.get('mcp__counting__echo')!.detail).toContain('read-only or idempotent');
    expect(tools.get('mcp__counting__count')!.detail).not.toContain('idempotent');
    expect(run.calls).toHaveLength(5);
    expect(run.calls.every((c) => c.idempotent)).toBe(true);
    // One server process served the whole run, and it is gone after close().
    expect(new Set(readEvents(events).map((e) => e.at(-1))).size).toBe(1);
    expect(processesWith(tag)).toEqual([]);
    // The image is an artifact of the agent.
    const artifactId = /artifact ([0-9a-f-]{36})/.exec(image.content)![1]!;
    expect(artifactId).toBeTruthy();
  });

  it('binary in structured content is never pasted as text; a task-required tool the server cannot run is left out', async () => {
    const { config } = fixtureServer();
    const run = await runAgent({ counting: config }, [{ name: 'mcp__counting__image_structured', input: {} }]);
    expect(run.agent.status).toBe('COMPLETED');
    const content = run.results.get('call_0')!.content;
    // As server-filesystem's read_media_file: the image once as an artifact; the structured copy points to it.
    expect(content).not.toContain('iVBORw0KGgo');
    const ids = [...content.matchAll(/saved as artifact ([0-9a-f-]{36})/g)].map((m) => m[1]);
    expect(ids.length).toBeGreaterThanOrEqual(1);
    expect(new Set(ids).size).toBe(1);
    expect(content).toContain('"width":1');

    const offered = run.model.calls[0]!.tools.map((t) => t.name);
    expect(offered).not.toContain('mcp__counting__needs_task');
    expect(run.status.find((t) => t.name === 'mcp__counting__needs_task')).toEqual({
      name: 'mcp__counting__needs_task',
      source: 'mcp',
      ready: false,
      offered: false,
      detail: expect.stringMatching(/not offered — the tool requires task-based execution/),
    });
  });

  it('a server that asks for what agentry did not declare (elicitation, sampling) is told why not', async () => {
    const { config } = fixtureServer();
    const run = await runAgent({ counting: config }, [
      { name: 'mcp__counting__ask_person', input: {} },
      { name: 'mcp__counting__ask_model', input: {} },
    ]);
    expect(run.agent.status).toBe('COMPLETED');
    expect(run.results.get('call_0')!.content).toMatch(
      /^refused: MCP error -32600: agentry declined the elicitation: it runs agents unattended, with no person to answer/,
    );
    expect(run.results.get('call_1')!.content).toMatch(
      /^refused: MCP error -32600: agentry declined the sampling request: the server "counting" is not allowed to use the agent's model \("sampling": true/,
    );
    // Nothing was billed for the refused sampling: the agent's three turns only.
    expect(run.ledger.filter((l) => l.kind === 'model')).toHaveLength(3);
  });

  it('sampling: at most sampling_max_requests per call, each a billed turn of the agent’s model', async () => {
    const { config } = fixtureServer();
    const model = scriptedModel({
      turns: (request, { turnIndex }): ScriptedTurn => {
        if (request.system.startsWith('An MCP server (counting)'))
          return { text: 'sampled', usage: { inputTokens: 5 } };
        return turnIndex === 0
          ? { toolCalls: [{ id: 'call_0', name: 'mcp__counting__ask_model', input: { times: 3 } }] }
          : { text: 'done' };
      },
    });
    const storage = memoryStorage();
    const runtime = await AgentRuntime.open({
      storage,
      model,
      builtinTools: false,
      mcpServers: { counting: { ...config, sampling: true, sampling_max_requests: 2 } },
    });
    try {
      const { agent_id } = await runtime.create({ goal: 'Let the server sample' });
      expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
      const lines = (await toolResults(storage, agent_id)).get('call_0')!.content.split('\n');
      expect(lines).toHaveLength(3);
      expect(lines[0]).toMatch(/^answered: .*"text":"sampled"/);
      expect(lines[1]).toMatch(/^answered: .*"model":"svc-1-lite"/);
      expect(lines[2]).toMatch(/^refused: .*a tool call may make at most 2 \("sampling_max_requests"/);
      const ledger = await storage.listLedger(runtime.defaultAccountId);
      expect(ledger.filter((l) => l.kind === 'model' && l.tokens_in === 5)).toHaveLength(2);
    } finally {
      await runtime.close();
    }
  });

  it('sampling with calls of two agents on one server: each request is answered by its own agent’s model, billed to it', async () => {
    const { config } = fixtureServer();
    const model = scriptedModel({
      turns: (request, { turnIndex }): ScriptedTurn => {
        if (request.system.startsWith('An MCP server (counting)'))
          return { text: 'sampled', usage: { inputTokens: 7 } };
        // Each call waits (at most 1.5 s) for the other agent's call: before agents took turns, both were in flight
        // when they asked, and both were refused.
        return turnIndex === 0
          ? { toolCalls: [{ id: 'call_0', name: 'mcp__counting__ask_model', input: { together: 2, wait_ms: 1500 } }] }
          : { text: 'done' };
      },
    });
    const storage = memoryStorage();
    const runtime = await AgentRuntime.open({
      storage,
      model,
      builtinTools: false,
      mcpServers: { counting: { ...config, sampling: true } },
    });
    try {
      const agents = await Promise.all([1, 2].map((i) => runtime.create({ goal: `Agent ${i}` })));
      for (const { agent_id } of agents) {
        expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
        expect((await toolResults(storage, agent_id)).get('call_0')!.content).toMatch(/^answered: .*"text":"sampled"/);
      }
      // One sampling turn per agent, each on its own model call and its own ledger row.
      const sampled = model.calls.filter((c) => c.system.startsWith('An MCP server'));
      expect(sampled.map((c) => c.agentId).sort()).toEqual(agents.map((a) => a.agent_id).sort());
      const ledger = await storage.listLedger(runtime.defaultAccountId);
      const rows = ledger.filter((l) => l.kind === 'model' && l.tokens_in === 7);
      expect(rows.map((l) => l.agent_id).sort()).toEqual(agents.map((a) => a.agent_id).sort());
    } finally {
      await runtime.close();
    }
  });

  it('sampling over Streamable HTTP with calls of two agents in flight together: each answered by its own agent’s model', async () => {
    const { url, child } = await startHttpFixture({}, ['--sessions']);
    const model = scriptedModel({
      turns: (request, { turnIndex }): ScriptedTurn => {
        if (request.system.startsWith('An MCP server (remote)')) return { text: 'sampled', usage: { inputTokens: 9 } };
        // Both calls wait until the other is in flight too, then ask: the request comes on each call's own stream.
        return turnIndex === 0
          ? { toolCalls: [{ id: 'call_0', name: 'mcp__remote__ask_model', input: { together: 2 } }] }
          : { text: 'done' };
      },
    });
    const storage = memoryStorage();
    const runtime = await AgentRuntime.open({
      storage,
      model,
      builtinTools: false,
      mcpServers: { remote: { type: 'http', url, sampling: true } },
    });
    try {
      const agents = await Promise.all([1, 2].map((i) => runtime.create({ goal: `Agent ${i}` })));
      for (const { agent_id } of agents) {
        expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
        expect((await toolResults(storage, agent_id)).get('call_0')!.content).toMatch(/^answered: .*"text":"sampled"/);
      }
      const sampled = model.calls.filter((c) => c.system.startsWith('An MCP server'));
      expect(sampled.map((c) => c.agentId).sort()).toEqual(agents.map((a) => a.agent_id).sort());
      const ledger = await storage.listLedger(runtime.defaultAccountId);
      const rows = ledger.filter((l) => l.kind === 'model' && l.tokens_in === 9);
      expect(rows.map((l) => l.agent_id).sort()).toEqual(agents.map((a) => a.agent_id).sort());
    } finally {
      await runtime.close();
      await stopChild(child);
    }
  });

  it('no sampled turn after the subscription is deactivated: the server is refused, the agent pauses', async () => {
    const { config } = fixtureServer();
    const opened: { runtime?: AgentRuntime } = {};
    const model = scriptedModel({
      turns: async (request, { turnIndex }): Promise<ScriptedTurn> => {
        if (request.system.startsWith('An MCP server (counting)')) {
          // The account is unsubscribed while the first sampling turn is answered.
          await opened.runtime!.accounts.unsubscribe(opened.runtime!.defaultAccountId);
          return { text: 'sampled', usage: { inputTokens: 11 } };
        }
        return turnIndex === 0
          ? { toolCalls: [{ id: 'call_0', name: 'mcp__counting__ask_model', input: { times: 3 } }] }
          : { text: 'done' };
      },
    });
    const storage = memoryStorage();
    const runtime = await AgentRuntime.open({
      storage,
      model,
      builtinTools: false,
      mcpServers: { counting: { ...config, sampling: true } },
    });
    opened.runtime = runtime;
    try {
      const { agent_id } = await runtime.create({ goal: 'Let the server sample' });
      const agent = await runtime.waitFor(agent_id);
      expect(agent).toMatchObject({ status: 'PAUSED', status_message: 'Paused: subscription inactive' });
      const lines = (await toolResults(storage, agent_id)).get('call_0')!.content.split('\n');
      expect(lines).toHaveLength(3);
      expect(lines[0]).toMatch(/^answered: /);
      expect(lines[1]).toMatch(/^refused: .*subscription of this account is not active/);
      expect(lines[2]).toMatch(/^refused: .*subscription of this account is not active/);
      // One sampling turn was made and billed; none after the deactivation.
      expect(model.calls.filter((c) => c.system.startsWith('An MCP server'))).toHaveLength(1);
      const ledger = await storage.listLedger(runtime.defaultAccountId);
      expect(ledger.filter((l) => l.kind === 'model' && l.tokens_in === 11)).toHaveLength(1);
    } finally {
      await runtime.close();
    }
  });

  it('a Streamable HTTP server that forgot the session (404): read-only calls are sent again, others are not', async () => {
    const events = join(dir, 'session-events.txt');
    const { url, child } = await startHttpFixture({ MCP_EVENTS: events }, ['--sessions']);
    const [server] = parseMcpServers({ remote: { type: 'http', url } });
    const connection = new McpServerConnection(server!, () => {});
    try {
      expect((await connection.callTool('echo', { text: 'a' })).content).toEqual([{ type: 'text', text: 'echo: a' }]);
      await connection.callTool('forget_sessions', {});
      // A read-only call: a new session, and the call sent again on it.
      const echoed = await connection.callTool('echo', { text: 'b' }, { idempotent: true });
      expect(echoed.content).toEqual([{ type: 'text', text: 'echo: b' }]);
      await connection.callTool('forget_sessions', {});
      // Any other call is not sent again: the model is told the server did not take it.
      await expect(connection.callTool('count', {})).rejects.toThrow(
        /^MCP server "remote" had restarted and lost the session when count was sent: the server did not take the call/,
      );
      expect(connection.state).toBe('exited');
      expect(connection.failure).toMatch(/ended the session \(the server restarted\)/);
      // The next call opens a new session.
      expect((await connection.callTool('echo', { text: 'c' })).content).toEqual([{ type: 'text', text: 'echo: c' }]);
      // Closing ends the session (DELETE): the server is told.
      expect(readEvents(events).filter((e) => e[0] === 'session-closed')).toHaveLength(0);
      await connection.close();
      expect(readEvents(events).filter((e) => e[0] === 'session-closed')).toHaveLength(1);
    } finally {
      await connection.close();
      await stopChild(child);
    }
  });

  it('a Streamable HTTP server that dies during a call fails the call at once, not at its timeout', async () => {
    const events = join(dir, 'http-death-events.txt');
    const { url, child } = await startHttpFixture({ MCP_EVENTS: events });
    const [server] = parseMcpServers({ remote: { type: 'http', url } });
    const connection = new McpServerConnection(server!, () => {});
    try {
      expect((await connection.callTool('echo', { text: 'up' })).content).toEqual([{ type: 'text', text: 'echo: up' }]);
      const call = connection.callTool('slow', { ms: 60_000 });
      const failed = call.then(
        () => 'answered',
        (err: Error) => err.message,
      );
      await eventually(() => readEvents(events).some((e) => e[1] === 'slow'), 10_000, 'the call to reach the server');
      const killedAt = Date.now();
      await stopChild(child);
      const message = await failed;
      const took = Date.now() - killedAt;
      console.log(`mcp http: a call failed ${took} ms after its server died (timeout 300 s)`);
      expect(message).toMatch(/^MCP server "remote" .*during the call to slow/);
      expect(took).toBeLessThan(5_000);
    } finally {
      await stopChild(child);
      await connection.close();
    }
  });

  it('a Streamable HTTP server', async () => {
    const { url, child } = await startHttpFixture();
    try {
      const run = await runAgent({ remote: { type: 'http', url, headers: { 'x-test': '1' } } }, [
        { name: 'mcp__remote__echo', input: { text: 'over http' } },
        { name: 'mcp__remote__add', input: { a: 40, b: 2 } },
        { name: 'mcp__remote__fail', input: { message: 'remote' } },
      ]);
      expect(run.agent.status).toBe('COMPLETED');
      expect(run.results.get('call_0')).toEqual({ content: 'echo: over http', is_error: false });
      expect(run.results.get('call_1')!.content).toBe('40 + 2 = 42');
      expect(run.results.get('call_2')).toMatchObject({ is_error: true });
    } finally {
      await stopChild(child);
    }
  });

  it('one server process serves every agent of the runtime', async () => {
    const events = join(dir, 'shared-events.txt');
    const { tag, config } = fixtureServer({ MCP_EVENTS: events });
    const storage = memoryStorage();
    const runtime = await AgentRuntime.open({
      storage,
      model: scriptedModel({ turns: playCalls([{ name: 'mcp__counting__pid', input: {} }]) }),
      builtinTools: false,
      mcpServers: { counting: config },
    });
    try {
      const ids = await Promise.all([1, 2, 3, 4, 5].map((i) => runtime.create({ goal: `Agent ${i}` })));
      await Promise.all(ids.map(({ agent_id }) => runtime.waitFor(agent_id)));
      const pids = await Promise.all(
        ids.map(async ({ agent_id }) => (await toolResults(storage, agent_id)).get('call_0')!.content),
      );
      expect(new Set(pids).size).toBe(1);
      expect(processesWith(tag)).toEqual([Number(pids[0])]);
    } finally {
      await runtime.close();
    }
    expect(processesWith(tag)).toEqual([]);
  });

  it('an HTTP server that goes away fails the call, naming the server', async () => {
    const { url, child } = await startHttpFixture();
    const [server] = parseMcpServers({ remote: { type: 'http', url } });
    const connection = new McpServerConnection(server!, () => {});
    try {
      expect((await connection.callTool('echo', { text: 'up' })).content).toEqual([{ type: 'text', text: 'echo: up' }]);
      await stopChild(child);
      // The call finds it gone, or the broken stream was noticed first (the check that followed found it gone).
      await expect(connection.callTool('echo', { text: 'down' })).rejects.toThrow(
        /^MCP server "remote" (failed the call to echo|did not start|went away|closed the connection)/,
      );
    } finally {
      await connection.close();
    }
  });

  it('@modelcontextprotocol/server-everything: echo, get-sum, structured content, an image, an error', async () => {
    const run = await runAgent({ everything: { command: process.execPath, args: [EVERYTHING, 'stdio'] } }, [
      { name: 'mcp__everything__echo', input: { message: 'hi there' } },
      { name: 'mcp__everything__get-sum', input: { a: 19, b: 23 } },
      { name: 'mcp__everything__get-structured-content', input: { location: 'Chicago' } },
      { name: 'mcp__everything__get-tiny-image', input: {} },
      { name: 'mcp__everything__get-sum', input: { a: 'x' } },
    ]);
    expect(run.agent.status).toBe('COMPLETED');
    expect(run.results.get('call_0')!.content).toContain('hi there');
    expect(run.results.get('call_1')!.content).toContain('42');
    expect(run.results.get('call_2')!.content).toContain('Light rain');
    expect(run.results.get('call_3')!.content).toMatch(/\[image image\/png, \d+ bytes, saved as artifact /);
    expect(run.results.get('call_4')!.is_error).toBe(true);
    for (const id of ['call_0', 'call_1', 'call_2', 'call_3']) expect(run.results.get(id)!.is_error).toBe(false);
  });

  it('allowed_tools / disallowed_tools, and a tools/list_changed that reaches the next step', async () => {
    const { config } = fixtureServer();
    const model = scriptedModel({
      turns: playCalls([
        { name: 'mcp__counting__add_tool', input: {} },
        { name: 'mcp__counting__late', input: {} },
      ]),
    });
    const storage = memoryStorage();
    const runtime = await AgentRuntime.open({
      storage,
      model,
      builtinTools: false,
      mcpServers: {
        counting: { ...config, allowed_tools: ['add_tool', 'late', 'echo', 'fail'], disallowed_tools: ['fail'] },
      },
    });
    try {
      const { agent_id } = await runtime.create({ goal: 'Add a tool, then call it' });
      expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
      const names = (i: number) => model.calls[i]!.tools.map((t) => t.name).filter((n) => n.startsWith('mcp__'));
      expect(names(0).sort()).toEqual(['mcp__counting__add_tool', 'mcp__counting__echo']);
      expect(names(1).sort()).toEqual(['mcp__counting__add_tool', 'mcp__counting__echo', 'mcp__counting__late']);
      expect((await toolResults(storage, agent_id)).get('call_1')).toEqual({
        content: 'late tool here',
        is_error: false,
      });
    } finally {
      await runtime.close();
    }
  });

  it('bills an MCP tool at its price in the price table', async () => {
    const { config } = fixtureServer();
    const run = await runAgent({ counting: config }, [{ name: 'mcp__counting__echo', input: { text: 'paid' } }], {
      prices: { tools: { mcp__counting__echo: 0.25 } },
    });
    expect(run.agent.status).toBe('COMPLETED');
    expect(run.ledger.filter((l) => l.kind === 'tool')).toEqual([
      expect.objectContaining({ item: 'mcp__counting__echo', amount: -250_000, agent_id: run.agent_id }),
    ]);
  });

  it('a bad config is refused at open, naming the server and the field', async () => {
    const open = (mcpServers: Record<string, unknown>) =>
      AgentRuntime.open({ storage: memoryStorage(), model: scriptedModel({ turns: [{ text: 'x' }] }), mcpServers });
    await expect(open({ files: { args: ['x'] } })).rejects.toThrow(/mcpServers\.files\.command/);
    await expect(open({ crm: { type: 'http', url: 'ftp://x' } })).rejects.toThrow(
      /mcpServers\.crm\.url: must be an http/,
    );
    await expect(open({ crm: { type: 'sse', url: 'http://x' } })).rejects.toThrow(/mcpServers\.crm\.type: the SSE/);
    await expect(open({ 'a.b': { command: 'x' }, a_b: { command: 'y' } })).rejects.toThrow(/both name their tools/);
    await expect(open({ s: { command: 'x', env: { TOKEN: '${NOT_SET_ANYWHERE_X}' } } })).rejects.toThrow(
      /mcpServers\.s\.env\.TOKEN: the environment variable NOT_SET_ANYWHERE_X is not set/,
    );
  });
});
