/**
 * @module tools/builtin/find-all/dedupe
 * How find_all tells that two submitted candidates are one entity, and how many entities it probably missed. Pure: no
 * I/O, so each rule is unit-tested on its own.
 *
 * Two submissions are one entity when they share a key: their normalised name ({@link normaliseEntityName}: case,
 * diacritics, punctuation, a leading "the" and legal forms like Inc, Ltd or Co. do not count), the page of their `url`,
 * or the registrable domain of their `url` (the public-suffix rule of `tldts`: `shop.example.co.uk` and
 * `www.example.co.uk` are both `example.co.uk`). A page or a domain identifies an entity only where no generator used
 * it for two different names: a wiki, a directory or a list page names many entities, and would merge them all. Only a
 * submission with checked evidence brings its URL's keys: an unchecked one joins an entity by name alone.
 */
import { parse } from 'tldts';
import { normaliseUrlForMatch } from '../../citations.js';

/** The evidence of a candidate, as far as merging needs it. */
export interface EvidenceLike {
  url: string;
  excerpt: string;
}

/** One candidate as a generator submitted it, its evidence already through the citation check. */
export interface CandidateSubmission<E extends EvidenceLike> {
  /** Which generator submitted it (0 or 1). */
  generator: number;
  name: string;
  url: string;
  description: string;
  /** Its evidence that passed the citation check (empty: none did). */
  evidence: E[];
}

/** One entity after merging: what its checked submissions said. */
export interface MergedCandidate<E extends EvidenceLike> {
  /** The spelling most of its checked submissions used (the first seen on a tie). */
  name: string;
  url: string;
  description: string;
  /** The checked evidence of all its submissions, without repeats. */
  evidence: E[];
  /** Every distinct spelling submitted for it. */
  spellings: string[];
  /** The generators that submitted it with checked evidence: what capture–recapture counts. */
  found_by: number[];
}

/** An entity the caller already knows: by name, or by its URL (its page, or its own domain). */
export interface ExcludedEntity {
  name: string;
  url?: string | undefined;
}

/** Evidence kept per entity at most: enough to show why, not every page that names it. */
export const MAX_EVIDENCE_PER_ENTITY = 5;

// Company forms that say nothing about which company it is. Compared after dots are dropped ("S.A." is "sa").
const LEGAL_FORMS = new Set([
  'inc',
  'incorporated',
  'corp',
  'corporation',
  'co',
  'cos',
  'company',
  'ltd',
  'limited',
  'llc',
  'llp',
  'lp',
  'plc',
  'gmbh',
  'ag',
  'kg',
  'se',
  'sa',
  'sas',
  'sarl',
  'srl',
  'spa',
  'bv',
  'nv',
  'oy',
  'oyj',
  'ab',
  'as',
  'asa',
  'aps',
  'pty',
  'pte',
  'pvt',
  'kk',
  'ltda',
]);

// Letters that Unicode does not decompose into a base letter and a mark.
const UNDECOMPOSED: Record<string, string> = {
  ß: 'ss',
  æ: 'ae',
  œ: 'oe',
  ø: 'o',
  đ: 'd',
  ð: 'd',
  ł: 'l',
  þ: 'th',
  ı: 'i',
  ħ: 'h',
};

/**
 * A name in the form two spellings of one entity share: without diacritics, in lower case, `&` as "and", dotted or
 * slashed initials joined (`S.A.` as "sa", `A/S` as "as"), apostrophes dropped, other punctuation as spaces, a leading
 * "the" and trailing legal forms (Inc, Ltd, Co., GmbH, "& Co." …) removed — but never the last word.
 *
 * @example
 * normaliseEntityName('Tessel Kelpworks Co.'); // 'tessel kelpworks'
 * normaliseEntityName('The Société Générale S.A.'); // 'societe generale'
 */
