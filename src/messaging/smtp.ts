/**
 * @module messaging/smtp
 * E-mail for `message_person` through SMTP with nodemailer (an optional peer dependency, loaded on the first message).
 * The server is the operator's (`SMTP_URL`), so its connection is not the agents' guarded fetch: no model input
 * chooses where it goes. TLS is what the URL says: `smtps://` is TLS from the first byte (port 465), `smtp://` upgrades
 * with STARTTLS when the server offers it (port 587 or 25).
 */
import type * as NodemailerModule from 'nodemailer';
import { z } from 'zod';
import { AgentryError } from '../errors.js';
import {
  MessageSendError,
  type MessageTransport,
  type OutgoingMessage,
  type SentMessage,
} from './message-transport.js';

export interface SmtpTransportOptions {
  /** `smtp://user:pass@host:587` or `smtps://user:pass@host:465` (user and password URL-encoded). */
  url: string;
  /** The sender: `alerts@example.com` or `Price alerts <alerts@example.com>`. */
  from: string;
  /**
   * How long a quiet connection is waited for before it is given up (each reply); connecting and the server's
   * greeting get half of it. @default 60 s
   */
  timeoutMs?: number;
}

// eslint-disable-next-line no-control-regex -- control characters are what it refuses
const FromSchema = z.string().regex(/^[^\u0000-\u001f\u007f]+$/, 'one line of printable characters');

const OptionsSchema = z
  .object({
    url: z.string().min(1),
    from: FromSchema,
    timeoutMs: z.number().int().positive().optional(),
  })
  .strict();

/** `Name <address>` or a bare address, the address checked. */
function parseFrom(from: string): { name: string; address: string } {
  const angled = /^\s*(?:"?([^"<>]*?)"?\s*)?<([^<>\s]+)>\s*$/.exec(from);
  const name = angled ? (angled[1] ?? '').trim() : '';
  const address = (angled ? angled[2]! : from.trim()).toLowerCase();
  if (!z.email().safeParse(address).success) {
    throw new AgentryError(
      'invalid_request',
      `The e-mail sender ${JSON.stringify(from)} is not an address ` +
        '(AGENTRY_EMAIL_FROM or builtinTools.messaging.from): ' +
        'use name@example.com or "Name <name@example.com>"',
    );
  }
  return { name, address };
}

function parseSmtpUrl(raw: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new AgentryError(
      'invalid_request',
      'SMTP_URL (or builtinTools.messaging.smtpUrl) is not a URL: use smtp://user:pass@host:587 or smtps://…:465',
    );
  }
  if (url.protocol !== 'smtp:' && url.protocol !== 'smtps:') {
    throw new AgentryError(
      'invalid_request',
      `SMTP_URL (or builtinTools.messaging.smtpUrl) must start with smtp:// (STARTTLS when offered) or smtps:// ` +
        `(TLS), not ${url.protocol}//`,
    );
  }
  if (!url.hostname)
    throw new AgentryError('invalid_request', 'SMTP_URL (or builtinTools.messaging.smtpUrl) has no host');
  return url;
}

/** Errors of the system calls that mean the connection was never made. */
const NEVER_CONNECTED = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);

interface NodemailerError extends Error {
  code?: string;
  originalCode?: string;
  command?: string;
  responseCode?: number;
  response?: string;
  /** Which of nodemailer's timeouts fired (all of them are code ETIMEDOUT, command CONN). */
  timeoutType?: string;
}

/** Timeouts before a session came up: nothing of the message was sent yet. A socket timeout may come mid-DATA. */
const SETUP_TIMEOUTS = new Set(['CONNECT_TIMEOUT', 'GREETING_TIMEOUT', 'UPGRADE_TIMEOUT']);

/**
 * What a nodemailer error means for the message. A reply code is the server's word: 4xx is "not now", 5xx is "no"
 * (for a recipient, remembered as an opt-out). Without a reply, only a connection that never came up proves the
 * message did not leave; anything else (a connection lost during DATA, a timeout waiting for the final reply) may
 * have delivered it, and is `outcome_unknown`.
 */
