/**
 * @module web/search/results
 * What the four search clients do before and after they talk to their provider: check a {@link SearchQuery} at the
 * door ({@link prepareQuery}), turn the provider's items into clean {@link SearchResult}s (plain text, ISO dates) and
 * filter them the same way whichever provider answered.
 *
 * The filters ({@link filterResults}): a result is kept only if its URL is http(s), its hostname is one of
 * `includeDomains` (subdomains included) and none of `excludeDomains`, and, when its publication date is known, that
 * date is inside `recencyDays`. Duplicated URLs are dropped and the list is capped to `maxResults`. A provider that
 * lacks a parameter therefore still honours the query.
 */
import { z } from 'zod';
import { parseArgs } from '../../base/validate.js';
import type { SearchQuery, SearchResult } from '../search-provider.js';

const SearchQuerySchema = z.object({
  query: z.string().trim().min(1, 'Expected a non-empty query'),
  maxResults: z.int().min(1),
  includeDomains: z.array(z.string()).optional(),
  excludeDomains: z.array(z.string()).optional(),
  recencyDays: z.int().min(1).optional(),
  signal: z.custom<AbortSignal>((value) => value instanceof AbortSignal, 'Expected an AbortSignal').optional(),
});

/** A query after {@link prepareQuery}: trimmed, domains normalised, signal kept. */
export interface PreparedQuery {
  query: string;
  maxResults: number;
  includeDomains: string[];
  excludeDomains: string[];
  recencyDays: number | undefined;
  signal: AbortSignal | undefined;
}

/** Checks a query at the door (throws `invalid_request`) and normalises its domains. */
export function prepareQuery(provider: string, query: SearchQuery): PreparedQuery {
  const q = parseArgs(SearchQuerySchema, query, `${provider} search query`);
  return {
    query: q.query,
    maxResults: q.maxResults,
    includeDomains: normaliseDomains(q.includeDomains),
    excludeDomains: normaliseDomains(q.excludeDomains),
    recencyDays: q.recencyDays,
    signal: q.signal,
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Text, dates and domains
// ---------------------------------------------------------------------------------------------------------------

const NAMED_ENTITIES: Record<string, string> = {
  amp: '&',
  lt: '<',
  gt: '>',
  quot: '"',
  apos: "'",
  nbsp: ' ',
  hellip: '…',
  mdash: '—',
  ndash: '–',
  lsquo: '‘',
  rsquo: '’',
  ldquo: '“',
  rdquo: '”',
  laquo: '«',
  raquo: '»',
  middot: '·',
  bull: '•',
  copy: '©',
  reg: '®',
  trade: '™',
  deg: '°',
  euro: '€',
  pound: '£',
  times: '×',
};

/** Decodes HTML character references: the common named ones and every numeric one. Unknown names stay as they are. */
export function decodeEntities(text: string): string {
  return text.replace(/&(#x[0-9a-f]+|#[0-9]+|[a-z][a-z0-9]*);/gi, (whole, ref: string) => {
    if (ref.startsWith('#')) {
      const code =
        ref[1] === 'x' || ref[1] === 'X' ? Number.parseInt(ref.slice(2), 16) : Number.parseInt(ref.slice(1), 10);
      return Number.isInteger(code) && code > 0 && code <= 0x10ffff ? String.fromCodePoint(code) : whole;
    }
    return NAMED_ENTITIES[ref.toLowerCase()] ?? whole;
  });
}

/** Longest snippet handed to the model; longer provider text is cut at a word boundary. */
export const MAX_SNIPPET_CHARS = 1000;

/**
 * Provider text to plain text: tags such as Brave's `<strong>` removed, entities decoded, whitespace collapsed,
 * trimmed, and cut to `maxChars` with an ellipsis.
 */
export function plainText(value: unknown, maxChars = MAX_SNIPPET_CHARS): string {
  if (typeof value !== 'string') return '';
  const text = decodeEntities(value.replace(/<[^>]*>/g, ''))
    .replace(/\s+/g, ' ')
    .trim();
  if (text.length <= maxChars) return text;
  const cut = text.slice(0, maxChars - 1);
  const space = cut.lastIndexOf(' ');
  return `${(space > maxChars * 0.6 ? cut.slice(0, space) : cut).trimEnd()}…`;
}

const ISO_WITHOUT_ZONE = /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?$/;
const ISO_DATE_ONLY = /^\d{4}-\d{2}-\d{2}$/;
const ISO_WITH_ZONE = /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})$/i;
const RFC_1123 = /^[a-z]{3}, \d{1,2} [a-z]{3} \d{4} \d{2}:\d{2}(:\d{2})? (GMT|UTC|[+-]\d{4})$/i;

