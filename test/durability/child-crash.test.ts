/**
 * A crash between a child's steps: a child agent of a tool recovers like any agent.
 *
 * A worker process (`child-crash-worker.ts`) runs a parent whose `research` tool spawned two children with a job of
 * their own. Each child has taken one step (alpha called `lookup`, idempotent; beta called `note`, not idempotent) and
 * is in its second model turn when the process is SIGKILLed. A second process reopens the SQLite file. Checked from
 * the database and the worker's event file:
 * - the children are resumed, not spawned again: the same two agent_ids, and the parent's re-run of `research` finds
 *   them (`reattached`);
 * - each child's first step is not redone: one model call for its turn 0 across both processes; its second turn sees
 *   the first step's tool result and submits from it;
 * - `note` ran once (its result was saved before the kill); `lookup`, whose result commits with the next model turn,
 *   ran again with the same tool_use_id (idempotent calls are rerun after a crash);
 * - the parent completes with the children's validated data, and Σ ledger = balance with nothing left reserved.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CHILDREN, CHILD_INSTRUCTIONS, EXPECTED_RESULTS, PARENT_FINAL, PARENT_GOAL } from './child-crash-script.js';
import {
  childrenInTaskOrder,
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

describe('crash between a child agent’s steps', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'agentry-child-crash-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('a SIGKILLed child resumes from its saved step in the next process; the parent re-attaches and completes with its data', async () => {
    const db = join(dir, 'children.db');
    const events = join(dir, 'events.txt');

    // --- first process: killed while both children are in their second model turn
    const first = startWorker('child-crash-worker.ts', [db, events, 'first']);
    const parentId = (await first.waitForLine(/^parent /)).split(' ')[1]!;
    await first.waitForLine(/^in-second-turn$/);
    await killWorker(first);

    // What the kill left on disk: two children, each with one step saved, none finished.
    let childIds: string[];
    {
      const storage = await openStorage(db);
      try {
        const parent = (await storage.getAgent(parentId))!;
        expect(parent).toMatchObject({ goal: PARENT_GOAL, status: 'ACTIVE', step_count: 1 });
        const children = await childrenInTaskOrder(storage, parentId);
        expect(children.map((c) => c.goal)).toEqual(CHILDREN.map((c) => `Research ${c.topic}`));
        for (const child of children) {
          expect(child).toMatchObject({ status: 'ACTIVE', step_count: 1, root_id: parentId });
          expect(JSON.parse(child.spec!)).toMatchObject({ instructions: CHILD_INSTRUCTIONS });
        }
        childIds = children.map((c) => c.agent_id);
        const [alphaTurns, betaTurns] = await Promise.all(childIds.map((id) => storage.listTurns(id)));
        // alpha's lookup result was to commit with its second model turn, which never came back; beta's note (not
        // idempotent) was saved before that turn started.
        expect(alphaTurns!.map((t) => t.role)).toEqual(['user', 'assistant']);
        expect(betaTurns!.map((t) => t.role)).toEqual(['user', 'assistant', 'user']);
      } finally {
        await storage.close();
      }
    }

    // --- second process: recovery resumes the tree
    const second = startWorker('child-crash-worker.ts', [db, events, 'second', parentId]);
    await expectWorkerCompleted(second);

    const lines = readEvents(events);
    const modelCalls = (agentId: string) =>
      lines.filter((l) => l[0] === 'M' && l[2] === agentId).map((l) => `${l[1]}:${l[3]}`);
    // Each child: turn 0 once (first process); turn 1 killed in flight, then played again after the restart.
    for (const id of childIds) expect(modelCalls(id)).toEqual(['first:0', 'first:1', 'second:1']);
    expect(modelCalls(parentId)).toEqual(['first:0', 'second:1']);
    // The spawn was never repeated: the re-runs of research re-attached (on recovery, and when the children woke it).
    const spawns = lines.filter((l) => l[0] === 'S').map((l) => `${l[1]}:${l[2]}`);
    expect(spawns[0]).toBe('first:false');
    expect(spawns.slice(1).length).toBeGreaterThanOrEqual(1);
    expect(spawns.slice(1).every((s) => s === 'second:true')).toBe(true);
    // Tool runs: note once; lookup rerun with the same tool_use_id (its result had not been saved).
    const toolRuns = (name: string) => lines.filter((l) => l[0] === 'T' && l[2] === name);
    const [alphaId, betaId] = childIds;
    expect(toolRuns('note').map((l) => [l[1], l[3]])).toEqual([['first', betaId]]);
    const lookups = toolRuns('lookup');
    expect(lookups.map((l) => [l[1], l[3]])).toEqual([
      ['first', alphaId],
      ['second', alphaId],
    ]);
    expect(lookups[1]![4]).toBe(lookups[0]![4]);

    // The database afterwards.
    const storage = await openStorage(db);
    try {
      const parent = (await storage.getAgent(parentId))!;
      expect(parent.status, parent.status_message).toBe('COMPLETED');
      const children = await childrenInTaskOrder(storage, parentId);
      expect(children.map((c) => c.agent_id)).toEqual(childIds); // same children, none added
      expect((await storage.listAgents({ limit: 100 })).rows).toHaveLength(3);
      for (const [i, child] of children.entries()) {
        expect(child.status, child.status_message).toBe('COMPLETED');
        expect(child.step_count).toBe(2);
        const turns = await storage.listTurns(child.agent_id);
        expect(turns.map((t) => t.role)).toEqual(['user', 'assistant', 'user', 'assistant', 'user']);
        const messages = await storage.listMessages(child.agent_id);
        expect(messages.at(-1)).toMatchObject({ role: 'ASSISTANT', text: JSON.stringify(EXPECTED_RESULTS[i]) });
        const calls = [
          ...(await storage.listToolCalls(child.agent_id, 1)),
          ...(await storage.listToolCalls(child.agent_id, 3)),
        ];
        expect(calls.map((c) => [c.name, c.status, c.is_error])).toEqual([
          [CHILDREN[i]!.tool, 'finished', false],
          ['submit_result', 'finished', false],
        ]);
      }
      // The parent's research call returned the validated data, and the parent finished on it.
      const [research] = await storage.listToolCalls(parentId, 1);
      expect(research).toMatchObject({ name: 'research', status: 'finished', is_error: false });
      expect(JSON.parse(research!.result!)).toEqual({
        results: childIds.map((agent_id, i) => ({ agent_id, status: 'COMPLETED', data: EXPECTED_RESULTS[i] })),
      });
      const parentMessages = await storage.listMessages(parentId);
      expect(parentMessages.at(-1)).toMatchObject({ role: 'ASSISTANT', text: PARENT_FINAL });

      // Credits: every charge on the one account, the killed turns charged nothing, no hold left behind.
      const ledger = await expectLedgerSettled(storage);
      for (const child of children) {
        const rows = ledger.filter((l) => l.agent_id === child.agent_id);
        expect(rows.filter((l) => l.kind === 'model')).toHaveLength(2);
        expect(spentBy(ledger, child.agent_id)).toBe(child.credits_spent);
      }
      // alpha's lookup ran twice but was charged once: only the committed run settles.
      expect(ledger.filter((l) => l.kind === 'tool').map((l) => [l.agent_id, l.item])).toEqual(
        expect.arrayContaining([
          [alphaId, 'lookup'],
          [betaId, 'note'],
        ]),
      );
      expect(ledger.filter((l) => l.kind === 'tool')).toHaveLength(2);
    } finally {
      await storage.close();
    }
  });
});
