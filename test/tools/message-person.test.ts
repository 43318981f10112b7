/**
 * message_person end to end: a scripted model calls the tool in a real runtime, and the message goes
 * through nodemailer to an in-process SMTP server (parsed back with postal-mime) or through fetch to a server in the
 * shape of Twilio's API. Refusals are checked the other way round: each is a clear tool error, and neither fake
 * received anything. A safety net refuses any connection that is not to loopback.
 */
import { createHash } from 'node:crypto';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  memoryStorage,
  sqliteStorage,
  type AgentRuntime,
  type BuiltinToolsOptions,
  type MessagingOptions,
} from 'agentry-runtime';
import { openTestRuntime, type TestRuntime } from '../support/runtime.js';
import { goalOf, playGoal, refuseNonLoopbackConnections, resultSeenAt, type PlannedCall } from './web-fixtures.js';
import {
  SMTP_REFUSED,
  startFakeSmtp,
  startFakeTwilio,
  TWILIO_FROM,
  TWILIO_SID,
  TWILIO_TOKEN,
  type FakeSmtp,
  type FakeTwilio,
} from './message-person-fixtures.js';

const violations = refuseNonLoopbackConnections();

let smtp: FakeSmtp;
let twilio: FakeTwilio;
const opened: AgentRuntime[] = [];

beforeAll(async () => {
  smtp = await startFakeSmtp();
  twilio = await startFakeTwilio();
});
afterAll(async () => {
  await smtp.close();
  await twilio.close();
});
beforeEach(() => {
  smtp.rcpts.length = 0;
  smtp.received.length = 0;
  twilio.requests.length = 0;
});
afterEach(async () => {
  expect(violations).toEqual([]);
  await Promise.all(opened.splice(0).map((r) => r.close()));
});

const ALLOW = ['ada@example.com', '@ops.example.com', SMTP_REFUSED, '+4930'];

function messaging(extra: MessagingOptions = {}): MessagingOptions {
  return {
    smtpUrl: smtp.url,
    from: 'Agentry Alerts <alerts@agentry.test>',
    twilio: { accountSid: TWILIO_SID, authToken: TWILIO_TOKEN, from: TWILIO_FROM, baseUrl: twilio.base },
    allow: ALLOW,
    ...extra,
  };
}

/** A runtime whose built-in tools read nothing from the environment: only what the test passes. */
async function openRuntime(
  builtin: Partial<BuiltinToolsOptions> = { messaging: messaging() },
  options: { storage?: ReturnType<typeof sqliteStorage> } = {},
): Promise<TestRuntime> {
  const t = await openTestRuntime(playGoal, {
    storage: options.storage ?? memoryStorage(),
    builtinTools: { env: {}, ...builtin },
  });
  opened.push(t.runtime);
  return t;
}

/** Runs an agent that makes `calls` and returns its id and what the model saw after each call. */
async function runAgent(t: TestRuntime, calls: PlannedCall[]) {
  const { agent_id } = await t.runtime.create({ goal: goalOf(calls) });
  const agent = await t.runtime.waitFor(agent_id);
  expect(agent.status, agent.status_message).toBe('COMPLETED');
  return { agentId: agent_id, results: calls.map((_, i) => resultSeenAt(t.model, agent_id, i + 1)) };
}

const email = (to: string, subject: string | undefined, body: string): PlannedCall => ({
  name: 'message_person',
  input: { channel: 'email', to, ...(subject === undefined ? {} : { subject }), body },
});
const sms = (to: string, body: string): PlannedCall => ({
  name: 'message_person',
  input: { channel: 'sms', to, body },
});

const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest('hex');

