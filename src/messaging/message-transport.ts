/**
 * @module messaging/message-transport
 * The extension point of `message_person`: a {@link MessageTransport} hands one message on one channel (e-mail or SMS)
 * to a provider and says what the provider answered. The defaults are `smtpTransport()` (nodemailer) and
 * `twilioTransport()` (Twilio's REST API); anything else (a queue, another SMS provider) implements this one interface
 * and is passed as `builtinTools.messaging.transports`.
 *
 * A transport only sends. Everything around it is the tool's job and happens before a transport is called: the
 * recipient allowlist, address checks, rate limits, opt-outs, and recording the attempt in the outbox.
 *
 * {@link MessagingOptions}, the option that passes transports in, lives here too: the tool platform's options name it,
 * and an interface file must not import the configuration code that reads it (messaging/config.ts).
 */
import { AgentryError } from '../errors.js';

/** The channels `message_person` knows. */
export type MessageChannel = 'email' | 'sms';

/** One message, checked and recorded: the transport sends it as it is. */
export interface OutgoingMessage {
  /** The outbox's id of the attempt (a UUID); an e-mail carries it in its Message-ID. */
  message_id: string;
  channel: MessageChannel;
  /** A bare e-mail address (lower-case domain) or an E.164 number (`+4930…`). */
  to: string;
  /** E-mail only; free of control characters. */
  subject?: string;
  /** Plain text (UTF-8). */
  body: string;
}

/** The provider accepted the message. */
export interface SentMessage {
  /** The provider's id (the SMTP Message-ID, a Twilio message SID), when it gives one. */
  provider_id: string | null;
  /** The provider's own words, for the outbox's record (an SMTP `250 …` line, Twilio's `queued`). */
  detail?: string;
}

/**
 * A way to deliver messages on one channel.
 *
 * @example
 * // Messages to a webhook of your own instead of Twilio.
 * const myTransport: MessageTransport = {
 *   channel: 'sms',
 *   name: 'my-gateway',
 *   describe: () => 'my SMS gateway at https://sms.internal',
 *   async send(message, { signal }) {
 *     const res = await fetch('https://sms.internal/send', {
 *       method: 'POST',
 *       body: JSON.stringify({ to: message.to, text: message.body }),
 *       signal,
 *     });
 *     if (res.status >= 500) throw new MessageSendError('outcome_unknown', `gateway answered ${res.status}`);
 *     if (!res.ok) throw new MessageSendError('rejected', `gateway refused the message: ${res.status}`);
 *     return { provider_id: (await res.json()).id };
 *   },
 * };
 * const runtime = await AgentRuntime.open({
 *   builtinTools: { messaging: { transports: [myTransport], allow: ['+4930'] } },
 * });
 */
export interface MessageTransport {
  readonly channel: MessageChannel;
  /** A short name for logs and `agentry tools`: `smtp`, `twilio`. */
  readonly name: string;
  /** What it sends through, for `agentry tools` (`smtp://mail.example.com:587 as alerts@example.com`); no secrets. */
  describe(): string;
  /**
   * Hands the message to the provider. Resolves when the provider accepted it; otherwise throws a
   * {@link MessageSendError} that says whether the message surely did not leave (`opted_out`, `invalid_recipient`,
   * `rejected`, `unavailable`, `misconfigured`) or may have (`outcome_unknown`). Any other error counts as
   * `outcome_unknown`: the tool never sends the message again.
   */
  send(message: OutgoingMessage, options: { signal: AbortSignal }): Promise<SentMessage>;
  /** Releases connections (called when the runtime closes). */
  close?(): Promise<void>;
}

/**
 * Why a message was not sent (or may not have been):
 * - `opted_out`: the recipient asked not to be messaged (Twilio 21610) or their server refused them for good (SMTP
 *   5xx to RCPT): remembered for the account, never tried again;
 * - `invalid_recipient`: the provider says the address or number cannot receive this (Twilio 21211, 21614);
 * - `rejected`: the provider refused this message (its content, the region, a 5xx to DATA);
 * - `unavailable`: the provider could not take it now (a 4xx, a refused connection, Twilio 20429): it did not leave,
 *   and a later call may succeed;
 * - `misconfigured`: the operator's settings are wrong (SMTP login, Twilio credentials, a sender that cannot send);
 * - `outcome_unknown`: it may have left (the connection broke mid-send, a 5xx from the API): it is never re-sent.
 */
export type MessageSendFailure =
  'opted_out' | 'invalid_recipient' | 'rejected' | 'unavailable' | 'misconfigured' | 'outcome_unknown';

const MARKER = Symbol.for('agentry.message-send-error');

/**
 * A transport's failure, with what it means for the message. The tool turns it into the outbox's status (`failed`, or
 * `unknown` for `outcome_unknown`) and into the message the model reads.
 *
 * @example
 * throw new MessageSendError('opted_out', 'The recipient replied STOP to this sender', { providerCode: 21610 });
 */
export class MessageSendError extends AgentryError {
  readonly failure: MessageSendFailure;
  /** The provider's own code (Twilio's `21610`, an SMTP reply code), when it gave one. */
  readonly providerCode: number | string | undefined;
  readonly [MARKER] = true;

  constructor(
    failure: MessageSendFailure,
    message: string,
    options: { providerCode?: number | string; cause?: unknown } = {},
  ) {
    // A transport failure is the provider's or the operator's business, not a fault of the runtime: `invalid_request`
    // when the message or recipient is at fault, `not_configured` when the settings are, `internal_error` otherwise.
    super(
      failure === 'misconfigured'
        ? 'not_configured'
        : failure === 'unavailable' || failure === 'outcome_unknown'
          ? 'internal_error'
          : 'invalid_request',
      message,
      options.cause === undefined ? {} : { cause: options.cause },
    );
    this.failure = failure;
    this.providerCode = options.providerCode;
  }

  /** True when the message surely did not leave, so the outbox says `failed` rather than `unknown`. */
  get notSent(): boolean {
    return this.failure !== 'outcome_unknown';
  }

  /** True for any MessageSendError, even one thrown by another copy of the package. */
  static isMessageSendError(value: unknown): value is MessageSendError {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[MARKER] === true;
  }
}

/** `builtinTools.messaging`: what `message_person` sends through, to whom, and how much. */
export interface MessagingOptions {
  /** The SMTP server. @default SMTP_URL */
  smtpUrl?: string;
  /** The e-mail sender, `alerts@example.com` or `Alerts <alerts@example.com>`. @default AGENTRY_EMAIL_FROM */
  from?: string;
  /**
   * Twilio, for SMS. Each field falls back to its variable: TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN, TWILIO_FROM,
   * AGENTRY_TWILIO_BASE_URL.
   */
  twilio?: { accountSid?: string; authToken?: string; from?: string; baseUrl?: string };
  /** Transports of your own (at most one per channel); each replaces the default of its channel. */
  transports?: MessageTransport[];
  /**
   * Who may be written to: addresses, `@domain`s and `+` number prefixes. Given here, it replaces
   * AGENTRY_MESSAGE_ALLOW. @default AGENTRY_MESSAGE_ALLOW, and without it nobody
   */
  allow?: string[];
  /** Attempts per sliding window. @default 10 per agent per hour, 100 per account per day */
  rateLimits?: {
    perAgent?: { max: number; windowS: number };
    perAccount?: { max: number; windowS: number };
  };
  /** Characters of a body at most. @default email 20,000, sms 1,600 */
  maxBodyChars?: { email?: number; sms?: number };
}
