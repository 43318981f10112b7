/**
 * A pause that lands right after a model turn commits, before its tool calls start: a call that must never run twice
 * does not start (it is marked started only while the agent is ACTIVE), and it runs once after the resume. The next
 * step also starts from the row the commit read back (core/loop.ts), so this checks that the row it carries does not
 * outvote the pause.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, memoryStorage, sqliteStorage, type StorageAdapter } from 'agentry-runtime';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openTestRuntime } from '../support/runtime.js';

const storages: Array<[string, () => { storage: StorageAdapter; cleanup(): void }]> = [
  ['memory', () => ({ storage: memoryStorage(), cleanup() {} })],
  [
    'sqlite',
    () => {
      const dir = mkdtempSync(join(tmpdir(), 'agentry-pause-'));
      return {
        storage: sqliteStorage({ path: join(dir, 'a.db') }),
        cleanup: () => rmSync(dir, { recursive: true, force: true }),
      };
    },
  ],
];

describe.each(storages)('a pause right after a model turn commits (%s)', (_name, open) => {
  it('starts none of the tool calls that turn asked for; resume runs them', async () => {
    const { storage, cleanup } = open();
    let toolRuns = 0;
    const sideEffect = defineTool({
      name: 'side_effect',
      description: 'Does something that must not happen while paused',
      input: z.object({}),
      idempotent: false,
      run: () => {
        toolRuns++;
        return 'done';
      },
    });
    const { runtime } = await openTestRuntime(
      (_req, { turnIndex }) => (turnIndex === 0 ? { toolCalls: [{ name: 'side_effect', input: {} }] } : { text: 'ok' }),
      { storage, tools: [sideEffect] },
    );
    const { agent_id } = await runtime.create({ goal: 'do it once' });
    let pausing: Promise<unknown> | undefined;
    // Emitted synchronously by the commit of the model turn, before the driver takes its next step.
    runtime.on('credits.charged', (e) => {
      if (e.agent_id === agent_id && e.kind === 'model') pausing ??= runtime.pause(agent_id);
    });
    await runtime.waitFor(agent_id, { until: ['PAUSED'] });
    await pausing;
    await runtime.whenIdle();
    expect(toolRuns).toBe(0);
    expect((await runtime.get(agent_id)).agent.status).toBe('PAUSED');

    await runtime.resume(agent_id);
    expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
    expect(toolRuns).toBe(1);
    await runtime.close();
    cleanup();
  });
});
