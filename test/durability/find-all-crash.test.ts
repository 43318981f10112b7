/**
 * A crash between find_all's phases: the phase saved in the call's durable state is not run again.
 *
 * A worker process (`find-all-crash-worker.ts`) runs a lead agent whose find_all call has finished generating (both
 * generators completed, the merged candidate set saved in the call's durable state) and spawned one verifier per
 * candidate; two verifiers have completed and three are in their second model turn when the process is SIGKILLed. A
 * second process reopens the SQLite file. Checked from the database and the worker's event file:
 * - generation does not run again: no generator model call and no search in the second process, and no generator
 *   child added (children counted by spawn group);
 * - finished verifiers are not repeated; the three cut short resume at their second turn, in the same agents;
 * - the call completes with exactly the cooperatives, and Σ ledger = balance with nothing left reserved.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { AgentRow, StorageAdapter } from 'agentry-runtime';
import { serveCorpus, type CorpusServer } from '../fixtures/corpus/veloran.js';
import {
  EXPECTED_ENTITIES,
  FINISHING,
  HANGING,
  LEAD_FINAL,
  LEAD_GOAL,
  OBJECTIVE,
  candidateOf,
} from './find-all-crash-script.js';
import {
  expectLedgerSettled,
  expectWorkerCompleted,
  killLiveWorkers,
  killWorker,
  openStorage,
  readEvents,
  spentBy,
  startWorker,
} from './worker-harness.js';

afterEach(killLiveWorkers);

/** The lead's children by spawn group (`<call id>/<group>#<index>`), each in task order. */
async function childrenByGroup(storage: StorageAdapter, leadId: string): Promise<Record<string, AgentRow[]>> {
  const { rows } = await storage.listAgents({ parent_id: leadId, limit: 100 });
  const groups: Record<string, AgentRow[]> = {};
  for (const row of rows) {
    const [spawnId, index] = row.spawn_key!.split('#');
    const group = spawnId!.split('/')[1] ?? '(none)';
    (groups[group] ??= [])[Number(index)] = row;
  }
  return groups;
}