describe('message_person: e-mail through SMTP', () => {
  it('delivers a UTF-8 message to the SMTP server: sender, recipient, subject and body as sent', async () => {
    const t = await openRuntime();
    const subject = 'Preis gefallen: 49 € — 値下がりしました — цена снизилась';
    const body =
      'Der Preis liegt jetzt bei 49 €.\n価格が50ユーロを下回りました。\nЦена опустилась ниже 50 евро.\nhttps://shop.example/item';
    const { agentId, results } = await runAgent(t, [email('Ada@Example.COM', subject, body)]);

    expect(results[0]!.is_error, results[0]!.content).toBeFalsy();
    const output = JSON.parse(results[0]!.content) as { message_id: string; status: string; provider_id: string };
    expect(output).toEqual({ message_id: expect.any(String), status: 'sent', provider_id: expect.any(String) });

    expect(smtp.received).toHaveLength(1);
    const mail = smtp.received[0]!;
    expect(mail.mailFrom).toBe('alerts@agentry.test');
    expect(mail.rcptTo).toEqual(['ada@example.com']);
    expect(mail.parsed.from).toEqual({ name: 'Agentry Alerts', address: 'alerts@agentry.test' });
    expect(mail.parsed.to).toEqual([{ name: '', address: 'ada@example.com' }]);
    expect(mail.parsed.subject).toBe(subject);
    expect(mail.parsed.text?.trimEnd()).toBe(body);
    // The outbox's id travels in the Message-ID, and is the provider id.
    expect(mail.parsed.messageId).toBe(`<${output.message_id}@agentry.test>`);
    expect(output.provider_id).toBe(mail.parsed.messageId);
    // No header of the model's: exactly one recipient header, and no Bcc.
    expect(mail.raw).not.toMatch(/^bcc:/im);

    const [entry] = await t.runtime.outbox(agentId);
    expect(entry).toEqual({
      message_id: output.message_id,
      agent_id: agentId,
      channel: 'email',
      to: 'ada@example.com',
      subject,
      body_hash: sha256(body),
      status: 'sent',
      provider_id: output.provider_id,
      error: null,
      created_at: expect.any(String),
      sent_at: expect.any(String),
    });
    const { agent } = await t.runtime.get(agentId);
    expect(agent.outbox).toEqual({ queued: 0, sent: 1, failed: 0, unknown: 0 });
    // Billed once, at the tool's price.
    const charges = (await t.storage.listLedger('local')).filter((l) => l.item === 'message_person');
    expect(charges.map((l) => l.amount)).toEqual([-1_000_000]);
  });

  it('remembers a recipient the server refuses for good (550), and never tries them again', async () => {
    const t = await openRuntime();
    const { agentId, results } = await runAgent(t, [
      email(SMTP_REFUSED, 'Hello', 'First try'),
      email(SMTP_REFUSED, 'Hello again', 'Second try'),
    ]);
    expect(results[0]!.is_error).toBe(true);
    expect(results[0]!.content).toMatch(/Not sent \(message [0-9a-f-]{36}, outbox status failed\)/);
    expect(results[0]!.content).toContain('refused the recipient gone@example.com');
    expect(results[0]!.content).toContain('550');
    expect(results[1]!.is_error).toBe(true);
    expect(results[1]!.content).toMatch(/gone@example.com opted out of messages from this account/);
    // The second attempt never reached the server, and was not recorded.
    expect(smtp.rcpts).toEqual([SMTP_REFUSED]);
    expect(smtp.received).toEqual([]);
    expect((await t.runtime.outbox(agentId)).map((m) => m.status)).toEqual(['failed']);
    expect(await t.storage.getOptOut('local', 'email', SMTP_REFUSED)).toMatchObject({ recipient: SMTP_REFUSED });
  });
});

