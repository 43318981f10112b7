/**
 * Cancel without killing: pause, delete and a call's timeout cancel the MCP request through
 * the SDK's AbortSignal — the server receives `notifications/cancelled` — and the same server process answers the
 * next call.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentRuntime, memoryStorage, type StorageAdapter } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { eventually } from '../support/runtime.js';
import { fixtureServer, mcpServerProcesses, processesWith, readEvents, toolResults } from './support.js';

let dir: string;
let before: number[];
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'agentry-mcp-cancel-'));
  before = mcpServerProcesses();
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  expect(mcpServerProcesses()).toEqual(before);
});

/** slow(30 s), then pid, then an answer. */
function slowThenPid(ms = 30_000) {
  return scriptedModel({
    turns: (_req, { turnIndex }): ScriptedTurn => {
      if (turnIndex === 0) return { toolCalls: [{ id: 'call_slow', name: 'mcp__counting__slow', input: { ms } }] };
      if (turnIndex === 1) return { toolCalls: [{ id: 'call_pid', name: 'mcp__counting__pid', input: {} }] };
      return { text: 'done' };
    },
  });
}

async function callFinished(storage: StorageAdapter, agentId: string, id: string): Promise<boolean> {
  return (await storage.listToolCalls(agentId, 1)).some((c) => c.tool_use_id === id && c.status === 'finished');
}

const slowStarted = (events: string) => readEvents(events).filter((e) => e[0] === 'start' && e[1] === 'slow');
const cancelled = (events: string) => readEvents(events).filter((e) => e[0] === 'cancelled' && e[1] === 'slow');

describe('cancelling an MCP call keeps the server', () => {
  it('pause during a 30 s call returns within 2 s; the server saw notifications/cancelled and answers the next call', async () => {
    const events = join(dir, 'pause-events.txt');
    const { tag, config } = fixtureServer({ MCP_EVENTS: events });
    const storage = memoryStorage();
    const runtime = await AgentRuntime.open({
      storage,
      model: slowThenPid(),
      builtinTools: false,
      mcpServers: { counting: config },
    });
    try {
      const { agent_id } = await runtime.create({ goal: 'Wait, then be paused' });
      await eventually(() => slowStarted(events).length === 1, 10_000, 'the slow call');
      const pausedAt = Date.now();
      expect((await runtime.pause(agent_id)).status).toBe('PAUSED');
      await eventually(() => callFinished(storage, agent_id, 'call_slow'), 2_000, 'the cancelled call saved');
      const stoppedIn = Date.now() - pausedAt;
      expect(stoppedIn).toBeLessThan(2_000);
      await eventually(() => cancelled(events).length === 1, 2_000, 'notifications/cancelled at the server');
      const serverPid = Number(slowStarted(events)[0]!.at(-1));
      expect(Number(cancelled(events)[0]!.at(-1))).toBe(serverPid);
      expect(processesWith(tag)).toEqual([serverPid]);

      await runtime.resume(agent_id);
      expect((await runtime.waitFor(agent_id, { until: ['COMPLETED', 'FAILED'] })).status).toBe('COMPLETED');
      const results = await toolResults(storage, agent_id);
      expect(results.get('call_slow')).toMatchObject({ is_error: true });
      expect(results.get('call_slow')!.content).toContain('cancelled because the agent was paused');
      // The same process answered the next call: it was never killed.
      expect(Number(results.get('call_pid')!.content)).toBe(serverPid);
      console.log(`mcp pause: the 30 s call stopped ${stoppedIn} ms after pause(); server pid ${serverPid} kept`);
    } finally {
      await runtime.close();
    }
  });

  it("a call's timeout cancels it; the server is kept", async () => {
    const events = join(dir, 'timeout-events.txt');
    const { config } = fixtureServer({ MCP_EVENTS: events }, { tool_timeout_ms: 300 });
    const storage = memoryStorage();
    const runtime = await AgentRuntime.open({
      storage,
      model: slowThenPid(),
      builtinTools: false,
      mcpServers: { counting: config },
    });
    try {
      const { agent_id } = await runtime.create({ goal: 'Time out' });
      expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
      const results = await toolResults(storage, agent_id);
      expect(results.get('call_slow')).toEqual({
        content:
          'Error: MCP server "counting" did not answer slow within 300 ms; the call was cancelled (the server is kept)',
        is_error: true,
      });
      await eventually(() => cancelled(events).length === 1, 2_000, 'notifications/cancelled at the server');
      expect(Number(results.get('call_pid')!.content)).toBe(Number(slowStarted(events)[0]!.at(-1)));
    } finally {
      await runtime.close();
    }
  });

  it('delete during a call cancels it; the server answers the next agent', async () => {
    const events = join(dir, 'delete-events.txt');
    const { config } = fixtureServer({ MCP_EVENTS: events });
    const storage = memoryStorage();
    const runtime = await AgentRuntime.open({
      storage,
      model: slowThenPid(),
      builtinTools: false,
      mcpServers: { counting: config },
    });
    try {
      const first = await runtime.create({ goal: 'Be deleted' });
      await eventually(() => slowStarted(events).length === 1, 10_000, 'the slow call');
      await runtime.delete(first.agent_id);
      await eventually(() => cancelled(events).length === 1, 2_000, 'notifications/cancelled at the server');
      const serverPid = Number(slowStarted(events)[0]!.at(-1));

      // A second agent's call reaches the same process: the delete cancelled the request, not the server.
      const second = await runtime.create({ goal: 'Carry on' });
      await eventually(() => slowStarted(events).length === 2, 10_000, 'the second slow call');
      expect(Number(slowStarted(events)[1]!.at(-1))).toBe(serverPid);
      await runtime.delete(second.agent_id);
    } finally {
      await runtime.close();
    }
  });
});
