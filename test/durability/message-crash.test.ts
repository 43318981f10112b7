/**
 * At most once across a crash: a worker process records a message_person attempt
 * and hands the e-mail to the SMTP server, which takes the whole message but has not answered when the worker is
 * SIGKILLed — the one moment nobody can know whether it was delivered. A second process reopens the SQLite file:
 * - the outbox entry, on disk as `queued` before anything was sent, is now `unknown`, never `sent` twice;
 * - the model is told the call's outcome is unknown; when it tries the same message again, the tool refuses it;
 * - the SMTP server saw exactly one message and one recipient across both processes.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startFakeSmtp, type FakeSmtp } from '../tools/message-person-fixtures.js';
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

describe('crash between "recorded" and "sent" (message_person)', () => {
  let dir: string;
  let smtp: FakeSmtp;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'agentry-message-crash-'));
    smtp = await startFakeSmtp();
  });
  afterAll(async () => {
    await smtp.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('sends nothing twice: the entry ends unknown, the model is told, a retry is refused', async () => {
    const db = join(dir, 'message.db');

    // --- first process: killed while the SMTP server holds the message it received, unanswered
    smtp.holdData = true;
    const first = startWorker('message-crash-worker.ts', [db, smtp.url, 'first']);
    const agentId = (await first.waitForLine(/^agent /)).split(' ')[1]!;
    await eventually(() => smtp.dataSeen === 1, 20_000, 'the SMTP server to receive the message');
    await killWorker(first);
    smtp.holdData = false;

    // Recorded before it was sent: on disk as queued.
    {
      const storage = await openStorage(db);
      try {
        const outbox = await storage.listOutbox(agentId);
        expect(outbox.map((r) => [r.status, r.to])).toEqual([['queued', 'ada@example.com']]);
        const [call] = await storage.listToolCalls(agentId, 1);
        expect(call).toMatchObject({ name: 'message_person', status: 'started', idempotent: false });
      } finally {
        await storage.close();
      }
    }

    // --- second process: recovery
    const second = startWorker('message-crash-worker.ts', [db, smtp.url, 'second', agentId]);
    await expectWorkerCompleted(second);

    expect(smtp.dataSeen).toBe(1);
    expect(smtp.rcpts).toEqual(['ada@example.com']);
    expect(smtp.received).toEqual([]); // the held message was never acknowledged

    const storage = await openStorage(db);
    try {
      const outbox = await storage.listOutbox(agentId);
      expect(outbox).toHaveLength(1);
      expect(outbox[0]).toMatchObject({ status: 'unknown', provider_id: null, sent_at: null });
      expect(outbox[0]!.error).toMatch(/may have been sent\. It is never sent again automatically/);
      // The model's view: the crashed call's outcome is unknown; its retry of the same message was refused.
      const [crashed] = await storage.listToolCalls(agentId, 1);
      expect(crashed).toMatchObject({ status: 'finished', is_error: true });
      expect(crashed!.result).toMatch(/The outcome of this call is unknown/);
      const [retry] = await storage.listToolCalls(agentId, 3);
      expect(retry).toMatchObject({ name: 'message_person', status: 'finished', is_error: true });
      expect(retry!.result).toMatch(/may already have been sent before the runtime stopped; it is not sent twice/);
      const answer = (await storage.listMessages(agentId)).at(-1)!;
      expect(answer.role).toBe('ASSISTANT');
      expect(answer.text).toMatch(/outcome of this call is unknown[\s\S]*not sent twice/);
      await expectLedgerSettled(storage);
    } finally {
      await storage.close();
    }
  });
});
