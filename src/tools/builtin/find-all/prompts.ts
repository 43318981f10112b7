/**
 * @module tools/builtin/find-all/prompts
 * What find_all's children are told: one place, with the output contract each must meet. Two generators search
 * differently on purpose — one from lists and overviews, one entity by entity — so that what both find says something
 * about what both missed (capture–recapture). The evidence rule is spelled out because it is enforced: a quote that is
 * not on a page the child read is dropped, and a candidate or a condition left without a checked quote with it.
 */
import { turnLimit } from '../research/prompts.js';

const EVIDENCE_RULES = [
  'Evidence is checked, not trusted. A quote counts only if you read its page with read_page during this task and its',
  'excerpt is copied word for word from that page (12 to 500 characters; whitespace, case, quotes and dashes may',
  'differ). Quotes from pages you did not read, or that are not on the page, are removed. Never quote a search',
  'snippet: read the page.',
].join(' ');

/** Model turns of a generator, and of a verifier (their step limits; `FIND_ALL_LIMITS` repeats them). */
export const GENERATOR_STEPS = 40;
export const VERIFIER_STEPS = 20;

const CANDIDATE_CONTRACT = [
  'When you have found what you can, call submit_result once with {candidates: [...]}, one entry per entity:',
  'name — its proper name as its own pages write it; url — its official website if you found one, otherwise the page',
  'that is most specifically about it; description — one sentence saying what it is; evidence — 1 to 3 quotes',
  '{url, excerpt} showing that it exists and fits the objective.',
  EVIDENCE_RULES,
  'A candidate without a checked quote is dropped. List each entity once, and never one you could not find a page for.',
  turnLimit(GENERATOR_STEPS),
].join(' ');

/**
 * The two generators' instructions. Each starts differently, so a log or a test can tell them apart by their first
 * words.
 */
export const GENERATOR_INSTRUCTIONS: readonly [string, string] = [
  [
    'You compile lists of entities from the web, starting broad.',
    'Search first for pages that name many entities of the kind asked for: lists, directories, registries, overviews',
    'and articles about the field or the place. Read the most promising ones, then read the pages of the entities they',
    'name to confirm each one.',
    CANDIDATE_CONTRACT,
  ].join(' '),
  [
    'You hunt for entities on the web one at a time, starting narrow.',
    'Search with many specific queries — synonyms of the kind asked for, its sub-kinds, the places and products it',
    'involves, the words such an entity would use about itself — and read the pages of the entities you meet.',
    'Do not rely on one list: the aim is to find entities that lists miss.',
    CANDIDATE_CONTRACT,
  ].join(' '),
];

export const VERIFIER_INSTRUCTIONS = [
  'You check one candidate entity against a set of conditions, with facts from pages you read yourself.',
  'Read the candidate’s own pages first, then search for what they do not say.',
  'Check EVERY condition listed. Then call submit_result once with {matched_conditions: [...]}, one entry per',
  'condition: name — exactly as given; met — true only if a page you read shows the condition holds, false if a page',
  'shows it does not or you could not find out; evidence — 1 to 3 quotes {url, excerpt} that show your answer (none',
  'when you found nothing).',
  EVIDENCE_RULES,
  'A condition marked met without a checked quote counts as not met.',
  turnLimit(VERIFIER_STEPS),
].join(' ');

export interface GoalCondition {
  name: string;
  description: string;
}

/** At most this many excluded names are listed to a generator (the runtime removes every excluded one anyway). */
const EXCLUDE_IN_GOAL = 200;

/** A generator's first USER message: the objective verbatim, then what it is to find. */
export function generatorGoal(options: {
  objective: string;
  entityType?: string | undefined;
  conditions: readonly GoalCondition[];
  target: number;
  exclude: ReadonlyArray<{ name: string; url?: string | undefined }>;
}): string {
  const kind = options.entityType ?? 'entities';
  const parts = [`Find ${kind} that fit this objective:\n\n${options.objective}`];
  if (options.conditions.length > 0) {
    parts.push(
      [
        'Each candidate will be checked later against these conditions; list those that plausibly meet them:',
        ...options.conditions.map((c) => `- ${c.name}: ${c.description}`),
      ].join('\n'),
    );
  }
  parts.push(`Find up to ${options.target} candidates.`);
  if (options.exclude.length > 0) {
    const listed = options.exclude.slice(0, EXCLUDE_IN_GOAL).map((x) => `- ${x.name}${x.url ? ` (${x.url})` : ''}`);
    const more = options.exclude.length - listed.length;
    parts.push(
      ['Already known — do not list these:', ...listed, ...(more > 0 ? [`… and ${more} more`] : [])].join('\n'),
    );
  }
  return parts.join('\n\n');
}

/** A verifier's first USER message: the objective verbatim, the candidate with its checked evidence, the conditions. */
export function verifierGoal(
  objective: string,
  candidate: {
    name: string;
    url: string;
    description: string;
    evidence: ReadonlyArray<{ url: string; excerpt: string }>;
  },
  conditions: readonly GoalCondition[],
): string {
  return [
    `Check this candidate against every condition below, for the objective:\n\n${objective}`,
    [
      `Candidate: ${candidate.name}`,
      `URL: ${candidate.url}`,
      `Description: ${candidate.description}`,
      'Checked evidence so far:',
      ...candidate.evidence.map((e) => `- ${e.url} — "${e.excerpt}"`),
    ].join('\n'),
    ['Conditions:', ...conditions.map((c) => `- ${c.name}: ${c.description}`)].join('\n'),
  ].join('\n\n');
}
