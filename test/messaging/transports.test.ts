/**
 * message_person's parts on their own: the allowlist and recipient checks, and how the two transports read what
 * their providers did — above all, whether a failure proves the message did not leave (`failed`) or not (`unknown`).
 * The SMTP cases run against a scripted SMTP server on a raw socket (it can hang up in the middle of DATA, which a
 * real server library will not do on request); the Twilio cases against a loopback HTTP server.
 */
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import {
  AgentRuntime,
  MessageSendError,
  memoryStorage,
  smtpTransport,
  twilioTransport,
  type MessageTransport,
} from 'agentry-runtime';
import { scriptedModel } from 'agentry-runtime/testing';
import { RecipientAllowList, normaliseRecipient } from '../../src/messaging/recipients.js';
import { goalOf, playGoal, resultSeenAt } from '../tools/web-fixtures.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((c) => c()));
});

async function listen(server: net.Server | http.Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  closers.push(
    () =>
      new Promise<void>((resolve) => {
        if (server instanceof http.Server) server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return (server.address() as AddressInfo).port;
}

/**
 * An SMTP server that answers each command from a script: `rcpt` and `dataEnd` replies, or `hangup` to drop the
 * connection at that point (after the whole message arrived, for `dataEnd`).
 */
async function scriptedSmtp(script: {
  rcpt?: string;
  dataEnd?: string | 'hangup' | 'silence';
  greeting?: false;
}): Promise<number> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    let inData = false;
    let buffer = '';
    const reply = (line: string) => socket.write(`${line}\r\n`);
    if (script.greeting !== false) reply('220 scripted ESMTP');
    socket.on('data', (chunk) => {
      buffer += chunk.toString('utf8');
      if (inData) {
        if (!buffer.includes('\r\n.\r\n')) return;
        buffer = '';
        inData = false;
        if (script.dataEnd === 'hangup') socket.destroy();
        else if (script.dataEnd === 'silence') return;
        else reply(script.dataEnd ?? '250 2.0.0 queued as 1');
        return;
      }
      let end: number;
      while ((end = buffer.indexOf('\r\n')) >= 0) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const verb = line.split(/[ :]/)[0]!.toUpperCase();
        if (verb === 'EHLO' || verb === 'HELO') reply('250 scripted');
        else if (verb === 'MAIL') reply('250 2.1.0 ok');
        else if (verb === 'RCPT') reply(script.rcpt ?? '250 2.1.5 ok');
        else if (verb === 'DATA') {
          reply('354 go ahead');
          inData = true;
        } else if (verb === 'QUIT') {
          reply('221 bye');
          socket.end();
        } else reply('250 ok');
      }
    });
  });
  closers.push(async () => sockets.forEach((s) => s.destroy()));
  return listen(server);
}

const message = { message_id: '00000000-0000-4000-8000-0000000000aa', channel: 'email' as const };
const send = (t: MessageTransport, to = 'ada@example.com') =>
  t.send({ ...message, to, subject: 'Hi', body: 'Hello' }, { signal: new AbortController().signal });

async function failureOf(promise: Promise<unknown>): Promise<MessageSendError> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(MessageSendError.isMessageSendError(err), String(err)).toBe(true);
  return err as MessageSendError;
}

