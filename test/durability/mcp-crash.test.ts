/**
 * Crash safety of MCP calls. A worker process (`mcp-crash-worker.ts`) has an agent call
 * the fixture's counting tool; the server moves its counter and holds the answer, and the worker is SIGKILLed during
 * the call. A second process reopens the SQLite file:
 * - `count` has no annotations, so it is not safe to send twice: the call was recorded `started` before it was sent,
 *   it is not sent again (the counter moved once), and the model is told the outcome is unknown;
 * - `count_idempotent` is annotated `idempotentHint`: it is sent again (the counter moves twice) and the model sees
 *   the second answer.
 * No server process is left behind by either worker.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../support/runtime.js';
import { processesWith, readEvents } from '../mcp/support.js';
import { killLiveWorkers, killWorker, openStorage, startWorker } from './worker-harness.js';

afterEach(killLiveWorkers);

describe('a runtime SIGKILLed during an MCP call', () => {
  let root: string;
  beforeAll(() => {
    root = mkdtempSync(join(tmpdir(), 'agentry-mcp-crash-'));
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  async function crashDuring(tool: 'count' | 'count_idempotent') {
    const work = mkdtempSync(join(root, `${tool}-`));
    writeFileSync(join(work, 'counter'), '0');
    const db = join(work, 'agents.db');

    const first = startWorker('mcp-crash-worker.ts', [db, work, tool, 'first']);
    const agentId = (await first.waitForLine(/^agent /)).split(' ')[1]!;
    await eventually(
      () => readEvents(join(work, 'events')).some((e) => e[0] === 'start'),
      20_000,
      'the call at the server',
    );
    await killWorker(first);
    // The server of the killed runtime sees its stdin close and exits.
    await eventually(() => processesWith(`--tag=${work}`).length === 0, 5_000, 'the orphaned server to exit');
    expect(readFileSync(join(work, 'counter'), 'utf8')).toBe('1');
    {
      const storage = await openStorage(db);
      try {
        const [call] = await storage.listToolCalls(agentId, 1);
        expect(call).toMatchObject({
          name: `mcp__counting__${tool}`,
          status: tool === 'count' ? 'started' : 'pending',
        });
      } finally {
        await storage.close();
      }
    }

    const second = startWorker('mcp-crash-worker.ts', [db, work, tool, 'second', agentId]);
    const saw = JSON.parse((await second.waitForLine(/^saw /, 30_000)).slice(4)) as {
      content: string;
      is_error?: boolean;
    };
    expect(await second.waitForLine(/^done /, 30_000)).toBe('done COMPLETED Completed');
    expect((await second.exited).code, second.stderr()).toBe(0);
    expect(processesWith(`--tag=${work}`)).toEqual([]);
    return {
      saw,
      counter: Number(readFileSync(join(work, 'counter'), 'utf8')),
      events: readEvents(join(work, 'events')),
    };
  }

  it('a tool without hints is not sent again: the counter moved once and the model is told the outcome is unknown', async () => {
    const { saw, counter, events } = await crashDuring('count');
    expect(counter).toBe(1);
    expect(events.filter((e) => e[0] === 'start')).toHaveLength(1);
    expect(saw.is_error).toBe(true);
    expect(saw.content).toMatch(/^The outcome of this call is unknown/);
  });

  it('a tool annotated idempotentHint is sent again after the crash', async () => {
    const { saw, counter, events } = await crashDuring('count_idempotent');
    expect(counter).toBe(2);
    expect(events.filter((e) => e[0] === 'start')).toHaveLength(2);
    expect(saw).toEqual({ type: 'tool_result', tool_use_id: 'call_count', content: 'counter: 2' });
  });
});
