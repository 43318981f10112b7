/**
 * Death and recovery of MCP servers: a stdio server SIGKILLed during a call fails that call
 * at once, naming the server and how it died; the next call respawns it, and exactly one process is alive afterwards;
 * a server that never answers `initialize` fails within its startup timeout; a crash-looping server is marked failed
 * and spends no CPU (no spawn) until its cooldown is over.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentRuntime, memoryStorage } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { parseMcpServers } from '../../src/mcp/config.js';
import { McpServerConnection } from '../../src/mcp/server-connection.js';
import { eventually } from '../support/runtime.js';
import { fixtureServer, mcpServerProcesses, processesWith, readEvents, toolResults } from './support.js';

let dir: string;
let before: number[];
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'agentry-mcp-death-'));
  before = mcpServerProcesses();
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  expect(mcpServerProcesses()).toEqual(before);
});

describe('MCP server death and recovery', () => {
  it('SIGKILL during a call fails it within 1 s naming the server; the next call respawns; one process after', async () => {
    const events = join(dir, 'kill-events.txt');
    const { tag, config } = fixtureServer({ MCP_EVENTS: events });
    const modelCalledAt: number[] = [];
    const model = scriptedModel({
      turns: (_req, { turnIndex }): ScriptedTurn => {
        modelCalledAt[turnIndex] = Date.now();
        if (turnIndex === 0)
          return { toolCalls: [{ id: 'call_slow', name: 'mcp__counting__slow', input: { ms: 30_000 } }] };
        if (turnIndex === 1) return { toolCalls: [{ id: 'call_pid', name: 'mcp__counting__pid', input: {} }] };
        return { text: 'done' };
      },
    });
    const storage = memoryStorage();
    const runtime = await AgentRuntime.open({ storage, model, builtinTools: false, mcpServers: { counting: config } });
    try {
      const { agent_id } = await runtime.create({ goal: 'Survive a crash' });
      await eventually(() => readEvents(events).some((e) => e[0] === 'start' && e[1] === 'slow'), 10_000, 'slow call');
      const firstPid = Number(
        readEvents(events)
          .find((e) => e[1] === 'slow')!
          .at(-1),
      );
      expect(processesWith(tag)).toEqual([firstPid]);
      const killedAt = Date.now();
      process.kill(firstPid, 'SIGKILL');
      expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');

      // The call failed at once (the next model turn came < 1 s after the kill), naming the server and the signal.
      const failedWithin = modelCalledAt[1]! - killedAt;
      expect(failedWithin).toBeLessThan(1_000);
      const results = await toolResults(storage, agent_id);
      expect(results.get('call_slow')).toMatchObject({ is_error: true });
      expect(results.get('call_slow')!.content).toMatch(
        /^Error: MCP server "counting" exited during the call to slow \(killed by SIGKILL\)/,
      );
      // The next call was answered by a new process, and it is the only one.
      const secondPid = Number(results.get('call_pid')!.content);
      expect(secondPid).not.toBe(firstPid);
      expect(processesWith(tag)).toEqual([secondPid]);
      console.log(`mcp death: call failed ${failedWithin} ms after SIGKILL; respawned pid ${firstPid} -> ${secondPid}`);
    } finally {
      await runtime.close();
    }
    expect(processesWith(tag)).toEqual([]);
  });

  it('a server that never answers initialize fails within its startup timeout, with its stderr; no process left', async () => {
    const { tag, config } = fixtureServer({ MCP_MODE: 'hang' }, { startup_timeout_ms: 800 });
    const firstCallAt: number[] = [];
    const model = scriptedModel({
      turns: (req): ScriptedTurn => {
        firstCallAt.push(Date.now());
        expect(req.tools.some((t) => t.name.startsWith('mcp__'))).toBe(false);
        return { text: 'worked without the stuck server' };
      },
    });
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model,
      builtinTools: false,
      mcpServers: { stuck: config },
    });
    try {
      const started = Date.now();
      const { agent_id } = await runtime.create({ goal: 'Go on without it' });
      expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
      const waited = firstCallAt[0]! - started;
      expect(waited).toBeGreaterThanOrEqual(750);
      expect(waited).toBeLessThan(2_500);
      const status = runtime.toolStatus().find((t) => t.name === 'mcp__stuck')!;
      expect(status).toMatchObject({ source: 'mcp', ready: false });
      expect(status.detail).toMatch(
        /failed: did not finish initialize within 800 ms; stderr: counting-server: stuck before initialize/,
      );
      expect(processesWith(tag)).toEqual([]);
      console.log(`mcp hang: the first step waited ${waited} ms for a server that never initialized (timeout 800 ms)`);
    } finally {
      await runtime.close();
    }
  });

  it('a crash loop backs off, then is marked failed and spawns nothing (no CPU) until its cooldown is over', async () => {
    const { tag, config } = fixtureServer(
      { MCP_MODE: 'crash' },
      { backoff_ms: 100, max_crashes: 3, crash_cooldown_ms: 60_000 },
    );
    const [server] = parseMcpServers({ crashy: config });
    const connection = new McpServerConnection(server!, () => {});
    try {
      const tries: Array<{ at: number; message: string }> = [];
      const t0 = Date.now();
      for (let i = 0; i < 3; i++) {
        const err = await connection.callTool('echo', { text: 'x' }).catch((e: Error) => e);
        tries.push({ at: Date.now() - t0, message: (err as Error).message });
      }
      expect(connection.spawns).toBe(3);
      expect(tries[0]!.message).toMatch(
        /^MCP server "crashy" did not start: .*\(exit code 1\); stderr: counting-server: boom/,
      );
      // Backoff between spawns: 100 ms, then 200 ms (each counted from the last exit).
      expect(tries[1]!.at - tries[0]!.at).toBeGreaterThanOrEqual(95);
      expect(tries[2]!.at - tries[1]!.at).toBeGreaterThanOrEqual(195);
      expect(connection.state).toBe('failed');

      // Cooldown: calls fail at once, nothing is spawned, and the process spends (next to) no CPU for it.
      const cpu = process.cpuUsage();
      const idleStart = Date.now();
      for (let i = 0; i < 50; i++) {
        await expect(connection.callTool('echo', { text: 'x' })).rejects.toThrow(/failed: .*tried again in 60 s/);
      }
      await new Promise((r) => setTimeout(r, 500));
      const used = process.cpuUsage(cpu);
      const cpuMs = (used.user + used.system) / 1000;
      expect(connection.spawns).toBe(3);
      expect(processesWith(tag)).toEqual([]);
      expect(cpuMs).toBeLessThan(100);
      console.log(
        `mcp crash loop: spawns at ${tries.map((t) => t.at).join(', ')} ms; then ${Date.now() - idleStart} ms of ` +
          `cooldown with 50 refused calls: ${cpuMs.toFixed(1)} ms CPU, 0 spawns`,
      );
    } finally {
      await connection.close();
    }
  });
});