describe('the recipient allowlist', () => {
  it('matches exact addresses, whole domains (not subdomains) and number prefixes', () => {
    const allow = RecipientAllowList.parse(['Ada@Example.com', ' @ops.example.com ', '+4930', '']);
    expect(allow.allows('email', 'ada@example.com')).toBe(true);
    expect(allow.allows('email', 'bob@example.com')).toBe(false);
    expect(allow.allows('email', 'bob@ops.example.com')).toBe(true);
    expect(allow.allows('email', 'bob@x.ops.example.com')).toBe(false);
    expect(allow.allows('email', 'bob@evilops.example.com')).toBe(false);
    expect(allow.allows('sms', '+49301234567')).toBe(true);
    expect(allow.allows('sms', '+49891234567')).toBe(false);
    // A prefix is a phone rule only; an address is never a number.
    expect(allow.allows('email', '+4930@example.com')).toBe(false);
    expect(allow.describe()).toBe('1 address, 1 domain, 1 number prefix');
    expect(RecipientAllowList.parse([]).empty).toBe(true);
  });

  it.each([['ada'], ['@'], ['+49 30'], ['+abc'], ['Ada <ada@example.com>']])(
    'refuses the entry %j at the door',
    (e) => {
      expect(() => RecipientAllowList.parse([e])).toThrow(/The message allowlist entry .* is malformed/);
    },
  );

  it('refuses a malformed allowlist when the runtime opens, naming the setting', async () => {
    await expect(
      AgentRuntime.open({
        storage: memoryStorage(),
        model: scriptedModel({ turns: [{ text: 'x' }] }),
        builtinTools: { env: { AGENTRY_MESSAGE_ALLOW: 'ada@example.com,not an entry' } },
      }),
    ).rejects.toThrow(/"not an entry" is malformed.*AGENTRY_MESSAGE_ALLOW/);
    await expect(
      AgentRuntime.open({
        storage: memoryStorage(),
        model: scriptedModel({ turns: [{ text: 'x' }] }),
        builtinTools: { env: { SMTP_URL: 'http://mail.example.com', AGENTRY_EMAIL_FROM: 'a@example.com' } },
      }),
    ).rejects.toThrow(/SMTP_URL \(or builtinTools.messaging.smtpUrl\) must start with smtp:\/\/ .* or smtps:\/\//);
  });
});

describe('recipient checks', () => {
  it('normalises e-mail addresses to lower case and numbers to E.164', async () => {
    expect(await normaliseRecipient('email', ' Ada@Example.COM ')).toBe('ada@example.com');
    expect(await normaliseRecipient('sms', '+49 (30) 123-4567')).toBe('+49301234567');
  });

  it.each([
    ['email', 'ada@exämple.com', /not an e-mail address this tool accepts/],
    ['email', '"ada"@example.com', /not an e-mail address/],
    ['email', 'ada@example.com\r\nBcc: eve@evil.test', /line break or another control character/],
    ['email', 'ada@example.com\u2028', /control character/],
    ['sms', '+1 555 1234567', /not a valid phone number for its country \(\+1\)/],
    ['sms', '+999 123', /is not a phone number/],
    ['sms', '+49301234567\n', /control character/],
  ] as const)('refuses %s %j', async (channel, to, message) => {
    await expect(normaliseRecipient(channel, to)).rejects.toThrow(message);
  });
});

describe('smtpTransport: what a failure means', () => {
  it('a refused connection: not sent', async () => {
    const port = await listen(net.createServer()); // a port that was free a moment ago
    await new Promise((r) => closers.pop()!().then(r));
    const failure = await failureOf(send(smtpTransport({ url: `smtp://127.0.0.1:${port}`, from: 'a@agentry.test' })));
    expect(failure.failure).toBe('unavailable');
    expect(failure.notSent).toBe(true);
    expect(failure.message).toMatch(/cannot reach the mail server \(ECONNREFUSED\)/);
  });

  it('a 4xx to RCPT: not sent, try later; a 5xx to DATA: refused', async () => {
    const busy = await scriptedSmtp({ rcpt: '451 4.3.0 try again later' });
    const f1 = await failureOf(send(smtpTransport({ url: `smtp://127.0.0.1:${busy}`, from: 'a@agentry.test' })));
    expect([f1.failure, f1.providerCode]).toEqual(['unavailable', 451]);
    const spam = await scriptedSmtp({ dataEnd: '554 5.7.1 looks like spam' });
    const f2 = await failureOf(send(smtpTransport({ url: `smtp://127.0.0.1:${spam}`, from: 'a@agentry.test' })));
    expect([f2.failure, f2.notSent]).toEqual(['rejected', true]);
    expect(f2.message).toContain('554 5.7.1 looks like spam');
  });

  it('a server that never greets: not sent; one that goes quiet after the message: unknown', async () => {
    const mute = await scriptedSmtp({ greeting: false });
    const f1 = await failureOf(
      send(smtpTransport({ url: `smtp://127.0.0.1:${mute}`, from: 'a@agentry.test', timeoutMs: 1_500 })),
    );
    expect([f1.failure, f1.notSent]).toEqual(['unavailable', true]);
    const quiet = await scriptedSmtp({ dataEnd: 'silence' });
    const f2 = await failureOf(
      send(smtpTransport({ url: `smtp://127.0.0.1:${quiet}`, from: 'a@agentry.test', timeoutMs: 1_500 })),
    );
    expect([f2.failure, f2.notSent]).toEqual(['outcome_unknown', false]);
  });

  it('a connection lost after the whole message went out: the outcome is unknown', async () => {
    const port = await scriptedSmtp({ dataEnd: 'hangup' });
    const failure = await failureOf(send(smtpTransport({ url: `smtp://127.0.0.1:${port}`, from: 'a@agentry.test' })));
    expect(failure.failure).toBe('outcome_unknown');
    expect(failure.notSent).toBe(false);
    expect(failure.message).toMatch(/may have been delivered/);
  });
});

describe('twilioTransport: what an answer means', () => {
  const SID = 'AC0123456789abcdef0123456789abcdef';
  async function twilioAnswering(status: number, body: unknown): Promise<string> {
    const port = await listen(
      http.createServer((req, res) => {
        req.resume();
        req.on('end', () => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body)));
      }),
    );
    return `http://127.0.0.1:${port}`;
  }
  const sms = (baseUrl: string) =>
    twilioTransport({ accountSid: SID, authToken: 't', from: '+15005550006', baseUrl }).send(
      { message_id: message.message_id, channel: 'sms', to: '+49301234567', body: 'hi' },
      { signal: new AbortController().signal },
    );

  it.each([
    [
      401,
      { code: 20003, message: 'Authenticate', status: 401 },
      'misconfigured',
      /TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN/,
    ],
    [429, { code: 20429, message: 'Too Many Requests', status: 429 }, 'unavailable', /rate-limiting/],
    [
      400,
      { code: 21614, message: "'To' number is not a valid mobile number", status: 400 },
      'invalid_recipient',
      /not a mobile number/,
    ],
    [400, { code: 21659, message: 'From is not a Twilio number', status: 400 }, 'misconfigured', /TWILIO_FROM/],
    [
      400,
      { code: 99999, message: 'Something new', status: 400 },
      'rejected',
      /Twilio refused the message \(Twilio error 99999.*Something new/,
    ],
    [500, { message: 'oops' }, 'outcome_unknown', /may or may not have been sent/],
    [
      201,
      { sid: 'SMx', status: 'failed', error_code: 30007, error_message: 'filtered' },
      'rejected',
      /carrier filtered/,
    ],
    [201, { nothing: true }, 'outcome_unknown', /without a message SID/],
  ] as const)('HTTP %i %j -> %s', async (status, body, failure, text) => {
    const f = await failureOf(sms(await twilioAnswering(status, body)));
    expect(f.failure).toBe(failure);
    expect(f.message).toMatch(text);
  });

  it('an unreachable Twilio: not sent', async () => {
    const base = await twilioAnswering(201, {});
    await closers.pop()!();
    const f = await failureOf(sms(base));
    expect([f.failure, f.notSent]).toEqual(['unavailable', true]);
  });
});

