/**
 * The official reference server, `@modelcontextprotocol/server-everything` (a pinned devDependency), over stdio and
 * over Streamable HTTP, through a real runtime under the scripted model:
 * - progress reaches the agent's status_message, and resets the call's timeout;
 * - a sampling request is answered by the agent's own model, and billed (a ledger row of its own);
 * - structured content that repeats the text is not shown twice;
 * - an image never appears as text (no base64 in the transcript: an artifact line);
 * - a server restarted mid-session serves the next call;
 * - a tool that requires task-based execution runs as a task (its status messages shown);
 * - roots are declared when configured; elicitation only with the application's handler.
 * `agentry mcp` exiting within 1 s of stdin closing is in mcp-exit.test.ts.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:net';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentRuntime, memoryStorage, type RuntimeOptions } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import type { ModelRequest } from '../../src/models/provider.js';
import { EVERYTHING, mcpServerProcesses, processesWith, ROOT, stopChild, toolResults } from './support.js';

/** The base64 of the server's tiny image starts so: it must never reach the model's text. */
const PNG_BASE64_START = 'iVBORw0KGgo';

let before: number[];
beforeAll(() => {
  before = mcpServerProcesses();
});
afterAll(() => {
  expect(mcpServerProcesses()).toEqual(before);
});

/** A free port on loopback (the HTTP server must come back on the same one after its restart). */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** server-everything over Streamable HTTP on `port`; resolves once it listens. */
async function startEverythingHttp(port: number, tag: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, [EVERYTHING, 'streamableHttp', tag], {
    cwd: ROOT,
    env: { ...process.env, PORT: String(port) },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  await new Promise<void>((resolve, reject) => {
    let err = '';
    child.stderr!.setEncoding('utf8').on('data', (c: string) => {
      err += c;
      if (/listening on port/.test(err)) resolve();
    });
    child.once('exit', (code) => reject(new Error(`server-everything (http) exited with ${code}: ${err}`)));
  });
  return child;
}

/**
 * One step of a scripted agent: a tool call, optionally after `before` ran (a restart between two calls). The
 * sampling requests of the server are answered `sampled` (and recorded), whatever the step.
 */
interface Step {
  name: string;
  input: unknown;
  before?: () => Promise<void>;
}

const SAMPLING_USAGE = { inputTokens: 77, outputTokens: 11 };

function agentModel(steps: Step[]) {
  const sampling: ModelRequest[] = [];
  /** When each of the agent's turns was asked for. */
  const turnsAt: number[] = [];
  const model = scriptedModel({
    turns: async (request, { turnIndex }): Promise<ScriptedTurn> => {
      if (request.system.includes('An MCP server (everything) asks for this completion')) {
        sampling.push(request);
        return { text: 'Sampled: hello from the agent model', usage: SAMPLING_USAGE };
      }
      turnsAt[turnIndex] = Date.now();
      const step = steps[turnIndex];
      if (!step) return { text: 'All done.' };
      await step.before?.();
      return { toolCalls: [{ name: step.name, input: step.input, id: `call_${turnIndex}` }] };
    },
  });
  return { model, sampling, turnsAt };
}

interface Transport {
  name: 'stdio' | 'http';
  /** The mcpServers entry of the server, with `extra` fields. */
  config(extra?: Record<string, unknown>): Record<string, unknown>;
  /** Kills the server and, for HTTP, starts it again on the same port; resolves when it serves again (HTTP). */
  restart(): Promise<void>;
  /** Live server processes of this transport's test. */
  processes(): number[];
  stop(): Promise<void>;
}

async function stdioTransport(): Promise<Transport> {
  const tag = `--tag=${randomUUID()}`;
  return {
    name: 'stdio',
    config: (extra = {}) => ({ command: process.execPath, args: [EVERYTHING, 'stdio', tag], cwd: ROOT, ...extra }),
    async restart() {
      // Killed between two calls, and gone (reaped) before the next: the runtime respawns it for that call.
      const pids = processesWith(tag);
      for (const pid of pids) process.kill(pid, 'SIGKILL');
      const alive = (pid: number) => {
        try {
          process.kill(pid, 0);
          return true;
        } catch {
          return false;
        }
      };
      const deadline = Date.now() + 10_000;
      while (pids.some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    },
    processes: () => processesWith(tag),
    async stop() {},
  };
}

async function httpTransport(): Promise<Transport> {
  const tag = `--tag=${randomUUID()}`;
  const port = await freePort();
  let child = await startEverythingHttp(port, tag);
  return {
    name: 'http',
    config: (extra = {}) => ({ type: 'http', url: `http://127.0.0.1:${port}/mcp`, ...extra }),
    async restart() {
      await stopChild(child);
      child = await startEverythingHttp(port, tag);
    },
    processes: () => processesWith(tag),
    async stop() {
      await stopChild(child);
    },
  };
}

async function runAgent(
  transport: Transport,
  steps: Step[],
  options: {
    server?: Record<string, unknown>;
    runtime?: Partial<RuntimeOptions>;
    onStatus?: (message: string) => void;
  } = {},
) {
  const { model, sampling, turnsAt } = agentModel(steps);
  const storage = memoryStorage();
  const runtime = await AgentRuntime.open({
    storage,
    model,
    builtinTools: false,
    mcpServers: { everything: transport.config(options.server) },
    ...options.runtime,
  });
  const statusMessages: string[] = [];
  runtime.on('agent.progress', ({ agent }) => {
    statusMessages.push(agent.status_message);
    options.onStatus?.(agent.status_message);
  });
  try {
    const { agent_id } = await runtime.create({ goal: 'Use the everything server' });
    const agent = await runtime.waitFor(agent_id);
    const results = await toolResults(storage, agent_id);
    const ledger = await storage.listLedger(runtime.defaultAccountId);
    const offered = model.calls.find((c) => !c.system.includes('An MCP server'))!.tools.map((t) => t.name);
    return {
      agent,
      results,
      ledger,
      sampling,
      turnsAt,
      statusMessages,
      offered,
      model,
      status: runtime.toolStatus(),
    };
  } finally {
    await runtime.close();
  }
}

describe.each([
  ['stdio', stdioTransport],
  ['Streamable HTTP', httpTransport],
])('server-everything over %s', (_label, makeTransport) => {
  let transport: Transport;
  beforeAll(async () => {
    transport = await makeTransport();
  });
  afterAll(async () => {
    await transport.stop();
  });

  it('progress reaches status_message and resets the call timeout', async () => {
    // 8 steps of 500 ms under a 2,000 ms timeout: the call outlives its timeout only because progress resets it.
    const run = await runAgent(
      transport,
      [{ name: 'mcp__everything__trigger-long-running-operation', input: { duration: 4, steps: 8 } }],
      { server: { tool_timeout_ms: 2_000 } },
    );
    expect(run.agent.status).toBe('COMPLETED');
    expect(run.results.get('call_0')).toEqual({
      content: 'Long running operation completed. Duration: 4 seconds, Steps: 8.',
      is_error: false,
    });
    const progress = run.statusMessages.filter((m) =>
      /^mcp__everything__trigger-long-running-operation: [1-8]\/8$/.test(m),
    );
    expect(progress.length).toBeGreaterThan(0);
    // The step that follows says what it does again.
    expect(run.statusMessages.at(-1)).toBe('Completed');
  });

  it('sampling is answered by the agent’s own model, one billed turn', async () => {
    const run = await runAgent(
      transport,
      [{ name: 'mcp__everything__trigger-sampling-request', input: { prompt: 'Say hello', maxTokens: 50 } }],
      { server: { sampling: true } },
    );
    expect(run.agent.status).toBe('COMPLETED');
    expect(run.sampling).toHaveLength(1);
    const turn = run.sampling[0]!;
    expect(turn.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'Resource trigger-sampling-request context: Say hello' }] },
    ]);
    expect(turn.system).toContain('You are a helpful test server.');
    expect(turn.tools).toEqual([]);
    expect(turn.maxTokens).toBe(50);
    expect(turn.agentId).toBe(run.agent.agent_id);
    const result = run.results.get('call_0')!;
    expect(result.is_error).toBe(false);
    expect(result.content).toContain('Sampled: hello from the agent model');
    expect(result.content).toContain('"model": "svc-1-lite"');
    // Billed: a model ledger row with the sampling turn's own tokens, beside the agent's two turns.
    const modelRows = run.ledger.filter((l) => l.kind === 'model' && l.agent_id === run.agent.agent_id);
    expect(modelRows).toHaveLength(3);
    expect(modelRows.filter((l) => l.tokens_in === 77 && l.tokens_out === 11)).toHaveLength(1);
  });

  it('sampling is not declared to a server that did not opt in: its tool is not offered', async () => {
    const run = await runAgent(transport, [{ name: 'mcp__everything__echo', input: { message: 'x' } }]);
    expect(run.offered).toContain('mcp__everything__echo');
    expect(run.offered).not.toContain('mcp__everything__trigger-sampling-request');
    expect(run.offered).not.toContain('mcp__everything__trigger-elicitation-request');
    expect(run.offered).not.toContain('mcp__everything__get-roots-list');
  });

  it('structured content is not shown twice; an image never appears as text', async () => {
    const run = await runAgent(transport, [
      { name: 'mcp__everything__get-structured-content', input: { location: 'Chicago' } },
      { name: 'mcp__everything__get-tiny-image', input: {} },
    ]);
    expect(run.agent.status).toBe('COMPLETED');
    expect(run.results.get('call_0')).toEqual({
      content: '{"temperature":36,"conditions":"Light rain / drizzle","humidity":82}',
      is_error: false,
    });
    const image = run.results.get('call_1')!;
    expect(image.content).toMatch(
      /^Here's the image you requested:\n\[image image\/png, \d+ bytes, saved as artifact [0-9a-f-]{36}\]\nThe image above is the MCP logo\.$/,
    );
    // Nowhere in what the model was sent is there base64 image data.
    for (const call of run.model.calls) expect(JSON.stringify(call.messages)).not.toContain(PNG_BASE64_START);
  });

  it('a server restarted mid-session serves the next call', async () => {
    const pidsBefore: number[][] = [];
    const run = await runAgent(transport, [
      { name: 'mcp__everything__echo', input: { message: 'before the restart' } },
      {
        name: 'mcp__everything__echo',
        input: { message: 'after the restart' },
        before: async () => {
          pidsBefore.push(transport.processes());
          await transport.restart();
        },
      },
      { name: 'mcp__everything__get-sum', input: { a: 40, b: 2 } },
    ]);
    expect(run.agent.status).toBe('COMPLETED');
    expect(run.results.get('call_0')).toEqual({ content: 'Echo: before the restart', is_error: false });
    expect(run.results.get('call_1')).toEqual({ content: 'Echo: after the restart', is_error: false });
    expect(run.results.get('call_2')!.content).toContain('42');
    expect(pidsBefore[0]).toHaveLength(1);
    const server = run.status.find((s) => s.name === 'mcp__everything')!;
    expect(server.ready).toBe(true);
  });

  it('a server that dies during a call fails the call at once, not at its timeout', async () => {
    let killed: Promise<number> | undefined;
    const run = await runAgent(
      transport,
      [{ name: 'mcp__everything__trigger-long-running-operation', input: { duration: 60, steps: 120 } }],
      {
        onStatus: (message) => {
          // The call is in flight (its first progress arrived): the server dies.
          if (!killed && /trigger-long-running-operation: 1\/120$/.test(message)) {
            killed = Promise.resolve().then(async () => {
              const at = Date.now();
              await transport.restart();
              return at;
            });
          }
        },
      },
    );
    expect(run.agent.status).toBe('COMPLETED');
    const killedAt = await killed!;
    const result = run.results.get('call_0')!;
    expect(result.is_error).toBe(true);
    expect(result.content).toMatch(
      /^Error: MCP server "everything" .*during the call to trigger-long-running-operation/,
    );
    const took = run.turnsAt[1]! - killedAt;
    console.log(`server-everything (${transport.name}): the call failed ${took} ms after the server died`);
    expect(took).toBeLessThan(5_000);
  });

  it('a tool that requires task-based execution runs as a task, its status shown', async () => {
    const run = await runAgent(transport, [
      { name: 'mcp__everything__simulate-research-query', input: { topic: 'MCP tasks' } },
    ]);
    expect(run.offered).toContain('mcp__everything__simulate-research-query');
    expect(run.agent.status).toBe('COMPLETED');
    const result = run.results.get('call_0')!;
    expect(result.is_error).toBe(false);
    expect(result.content).toContain('# Research Report: MCP tasks');
    expect(
      run.statusMessages.some((m) =>
        /^mcp__everything__simulate-research-query: (Gathering sources|Analyzing content|Synthesizing findings|Generating report)/.test(
          m,
        ),
      ),
    ).toBe(true);
  });

  it('roots: the workspace when configured', async () => {
    const run = await runAgent(transport, [{ name: 'mcp__everything__get-roots-list', input: {} }], {
      server: { roots: 'workspace', cwd: ROOT },
    });
    expect(run.agent.status).toBe('COMPLETED');
    const content = run.results.get('call_0')!.content;
    expect(content).toContain('Current MCP Roots (1 total)');
    // Over HTTP there is no cwd: the workspace is the runtime's working directory, which is ROOT here too.
    expect(content).toContain(pathToFileURL(ROOT).href.replace(/\/$/, ''));
  });

  it('elicitation: offered and answered only with the application’s handler', async () => {
    const asked: Array<{ server: string; agentId: string | undefined; message: string }> = [];
    const run = await runAgent(transport, [{ name: 'mcp__everything__trigger-elicitation-request', input: {} }], {
      runtime: {
        onMcpElicitation: async (request) => {
          asked.push({ server: request.server, agentId: request.agentId, message: request.message });
          return { action: 'accept', content: { name: 'Ada Lovelace' } };
        },
      },
    });
    expect(run.agent.status).toBe('COMPLETED');
    expect(asked).toEqual([
      {
        server: 'everything',
        agentId: run.agent.agent_id,
        message: 'Please provide inputs for the following fields:',
      },
    ]);
    expect(run.results.get('call_0')!.content).toContain('- Name: Ada Lovelace');
  });
});