export function normaliseEntityName(name: string): string {
  let s = name.normalize('NFKD').replace(/\p{M}/gu, '').toLowerCase();
  s = s.replace(/[ßæœøđðłþıħ]/g, (ch) => UNDECOMPOSED[ch] ?? ch);
  s = s.replace(/&/g, ' and ');
  s = s.replace(/(?<![\p{L}\p{N}])\p{L}(?:[./]\p{L})+\.?(?![\p{L}\p{N}])/gu, (initials) =>
    initials.replace(/[./]/g, ''),
  );
  s = s.replace(/['’ʼ`]/g, '').replace(/[^\p{L}\p{N}]+/gu, ' ');
  const words = s.split(' ').filter(Boolean);
  if (words.length > 1 && words[0] === 'the') words.shift();
  for (;;) {
    const last = words.at(-1);
    if (words.length < 2 || last === undefined || !LEGAL_FORMS.has(last)) break;
    words.pop();
    // "Smith & Co." and "Smith and Company": the "and" went with the form.
    if (words.length > 1 && words.at(-1) === 'and') words.pop();
  }
  return words.join(' ');
}

/** What names are compared by: the normalised name without its spaces ("Kelp Works" and "Kelpworks" are one). */
function nameKey(name: string): string {
  return normaliseEntityName(name).replaceAll(' ', '');
}

/**
 * The registrable domain of an http(s) URL by the public-suffix list (private suffixes included, so two sites on
 * `github.io` stay two), the host itself for an IP address or a single-label host, null for anything else.
 *
 * @example
 * registrableDomain('https://shop.example.co.uk/about'); // 'example.co.uk'
 * registrableDomain('http://127.0.0.1:8080/x'); // '127.0.0.1'
 */
export function registrableDomain(url: string): string | null {
  let parsed: URL;
  try {
    parsed = new URL(url.trim());
  } catch {
    return null;
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') return null;
  const host = parsed.hostname.replace(/^\[|\]$/g, '');
  if (!host) return null;
  const info = parse(host, { allowPrivateDomains: true });
  return info.isIp ? host : (info.domain ?? host);
}

function isSiteRoot(url: string): boolean {
  try {
    const parsed = new URL(url.trim());
    return /^\/*$/.test(parsed.pathname) && parsed.search === '';
  } catch {
    return false;
  }
}

/** The keys of a URL a submission can be merged by. */
function urlKeys(url: string): string[] {
  const keys: string[] = [];
  const page = normaliseUrlForMatch(url);
  if (page !== null) keys.push(`page:${page}`);
  const domain = registrableDomain(url);
  if (domain !== null) keys.push(`domain:${domain}`);
  return keys;
}

/**
 * Merges the generators' submissions into entities, in the order they were first submitted, and leaves out those the
 * caller excluded (by name; by URL, its page — or its whole site when the URL is a home page). An entity none of whose
 * submissions has checked evidence is dropped and counted.
 *
 * @example
 * const { candidates, dropped } = mergeCandidates(submissions, input.exclude ?? []);
 */
export function mergeCandidates<E extends EvidenceLike>(
  submissions: readonly CandidateSubmission<E>[],
  exclude: readonly ExcludedEntity[] = [],
): { candidates: MergedCandidate<E>[]; dropped: number } {
  const entries = submissions
    .map((s) => ({ s, name: nameKey(s.name), urls: s.evidence.length > 0 ? urlKeys(s.url) : [] }))
    .filter((e) => e.name !== '');

  // A URL key used by one generator for two names is a list, not an entity's own page or site.
  const namesBy = new Map<string, Set<string>>();
  for (const e of entries) {
    for (const key of e.urls) {
      const at = `${e.s.generator}\n${key}`;
      const names = namesBy.get(at) ?? new Set<string>();
      names.add(e.name);
      namesBy.set(at, names);
    }
  }
  const ambiguous = new Set<string>();
  for (const [at, names] of namesBy) if (names.size > 1) ambiguous.add(at.slice(at.indexOf('\n') + 1));

  const parent = entries.map((_, i) => i);
  const find = (i: number): number => {
    while (parent[i] !== i) {
      parent[i] = parent[parent[i]!]!;
      i = parent[i]!;
    }
    return i;
  };
  const owner = new Map<string, number>();
  const identityKeys = entries.map((e) => [`name:${e.name}`, ...e.urls.filter((k) => !ambiguous.has(k))]);
  identityKeys.forEach((keys, i) => {
    for (const key of keys) {
      const j = owner.get(key);
      if (j === undefined) owner.set(key, i);
      else {
        // The earlier submission's root stays the root: groups keep their first-seen order.
        const [a, b] = [find(i), find(j)];
        if (a !== b) parent[Math.max(a, b)] = Math.min(a, b);
      }
    }
  });
  const groups = new Map<number, number[]>();
  entries.forEach((_, i) => {
    const root = find(i);
    const members = groups.get(root) ?? [];
    members.push(i);
    groups.set(root, members);
  });

  const excludedKeys = new Set<string>();
  for (const x of exclude) {
    const name = nameKey(x.name);
    if (name) excludedKeys.add(`name:${name}`);
    // A home page stands for its whole site; a deeper page (a wiki article, a directory entry) only for itself.
    if (x.url)
      for (const key of urlKeys(x.url)) if (key.startsWith('page:') || isSiteRoot(x.url)) excludedKeys.add(key);
  }

  const candidates: MergedCandidate<E>[] = [];
  let dropped = 0;
  for (const members of [...groups.values()].sort((a, b) => a[0]! - b[0]!)) {
    // A group's own keys: all its names, and the URL keys that identify it.
    const keys = members.flatMap((i) => identityKeys[i]!);
    // An excluded URL's page matches even on a shared domain: it names that page's entity.
    const pages = members.flatMap((i) => entries[i]!.urls.filter((k) => k.startsWith('page:')));
    if ([...keys, ...pages].some((k) => excludedKeys.has(k))) continue;
    const checked = members.map((i) => entries[i]!.s).filter((s) => s.evidence.length > 0);
    if (checked.length === 0) {
      dropped++;
      continue;
    }
    candidates.push(
      mergeGroup(
        checked,
        members.map((i) => entries[i]!.s),
      ),
    );
  }
  return { candidates, dropped };
}

function mergeGroup<E extends EvidenceLike>(
  checked: CandidateSubmission<E>[],
  all: CandidateSubmission<E>[],
): MergedCandidate<E> {
  const counts = new Map<string, number>();
  for (const s of checked) counts.set(s.name.trim(), (counts.get(s.name.trim()) ?? 0) + 1);
  let name = checked[0]!.name.trim();
  for (const [spelling, count] of counts) if (count > counts.get(name)!) name = spelling;

  const evidence: E[] = [];
  const seen = new Set<string>();
  for (const e of checked.flatMap((s) => s.evidence)) {
    const key = `${e.url}\n${e.excerpt}`;
    if (seen.has(key) || evidence.length >= MAX_EVIDENCE_PER_ENTITY) continue;
    seen.add(key);
    evidence.push(e);
  }
  return {
    name,
    url: checked.find((s) => s.url.trim())?.url.trim() ?? '',
    description: checked.find((s) => s.description.trim())?.description.trim() ?? '',
    evidence,
    spellings: [...new Set(all.map((s) => s.name.trim()))],
    found_by: [...new Set(checked.map((s) => s.generator))].sort((a, b) => a - b),
  };
}

/**
 * Capture–recapture (Lincoln–Petersen) over the two generators' sets: `n1·n2/m`, rounded, where n1 and n2 are how many
 * entities each generator found and m how many both found. Undefined when m is 0 (no overlap: no estimate). Never below
 * the number found, since n1·n2/m − (n1 + n2 − m) = (n1 − m)(n2 − m)/m ≥ 0.
 *
 * @example
 * estimateTotal([[0, 1], [0, 1], [0]]); // 3·2/2 = 3
 */
export function estimateTotal(foundBy: ReadonlyArray<readonly number[]>): number | undefined {
  let n1 = 0;
  let n2 = 0;
  let m = 0;
  for (const generators of foundBy) {
    const first = generators.includes(0);
    const second = generators.includes(1);
    if (first) n1++;
    if (second) n2++;
    if (first && second) m++;
  }
  return m === 0 ? undefined : Math.round((n1 * n2) / m);
}