describe("message_person: SMS through Twilio's API", () => {
  it("posts the form to the account's Messages.json with basic auth, and keeps the SID", async () => {
    const t = await openRuntime();
    const body = 'Preis: 49 € — 値下がり — цена';
    const { agentId, results } = await runAgent(t, [sms('+49 30 1234567', body)]);
    expect(results[0]!.is_error, results[0]!.content).toBeFalsy();
    const output = JSON.parse(results[0]!.content) as { message_id: string; status: string; provider_id: string };
    expect(output.status).toBe('sent');
    expect(output.provider_id).toMatch(/^SM[0-9a-f]{32}$/);

    expect(twilio.requests).toEqual([
      {
        method: 'POST',
        path: `/2010-04-01/Accounts/${TWILIO_SID}/Messages.json`,
        contentType: 'application/x-www-form-urlencoded',
        auth: `${TWILIO_SID}:${TWILIO_TOKEN}`,
        form: { To: '+49301234567', From: TWILIO_FROM, Body: body },
      },
    ]);
    expect(await t.runtime.outbox(agentId)).toEqual([
      expect.objectContaining({
        channel: 'sms',
        to: '+49301234567',
        subject: null,
        status: 'sent',
        provider_id: output.provider_id,
      }),
    ]);
  });

  it('sends as a Messaging Service when TWILIO_FROM is an MG… SID', async () => {
    const service = `MG${'ab'.repeat(16)}`;
    const t = await openRuntime({
      messaging: messaging({
        twilio: { accountSid: TWILIO_SID, authToken: TWILIO_TOKEN, from: service, baseUrl: twilio.base },
      }),
    });
    await runAgent(t, [sms('+49301234567', 'hi')]);
    expect(twilio.requests[0]!.form).toEqual({ To: '+49301234567', MessagingServiceSid: service, Body: 'hi' });
  });

  it('a 400 with code 21211 reaches the model as a clear failure, and the outbox says failed', async () => {
    const t = await openRuntime();
    const { agentId, results } = await runAgent(t, [sms('+49301234568', 'Your parcel is here')]);
    expect(results[0]!.is_error).toBe(true);
    expect(results[0]!.content).toMatch(
      /^Error: Not sent \(message [0-9a-f-]{36}, outbox status failed\): Twilio says the number is not a valid phone number \(Twilio error 21211, https:\/\/www.twilio.com\/docs\/errors\/21211\)/,
    );
    expect(results[0]!.content).toContain("The 'To' number +49301234568 is not a valid phone number.");
    const [entry] = await t.runtime.outbox(agentId);
    expect(entry).toMatchObject({ status: 'failed', to: '+49301234568', provider_id: null, sent_at: null });
    expect(entry!.error).toContain('21211');
    expect((await t.runtime.get(agentId)).agent.outbox).toEqual({ queued: 0, sent: 0, failed: 1, unknown: 0 });
  });

  it('21610 (unsubscribed) is remembered for the account: the next call is refused without asking Twilio', async () => {
    const t = await openRuntime();
    const { results } = await runAgent(t, [sms('+49301234569', 'one'), sms('+49 30 1234569', 'two')]);
    expect(results[0]!.content).toContain('the recipient unsubscribed from this sender');
    expect(results[1]!.content).toMatch(/^Error: Not sent: \+49301234569 opted out of messages from this account/);
    expect(twilio.requests).toHaveLength(1);
    // Another agent of the same account is refused too.
    const other = await runAgent(t, [sms('+49301234569', 'three')]);
    expect(other.results[0]!.content).toContain('opted out');
    expect(twilio.requests).toHaveLength(1);
  });

  it('21408 (region not enabled) says what the operator must change', async () => {
    const t = await openRuntime();
    const { results } = await runAgent(t, [sms('+49301234560', 'hi')]);
    expect(results[0]!.content).toContain("may not send SMS to this number's country");
  });
});

