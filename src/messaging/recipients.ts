/**
 * @module messaging/recipients
 * Who `message_person` may write to, and what it may write: the recipient allowlist (empty, so nothing is sent, until
 * the operator configures it), e-mail and phone number checks, and the refusals that keep a model from smuggling
 * headers or novels into a message. Everything here runs before the outbox records an attempt: a refused message
 * never reaches a transport.
 */
import type * as PhoneNumbers from 'libphonenumber-js/max';
import { z } from 'zod';
import { AgentryError } from '../errors.js';
import type { MessageChannel } from './message-transport.js';

/**
 * Control characters, line and paragraph separators: in a header (the subject, an address) a CR or LF would start a
 * header of the model's choosing (`Bcc: everyone@…`); the others have no business there either.
 */
// eslint-disable-next-line no-control-regex -- control characters are what it refuses
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/;

/**
 * E-mail addresses: zod's `z.email()` (its default pattern: a dot-atom local part of letters, digits and `_'+-.`, a
 * domain of letter-digit-hyphen labels with an alphabetic top-level label). Stricter than RFC 5322 on purpose: no
 * quoted local parts, comments, display names or IP literals, which are where injection and confusion hide.
 * Internationalised addresses are refused (use the punycode form of the domain).
 */
const EmailAddress = z.email();

/** The longest address SMTP carries (RFC 5321: a 256-octet path, less the angle brackets). */
const MAX_EMAIL_CHARS = 254;
/** Subjects longer than this are cut by many clients anyway; far below SMTP's 998-octet line. */
export const MAX_SUBJECT_CHARS = 255;

/** One rule of the allowlist. */
export type AllowRule =
  { kind: 'address'; value: string } | { kind: 'domain'; value: string } | { kind: 'prefix'; value: string };

/**
 * The recipient allowlist: exact e-mail addresses (`ada@example.com`), whole e-mail domains (`@example.com`: that
 * domain only, not its subdomains) and phone number prefixes (`+4930`: every number that starts with it; `+` alone
 * allows every number). Empty means nobody.
 */
export class RecipientAllowList {
  private constructor(readonly rules: readonly AllowRule[]) {}

  /**
   * Parses entries (from `builtinTools.messaging.allow` and `AGENTRY_MESSAGE_ALLOW`, comma-separated); a malformed
   * entry is refused with a message naming it, at the door.
   *
   * @example
   * RecipientAllowList.parse(['ada@example.com', '@ops.example.com', '+4930']);
   */
  static parse(entries: readonly string[]): RecipientAllowList {
    const rules: AllowRule[] = [];
    for (const raw of entries) {
      const entry = raw.trim();
      if (entry === '') continue;
      if (entry.startsWith('+')) {
        if (!/^\+\d{0,15}$/.test(entry)) throw badEntry(raw, 'a number prefix is + and up to 15 digits, e.g. +4930');
        rules.push({ kind: 'prefix', value: entry });
      } else if (entry.startsWith('@')) {
        const domain = entry.slice(1).toLowerCase();
        if (!EmailAddress.safeParse(`x@${domain}`).success) throw badEntry(raw, 'a domain is @ and a domain name');
        rules.push({ kind: 'domain', value: domain });
      } else {
        const address = entry.toLowerCase();
        if (!EmailAddress.safeParse(address).success) {
          throw badEntry(raw, 'an entry is an e-mail address, @domain, or a +number prefix');
        }
        rules.push({ kind: 'address', value: address });
      }
    }
    return new RecipientAllowList(rules);
  }

  get empty(): boolean {
    return this.rules.length === 0;
  }

  /** Whether the allowlist lets the tool write to `to`, a recipient {@link normaliseRecipient} gave. */
  allows(channel: MessageChannel, to: string): boolean {
    return this.rules.some((r) => {
      if (channel === 'sms') return r.kind === 'prefix' && to.startsWith(r.value);
      if (r.kind === 'address') return r.value === to;
      return r.kind === 'domain' && to.slice(to.lastIndexOf('@') + 1) === r.value;
    });
  }

