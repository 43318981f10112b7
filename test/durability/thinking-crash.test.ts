/**
 * Crash resume under extended thinking: a worker process runs an
 * svc-1-ultra agent (thinking on, with a budget) against the test's stand-in Messages API and is SIGKILLed while its third model
 * call is in flight, two tool turns with their thinking already committed. A second process reopens the database and
 * finishes the agent. The stand-in refuses any request whose thinking block was dropped or altered (400), so the
 * agent completes only if the turn log gave back every thinking block — text, signature and redacted_thinking —
 * exactly as the stand-in signed it. Runs on SQLite, and on PostgreSQL when reachable (AGENTRY_CI_STRICT=1 requires it).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startFakeAnthropic, type FakeAnthropic } from 'agentry-runtime/testing';
import { FINAL_TEXT, THOUGHT, TOOL_TURNS, thinkingHandler, turnOf } from '../models/thinking-fixtures.js';
import { dropSchemas, newSchemaName, postgresUnreachable, urlWithSchema } from '../support/postgres.js';
import { eventually } from '../support/runtime.js';
import {
  expectLedgerSettled,
  expectWorkerCompleted,
  killLiveWorkers,
  killWorker,
  openStorage,
  startWorker,
} from './worker-harness.js';

afterEach(killLiveWorkers);

const postgresDown = await postgresUnreachable();
const strict = process.env.AGENTRY_CI_STRICT === '1';
const BACKENDS: Array<{ name: string; skip: string | null }> = [
  { name: 'sqlite', skip: null },
  { name: 'postgres', skip: postgresDown !== null && !strict ? postgresDown : null },
];
const schemas: string[] = [];
afterAll(() => dropSchemas(schemas));

type Block = Record<string, unknown>;

describe.each(BACKENDS)('SIGKILL mid-run under thinking ($name)', ({ name, skip }) => {
  let dir: string;
  let fake: FakeAnthropic;
  /** The model turn the stand-in holds without answering (the first process dies during it). */
  let holdTurn: number | undefined;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'agentry-thinking-crash-'));
    fake = await startFakeAnthropic({ handler: thinkingHandler({ holdTurn: () => holdTurn }) });
  });
  afterAll(async () => {
    await fake.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it.skipIf(skip !== null)(
    `resumes with the thinking blocks intact${skip === null ? '' : ` (skipped: PostgreSQL unreachable: ${skip})`}`,
    async () => {
      let db = join(dir, 'thinking.db');
      if (name === 'postgres') {
        const schema = newSchemaName('agentry_thinking_crash');
        schemas.push(schema);
        db = urlWithSchema(schema);
      }
      // --- first process: dies while its third model call (after two tool turns) waits for an answer
      holdTurn = 2;
      const first = startWorker('thinking-crash-worker.ts', [db, fake.url, 'first']);
      const agentId = (await first.waitForLine(/^agent /)).split(' ')[1]!;
      await eventually(
        () => fake.requests.some((r) => turnOf(r) === 2),
        20_000,
        'the third model call to reach the stand-in',
      );
      await killWorker(first);
      holdTurn = undefined;

      // On disk: two assistant turns, each starting with its signed thinking (the first also redacted thinking).
      {
        const storage = await openStorage(db);
        try {
          const turns = await storage.listTurns(agentId);
          const assistants = turns.filter((t) => t.role === 'assistant').map((t) => JSON.parse(t.content) as Block[]);
          expect(assistants).toHaveLength(2);
          for (const blocks of assistants) {
            expect(blocks[0]!.type).toBe('thinking');
            expect(fake.thinking.verify(blocks[0]!)).toBe(true);
          }
          expect(assistants[0]![1]).toMatchObject({ type: 'redacted_thinking' });
          expect(fake.thinking.verify(assistants[0]![1]!)).toBe(true);
        } finally {
          await storage.close();
        }
      }

      // --- second process: recovery redoes the third call from the turn log; the stand-in checks every block
      const before = fake.requests.length;
      const second = startWorker('thinking-crash-worker.ts', [db, fake.url, 'second', agentId]);
      await expectWorkerCompleted(second);

      const resumed = fake.requests.slice(before);
      expect(resumed.map(turnOf)).toEqual([2, 3]);
      for (const request of resumed) {
        const assistants = request.messages.filter((m) => m.role === 'assistant');
        assistants.forEach((m, n) => {
          const blocks = m.content as Block[];
          expect(blocks[0]).toMatchObject({ type: 'thinking', thinking: expect.stringContaining(`${THOUGHT} ${n}:`) });
          expect(fake.thinking.verify(blocks[0]!)).toBe(true);
        });
        expect(blocksWithType(assistants[0]!.content as Block[], 'redacted_thinking')).toHaveLength(1);
      }

      const storage = await openStorage(db);
      try {
        const agent = (await storage.getAgent(agentId))!;
        expect(agent.status).toBe('COMPLETED');
        const messages = await storage.listMessages(agentId);
        expect(messages.at(-1)!.text).toBe(FINAL_TEXT);
        expect(messages).toHaveLength(TOOL_TURNS + 2);
        for (const m of messages) expect(m.text).not.toContain(THOUGHT);
        const turns = await storage.listTurns(agentId);
        expect(turns.filter((t) => t.role === 'assistant')).toHaveLength(TOOL_TURNS + 1);
        // The interrupted call was never settled; every committed call is, and nothing stays reserved.
        const ledger = await expectLedgerSettled(storage);
        expect(ledger.filter((l) => l.kind === 'model')).toHaveLength(TOOL_TURNS + 1);
      } finally {
        await storage.close();
      }
    },
    90_000,
  );
});

function blocksWithType(blocks: Block[], type: string): Block[] {
  return blocks.filter((b) => b.type === type);
}
