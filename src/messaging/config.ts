/**
 * @module messaging/config
 * `message_person`'s configuration: `builtinTools.messaging` first, the environment (`SMTP_URL`,
 * `AGENTRY_EMAIL_FROM`, `TWILIO_*`, `AGENTRY_TWILIO_BASE_URL`, `AGENTRY_MESSAGE_ALLOW`) as the fallback. Malformed
 * settings are refused when the runtime opens, naming the setting; missing ones leave the channel unconfigured, and
 * its calls fail with what to set.
 */
import { createRequire } from 'node:module';
import { z } from 'zod';
import { AgentryError } from '../errors.js';
import type { MessageChannel, MessageTransport, MessagingOptions } from './message-transport.js';
import { DEFAULT_MESSAGING_LIMITS, Messenger, type MessagingLimits } from './outbox.js';
import { RecipientAllowList } from './recipients.js';
import { smtpTransport } from './smtp.js';
import { TWILIO_DEFAULT_BASE_URL, twilioTransport, type TwilioTransportOptions } from './twilio.js';

const Window = z.object({ max: z.number().int().min(0), windowS: z.number().int().positive() }).strict();

/** The zod schema of `builtinTools.messaging` (builtins.ts checks every option at the door with it). */
export const MessagingOptionsSchema = z
  .object({
    smtpUrl: z.string().min(1).optional(),
    from: z.string().min(1).optional(),
    twilio: z
      .object({
        accountSid: z.string().min(1).optional(),
        authToken: z.string().min(1).optional(),
        from: z.string().min(1).optional(),
        baseUrl: z.string().min(1).optional(),
      })
      .strict()
      .optional(),
    transports: z
      .array(
        z.custom<MessageTransport>(
          (v) =>
            typeof (v as MessageTransport)?.send === 'function' &&
            ((v as MessageTransport).channel === 'email' || (v as MessageTransport).channel === 'sms'),
          'must be a MessageTransport ({channel: "email" | "sms", name, describe(), send()})',
        ),
      )
      .optional(),
    allow: z.array(z.string()).optional(),
    rateLimits: z.object({ perAgent: Window.optional(), perAccount: Window.optional() }).strict().optional(),
    maxBodyChars: z
      .object({
        email: z.number().int().positive().optional(),
        // Twilio refuses more (error 21617).
        sms: z.number().int().positive().max(1_600).optional(),
      })
      .strict()
      .optional(),
  })
  .strict();

/** What to set for each channel, as the tool's error and `agentry tools` say it. */
export const MESSAGING_SETUP_HINTS: Record<MessageChannel, string> = {
  email:
    'e-mail is not configured: set SMTP_URL (smtp://user:pass@host:587 or smtps://…:465) and AGENTRY_EMAIL_FROM, ' +
    'or builtinTools.messaging.smtpUrl and .from',
  sms:
    'SMS is not configured: set TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN and TWILIO_FROM, ' +
    'or builtinTools.messaging.twilio',
};

/** The messenger of a runtime, and how `agentry tools` shows it. */
export interface MessagingSetup {
  messenger: Messenger;
  ready: boolean;
  detail: string;
}

const env1 = (env: NodeJS.ProcessEnv, name: string): string | undefined => {
  const v = env[name]?.trim();
  return v ? v : undefined;
};

function nodemailerInstalled(): boolean {
  try {
    createRequire(import.meta.url).resolve('nodemailer');
    return true;
  } catch {
    return false;
  }
}

/** The Twilio base URL's host, for the guarded fetch to let through. */
export function twilioHost(options: MessagingOptions | undefined, env: NodeJS.ProcessEnv): string {
  const base = options?.twilio?.baseUrl ?? env1(env, 'AGENTRY_TWILIO_BASE_URL') ?? TWILIO_DEFAULT_BASE_URL;
  try {
    return new URL(base).hostname.replace(/^\[|\]$/g, '');
  } catch {
    throw new AgentryError(
      'invalid_request',
      `AGENTRY_TWILIO_BASE_URL (or builtinTools.messaging.twilio.baseUrl) is not a URL: ${JSON.stringify(base)}`,
    );
  }
}

