/**
 * What the enrich crash test's agents do, shared by the worker process (`enrich-crash-worker.ts`) and the test that
 * reads the database and the event file afterwards (`enrich-crash.test.ts`).
 *
 * A parent calls `enrich` for six companies of the Veloran corpus (served by the test process, so both workers see the
 * same URLs) with two fields. Each child searches, reads its company's page, and submits. In the first process the
 * first three children finish and the last three hang in their submitting turn; the process is killed there. The
 * worker writes one line per model call to a file with synchronous appends, so a SIGKILL loses none:
 * `M <run> <agent_id> <turn> <entity>`.
 */
import { appendFileSync } from 'node:fs';
import type { ModelRequest } from 'agentry-runtime';
import type { ScriptedTurn } from 'agentry-runtime/testing';
import { ENRICH_INSTRUCTIONS_START } from '../../src/tools/builtin/enrich/prompts.js';

export const PARENT_GOAL = 'Enrich the Veloran companies';
export const PARENT_FINAL = 'The table is filled in.';

/** The companies, in task order, with the facts their pages state. */
export const COMPANIES = [
  { name: 'Tessel Kelpworks', slug: 'company-tessel-kelpworks', founded: 1921, town: 'Brightwater' },
  { name: 'Marrow Ferry Company', slug: 'company-marrow-ferry-company', founded: 1898, town: 'Cobble Reach' },
  { name: 'Quillon Glass', slug: 'company-quillon-glass', founded: 1954, town: 'Hollin' },
  { name: 'Ardent Salt Co.', slug: 'company-ardent-salt-co', founded: 1877, town: 'Saltmere' },
  { name: 'Penhallow Weather Bureau', slug: 'company-penhallow-weather-bureau', founded: 1932, town: 'Fennick' },
  { name: 'Sorrel Rope Works', slug: 'company-sorrel-rope-works', founded: 1909, town: 'Gullsway' },
] as const;

/** Children at these task indexes finish in the first process; the others hang in their submitting turn there. */
export const FINISH_FIRST = 3;

export const ENRICH_INPUT = {
  entities: COMPANIES.map((c) => ({ name: c.name })),
  fields: [
    { name: 'founded', description: 'the year the company was founded', type: 'number' },
    { name: 'headquarters', description: 'the town where it is headquartered', type: 'string' },
  ],
};

export function logEvent(file: string, line: string): void {
  appendFileSync(file, `${line}\n`);
}

const firstText = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
export const isChild = (req: ModelRequest) => req.system.startsWith(ENRICH_INSTRUCTIONS_START);
/** The entity a child works on: the name is the goal's second paragraph, verbatim. */
export const entityOf = (req: ModelRequest) => firstText(req).split('\n\n')[1]!;

/**
 * The scripted turns. `hang` makes the submitting turn of the children after {@link FINISH_FIRST} wait forever: the
 * first process is killed there.
 */
export function playTurn(
  req: ModelRequest,
  turnIndex: number,
  urlOf: (slug: string) => string,
  hang: boolean,
): ScriptedTurn | Promise<ScriptedTurn> {
  if (!isChild(req)) {
    return turnIndex === 0 ? { toolCalls: [{ name: 'enrich', input: ENRICH_INPUT }] } : { text: PARENT_FINAL };
  }
  const index = COMPANIES.findIndex((c) => c.name === entityOf(req));
  const company = COMPANIES[index];
  if (!company) throw new Error(`no script for the child "${entityOf(req)}"`);
  if (turnIndex === 0) return { toolCalls: [{ name: 'web_search', input: { query: company.name } }] };
  if (turnIndex === 1) return { toolCalls: [{ name: 'read_page', input: { url: urlOf(company.slug) } }] };
  if (hang && index >= FINISH_FIRST) return new Promise<ScriptedTurn>(() => {});
  const url = urlOf(company.slug);
  return {
    toolCalls: [
      {
        name: 'submit_result',
        input: {
          fields: {
            founded: {
              value: String(company.founded),
              citations: [{ url, excerpt: `${company.name} was founded in ${company.founded}` }],
              confidence: 0.9,
            },
            headquarters: {
              value: company.town,
              citations: [{ url, excerpt: `is headquartered in ${company.town}` }],
              confidence: 0.9,
            },
          },
        },
      },
    ],
  };
}
