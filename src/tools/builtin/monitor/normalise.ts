/**
 * @module tools/builtin/monitor/normalise
 * Volatile noise a monitored page changes on every load without anything happening: clocks, "updated 3 minutes ago",
 * view counters. Each rule replaces what it matches with a placeholder before the text is hashed and diffed, so such
 * a change is no change. Prices, stock counts and other numbers that are the news are left alone: only numbers next
 * to a counter word ("1,204 views") count as noise.
 *
 * The rules, in order:
 * 1. ISO 8601 date-times (`2026-11-26T12:05:00Z`, `2026-11-26 12:05`) → `<datetime>`
 * 2. Dates: `2026-11-26`, `26/11/2026`, `11/26/26`, `26 Nov 2026`, `Nov 26, 2026`, `Thursday, 26 November` → `<date>`
 * 3. Times of day: `12:05`, `12:05:59`, `3:04 pm`, with an optional zone (`UTC`, `GMT`, `CET`, `+01:00`) → `<time>`
 * 4. Relative times: `5 minutes ago`, `an hour ago`, `just now`, `yesterday`, `today` → `<ago>`
 * 5. Counters: a number followed by views, visits, visitors, reads, likes, comments, shares, followers, watching,
 *    online, people viewing, in cart(s), sold in the last … → `<n> views` (the word is kept)
 * 6. Unix timestamps in the text (10 or 13 digits starting with 1) → `<epoch>`
 * 7. Runs of whitespace → one space (per line; empty lines dropped by the caller)
 *
 * @example
 * normaliseVolatile('Updated 12:05 UTC · 1,204 views · Price: $49') // 'Updated <time> · <n> views · Price: $49'
 */

const MONTHS =
  'jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|' +
  'nov(?:ember)?|dec(?:ember)?';
const WEEKDAYS = '(?:mon|tues?|wed(?:nes)?|thu(?:rs?)?|fri|sat(?:ur)?|sun)(?:day)?';
const ZONE = String.raw`(?:\s?(?:utc|gmt|z|[a-z]{2,4}t|[+-]\d{2}:?\d{2}))?`;
const COUNTER_WORDS =
  'views?|visits?|visitors?|reads?|likes?|comments?|shares?|followers?|watching|watchers?|online|' +
  'people (?:viewing|watching|looking)|viewing now|in (?:their )?carts?|sold in the last';

/** [pattern, replacement], applied in order (later rules see earlier placeholders, never the raw text). */
const RULES: ReadonlyArray<[RegExp, string]> = [
  [
    new RegExp(String.raw`\b\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:z|[+-]\d{2}:?\d{2})?`, 'gi'),
    '<datetime>',
  ],
  [new RegExp(String.raw`\b\d{4}-\d{2}-\d{2}\b`, 'g'), '<date>'],
  [new RegExp(String.raw`\b\d{1,2}[/.]\d{1,2}[/.]\d{2,4}\b`, 'g'), '<date>'],
  [
    new RegExp(String.raw`\b(?:${WEEKDAYS},?\s+)?\d{1,2}(?:st|nd|rd|th)?\s+(?:${MONTHS})\.?(?:,?\s+\d{4})?\b`, 'gi'),
    '<date>',
  ],
  [
    new RegExp(String.raw`\b(?:${WEEKDAYS},?\s+)?(?:${MONTHS})\.?\s+\d{1,2}(?:st|nd|rd|th)?(?:,?\s+\d{4})?\b`, 'gi'),
    '<date>',
  ],
  [/\b(?:mon|tues|wednes|thurs|fri|satur|sun)day\b/gi, '<date>'],
  [new RegExp(String.raw`\b\d{1,2}:\d{2}(?::\d{2})?(?:\s?[ap]\.?m\.?)?${ZONE}\b`, 'gi'), '<time>'],
  [new RegExp(String.raw`\b\d{1,2}\s?[ap]\.?m\.?\b`, 'gi'), '<time>'],
  [
    new RegExp(
      String.raw`\b(?:\d+|an?|one|a few|several)\s+(?:sec(?:ond)?s?|min(?:ute)?s?|h(?:ou)?rs?|days?|weeks?|months?|years?)\s+ago\b`,
      'gi',
    ),
    '<ago>',
  ],
  [/\b(?:just now|yesterday|today|moments? ago)\b/gi, '<ago>'],
  // `{0,24}`, not `*`: a page's line of `1,1,1,…` gives the engine a start at every digit, and an unbounded run would
  // be rescanned from each (quadratic: 80 KB of it held the event loop 12 s). No count is longer than that.
  [new RegExp(String.raw`\b\d[\d,.]{0,24}\s?[km]?\+?\s+(${COUNTER_WORDS})\b`, 'gi'), '<n> $1'],
  [/\b1\d{9}(?:\d{3})?\b/g, '<epoch>'],
];

/** The text with volatile noise replaced by placeholders (see the module's rules). */
export function normaliseVolatile(text: string): string {
  let out = text;
  for (const [pattern, replacement] of RULES) out = out.replace(pattern, replacement);
  return out.replace(/[ \t\f\v\u00a0]+/g, ' ').trim();
}

/** Normalises every line and drops the empty ones: what is hashed and diffed. */
export function normaliseLines(lines: readonly string[]): string[] {
  const out: string[] = [];
  for (const line of lines) {
    const n = normaliseVolatile(line);
    if (n) out.push(n);
  }
  return out;
}