/**
 * Builds the messenger from the options and the environment.
 *
 * @example
 * const { messenger } = messagingFromConfig({ allow: ['@example.com'] }, process.env, fetch);
 */
export function messagingFromConfig(
  options: MessagingOptions | undefined,
  env: NodeJS.ProcessEnv,
  twilioFetch: TwilioTransportOptions['fetch'],
): MessagingSetup {
  const o = options ?? {};
  const transports = new Map<MessageChannel, MessageTransport>();
  for (const t of o.transports ?? []) {
    if (transports.has(t.channel)) {
      throw new AgentryError('invalid_request', `builtinTools.messaging.transports: two transports for ${t.channel}`);
    }
    transports.set(t.channel, t);
  }
  const missing = { ...MESSAGING_SETUP_HINTS };
  let nodemailerMissing = false;
  if (!transports.has('email')) {
    const url = o.smtpUrl ?? env1(env, 'SMTP_URL');
    const from = o.from ?? env1(env, 'AGENTRY_EMAIL_FROM');
    if (url && from) transports.set('email', smtpTransport({ url, from }));
    else if (url)
      missing.email = 'e-mail is not configured: SMTP_URL is set but AGENTRY_EMAIL_FROM (the sender) is not';
    else if (from) missing.email = 'e-mail is not configured: AGENTRY_EMAIL_FROM is set but SMTP_URL is not';
    nodemailerMissing = transports.has('email') && !nodemailerInstalled();
  }
  if (!transports.has('sms')) {
    const accountSid = o.twilio?.accountSid ?? env1(env, 'TWILIO_ACCOUNT_SID');
    const authToken = o.twilio?.authToken ?? env1(env, 'TWILIO_AUTH_TOKEN');
    const from = o.twilio?.from ?? env1(env, 'TWILIO_FROM');
    const baseUrl = o.twilio?.baseUrl ?? env1(env, 'AGENTRY_TWILIO_BASE_URL');
    const unset = [
      ['TWILIO_ACCOUNT_SID', accountSid],
      ['TWILIO_AUTH_TOKEN', authToken],
      ['TWILIO_FROM', from],
    ].filter(([, v]) => !v);
    if (unset.length === 0) {
      transports.set(
        'sms',
        twilioTransport({
          accountSid: accountSid!,
          authToken: authToken!,
          from: from!,
          ...(baseUrl ? { baseUrl } : {}),
          ...(twilioFetch ? { fetch: twilioFetch } : {}),
        }),
      );
    } else if (unset.length < 3) {
      missing.sms = `SMS is not configured: set ${unset.map(([n]) => n).join(' and ')} as well`;
    }
  }
  const allowEntries = o.allow ?? env1(env, 'AGENTRY_MESSAGE_ALLOW')?.split(',') ?? [];
  const allow = RecipientAllowList.parse(allowEntries);
  const limits: MessagingLimits = {
    perAgent: o.rateLimits?.perAgent ?? DEFAULT_MESSAGING_LIMITS.perAgent,
    perAccount: o.rateLimits?.perAccount ?? DEFAULT_MESSAGING_LIMITS.perAccount,
    maxBodyChars: { ...DEFAULT_MESSAGING_LIMITS.maxBodyChars, ...o.maxBodyChars },
  };
  const channels = (['email', 'sms'] as const).map((c) => {
    const t = transports.get(c);
    if (!t) return `${c}: ${missing[c].replace(/^(e-mail|SMS) is not configured: /, 'not configured, ')}`;
    if (c === 'email' && nodemailerMissing) return 'email: needs the nodemailer package (npm install nodemailer)';
    return `${c}: ${t.name} (${t.describe()})`;
  });
  const ready = transports.size > 0 && !allow.empty && !(nodemailerMissing && transports.size === 1);
  const detail = [
    ...channels,
    allow.empty
      ? 'recipients: nobody yet (set AGENTRY_MESSAGE_ALLOW or builtinTools.messaging.allow)'
      : `recipients: ${allow.describe()}`,
  ].join('; ');
  return { messenger: new Messenger({ transports, missing, allow, limits }), ready, detail };
}