  /** For `agentry tools`: how many rules of each kind, no addresses. */
  describe(): string {
    if (this.empty) return 'nobody (the allowlist is empty)';
    const count = (kind: AllowRule['kind']) => this.rules.filter((r) => r.kind === kind).length;
    const parts = [
      [count('address'), 'address', 'addresses'],
      [count('domain'), 'domain', 'domains'],
      [count('prefix'), 'number prefix', 'number prefixes'],
    ] as const;
    return parts
      .filter(([n]) => n > 0)
      .map(([n, one, many]) => `${n} ${n === 1 ? one : many}`)
      .join(', ');
  }
}

function badEntry(entry: string, rule: string): AgentryError {
  return new AgentryError(
    'invalid_request',
    `The message allowlist entry ${JSON.stringify(entry)} is malformed: ${rule} (AGENTRY_MESSAGE_ALLOW or ` +
      'builtinTools.messaging.allow)',
  );
}

/** A refusal of `message_person` before anything was recorded or sent. */
export function refused(message: string): AgentryError {
  return new AgentryError('invalid_request', `Not sent: ${message}`);
}

let phoneModule: Promise<typeof PhoneNumbers> | undefined;

/**
 * The recipient in the form the outbox and the allowlist use: an e-mail address in lower case, a phone number in
 * E.164 (`+49 30 1234567` becomes `+49301234567`). Refuses anything else with a message for the model.
 */
export async function normaliseRecipient(channel: MessageChannel, to: string): Promise<string> {
  if (CONTROL.test(to)) {
    throw refused('the recipient contains a line break or another control character, which is never allowed');
  }
  const value = to.trim();
  if (channel === 'email') {
    const address = value.toLowerCase();
    if (address.length > MAX_EMAIL_CHARS || !EmailAddress.safeParse(address).success) {
      throw refused(
        `${JSON.stringify(to)} is not an e-mail address this tool accepts: give a bare address such as ` +
          'name@example.com (no display name, no angle brackets, no quoted or internationalised parts)',
      );
    }
    return address;
  }
  if (!value.startsWith('+')) {
    throw refused(
      `${JSON.stringify(to)} is not a phone number in international form: start with + and the country code ` +
        '(E.164), e.g. +49 30 1234567',
    );
  }
  // libphonenumber-js with its full metadata ("max"): validity per country and number type, not only the length.
  // Loaded on the first SMS, as it weighs ~150 KB.
  const { parsePhoneNumberWithError } = await (phoneModule ??= import('libphonenumber-js/max'));
  let number: ReturnType<typeof parsePhoneNumberWithError>;
  try {
    number = parsePhoneNumberWithError(value);
  } catch (err) {
    throw refused(`${JSON.stringify(to)} is not a phone number (${(err as Error).message})`);
  }
  if (!number.isValid()) {
    throw refused(`${JSON.stringify(to)} is not a valid phone number for its country (+${number.countryCallingCode})`);
  }
  return number.number;
}

/** The subject of an e-mail: required, one line, no control characters. Returns it trimmed. */
export function checkSubject(channel: MessageChannel, subject: string | undefined): string | undefined {
  if (channel === 'sms') return undefined; // an SMS has no subject: it is not sent, and not recorded
  if (subject === undefined || subject.trim() === '') throw refused('an e-mail needs a subject');
  if (CONTROL.test(subject)) {
    throw refused('the subject contains a line break or another control character, which is never allowed');
  }
  if (subject.length > MAX_SUBJECT_CHARS) {
    throw refused(`the subject has ${subject.length} characters; at most ${MAX_SUBJECT_CHARS} are allowed`);
  }
  return subject.trim();
}

/** The body: not empty, not beyond the channel's cap. */
export function checkBody(channel: MessageChannel, body: string, maxChars: number): void {
  if (body.trim() === '') throw refused('the body is empty');
  if (body.includes('\u0000')) throw refused('the body contains a NUL character');
  if (body.length > maxChars) {
    throw refused(`the body has ${body.length} characters; at most ${maxChars} are allowed for ${channel}`);
  }
}
