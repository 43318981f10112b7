/**
 * @module tools/builtin/enrich/coerce
 * What enrich accepts as a value of each field type, and the one form it returns it in. Pure: no I/O, unit-tested.
 * A value that does not fit its type is never repaired into one that might be wrong: it becomes `null` with a reason.
 *
 * - `string`: any non-empty text, trimmed (a number or boolean is written as text).
 * - `number`: a finite number, or text that is one number with an optional unit after it: `"41"`, `"41 metres"`,
 *   `"48,000"` (commas only as thousands separators), `"-3.5 °C"`. Not `"about 40"`, `"38-41"` or `"12,34"`: a second
 *   number or words before the number make it a guess.
 * - `boolean`: `true` / `false`, or the text `true`, `false`, `yes`, `no` in any case.
 * - `date`: ISO `YYYY-MM-DD` out; in: `YYYY-MM-DD`, an ISO date-time (its date as written), `YYYY/MM/DD`,
 *   `12 March 1921`, `March 12, 1921` (month names in English, full or three letters). A year or a month alone is not a
 *   date (use a `number` field for a year); `03/04/2020` is refused because it reads two ways.
 * - `url`: an absolute `http(s)` URL, returned as WHATWG `URL.href`. No scheme is guessed for `example.com`.
 *
 * @example
 * coerceValue('number', '41 metres'); // { ok: true, value: 41 }
 * coerceValue('date', 'March 12, 1921'); // { ok: true, value: '1921-03-12' }
 * coerceValue('boolean', 'maybe'); // { ok: false, reason: 'not a boolean (true, false, yes or no): "maybe"' }
 */

export const FIELD_TYPES = ['string', 'number', 'boolean', 'date', 'url'] as const;
export type FieldType = (typeof FIELD_TYPES)[number];

/** A field's value as the caller gets it. */
export type FieldValue = string | number | boolean;

export type Coerced = { ok: true; value: FieldValue } | { ok: false; reason: string };

/** Longest string value kept; a longer one is not a field value but a report. */
export const MAX_STRING_CHARS = 2_000;

const NUMBER_WITH_UNIT = /^([+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[+-]?\d+)?)(?:\s*([^\d\s][^\d]*))?$/i;
/** Scale words that are part of the number ("4.2 million" is 4,200,000), as powers of ten. */
const SCALES = new Map([
  ['thousand', 3],
  ['million', 6],
  ['billion', 9],
  ['trillion', 12],
  ['bn', 9],
]);
/** Abbreviations that may be a scale or a unit ("12k", "5 K"): a guess either way, so refused. */
const AMBIGUOUS_SCALES = new Set(['k']);

const MONTHS = [
  'january',
  'february',
  'march',
  'april',
  'may',
  'june',
  'july',
  'august',
  'september',
  'october',
  'november',
  'december',
];

function quoted(value: unknown): string {
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  return JSON.stringify(text.length > 80 ? `${text.slice(0, 77)}...` : text);
}

/** Coerces a researcher's value to the field's type, or says why it cannot be. */
export function coerceValue(type: FieldType, raw: unknown): Coerced {
  if (raw === null || raw === undefined) return { ok: false, reason: 'no value' };
  switch (type) {
    case 'string':
      return coerceString(raw);
    case 'number':
      return coerceNumber(raw);
    case 'boolean':
      return coerceBoolean(raw);
    case 'date':
      return coerceDate(raw);
    case 'url':
      return coerceUrl(raw);
  }
}

function coerceString(raw: unknown): Coerced {
  if (typeof raw === 'number' && Number.isFinite(raw)) return { ok: true, value: String(raw) };
  if (typeof raw === 'boolean') return { ok: true, value: String(raw) };
  if (typeof raw !== 'string') return { ok: false, reason: `not text: ${quoted(raw)}` };
  const text = raw.trim();
  if (text === '') return { ok: false, reason: 'empty text' };
  if (text.length > MAX_STRING_CHARS) return { ok: false, reason: `longer than ${MAX_STRING_CHARS} characters` };
  return { ok: true, value: text };
}

function coerceNumber(raw: unknown): Coerced {
  if (typeof raw === 'number') {
    return Number.isFinite(raw) ? { ok: true, value: raw } : { ok: false, reason: `not a finite number: ${raw}` };
  }
  if (typeof raw !== 'string') return { ok: false, reason: `not a number: ${quoted(raw)}` };
  const match = NUMBER_WITH_UNIT.exec(raw.trim());
  if (!match) return { ok: false, reason: `not a number: ${quoted(raw)}` };
  const word = /^[a-z]+/i.exec(match[2] ?? '')?.[0].toLowerCase() ?? '';
  if (AMBIGUOUS_SCALES.has(word)) return { ok: false, reason: `ambiguous scale or unit "${word}": ${quoted(raw)}` };
  const scale = SCALES.get(word);
  const digits = match[1]!.replaceAll(',', '');
  // Scaled through the exponent, not by multiplying: 1.1e9, not 1100000000.0000002.
  const value = Number(scale === undefined ? digits : `${digits}e${scale}`);
  if (!Number.isFinite(value)) return { ok: false, reason: `not a finite number: ${quoted(raw)}` };
  return { ok: true, value };
}