describe('crash between find_all’s phases', () => {
  let dir: string;
  let corpus: CorpusServer;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'agentry-find-all-crash-'));
    corpus = await serveCorpus();
  });
  afterAll(async () => {
    await corpus.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('resumes at verification: generation is not run again, finished verifiers are not repeated, credits exact', async () => {
    const db = join(dir, 'find-all.db');
    const events = join(dir, 'events.txt');

    // --- first process: killed after generation, with two verifiers done and three in their second turn
    const first = startWorker('find-all-crash-worker.ts', [db, events, corpus.base, 'first']);
    const leadId = (await first.waitForLine(/^lead /)).split(' ')[1]!;
    await first.waitForLine(/^ready$/);
    await killWorker(first);

    // What the kill left on disk: the candidate set saved, the generators done, the verifiers part done.
    let generatorIds: string[];
    let verifierIds: Map<string, string>;
    let callId: string;
    {
      const storage = await openStorage(db);
      try {
        expect(await storage.getAgent(leadId)).toMatchObject({ goal: LEAD_GOAL, status: 'ACTIVE' });
        const [call] = await storage.listToolCalls(leadId, 1);
        expect(call).toMatchObject({ name: 'find_all' });
        callId = call!.tool_use_id;
        const state = JSON.parse((await storage.getToolState(leadId, callId))!) as {
          phase: string;
          candidates: Array<{ name: string; spellings: string[] }>;
        };
        expect(state.phase).toBe('verify');
        expect(state.candidates.map((c) => c.name)).toEqual([
          'Tessel Kelpworks',
          'Quillon Glass',
          'Penhallow Weather Bureau',
          'Marrow Ferry Company',
          'Sorrel Rope Works',
        ]);
        expect(state.candidates[0]!.spellings).toEqual(['Tessel Kelpworks', 'Tessel Kelpworks Co.']);

        const groups = await childrenByGroup(storage, leadId);
        expect(Object.keys(groups).sort()).toEqual(['generate', 'verify']);
        expect(groups.generate!.map((c) => c.status)).toEqual(['COMPLETED', 'COMPLETED']);
        generatorIds = groups.generate!.map((c) => c.agent_id);
        verifierIds = new Map(groups.verify!.map((c) => [candidateOf(c.goal)!.name, c.agent_id]));
        for (const c of groups.verify!) {
          expect(c.goal).toContain(OBJECTIVE);
          expect(c.status).toBe(FINISHING.includes(candidateOf(c.goal)!.name) ? 'COMPLETED' : 'ACTIVE');
        }
      } finally {
        await storage.close();
      }
    }

    // --- second process: recovery resumes the verifiers and then the call
    const second = startWorker('find-all-crash-worker.ts', [db, events, corpus.base, 'second', leadId]);
    await expectWorkerCompleted(second);

    const lines = readEvents(events);
    const modelCalls = (agentId: string) =>
      lines.filter((l) => l[0] === 'M' && l[3] === agentId).map((l) => `${l[1]}:${l[4]}`);
    const callsIn = (run: string, role: string) => lines.filter((l) => l[0] === 'M' && l[1] === run && l[2] === role);
    // Generation ran once, in the first process: three turns per generator, two searches.
    for (const id of generatorIds) expect(modelCalls(id)).toEqual(['first:0', 'first:1', 'first:2']);
    expect(callsIn('second', 'generator-0')).toEqual([]);
    expect(callsIn('second', 'generator-1')).toEqual([]);
    expect(lines.filter((l) => l[0] === 'Q').map((l) => l[1])).toEqual(['first', 'first']);
    // Finished verifiers are not repeated; those cut short replay only their second turn.
    for (const name of FINISHING) expect(modelCalls(verifierIds.get(name)!)).toEqual(['first:0', 'first:1']);
    for (const name of HANGING) expect(modelCalls(verifierIds.get(name)!)).toEqual(['first:0', 'first:1', 'second:1']);
    expect(modelCalls(leadId)).toEqual(['first:0', 'second:1']);

    const storage = await openStorage(db);
    try {
      // The same children, none added: 2 generators and 5 verifiers.
      const groups = await childrenByGroup(storage, leadId);
      expect(groups.generate!.map((c) => c.agent_id)).toEqual(generatorIds);
      expect(groups.verify!.map((c) => c.agent_id).sort()).toEqual([...verifierIds.values()].sort());
      expect((await storage.listAgents({ limit: 100 })).rows).toHaveLength(1 + 2 + 5);
      for (const c of [...groups.generate!, ...groups.verify!]) expect(c.status, c.status_message).toBe('COMPLETED');

      const [call] = await storage.listToolCalls(leadId, 1);
      expect(call).toMatchObject({ tool_use_id: callId, name: 'find_all', status: 'finished', is_error: false });
      const result = JSON.parse(call!.result!) as {
        entities: Array<{ name: string; matched_conditions: Array<{ met: boolean }> }>;
      };
      expect(result.entities.map((e) => e.name)).toEqual(EXPECTED_ENTITIES);
      expect(result.entities.every((e) => e.matched_conditions.every((m) => m.met))).toBe(true);
      // Tessel (both), Quillon (both), Penhallow, Marrow, Sorrel; matched: 3 by one generator, 2 by the other, 2 both.
      expect(result).toMatchObject({ candidates_considered: 5, dropped: 0, estimated_total: 3 });
      expect((await storage.listMessages(leadId)).at(-1)).toMatchObject({ role: 'ASSISTANT', text: LEAD_FINAL });

      // Credits: every charge on the one account, find_all charged once, no hold left behind.
      const ledger = await expectLedgerSettled(storage);
      expect(ledger.filter((l) => l.kind === 'tool' && l.item === 'find_all').map((l) => l.agent_id)).toEqual([leadId]);
      const agents = (await storage.listAgents({ limit: 100 })).rows;
      for (const agent of agents) {
        expect(spentBy(ledger, agent.agent_id)).toBe(agent.credits_spent);
      }
    } finally {
      await storage.close();
    }
  });
});