export function classifySmtpError(error: unknown, to: string): MessageSendError {
  const e = (error ?? {}) as NodemailerError;
  const reply = (e.response ?? '').trim();
  const code = e.responseCode;
  const fail = (failure: ConstructorParameters<typeof MessageSendError>[0], message: string) =>
    new MessageSendError(failure, message, { cause: error, ...(code ? { providerCode: code } : {}) });
  if (code) {
    if (code >= 400 && code < 500) {
      return fail('unavailable', `the mail server cannot take the message now (${reply}); it was not sent`);
    }
    if (e.command === 'RCPT TO') {
      return fail(
        'opted_out',
        `the mail server refused the recipient ${to} (${reply}); this account will not write to ${to} again`,
      );
    }
    if (e.command === 'MAIL FROM' || e.code === 'EAUTH') {
      return fail(
        'misconfigured',
        `the mail server refused the sender or the login (${reply}); check SMTP_URL and AGENTRY_EMAIL_FROM`,
      );
    }
    return fail('rejected', `the mail server refused the message (${reply}); it was not sent`);
  }
  if (e.code === 'EAUTH') return fail('misconfigured', `SMTP login failed (${e.message}); check SMTP_URL`);
  if (e.code === 'ETLS') return fail('misconfigured', `TLS with the mail server failed (${e.message}); check SMTP_URL`);
  if (e.code === 'EDNS' || (e.originalCode && NEVER_CONNECTED.has(e.originalCode))) {
    return fail('unavailable', `cannot reach the mail server (${e.originalCode ?? e.code}); the message was not sent`);
  }
  if (e.code === 'ETIMEDOUT' && e.timeoutType && SETUP_TIMEOUTS.has(e.timeoutType)) {
    return fail('unavailable', 'the mail server did not answer the connection; the message was not sent');
  }
  if (e.code === 'EENVELOPE' || e.code === 'EMESSAGE') {
    return fail('rejected', `the message could not be composed (${e.message}); it was not sent`);
  }
  return fail(
    'outcome_unknown',
    `the connection to the mail server failed while sending (${e.message}); the message may have been delivered`,
  );
}

type Nodemailer = typeof NodemailerModule;
type Transporter = ReturnType<Nodemailer['createTransport']>;

async function loadNodemailer(): Promise<Nodemailer> {
  try {
    return await import('nodemailer');
  } catch (err) {
    // Thrown before any connection: the outbox says `failed`, not `unknown`.
    throw new MessageSendError(
      'misconfigured',
      'message_person needs the nodemailer package to send e-mail: npm install nodemailer',
      { cause: err },
    );
  }
}

/**
 * E-mail through an SMTP server.
 *
 * @example
 * const email = smtpTransport({
 *   url: 'smtps://alerts%40example.com:secret@smtp.example.com:465',
 *   from: 'Alerts <alerts@example.com>',
 * });
 * const runtime = await AgentRuntime.open({
 *   builtinTools: { messaging: { transports: [email], allow: ['@example.com'] } },
 * });
 */
export function smtpTransport(options: SmtpTransportOptions): MessageTransport {
  const parsed = OptionsSchema.safeParse(options);
  if (!parsed.success) {
    throw new AgentryError('invalid_request', `Invalid smtpTransport options: ${z.prettifyError(parsed.error)}`);
  }
  const o = parsed.data;
  const url = parseSmtpUrl(o.url);
  const from = parseFrom(o.from);
  const timeoutMs = o.timeoutMs ?? 60_000;
  const where = `${url.protocol}//${url.hostname}${url.port ? `:${url.port}` : ''}`;
  let transporter: Promise<Transporter> | undefined;
  const get = () =>
    (transporter ??= loadNodemailer().then((nodemailer) =>
      nodemailer.createTransport({
        url: o.url,
        // Setup gets half: nodemailer's idle-socket timer runs during setup too, and a message that never started must
        // fail as "not sent" (a setup timeout), never as the idle timeout that also ends a silent DATA ("unknown").
        connectionTimeout: Math.max(1, Math.floor(timeoutMs / 2)),
        greetingTimeout: Math.max(1, Math.floor(timeoutMs / 2)),
        socketTimeout: timeoutMs,
      }),
    ));
  return {
    channel: 'email',
    name: 'smtp',
    describe: () => `${where} as ${from.address}`,
    async send(message: OutgoingMessage, { signal }): Promise<SentMessage> {
      const mailer = await get();
      if (signal.aborted) throw new MessageSendError('unavailable', 'stopped before sending; the message was not sent');
      let info: { messageId?: string; response?: string };
      try {
        info = await mailer.sendMail({
          from: from.name ? { name: from.name, address: from.address } : from.address,
          to: message.to,
          subject: message.subject ?? '',
          text: message.body,
          // The outbox's id in the Message-ID: a delivered message can be matched to its record.
          messageId: `<${message.message_id}@${from.address.slice(from.address.indexOf('@') + 1)}>`,
          // Nothing of the model's may make nodemailer read a file or a URL.
          disableFileAccess: true,
          disableUrlAccess: true,
        });
      } catch (err) {
        throw classifySmtpError(err, message.to);
      }
      return {
        provider_id: info.messageId ?? null,
        ...(info.response ? { detail: info.response } : {}),
      };
    },
    async close() {
      if (transporter) (await transporter.catch(() => null))?.close();
    },
  };
}
