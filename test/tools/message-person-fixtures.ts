/**
 * Fakes for message_person's tests, both real protocol servers on 127.0.0.1 and ephemeral ports: an SMTP server
 * (smtp-server, no TLS, login optional) that keeps every message it accepted, raw and parsed with postal-mime, and an
 * HTTP server in the shape of Twilio's Messages API that checks the path, the form and the basic auth of each request
 * and answers as Twilio does (201 with a Message, or 4xx with Twilio's error JSON).
 */
import { createHash } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import PostalMime, { type Email } from 'postal-mime';
import { SMTPServer, type SMTPServerAddress } from 'smtp-server';

export interface ReceivedMail {
  mailFrom: string;
  rcptTo: string[];
  raw: string;
  parsed: Email;
}

export interface FakeSmtp {
  port: number;
  url: string;
  /** Recipients the server was asked for with RCPT TO (accepted or not), in order. */
  rcpts: string[];
  /** Messages accepted (DATA ended with 250). */
  received: ReceivedMail[];
  /** Messages whose DATA arrived in full (accepted or held). */
  dataSeen: number;
  /** While set, a message's DATA is read in full but never answered (a server that hangs before its 250). */
  holdData: boolean;
  close(): Promise<void>;
}

/** Recipients the fake SMTP server refuses for good (550 to RCPT TO). */
export const SMTP_REFUSED = 'gone@example.com';

export async function startFakeSmtp(): Promise<FakeSmtp> {
  const fake: FakeSmtp = {
    port: 0,
    url: '',
    rcpts: [],
    received: [],
    dataSeen: 0,
    holdData: false,
    close: async () => {},
  };
  const server = new SMTPServer({
    secure: false,
    authOptional: true,
    // No STARTTLS: the test server has no certificate a client would trust.
    disabledCommands: ['STARTTLS'],
    logger: false,
    onRcptTo(address: SMTPServerAddress, _session, callback) {
      fake.rcpts.push(address.address);
      if (address.address === SMTP_REFUSED) {
        callback(Object.assign(new Error('5.1.1 <gone@example.com>: user has unsubscribed'), { responseCode: 550 }));
        return;
      }
      callback();
    },
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        fake.dataSeen++;
        if (fake.holdData) return; // never answered
        const raw = Buffer.concat(chunks).toString('utf8');
        PostalMime.parse(raw).then(
          (parsed) => {
            fake.received.push({
              mailFrom: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
              rcptTo: session.envelope.rcptTo.map((r) => r.address),
              raw,
              parsed,
            });
            callback();
          },
          (err: Error) => callback(err),
        );
      });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  fake.port = (server.server.address() as AddressInfo).port;
  fake.url = `smtp://127.0.0.1:${fake.port}`;
  fake.close = () => new Promise<void>((resolve) => server.close(() => resolve()));
  return fake;
}

export const TWILIO_SID = 'AC0123456789abcdef0123456789abcdef';
export const TWILIO_TOKEN = 'test-auth-token';
export const TWILIO_FROM = '+15005550006';

/** Numbers the fake Twilio answers with an error: 21211 (invalid), 21610 (unsubscribed), 21408 (region). */
export const TWILIO_ERRORS: Record<string, { code: number; message: string }> = {
  '+49301234568': { code: 21211, message: "The 'To' number +49301234568 is not a valid phone number." },
  '+49301234569': { code: 21610, message: 'Attempt to send to unsubscribed recipient' },
  '+49301234560': {
    code: 21408,
    message: "Permission to send an SMS has not been enabled for the region indicated by the 'To' number",
  },
};

export interface TwilioRequest {
  method: string;
  path: string;
  contentType: string;
  /** `user:password` of the basic auth, decoded. */
  auth: string;
  form: Record<string, string>;
}

export interface FakeTwilio {
  base: string;
  /** Every request received, in order (also the refused ones). */
  requests: TwilioRequest[];
  close(): Promise<void>;
}

export async function startFakeTwilio(): Promise<FakeTwilio> {
  const requests: TwilioRequest[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const auth = /^Basic (.+)$/.exec(req.headers.authorization ?? '')?.[1];
      const r: TwilioRequest = {
        method: req.method ?? '',
        path: new URL(req.url ?? '/', 'http://x').pathname,
        contentType: req.headers['content-type'] ?? '',
        auth: auth ? Buffer.from(auth, 'base64').toString('utf8') : '',
        form: Object.fromEntries(new URLSearchParams(body)),
      };
      requests.push(r);
      const json = (status: number, value: unknown) =>
        res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value));
      const error = (status: number, code: number, message: string) =>
        json(status, { code, message, more_info: `https://www.twilio.com/docs/errors/${code}`, status });
      if (r.auth !== `${TWILIO_SID}:${TWILIO_TOKEN}`) return error(401, 20003, 'Authenticate');
      if (r.method !== 'POST' || r.path !== `/2010-04-01/Accounts/${TWILIO_SID}/Messages.json`) {
        return error(404, 20404, 'The requested resource was not found');
      }
      if (!r.contentType.startsWith('application/x-www-form-urlencoded')) return error(400, 400, 'Bad content type');
      const to = r.form.To ?? '';
      const known = TWILIO_ERRORS[to];
      if (known) return error(400, known.code, known.message);
      const sid = `SM${createHash('sha256').update(`${to}\n${r.form.Body}`).digest('hex').slice(0, 32)}`;
      return json(201, {
        sid,
        account_sid: TWILIO_SID,
        to,
        from: r.form.From ?? null,
        messaging_service_sid: r.form.MessagingServiceSid ?? null,
        body: r.form.Body,
        status: 'queued',
        error_code: null,
        error_message: null,
        api_version: '2010-04-01',
        uri: `/2010-04-01/Accounts/${TWILIO_SID}/Messages/${sid}.json`,
      });
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    base: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
