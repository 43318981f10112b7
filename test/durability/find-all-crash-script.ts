/**
 * What the find_all crash test's agents do, shared by the worker process (`find-all-crash-worker.ts`) and the test
 * that reads the database and the event file afterwards (`find-all-crash.test.ts`).
 *
 * A lead agent calls find_all for the cooperatives of the Veloran corpus with one match condition. Two generators
 * search, read company pages and submit candidates (two spellings of Tessel Kelpworks among them); one verifier per
 * candidate reads the candidate's page and submits its verdict. In the first process the verifiers of `HANGING` never
 * get an answer to their second turn: the process is killed there, after the generation phase finished and two
 * verifiers completed.
 */
import { appendFileSync } from 'node:fs';
import type { ModelRequest, ToolResultBlock } from 'agentry-runtime';
import type { ScriptedTurn } from 'agentry-runtime/testing';
import { GENERATOR_INSTRUCTIONS, VERIFIER_INSTRUCTIONS } from '../../src/tools/builtin/find-all/prompts.js';

export const LEAD_GOAL = 'List the cooperatives of Veloran';
export const LEAD_FINAL = 'Found them.';
export const OBJECTIVE = 'companies of the Veloran Archipelago that are cooperatives';
export const CONDITION = { name: 'cooperative', description: 'The company is owned by its workers as a cooperative.' };

/** The entities find_all must return, in order. */
export const EXPECTED_ENTITIES = ['Tessel Kelpworks', 'Quillon Glass', 'Penhallow Weather Bureau'];
/** Candidates whose verifier hangs in its second turn in the first process (the others finish there). */
export const HANGING = ['Penhallow Weather Bureau', 'Marrow Ferry Company', 'Sorrel Rope Works'];
export const FINISHING = ['Tessel Kelpworks', 'Quillon Glass'];

export type Role = 'lead' | 'generator-0' | 'generator-1' | 'verifier';
export function roleOf(req: { system: string }): Role {
  if (req.system === GENERATOR_INSTRUCTIONS[0]) return 'generator-0';
  if (req.system === GENERATOR_INSTRUCTIONS[1]) return 'generator-1';
  if (req.system === VERIFIER_INSTRUCTIONS) return 'verifier';
  return 'lead';
}

/**
 * One line per event in the event file:
 * - `M <run> <role> <agent_id> <turn>`: a model call starts;
 * - `Q <run> <query>`: the search provider is asked (query words joined by `_`).
 */
export function logEvent(file: string, line: string): void {
  appendFileSync(file, `${line}\n`);
}

const firstText = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;

/** The candidate a verifier checks, from its goal (null for another agent's goal). */
export function candidateOf(goal: string): { name: string; url: string } | null {
  const name = /^Candidate: (.*)$/m.exec(goal)?.[1];
  const url = /^URL: (.*)$/m.exec(goal)?.[1];
  return name !== undefined && url !== undefined ? { name, url } : null;
}

const COMPANIES: Record<string, { slug: string; founded: string; cooperative: boolean }> = {
  'Tessel Kelpworks': { slug: 'tessel-kelpworks', founded: 'founded in 1921 on Tessel Island', cooperative: true },
  'Quillon Glass': { slug: 'quillon-glass', founded: 'founded in 1954 on Quillon Island', cooperative: true },
  'Penhallow Weather Bureau': {
    slug: 'penhallow-weather-bureau',
    founded: 'founded in 1932 on Penhallow Island',
    cooperative: true,
  },
  'Marrow Ferry Company': {
    slug: 'marrow-ferry-company',
    founded: 'founded in 1898 on Marrow Island',
    cooperative: false,
  },
  'Sorrel Rope Works': { slug: 'sorrel-rope-works', founded: 'founded in 1909 on Sorrel Island', cooperative: false },
};

/** Each generator's finds: [spelling, company]. */
const FINDS: Record<'generator-0' | 'generator-1', Array<[string, string]>> = {
  'generator-0': [
    ['Tessel Kelpworks', 'Tessel Kelpworks'],
    ['Quillon Glass', 'Quillon Glass'],
    ['Penhallow Weather Bureau', 'Penhallow Weather Bureau'],
    ['Marrow Ferry Company', 'Marrow Ferry Company'],
  ],
  'generator-1': [
    ['Tessel Kelpworks Co.', 'Tessel Kelpworks'],
    ['Quillon Glass', 'Quillon Glass'],
    ['Sorrel Rope Works', 'Sorrel Rope Works'],
  ],
};

/**
 * The scripted turns. `hang` makes the second turn of the verifiers of {@link HANGING} wait forever (the first
 * process is killed there).
 */
export function playTurn(
  req: ModelRequest,
  turnIndex: number,
  urlOf: (slug: string) => string,
  hang: boolean,
): ScriptedTurn | Promise<ScriptedTurn> {
  const page = (company: string) => urlOf(`company-${COMPANIES[company]!.slug}`);
  const role = roleOf(req);
  if (role === 'generator-0' || role === 'generator-1') {
    const finds = FINDS[role];
    if (turnIndex === 0)
      return { toolCalls: [{ name: 'web_search', input: { query: `Veloran cooperative ${role}` } }] };
    if (turnIndex === 1) {
      return { toolCalls: finds.map(([, company]) => ({ name: 'read_page', input: { url: page(company) } })) };
    }
    const candidates = finds.map(([name, company]) => ({
      name,
      url: page(company),
      description: `${company}, a company of Veloran.`,
      evidence: [{ url: page(company), excerpt: `${company} was ${COMPANIES[company]!.founded}` }],
    }));
    return { toolCalls: [{ name: 'submit_result', input: { candidates } }] };
  }
  if (role === 'verifier') {
    const { name, url } = candidateOf(firstText(req))!;
    if (turnIndex === 0) return { toolCalls: [{ name: 'read_page', input: { url } }] };
    if (hang && HANGING.includes(name)) return new Promise<ScriptedTurn>(() => {});
    const cooperative = COMPANIES[name]!.cooperative;
    const excerpt = cooperative
      ? `${name} is owned by its workers as a cooperative.`
      : `${name} is a family-owned company.`;
    const matched_conditions = [{ name: CONDITION.name, met: cooperative, evidence: [{ url, excerpt }] }];
    return { toolCalls: [{ name: 'submit_result', input: { matched_conditions } }] };
  }
  if (turnIndex === 0) {
    return { toolCalls: [{ name: 'find_all', input: { objective: OBJECTIVE, match_conditions: [CONDITION] } }] };
  }
  const result = (req.messages.at(-1)!.content as ToolResultBlock[]).find((b) => b.type === 'tool_result');
  if (!result || result.is_error) throw new Error(`find_all failed: ${JSON.stringify(result)}`);
  return { text: LEAD_FINAL };
}
