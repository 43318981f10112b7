/**
 * @module messaging/twilio
 * SMS for `message_person` through Twilio's REST API, with fetch and no SDK: one form-encoded POST to
 * `{base}/2010-04-01/Accounts/{AccountSid}/Messages.json` with HTTP basic auth (Account SID : Auth Token). Twilio's
 * error codes become {@link MessageSendError}s that say what happened in words a model (and a person) can act on.
 */
import { z } from 'zod';
import { AgentryError } from '../errors.js';
import {
  MessageSendError,
  type MessageSendFailure,
  type MessageTransport,
  type OutgoingMessage,
  type SentMessage,
} from './message-transport.js';

export const TWILIO_DEFAULT_BASE_URL = 'https://api.twilio.com';

export interface TwilioTransportOptions {
  /** `AC…` (TWILIO_ACCOUNT_SID). */
  accountSid: string;
  /** TWILIO_AUTH_TOKEN. */
  authToken: string;
  /**
   * The sender (TWILIO_FROM): a Twilio number in E.164, an alphanumeric sender ID, or a Messaging Service SID (`MG…`),
   * which is sent as `MessagingServiceSid` instead of `From`.
   */
  from: string;
  /** AGENTRY_TWILIO_BASE_URL (tests, proxies). @default https://api.twilio.com */
  baseUrl?: string;
  /**
   * How requests go out. The composition root passes the guarded fetch with the base URL's host allowed: the host is
   * the operator's choice, so it may be private (a proxy, a test server). @default globalThis.fetch
   */
  fetch?: (url: string, init: RequestInit & { timeoutMs?: number }) => Promise<Response>;
  /** The whole request. @default 30 s */
  timeoutMs?: number;
}

const OptionsSchema = z
  .object({
    accountSid: z.string().regex(/^AC[0-9a-zA-Z]{32}$/, 'an Account SID: AC and 32 characters'),
    authToken: z.string().min(1),
    // eslint-disable-next-line no-control-regex -- control characters are what it refuses
    from: z.string().regex(/^[^\u0000-\u001f\u007f]{1,64}$/, 'a number, a sender ID or an MG… service SID'),
    baseUrl: z.url({ protocol: /^https?$/ }).optional(),
    fetch: z.function().optional(),
    timeoutMs: z.number().int().positive().optional(),
  })
  .strict();

/** Twilio's error body (`{code, message, more_info, status}`). */
const TwilioErrorSchema = z.object({
  code: z.number().int().optional(),
  message: z.string().optional(),
  more_info: z.string().optional(),
  status: z.number().int().optional(),
});

/** What a Message resource answers on creation (the fields read here). */
const TwilioMessageSchema = z.object({
  sid: z.string().min(1),
  status: z.string().optional(),
  error_code: z.number().int().nullable().optional(),
  error_message: z.string().nullable().optional(),
});

/** Twilio error codes and what they mean for the message; the rest are `rejected` with Twilio's own words. */
const TWILIO_ERRORS: Record<number, { failure: MessageSendFailure; text: string }> = {
  20003: {
    failure: 'misconfigured',
    text: 'Twilio refused the credentials: check TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN',
  },
  20404: { failure: 'misconfigured', text: 'Twilio does not know this account: check TWILIO_ACCOUNT_SID' },
  20429: { failure: 'unavailable', text: 'Twilio is rate-limiting this account; try again later' },
  21211: { failure: 'invalid_recipient', text: 'Twilio says the number is not a valid phone number' },
  21214: { failure: 'invalid_recipient', text: 'Twilio cannot reach this number' },
  21408: {
    failure: 'rejected',
    text: "the Twilio account may not send SMS to this number's country (enable the region in its geo permissions)",
  },
  21608: {
    failure: 'rejected',
    text: 'a Twilio trial account may only send to verified numbers, and this one is not verified',
  },
  21610: {
    failure: 'opted_out',
    text: 'the recipient unsubscribed from this sender (replied STOP); this account will not text them again',
  },
  21612: { failure: 'invalid_recipient', text: 'Twilio cannot route a message from this sender to this number' },
  21614: { failure: 'invalid_recipient', text: 'the number is not a mobile number and cannot receive SMS' },
  21602: { failure: 'rejected', text: 'Twilio needs a message body' },
  21617: { failure: 'rejected', text: 'the message body is longer than Twilio allows (1,600 characters)' },
  21212: { failure: 'misconfigured', text: 'the sender (TWILIO_FROM) is not a valid number or sender ID' },
  21606: { failure: 'misconfigured', text: 'the sender (TWILIO_FROM) cannot send SMS to this number' },
  21659: { failure: 'misconfigured', text: 'the sender (TWILIO_FROM) is not a number of this Twilio account' },
  21660: { failure: 'misconfigured', text: 'the sender (TWILIO_FROM) does not belong to this Twilio account' },
  30003: { failure: 'invalid_recipient', text: 'the handset is unreachable' },
  30004: { failure: 'rejected', text: 'the recipient or their carrier blocked the message' },
  30005: { failure: 'invalid_recipient', text: 'the number is unknown to its carrier' },
  30006: { failure: 'invalid_recipient', text: 'the number is a landline or cannot receive SMS' },
  30007: { failure: 'rejected', text: 'the carrier filtered the message (spam or content rules)' },
};