describe('message_person: refusals (nothing recorded, nothing sent)', () => {
  const cases: Array<[string, PlannedCall, RegExp]> = [
    [
      'an address outside the allowlist',
      email('eve@evil.test', 'Hi', 'x'),
      /eve@evil.test is not on the recipient allowlist/,
    ],
    ['a subdomain of an allowed domain', email('x@sub.ops.example.com', 'Hi', 'x'), /not on the recipient allowlist/],
    [
      'a number outside the allowed prefixes',
      sms('+49 89 1234567', 'x'),
      /\+49891234567 is not on the recipient allowlist/,
    ],
    ['a malformed address', email('ada@', 'Hi', 'x'), /"ada@" is not an e-mail address this tool accepts/],
    ['an address with a display name', email('Ada <ada@example.com>', 'Hi', 'x'), /is not an e-mail address/],
    ['a number without country code', sms('030 1234567', 'x'), /not a phone number in international form/],
    ['a number too short for its country', sms('+4930', 'x'), /is not a (valid )?phone number/],
    [
      'a subject with CR/LF',
      email('ada@example.com', 'Hi\r\nBcc: eve@evil.test', 'x'),
      /the subject contains a line break/,
    ],
    [
      'a subject with a bare LF',
      email('ada@example.com', 'Hi\nBcc: eve@evil.test', 'x'),
      /the subject contains a line break/,
    ],
    [
      'an address with LF',
      email('ada@example.com\nBcc: eve@evil.test', 'Hi', 'x'),
      /the recipient contains a line break/,
    ],
    ['an e-mail without a subject', email('ada@example.com', undefined, 'x'), /an e-mail needs a subject/],
    ['a body over the cap', sms('+49301234567', 'x'.repeat(1_601)), /the body has 1601 characters; at most 1600/],
  ];

  it.each(cases)('%s', async (_name, call, message) => {
    const t = await openRuntime();
    const { agentId, results } = await runAgent(t, [call]);
    expect(results[0]!.is_error).toBe(true);
    expect(results[0]!.content).toMatch(message);
    expect(smtp.rcpts).toEqual([]);
    expect(twilio.requests).toEqual([]);
    expect(await t.runtime.outbox(agentId)).toEqual([]);
  });

  it('an empty allowlist sends nothing and says what to set', async () => {
    const t = await openRuntime({ messaging: messaging({ allow: [] }) });
    const { results } = await runAgent(t, [email('ada@example.com', 'Hi', 'x'), sms('+49301234567', 'x')]);
    for (const r of results) expect(r.content).toMatch(/the recipient allowlist is empty.*AGENTRY_MESSAGE_ALLOW/);
    expect(smtp.rcpts).toEqual([]);
    expect(twilio.requests).toEqual([]);
    const status = t.runtime.toolStatus().find((s) => s.name === 'message_person')!;
    expect(status).toMatchObject({ ready: false, source: 'builtin' });
    expect(status.detail).toContain('recipients: nobody yet');
  });

  it('an unconfigured transport fails with what to set, and pretends nothing', async () => {
    const t = await openRuntime({ messaging: { allow: ALLOW } });
    const { agentId, results } = await runAgent(t, [email('ada@example.com', 'Hi', 'x'), sms('+49301234567', 'x')]);
    expect(results[0]!.content).toMatch(/e-mail is not configured: set SMTP_URL .* and AGENTRY_EMAIL_FROM/);
    expect(results[1]!.content).toMatch(
      /SMS is not configured: set TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN and TWILIO_FROM/,
    );
    expect(await t.runtime.outbox(agentId)).toEqual([]);
    expect(t.runtime.toolStatus().find((s) => s.name === 'message_person')).toMatchObject({ ready: false });
  });

  it('reads its configuration from the environment', async () => {
    const t = await openRuntime({
      env: {
        SMTP_URL: smtp.url,
        AGENTRY_EMAIL_FROM: 'alerts@agentry.test',
        TWILIO_ACCOUNT_SID: TWILIO_SID,
        TWILIO_AUTH_TOKEN: TWILIO_TOKEN,
        TWILIO_FROM,
        AGENTRY_TWILIO_BASE_URL: twilio.base,
        AGENTRY_MESSAGE_ALLOW: 'ada@example.com, +4930',
      },
    });
    const status = t.runtime.toolStatus().find((s) => s.name === 'message_person')!;
    expect(status.ready).toBe(true);
    expect(status.detail).toBe(
      `email: smtp (smtp://127.0.0.1:${smtp.port} as alerts@agentry.test); ` +
        `sms: twilio (Twilio account ${TWILIO_SID} at ${twilio.base}, from ${TWILIO_FROM}); ` +
        'recipients: 1 address, 1 number prefix',
    );
    const { results } = await runAgent(t, [email('ada@example.com', 'Hi', 'x'), sms('+49301234567', 'y')]);
    expect(results.map((r) => r.is_error ?? false)).toEqual([false, false]);
    expect(smtp.received).toHaveLength(1);
    expect(twilio.requests).toHaveLength(1);
  });

  it('rate limits per agent and per account, in sliding windows of the runtime clock', async () => {
    const t = await openRuntime({
      messaging: messaging({
        rateLimits: { perAgent: { max: 2, windowS: 3_600 }, perAccount: { max: 3, windowS: 86_400 } },
      }),
    });
    const first = await runAgent(t, [
      sms('+49301234567', 'one'),
      sms('+49301234567', 'two'),
      sms('+49301234567', 'three'),
    ]);
    expect(first.results.map((r) => r.is_error ?? false)).toEqual([false, false, true]);
    expect(first.results[2]!.content).toBe(
      'Error: Not sent: this agent has sent 2 messages in the last hour, the most it may (2 per hour). Try again ' +
        'later or tell the user.',
    );
    expect(twilio.requests).toHaveLength(2);
    // A second agent of the account: one more fits the account's day.
    const second = await runAgent(t, [sms('+49301234567', 'four'), sms('+49301234567', 'five')]);
    expect(second.results.map((r) => r.is_error ?? false)).toEqual([false, true]);
    expect(second.results[1]!.content).toMatch(/this account's agents have sent 3 messages in the last day/);
    expect(twilio.requests).toHaveLength(3);
    // An hour later the first agent's window has room again, but the account's day is still full.
    t.clock.advance(3_601_000);
    const later = await runAgent(t, [sms('+49301234567', 'six')]);
    expect(later.results[0]!.content).toMatch(/this account's agents have sent 3 messages/);
    t.clock.advance(86_400_000);
    const nextDay = await runAgent(t, [sms('+49301234567', 'seven')]);
    expect(nextDay.results[0]!.is_error).toBeFalsy();
    expect(twilio.requests).toHaveLength(4);
  });
});

describe('the Twilio host is trusted for the SMS transport only', () => {
  it('read_page still refuses the private address the SMS transport may reach', async () => {
    const t = await openRuntime();
    const { results } = await runAgent(t, [
      sms('+49301234567', 'hi'),
      { name: 'read_page', input: { url: `${twilio.base}/2010-04-01/Accounts/${TWILIO_SID}/Messages.json` } },
    ]);
    expect(results[0]!.is_error).toBeFalsy();
    expect(results[1]!.is_error).toBe(true);
    expect(results[1]!.content).toMatch(/127\.0\.0\.1/);
    expect(twilio.requests).toHaveLength(1);
  });
});

describe('message_person on SQLite', () => {
  it('keeps the outbox in the database file', async () => {
    const t = await openRuntime(undefined, { storage: sqliteStorage({ path: ':memory:' }) });
    const { agentId } = await runAgent(t, [email('ops@ops.example.com', 'Hi', 'x'), sms('+49301234568', 'y')]);
    expect((await t.runtime.outbox(agentId)).map((m) => [m.channel, m.status])).toEqual([
      ['email', 'sent'],
      ['sms', 'failed'],
    ]);
    expect((await t.runtime.get(agentId)).agent.outbox).toEqual({ queued: 0, sent: 1, failed: 1, unknown: 0 });
  });
});