/**
 * A provider's date string as ISO 8601 UTC, or `undefined` when it is missing or not a date this function is sure
 * about. Accepted: ISO dates and date-times (a time without a zone is taken as UTC, as Brave's `page_age` and
 * SearXNG's `publishedDate` are) and RFC 1123 dates (Tavily news). Human strings such as "3 days ago" are not guessed.
 */
export function isoDate(value: unknown): string | undefined {
  if (typeof value !== 'string') return undefined;
  const text = value.trim();
  let ms: number;
  if (ISO_DATE_ONLY.test(text)) ms = Date.parse(`${text}T00:00:00Z`);
  else if (ISO_WITHOUT_ZONE.test(text)) ms = Date.parse(`${text.replace(' ', 'T')}Z`);
  else if (ISO_WITH_ZONE.test(text)) ms = Date.parse(text.replace(' ', 'T'));
  else if (RFC_1123.test(text)) ms = Date.parse(text);
  else return undefined;
  return Number.isFinite(ms) ? new Date(ms).toISOString() : undefined;
}

/** `YYYY-MM-DD` of a date, in UTC. */
export function utcDay(date: Date): string {
  return date.toISOString().slice(0, 10);
}

/**
 * The oldest publication time `recencyDays` allows: midnight UTC, `recencyDays` days before today. Day-aligned so
 * that a date-only publication date on the first allowed day is kept, and so that the date sent to providers that
 * take a day (`start_date`, Brave's date range) is the same cut-off.
 */
export function recencyCutoff(recencyDays: number, now: Date): Date {
  const today = Date.parse(`${utcDay(now)}T00:00:00Z`);
  return new Date(today - recencyDays * 86_400_000);
}

/**
 * A domain as the filters compare it: lower case, without scheme, path, port, trailing dot, a leading `*.` or a
 * leading `www.` (so `www.example.com` also keeps `example.com`). `undefined` when nothing is left.
 */
export function normaliseDomain(input: string): string | undefined {
  const domain = input
    .trim()
    .toLowerCase()
    .replace(/^[a-z][a-z0-9+.-]*:\/\//, '')
    .split(/[/?#]/)[0]!
    .replace(/^\*\./, '')
    .replace(/:\d+$/, '')
    .replace(/\.+$/, '')
    .replace(/^www\./, '');
  return domain === '' ? undefined : domain;
}

function normaliseDomains(list: readonly string[] | undefined): string[] {
  const out: string[] = [];
  for (const item of list ?? []) {
    const domain = normaliseDomain(item);
    if (domain !== undefined && !out.includes(domain)) out.push(domain);
  }
  return out;
}

/** True when `hostname` is `domain` or one of its subdomains. */
export function hostnameMatches(hostname: string, domain: string): boolean {
  const host = hostname.toLowerCase().replace(/\.+$/, '');
  return host === domain || host.endsWith(`.${domain}`);
}

/**
 * The filters every client applies to what the provider returned (see the module comment), then the cap. Results
 * come in the provider's order and stay in it.
 */
export function filterResults(results: readonly SearchResult[], query: PreparedQuery, now: Date): SearchResult[] {
  const cutoff = query.recencyDays === undefined ? undefined : recencyCutoff(query.recencyDays, now).getTime();
  const seen = new Set<string>();
  const kept: SearchResult[] = [];
  for (const result of results) {
    let url: URL;
    try {
      url = new URL(result.url);
    } catch {
      continue;
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') continue;
    const host = url.hostname;
    if (query.includeDomains.length > 0 && !query.includeDomains.some((d) => hostnameMatches(host, d))) continue;
    if (query.excludeDomains.some((d) => hostnameMatches(host, d))) continue;
    if (cutoff !== undefined && result.published_at !== undefined && Date.parse(result.published_at) < cutoff) continue;
    const key = url.href;
    if (seen.has(key)) continue;
    seen.add(key);
    kept.push(result);
    if (kept.length >= query.maxResults) break;
  }
  return kept;
}

/** Builds a {@link SearchResult}, leaving `published_at` out when unknown and falling back to the URL for a title. */
export function searchResult(fields: {
  title: unknown;
  url: string;
  snippet: unknown;
  published: unknown;
}): SearchResult {
  const url = fields.url.trim();
  const title = plainText(fields.title, 300) || url;
  const published = isoDate(fields.published);
  return {
    title,
    url,
    snippet: plainText(fields.snippet),
    ...(published === undefined ? {} : { published_at: published }),
  };
}

/** Parses each item with `schema`, dropping the ones that do not fit (one malformed result does not sink a search). */
export function parseItems<S extends z.ZodType>(schema: S, items: readonly unknown[]): z.output<S>[] {
  const out: z.output<S>[] = [];
  for (const item of items) {
    const parsed = schema.safeParse(item);
    if (parsed.success) out.push(parsed.data);
  }
  return out;
}
