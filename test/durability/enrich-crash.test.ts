/**
 * A crash between enrich's children: the children that finished are not run again, the others are recovered.
 *
 * A worker process (`enrich-crash-worker.ts`) runs a parent whose `enrich` call spawned one research child per
 * company. Three children have COMPLETED (their results committed) and three are in their submitting model turn when
 * the process is SIGKILLed. A second process reopens the SQLite file. Checked from the database, the worker's event
 * file and the page server's log:
 * - the finished children are not run again: no model call of theirs in the second process, their pages fetched once,
 *   their stored results unchanged; the others resume at their submitting turn;
 * - no child is spawned again: the same six agent_ids, the re-run enrich call re-attached to them;
 * - the call returns every row, the finished children's included, each value with its checked citation;
 * - credits are exact: Σ ledger = balance, nothing left reserved, each child charged for each committed model turn once,
 *   the enrich call once.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { serveCorpus, type CorpusServer } from '../fixtures/corpus/veloran.js';
import { COMPANIES, FINISH_FIRST, PARENT_FINAL, PARENT_GOAL } from './enrich-crash-script.js';
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

describe('crash between enrich children', () => {
  let dir: string;
  let corpus: CorpusServer;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'agentry-enrich-crash-'));
    corpus = await serveCorpus();
  });
  afterAll(async () => {
    await corpus.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the resumed call neither repeats finished children nor loses their results; credits exact', async () => {
    const db = join(dir, 'enrich.db');
    const events = join(dir, 'events.txt');

    // --- first process: killed with three children COMPLETED and three in their submitting turn
    const first = startWorker('enrich-crash-worker.ts', [db, events, corpus.base, 'first']);
    const parentId = (await first.waitForLine(/^parent /)).split(' ')[1]!;
    await first.waitForLine(/^ready$/);
    await killWorker(first);

    // What the kill left on disk.
    let childIds: string[];
    const resultsBefore = new Map<string, string>();
    {
      const storage = await openStorage(db);
      try {
        expect(await storage.getAgent(parentId)).toMatchObject({ goal: PARENT_GOAL, status: 'ACTIVE' });
        const children = await childrenInTaskOrder(storage, parentId);
        expect(children.map((c) => c.goal.split('\n\n')[1])).toEqual(COMPANIES.map((c) => c.name));
        expect(children.map((c) => c.status)).toEqual(
          COMPANIES.map((_, i) => (i < FINISH_FIRST ? 'COMPLETED' : 'ACTIVE')),
        );
        childIds = children.map((c) => c.agent_id);
        for (const child of children.slice(0, FINISH_FIRST)) {
          const messages = await storage.listMessages(child.agent_id);
          resultsBefore.set(child.agent_id, messages.at(-1)!.text);
        }
      } finally {
        await storage.close();
      }
    }
    const fetchesBefore = [...corpus.seen];

    // --- second process: recovery resumes the tree
    const second = startWorker('enrich-crash-worker.ts', [db, events, corpus.base, 'second', parentId]);
    await expectWorkerCompleted(second);

    // Model calls per child across both processes: the finished ones never again; the others replay the killed turn.
    const lines = readEvents(events);
    const modelCalls = (agentId: string) =>
      lines.filter((l) => l[0] === 'M' && l[2] === agentId).map((l) => `${l[1]}:${l[3]}`);
    for (const [i, id] of childIds.entries()) {
      expect(modelCalls(id), COMPANIES[i]!.name).toEqual(
        i < FINISH_FIRST ? ['first:0', 'first:1', 'first:2'] : ['first:0', 'first:1', 'first:2', 'second:2'],
      );
    }
    expect(modelCalls(parentId)).toEqual(['first:0', 'second:1']);
    // The finished children's pages were fetched in the first process only.
    const fetchesAfter = corpus.seen.slice(fetchesBefore.length);
    for (const company of COMPANIES.slice(0, FINISH_FIRST)) {
      expect(corpus.seen.filter((p) => p === `/wiki/${company.slug}`)).toHaveLength(1);
      expect(fetchesAfter).not.toContain(`/wiki/${company.slug}`);
    }

    const storage = await openStorage(db);
    try {
      const parent = (await storage.getAgent(parentId))!;
      expect(parent.status, parent.status_message).toBe('COMPLETED');
      const children = await childrenInTaskOrder(storage, parentId);
      expect(children.map((c) => c.agent_id)).toEqual(childIds); // same children, none added
      expect((await storage.listAgents({ limit: 100 })).rows).toHaveLength(1 + COMPANIES.length);
      for (const child of children) {
        expect(child.status, child.status_message).toBe('COMPLETED');
        expect(child.step_count).toBe(3);
        const last = (await storage.listMessages(child.agent_id)).at(-1)!;
        if (resultsBefore.has(child.agent_id)) expect(last.text).toBe(resultsBefore.get(child.agent_id));
      }

      // The enrich call finished once, with every row: the finished children's results are in it.
      const [call] = await storage.listToolCalls(parentId, 1);
      expect(call).toMatchObject({ name: 'enrich', status: 'finished', is_error: false });
      const output = JSON.parse(call!.result!) as {
        rows: Array<{ entity: { name: string }; fields: Record<string, { value: unknown; citations: unknown[] }> }>;
        dropped_citations: number;
      };
      expect(output.dropped_citations).toBe(0);
      expect(output.rows.map((r) => [r.entity.name, r.fields.founded!.value, r.fields.headquarters!.value])).toEqual(
        COMPANIES.map((c) => [c.name, c.founded, c.town]),
      );
      for (const row of output.rows) {
        expect(row.fields.founded!.citations).toHaveLength(1);
        expect(row.fields.headquarters!.citations).toHaveLength(1);
      }
      expect((await storage.listMessages(parentId)).at(-1)).toMatchObject({ role: 'ASSISTANT', text: PARENT_FINAL });

      // Credits: every charge on the one account, the killed turns charged nothing, no hold left behind.
      const ledger = await expectLedgerSettled(storage);
      for (const child of children) {
        const rows = ledger.filter((l) => l.agent_id === child.agent_id);
        expect(rows.filter((l) => l.kind === 'model')).toHaveLength(3);
        expect(
          rows
            .filter((l) => l.kind === 'tool')
            .map((l) => l.item)
            .sort(),
        ).toEqual(['read_page', 'web_search']);
        expect(spentBy(ledger, child.agent_id)).toBe(child.credits_spent);
      }
      const parentRows = ledger.filter((l) => l.agent_id === parentId);
      expect(parentRows.filter((l) => l.kind === 'model')).toHaveLength(2);
      expect(parentRows.filter((l) => l.kind === 'tool').map((l) => [l.item, l.amount])).toEqual([
        ['enrich', -1_000_000],
      ]);
    } finally {
      await storage.close();
    }
  });
});
