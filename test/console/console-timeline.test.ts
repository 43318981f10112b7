/**
 * The console's timeline over plain HTTP (no browser), from what storage keeps: a model call shows the provider's
 * latency as its ledger row stored it (not the time since the previous entry, which includes a wait for a model slot),
 * and pauses and resumes are status marks that a restart of the whole server on the same SQLite file keeps.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentRuntime, memoryStorage, sqliteStorage } from 'agentry-runtime';
import { startServer, type RunningServer } from 'agentry-runtime/http';
import { fakeClock, scriptedModel } from 'agentry-runtime/testing';
import { eventually, signIn } from './support.js';

interface TimelineEntry {
  kind: string;
  at: string;
  latency_ms?: number | null;
  status?: string;
  previous?: string;
  message?: string;
}

async function timelineOf(origin: string, cookie: string, agentId: string): Promise<TimelineEntry[]> {
  const response = await fetch(`${origin}/console/api/agents/${agentId}`, { headers: { cookie } });
  expect(response.status).toBe(200);
  return ((await response.json()) as { timeline: TimelineEntry[] }).timeline;
}

describe("the console's timeline from storage", () => {
  const cleanups: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  it("shows a model call's latency as measured around the provider's call, not its wait for a model slot", async () => {
    // Each call takes a known time on the fake clock, inside the provider. One model slot: whichever agent calls
    // second waits for the first's call, which a latency guessed from the previous entry would count.
    const clock = fakeClock();
    const took: Record<string, number> = { '[one]': 1_000, '[two]': 1_234 };
    const model = scriptedModel({
      record: false,
      turns: (request) => {
        const goal = JSON.stringify(request.messages[0] ?? '');
        const marker = Object.keys(took).find((m) => goal.includes(m))!;
        clock.advance(took[marker]!);
        return { text: `Done ${marker}.` };
      },
    });
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model,
      clock,
      builtinTools: false,
      concurrency: { models: 1 },
    });
    cleanups.push(() => runtime.close());
    const { account, apiKey } = await runtime.accounts.create({ name: 'latency', credits: 100 });
    const server: RunningServer = await startServer(runtime, { port: 0, console: true, pollThread: false });
    cleanups.push(() => server.close());
    const cookie = await signIn(server.url, apiKey!.key);

    const agents = await Promise.all(
      Object.keys(took).map(async (marker) => {
        const created = await runtime.create({ goal: `Answer ${marker}`, accountId: account.account_id });
        return { marker, id: created.agent_id };
      }),
    );
    for (const { id } of agents) await runtime.waitFor(id);

    for (const { marker, id } of agents) {
      const models = (await timelineOf(server.url, cookie, id)).filter((e) => e.kind === 'model_call');
      expect(
        models.map((e) => e.latency_ms),
        marker,
      ).toEqual([took[marker]]);
    }
    // The ledger row is where it comes from.
    const { ledger } = await runtime.activity(agents[1]!.id);
    expect(ledger.map((l) => l.latency_ms)).toEqual([took['[two]']]);
  });

  it('keeps pauses and resumes as status marks across a restart on the same SQLite file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'agentry-console-marks-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const path = join(dir, 'agentry.db');
    // A model turn that never ends on its own: a pause aborts it, a resume starts it again, a close ends it.
    const open = async () => {
      const runtime = await AgentRuntime.open({
        storage: sqliteStorage({ path }),
        model: scriptedModel({ record: false, turns: () => ({ text: 'holding', delayMs: 3_600_000 }) }),
        builtinTools: false,
        closeTimeoutMs: 50,
      });
      const server = await startServer(runtime, { port: 0, console: true, pollThread: false });
      const close = async () => {
        await server.close();
        await runtime.close();
      };
      return { runtime, server, close };
    };
    let up = await open();
    cleanups.push(() => up.close());
    const { account, apiKey } = await up.runtime.accounts.create({ name: 'marks', credits: 100 });
    const cookie = await signIn(up.server.url, apiKey!.key);
    const post = async (path: string) => {
      const response = await fetch(`${up.server.url}/console/api/agents/${path}`, {
        method: 'POST',
        headers: { cookie, origin: up.server.url },
      });
      expect(response.status, path).toBe(200);
    };
    const agent = await up.runtime.create({ goal: 'Hold on', accountId: account.account_id });
    // In its model call, so that the pause moves it from ACTIVE.
    await eventually(async () => (await up.runtime.get(agent.agent_id)).agent.status === 'ACTIVE', 'the agent runs');
    await post(`${agent.agent_id}/pause`);
    await post(`${agent.agent_id}/resume`);
    await post(`${agent.agent_id}/pause`);
    const marks = (entries: TimelineEntry[]) =>
      entries.filter((e) => e.kind === 'status').map((e) => [e.status, e.previous, e.message]);
    const expected = [
      ['PAUSED', 'ACTIVE', 'Paused'],
      ['ACTIVE', 'PAUSED', 'Resuming'],
      ['PAUSED', 'ACTIVE', 'Paused'],
    ];
    expect(marks(await timelineOf(up.server.url, cookie, agent.agent_id))).toEqual(expected);

    // A restart of the whole server: a new runtime (a new process, as far as storage can tell) on the same file.
    await up.close();
    up = await open();
    // The session is a row of the file too: the same cookie reads the same marks from the new runtime.
    const after = await timelineOf(up.server.url, cookie, agent.agent_id);
    expect(marks(after)).toEqual(expected);
    const times = after.filter((e) => e.kind === 'status').map((e) => e.at);
    expect([...times].sort()).toEqual(times);
  });
});
