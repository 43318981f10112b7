/**
 * `agentry agents outbox <id>` and the outbox line of `agents show`, run from source as child processes against a
 * SQLite file a runtime in this test wrote; and what an admin command must not do: mark an attempt that a live
 * runtime has in flight as `unknown` (only a runtime that drives agents repairs the outbox when it opens).
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentRuntime, sqliteStorage } from 'agentry-runtime';
import { scriptedModel } from 'agentry-runtime/testing';
import { cliEnv, runCli, tempDir } from '../http/helpers.js';
import { goalOf, playGoal } from './web-fixtures.js';
import {
  startFakeSmtp,
  startFakeTwilio,
  TWILIO_FROM,
  TWILIO_SID,
  TWILIO_TOKEN,
  type FakeSmtp,
  type FakeTwilio,
} from './message-person-fixtures.js';

let tmp: ReturnType<typeof tempDir>;
let db: string;
let smtp: FakeSmtp;
let twilio: FakeTwilio;
let accountId: string;
let otherAccountId: string;
let agentId: string;
let quietAgentId: string;

const cli = (...args: string[]) => runCli(['agents', ...args, '--db', db, '--account', accountId], cliEnv());

beforeAll(async () => {
  tmp = tempDir('agentry-cli-outbox-');
  db = join(tmp.dir, 'agentry.db');
  smtp = await startFakeSmtp();
  twilio = await startFakeTwilio();
  const runtime = await AgentRuntime.open({
    storage: sqliteStorage({ path: db }),
    model: scriptedModel({ turns: playGoal }),
    builtinTools: {
      env: {},
      messaging: {
        smtpUrl: smtp.url,
        from: 'alerts@agentry.test',
        twilio: { accountSid: TWILIO_SID, authToken: TWILIO_TOKEN, from: TWILIO_FROM, baseUrl: twilio.base },
        allow: ['ada@example.com', '+4930'],
      },
    },
  });
  try {
    accountId = (await runtime.accounts.create({ name: 'cli', credits: 100 })).account.account_id;
    otherAccountId = (await runtime.accounts.create({ name: 'other', credits: 1 })).account.account_id;
    const goal = goalOf([
      { name: 'message_person', input: { channel: 'email', to: 'ada@example.com', subject: 'Hi', body: 'Hello' } },
      { name: 'message_person', input: { channel: 'sms', to: '+49301234568', body: 'Hello' } },
    ]);
    agentId = (await runtime.create({ goal, accountId })).agent_id;
    quietAgentId = (await runtime.create({ goal: '[]', accountId })).agent_id;
    expect((await runtime.waitFor(agentId)).status).toBe('COMPLETED');
    expect((await runtime.waitFor(quietAgentId)).status).toBe('COMPLETED');
  } finally {
    await runtime.close();
  }
});

afterAll(async () => {
  await smtp?.close();
  await twilio?.close();
  tmp?.remove();
});

describe('agentry agents outbox', () => {
  it('lists the attempts as a table and as JSON', async () => {
    const table = await cli('outbox', agentId);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(/^MESSAGE\s+STATUS\s+CHANNEL\s+TO\s+CREATED\s+DETAIL$/m);
    expect(table.stdout).toMatch(/\ssent\s+email\s+ada@example.com\s/);
    expect(table.stdout).toMatch(/\sfailed\s+sms\s+\+49301234568\s.*21211/);

    const json = await cli('outbox', agentId, '--json');
    expect(json.code, json.stderr).toBe(0);
    const { outbox } = JSON.parse(json.stdout) as { outbox: Array<{ status: string; channel: string }> };
    expect(outbox.map((m) => [m.channel, m.status])).toEqual([
      ['email', 'sent'],
      ['sms', 'failed'],
    ]);

    const none = await cli('outbox', quietAgentId);
    expect(none.stdout.trim()).toBe(`Agent ${quietAgentId} has sent no messages.`);
  });

  it('shows the counts in `agents show`, and keeps other accounts out', async () => {
    const show = await cli('show', agentId);
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toMatch(/messages\s+1 sent, 1 failed, 0 unknown \(agentry agents outbox /);
    const other = await runCli(['agents', 'outbox', agentId, '--db', db, '--account', otherAccountId], cliEnv());
    expect(other.code).not.toBe(0);
    expect(other.stderr).toMatch(/not found/i);
  });

  it('an admin command leaves attempts in flight alone; a runtime that drives agents marks them unknown', async () => {
    const storage = sqliteStorage({ path: db });
    await storage.init();
    await storage.queueOutbox(
      {
        message_id: '00000000-0000-4000-8000-000000000001',
        agent_id: quietAgentId,
        account_id: accountId,
        tool_use_id: 'toolu_in_flight',
        channel: 'email',
        to: 'ada@example.com',
        subject: 'In flight',
        body_hash: '0'.repeat(64),
        status: 'queued',
        provider_id: null,
        error: null,
        created_at: new Date().toISOString(),
        sent_at: null,
      },
      {
        agent: { max: 10, since: '1970-01-01T00:00:00.000Z' },
        account: { max: 10, since: '1970-01-01T00:00:00.000Z' },
      },
    );
    await storage.close();

    const listed = await cli('outbox', quietAgentId, '--json');
    expect(listed.code, listed.stderr).toBe(0);
    expect((JSON.parse(listed.stdout) as { outbox: Array<{ status: string }> }).outbox.map((m) => m.status)).toEqual([
      'queued',
    ]);

    const runtime = await AgentRuntime.open({
      storage: sqliteStorage({ path: db }),
      model: scriptedModel({ turns: [{ text: 'x' }] }),
      builtinTools: { env: {} },
    });
    try {
      expect((await runtime.outbox(quietAgentId)).map((m) => [m.status, m.error])).toEqual([
        ['unknown', expect.stringMatching(/may have been sent/)],
      ]);
      expect((await runtime.get(quietAgentId)).agent.outbox).toEqual({ queued: 0, sent: 0, failed: 0, unknown: 1 });
    } finally {
      await runtime.close();
    }
  });
});