function coerceBoolean(raw: unknown): Coerced {
  if (typeof raw === 'boolean') return { ok: true, value: raw };
  const text = typeof raw === 'string' ? raw.trim().toLowerCase() : '';
  if (text === 'true' || text === 'yes') return { ok: true, value: true };
  if (text === 'false' || text === 'no') return { ok: true, value: false };
  return { ok: false, reason: `not a boolean (true, false, yes or no): ${quoted(raw)}` };
}

function isoDate(year: number, month: number, day: number): string | null {
  if (year < 1 || year > 9999 || month < 1 || month > 12 || day < 1) return null;
  // Day 0 of the next month is the last day of this one (UTC, so no time zone moves it).
  const daysInMonth = new Date(Date.UTC(year, month, 0)).getUTCDate();
  if (day > daysInMonth) return null;
  const pad = (n: number, width: number) => String(n).padStart(width, '0');
  return `${pad(year, 4)}-${pad(month, 2)}-${pad(day, 2)}`;
}

function monthOf(name: string): number {
  const lower = name.toLowerCase().replace(/\.$/, '');
  const index = MONTHS.findIndex((m) => m === lower || (lower.length === 3 && m.startsWith(lower)));
  return index + 1; // 0 when unknown
}

function coerceDate(raw: unknown): Coerced {
  if (typeof raw !== 'string') {
    return typeof raw === 'number' && Number.isInteger(raw)
      ? { ok: false, reason: `only a year (${raw}), not a full date` }
      : { ok: false, reason: `not a date: ${quoted(raw)}` };
  }
  const text = raw.trim();
  const invalid = (): Coerced => ({ ok: false, reason: `not a valid date: ${quoted(raw)}` });
  let m = /^(\d{4})[-/](\d{1,2})[-/](\d{1,2})(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/.exec(
    text,
  );
  if (m) {
    const iso = isoDate(Number(m[1]), Number(m[2]), Number(m[3]));
    return iso ? { ok: true, value: iso } : invalid();
  }
  // 12 March 1921, 12 Mar. 1921
  m = /^(\d{1,2})(?:st|nd|rd|th)?\s+([a-z]+\.?)\s+(\d{4})$/i.exec(text);
  if (m) {
    const iso = isoDate(Number(m[3]), monthOf(m[2]!), Number(m[1]));
    return iso ? { ok: true, value: iso } : invalid();
  }
  // March 12, 1921 / March 12 1921
  m = /^([a-z]+\.?)\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})$/i.exec(text);
  if (m) {
    const iso = isoDate(Number(m[3]), monthOf(m[1]!), Number(m[2]));
    return iso ? { ok: true, value: iso } : invalid();
  }
  if (/^\d{4}$/.test(text)) return { ok: false, reason: `only a year (${text}), not a full date` };
  if (/^(\d{4}-\d{1,2}|[a-z]+\.?\s+\d{4})$/i.test(text)) {
    return { ok: false, reason: `only a month (${quoted(raw)}), not a full date` };
  }
  if (/^\d{1,2}[/.]\d{1,2}[/.]\d{2,4}$/.test(text)) {
    return { ok: false, reason: `ambiguous date (day and month order unknown): ${quoted(raw)}` };
  }
  return { ok: false, reason: `not a date: ${quoted(raw)}` };
}

function coerceUrl(raw: unknown): Coerced {
  if (typeof raw !== 'string') return { ok: false, reason: `not a URL: ${quoted(raw)}` };
  let url: URL;
  try {
    url = new URL(raw.trim());
  } catch {
    return { ok: false, reason: `not an absolute http(s) URL: ${quoted(raw)}` };
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || !url.hostname) {
    return { ok: false, reason: `not an absolute http(s) URL: ${quoted(raw)}` };
  }
  return { ok: true, value: url.href };
}

/**
 * The key two coerced values of one field share when they say the same thing: numbers by value, booleans as
 * themselves, text compared without case and with whitespace collapsed, dates and URLs as coerced (a URL without its
 * trailing slash).
 */
export function sameValueKey(type: FieldType, value: FieldValue): string {
  switch (type) {
    case 'number':
    case 'boolean':
    case 'date':
      return String(value);
    case 'url':
      return String(value).replace(/\/+$/, '');
    case 'string':
      return String(value).normalize('NFKC').toLowerCase().replace(/\s+/g, ' ').trim();
  }
}