describe('a transport of your own', () => {
  it('replaces the default of its channel; an error that is not a MessageSendError leaves the outcome unknown', async () => {
    const sent: string[] = [];
    const transport: MessageTransport = {
      channel: 'sms',
      name: 'pager',
      describe: () => 'the pager gateway',
      async send(m) {
        sent.push(m.body);
        if (m.body === 'boom') throw new Error('socket hang up');
        return { provider_id: `pager-${sent.length}` };
      },
    };
    const model = scriptedModel({ turns: playGoal });
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model,
      builtinTools: { env: {}, messaging: { transports: [transport], allow: ['+4930'] } },
    });
    try {
      const calls = ['hello', 'boom'].map((body) => ({
        name: 'message_person',
        input: { channel: 'sms', to: '+49301234567', body },
      }));
      const { agent_id } = await runtime.create({ goal: goalOf(calls) });
      await runtime.waitFor(agent_id);
      expect(JSON.parse(resultSeenAt(model, agent_id, 1).content)).toMatchObject({
        status: 'sent',
        provider_id: 'pager-1',
      });
      expect(resultSeenAt(model, agent_id, 2).content).toMatch(
        /^Error: Outcome unknown \(message [0-9a-f-]{36}, outbox status unknown; it is not sent again\): sending failed unexpectedly \(Error: socket hang up\)/,
      );
      expect((await runtime.outbox(agent_id)).map((m) => m.status)).toEqual(['sent', 'unknown']);
      expect(sent).toEqual(['hello', 'boom']);
      expect(runtime.toolStatus().find((s) => s.name === 'message_person')?.detail).toContain(
        'sms: pager (the pager gateway)',
      );
    } finally {
      await runtime.close();
    }
  });
});