/** Errors of the system calls that mean the request never reached Twilio. */
const NEVER_CONNECTED = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);

/** A Twilio error code (from an error answer or a failed message) as a {@link MessageSendError}. */
export function twilioError(
  code: number | undefined,
  twilioMessage: string | undefined,
  httpStatus: number,
): MessageSendError {
  const known = code === undefined ? undefined : TWILIO_ERRORS[code];
  const theirs = twilioMessage ? ` Twilio: "${twilioMessage}"` : '';
  const ref =
    code === undefined ? `HTTP ${httpStatus}` : `Twilio error ${code}, https://www.twilio.com/docs/errors/${code}`;
  if (known) {
    return new MessageSendError(known.failure, `${known.text} (${ref}).${theirs}`, {
      ...(code !== undefined ? { providerCode: code } : {}),
    });
  }
  return new MessageSendError('rejected', `Twilio refused the message (${ref}).${theirs}`, {
    ...(code !== undefined ? { providerCode: code } : {}),
  });
}

function causeCode(err: unknown): string | undefined {
  let e: unknown = err;
  for (let depth = 0; depth < 4 && e && typeof e === 'object'; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && NEVER_CONNECTED.has(code)) return code;
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

/**
 * SMS through Twilio.
 *
 * @example
 * const sms = twilioTransport({ accountSid: 'AC…', authToken: process.env.TWILIO_AUTH_TOKEN!, from: '+15017122661' });
 * const runtime = await AgentRuntime.open({ builtinTools: { messaging: { transports: [sms], allow: ['+4930'] } } });
 */
export function twilioTransport(options: TwilioTransportOptions): MessageTransport {
  const parsed = OptionsSchema.safeParse(options);
  if (!parsed.success) {
    throw new AgentryError('invalid_request', `Invalid Twilio options: ${z.prettifyError(parsed.error)}`);
  }
  const o = parsed.data;
  const base = (o.baseUrl ?? TWILIO_DEFAULT_BASE_URL).replace(/\/+$/, '');
  const endpoint = `${base}/2010-04-01/Accounts/${encodeURIComponent(o.accountSid)}/Messages.json`;
  const authorization = `Basic ${Buffer.from(`${o.accountSid}:${o.authToken}`, 'utf8').toString('base64')}`;
  const viaService = /^MG[0-9a-fA-F]{32}$/.test(o.from);
  const doFetch = options.fetch ?? ((url: string, init: RequestInit) => globalThis.fetch(url, init));
  const timeoutMs = o.timeoutMs ?? 30_000;
  return {
    channel: 'sms',
    name: 'twilio',
    describe: () => `Twilio account ${o.accountSid} at ${base}, ${viaService ? 'messaging service' : 'from'} ${o.from}`,
    async send(message: OutgoingMessage, { signal }): Promise<SentMessage> {
      const form = new URLSearchParams({ To: message.to });
      form.set(viaService ? 'MessagingServiceSid' : 'From', o.from);
      form.set('Body', message.body);
      let res: Response;
      try {
        res = await doFetch(endpoint, {
          method: 'POST',
          headers: {
            authorization,
            'content-type': 'application/x-www-form-urlencoded',
            accept: 'application/json',
          },
          body: form.toString(),
          signal: AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]),
          timeoutMs,
        });
      } catch (err) {
        const never = causeCode(err);
        if (never) {
          throw new MessageSendError('unavailable', `cannot reach Twilio at ${base} (${never}); the SMS was not sent`, {
            cause: err,
          });
        }
        if (AgentryError.isInstance(err) && err.code === 'invalid_request') {
          // The guard refused the address before connecting: the operator's base URL points somewhere it may not.
          throw new MessageSendError('misconfigured', `cannot send to ${base}: ${err.message}`, { cause: err });
        }
        throw new MessageSendError(
          'outcome_unknown',
          `the request to Twilio failed after it was sent (${(err as Error).message}); the SMS may have been sent`,
          { cause: err },
        );
      }
      const text = await res.text().catch(() => '');
      let json: unknown;
      try {
        json = text ? JSON.parse(text) : undefined;
      } catch {
        json = undefined;
      }
      if (res.status >= 500) {
        // Twilio (or a proxy in front of it) failed; the message may have been created before it did.
        throw new MessageSendError(
          'outcome_unknown',
          `Twilio answered HTTP ${res.status}; the SMS may or may not have been sent`,
          { providerCode: res.status },
        );
      }
      if (!res.ok) {
        const error = TwilioErrorSchema.safeParse(json);
        throw twilioError(
          error.success ? error.data.code : undefined,
          error.success ? error.data.message : undefined,
          res.status,
        );
      }
      const created = TwilioMessageSchema.safeParse(json);
      if (!created.success) {
        // Accepted (2xx), but not in the shape of a Message: it may well have been sent.
        throw new MessageSendError(
          'outcome_unknown',
          `Twilio answered HTTP ${res.status} without a message SID; the SMS may have been sent`,
        );
      }
      const m = created.data;
      if (m.status === 'failed' || m.status === 'undelivered' || (m.error_code ?? null) !== null) {
        throw twilioError(m.error_code ?? undefined, m.error_message ?? undefined, res.status);
      }
      return { provider_id: m.sid, ...(m.status ? { detail: m.status } : {}) };
    },
  };
}
