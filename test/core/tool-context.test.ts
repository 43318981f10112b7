/**
 * The tool context on its own: `pagesRead` returns the reads of the call and of the children it spawned, in any of
 * its spawn groups, and of no other call.
 */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { memoryStorage, type AgentRow } from 'agentry-runtime';

const T0 = new Date(0).toISOString();
import type { StepDeps } from '../../src/core/step-types.js';
import { newRunControl } from '../../src/core/step-types.js';
import { createToolContext } from '../../src/core/tool-context.js';
import { agentRow } from './gate-fixtures.js';

describe('ToolContext.pagesRead', () => {
  it("reads only the call's own children, not those of a call whose id starts with the same characters", async () => {
    const storage = memoryStorage();
    await storage.init();
    const parent = agentRow('P', { parent_id: null, spawn_key: null });
    await storage.insertAgents(
      [
        parent,
        agentRow('own', { parent_id: 'P', spawn_key: 'call_1#0' }),
        agentRow('grouped', { parent_id: 'P', spawn_key: 'call_1/wave#0' }),
        agentRow('other', { parent_id: 'P', spawn_key: 'call_12#0' }),
      ],
      [],
      [],
    );
    for (const [agent, url] of [
      ['own', 'https://a.example/own'],
      ['grouped', 'https://a.example/grouped'],
      ['other', 'https://a.example/other'],
    ] as const) {
      const text = `text of ${url}`;
      await storage.recordPageRead(
        {
          agent_id: agent,
          tool_use_id: 'x',
          url,
          final_url: url,
          title: url,
          content_sha256: createHash('sha256').update(text).digest('hex'),
          retrieved_at: T0,
        },
        text,
      );
    }
    const deps = { storage } as unknown as StepDeps;
    const ctx = createToolContext(
      deps,
      parent,
      { type: 'tool_use', id: 'call_1', name: 't', input: {} },
      newRunControl(),
      () => {},
    );
    const urls = (await ctx.pagesRead()).map((p) => p.url).sort();
    expect(urls).toEqual(['https://a.example/grouped', 'https://a.example/own']);
  });

  it("refuses a spawn group whose name has a '#', which would mix it with another group's children", async () => {
    const spawned: string[] = [];
    const deps = {
      subAgents: { spawn: async (_row: AgentRow, spawnId: string) => void spawned.push(spawnId) },
    } as unknown as StepDeps;
    const ctx = createToolContext(
      deps,
      agentRow('P', { parent_id: null, spawn_key: null }),
      { type: 'tool_use', id: 'call_1', name: 't', input: {} },
      newRunControl(),
      () => {},
    );
    await ctx.spawn([{ goal: 'g' }], { group: 'a' });
    await expect(ctx.spawn([{ goal: 'g' }], { group: 'a#1' })).rejects.toThrow(/may not contain '#'/);
    expect(spawned).toEqual(['call_1/a']);
  });
});
