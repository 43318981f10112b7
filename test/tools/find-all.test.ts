/**
 * find_all under the scripted model, against the Veloran corpus served on loopback and a local search provider. The
 * corpus has six companies; three are cooperatives (Tessel Kelpworks, Quillon Glass, Penhallow Weather Bureau), three
 * are family-owned. Two generators propose candidates (with two spellings of one entity each time, and one candidate
 * backed only by an invented quote), one verifier per candidate checks the condition, and only entities whose every
 * condition is backed by a checked quote come back.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelRequest, Tool, ToolResultBlock } from 'agentry-runtime';
import type { ScriptedTurn } from 'agentry-runtime/testing';
import { recheckCitation } from '../../src/tools/citations.js';
import {
  estimateTotal,
  mergeCandidates,
  normaliseEntityName,
  registrableDomain,
  type CandidateSubmission,
} from '../../src/tools/builtin/find-all/dedupe.js';
import { GENERATOR_INSTRUCTIONS, VERIFIER_INSTRUCTIONS } from '../../src/tools/builtin/find-all/prompts.js';
import { FIND_ALL_LIMITS, findAllTool } from '../../src/tools/builtin/find-all/index.js';
import { corpusSearch, serveCorpus, type CorpusServer } from '../fixtures/corpus/veloran.js';
import { openTestRuntime } from '../support/runtime.js';

let corpus: CorpusServer;
beforeAll(async () => {
  corpus = await serveCorpus();
});
afterAll(async () => {
  await corpus.close();
});

const OBJECTIVE = 'companies of the Veloran Archipelago that are cooperatives';
const COOPERATIVE = { name: 'cooperative', description: 'The company is owned by its workers as a cooperative.' };

const firstText = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
const lastToolResult = (req: ModelRequest) =>
  (req.messages.at(-1)!.content as ToolResultBlock[]).find((b) => b.type === 'tool_result')!;
const page = (slug: string) => corpus.urlOf(`company-${slug}`);
const founded = (name: string, year: number, island: string) => `${name} was founded in ${year} on ${island} Island`;

type Role = 'lead' | 'generator-lists' | 'generator-hunt' | 'verifier';
function roleOf(req: ModelRequest): Role {
  if (req.system === GENERATOR_INSTRUCTIONS[0]) return 'generator-lists';
  if (req.system === GENERATOR_INSTRUCTIONS[1]) return 'generator-hunt';
  if (req.system === VERIFIER_INSTRUCTIONS) return 'verifier';
  return 'lead';
}

/** What each generator reads, then submits. */
function generatorScript(role: 'generator-lists' | 'generator-hunt') {
  if (role === 'generator-lists') {
    return {
      query: 'Veloran cooperative company',
      reads: ['tessel-kelpworks', 'quillon-glass', 'penhallow-weather-bureau', 'marrow-ferry-company'].map(page),
      candidates: [
        {
          name: 'Tessel Kelpworks',
          url: page('tessel-kelpworks'),
          description: 'Makes kelp fertiliser on Tessel Island.',
          evidence: [{ url: page('tessel-kelpworks'), excerpt: founded('Tessel Kelpworks', 1921, 'Tessel') }],
        },
        {
          name: 'Quillon Glass',
          url: page('quillon-glass'),
          description: 'Makes sea-glass lenses.',
          evidence: [{ url: page('quillon-glass'), excerpt: founded('Quillon Glass', 1954, 'Quillon') }],
        },
        {
          name: 'Penhallow Weather Bureau',
          url: page('penhallow-weather-bureau'),
          description: 'Storm forecasts.',
          evidence: [
            { url: page('penhallow-weather-bureau'), excerpt: founded('Penhallow Weather Bureau', 1932, 'Penhallow') },
          ],
        },
        {
          name: 'Marrow Ferry Company',
          url: page('marrow-ferry-company'),
          description: 'Ferry crossings.',
          evidence: [{ url: page('marrow-ferry-company'), excerpt: founded('Marrow Ferry Company', 1898, 'Marrow') }],
        },
      ],
    };
  }
  return {
    query: 'workers cooperative Veloran',
    reads: [...['tessel-kelpworks', 'quillon-glass', 'sorrel-rope-works'].map(page), corpus.urlOf('town-hollin')],
    candidates: [
      // the same entity as the other generator's "Tessel Kelpworks", spelled with its legal form
      {
        name: 'Tessel Kelpworks Co.',
        url: page('tessel-kelpworks'),
        description: 'A kelp cooperative.',
        evidence: [{ url: page('tessel-kelpworks'), excerpt: 'Tessel Kelpworks is owned by its workers' }],
      },
      // the same entity as "Quillon Glass": another name, but the same page
      {
        name: 'Quillon Glassworks',
        url: page('quillon-glass'),
        description: 'Glassworks on Quillon.',
        evidence: [{ url: page('quillon-glass'), excerpt: 'It employs 110 people and is headquartered in Hollin' }],
      },
      {
        name: 'Sorrel Rope Works',
        url: page('sorrel-rope-works'),
        description: 'Hemp rope.',
        evidence: [{ url: page('sorrel-rope-works'), excerpt: founded('Sorrel Rope Works', 1909, 'Sorrel') }],
      },
      // invented: the page was read, but it never says this
      {
        name: 'Hollin Net Makers',
        url: corpus.urlOf('town-hollin'),
        description: 'A fishermen’s cooperative.',
        evidence: [
          { url: corpus.urlOf('town-hollin'), excerpt: 'Hollin Net Makers is a cooperative of the fishermen' },
        ],
      },
    ],
  };
}

/** What each verifier answers, by candidate: met or not, and the quote it gives. */
const VERDICTS: Record<string, { met: boolean; excerpt: string }> = {
  'Tessel Kelpworks': { met: true, excerpt: 'Tessel Kelpworks is owned by its workers as a cooperative.' },
  'Quillon Glass': { met: true, excerpt: 'Quillon Glass is owned by its workers as a cooperative.' },
  'Penhallow Weather Bureau': {
    met: true,
    excerpt: 'Penhallow Weather Bureau is owned by its workers as a cooperative.',
  },
  'Marrow Ferry Company': { met: false, excerpt: 'Marrow Ferry Company is a family-owned company.' },
  // the page says it is family-owned: the verifier's "met" rests on a quote that is not there
  'Sorrel Rope Works': { met: true, excerpt: 'Sorrel Rope Works is owned by its workers as a cooperative.' },
};

function findAllScript(input: Record<string, unknown>, seen: { result?: Record<string, unknown> }) {
  return (req: ModelRequest, { turnIndex }: { turnIndex: number }): ScriptedTurn => {
    const role = roleOf(req);
    if (role === 'generator-lists' || role === 'generator-hunt') {
      const script = generatorScript(role);
      if (turnIndex === 0) return { toolCalls: [{ name: 'web_search', input: { query: script.query } }] };
      if (turnIndex === 1) return { toolCalls: script.reads.map((url) => ({ name: 'read_page', input: { url } })) };
      return { toolCalls: [{ name: 'submit_result', input: { candidates: script.candidates } }] };
    }
    if (role === 'verifier') {
      const goal = firstText(req);
      const name = /^Candidate: (.*)$/m.exec(goal)![1]!;
      const url = /^URL: (.*)$/m.exec(goal)![1]!;
      if (turnIndex === 0) return { toolCalls: [{ name: 'read_page', input: { url } }] };
      const verdict = VERDICTS[name]!;
      const matched_conditions = [
        { name: COOPERATIVE.name, met: verdict.met, evidence: [{ url, excerpt: verdict.excerpt }] },
      ];
      return { toolCalls: [{ name: 'submit_result', input: { matched_conditions } }] };
    }
    if (turnIndex === 0) return { toolCalls: [{ name: 'find_all', input }] };
    const result = lastToolResult(req);
    seen.result = result.is_error ? { error: result.content } : (JSON.parse(result.content) as Record<string, unknown>);
    return { text: 'Done.' };
  };
}

async function findAll(
  input: Record<string, unknown>,
  options: { search?: boolean; own?: { maxOutputChars: number } } = {},
) {
  const seen: { result?: Record<string, unknown> } = {};
  const search = corpusSearch(corpus);
  const t = await openTestRuntime(findAllScript(input, seen), {
    builtinTools: {
      ...(options.search === false ? {} : { search }),
      env: {},
      fetch: { allow: ['127.0.0.1/32'] },
      // with a find_all of its own, the built-in one is left out
      ...(options.own ? { only: ['web_search', 'read_page'] } : {}),
    },
    ...(options.own ? { tools: [findAllTool(options.own) as Tool] } : {}),
    defaultAccount: { id: 'local', credits: 1_000 },
  });
  const { agent_id } = await t.runtime.create({ goal: 'List the cooperatives of Veloran' });
  const agent = await t.runtime.waitFor(agent_id);
  expect(agent.status, agent.status_message).toBe('COMPLETED');
  const children = (await t.runtime.list({ parentId: agent_id, limit: 100 })).data;
  const callsBy = (role: Role) => t.model.calls.filter((c) => roleOf(c) === role);
  return { ...t, agent_id, result: seen.result!, search, children, callsBy };
}

type Entity = {
  name: string;
  url: string;
  evidence: Array<{ url: string; excerpt: string; content_sha256: string; span: { start: number; end: number } }>;
  matched_conditions: Array<{ name: string; met: boolean; evidence: Array<{ url: string; excerpt: string }> }>;
};
const entitiesOf = (result: Record<string, unknown>) => result.entities as Entity[];

describe('find_all', () => {
  it('returns exactly the cooperatives, merges two spellings of one entity, drops what only invented quotes support', async () => {
    const { runtime, result, children, callsBy, agent_id } = await findAll({
      objective: OBJECTIVE,
      entity_type: 'company',
      match_conditions: [COOPERATIVE],
    });
    const entities = entitiesOf(result);
    expect(entities.map((e) => e.name)).toEqual(['Tessel Kelpworks', 'Quillon Glass', 'Penhallow Weather Bureau']);
    // Tessel Kelpworks, Quillon Glass (each two spellings, merged), Penhallow, Marrow Ferry, Sorrel, Hollin
    expect(result.candidates_considered).toBe(6);
    // Hollin Net Makers (its only quote invented) and Sorrel Rope Works (its "cooperative" quote invented)
    expect(result.dropped).toBe(2);
    // matched: lists found Tessel, Quillon, Penhallow (3); hunt found Tessel, Quillon (2); both 2: 3·2/2
    expect(result.estimated_total).toBe(3);

    // The merged entity keeps the checked evidence of both spellings.
    const tessel = entities[0]!;
    expect(tessel.url).toBe(page('tessel-kelpworks'));
    expect(tessel.evidence.map((e) => e.excerpt)).toEqual([
      'Tessel Kelpworks was founded in 1921 on Tessel Island',
      'Tessel Kelpworks is owned by its workers',
    ]);
    expect(entities[1]!.evidence).toHaveLength(2); // "Quillon Glass" and "Quillon Glassworks"
    for (const e of entities) {
      expect(e.matched_conditions).toEqual([
        {
          name: 'cooperative',
          met: true,
          evidence: [
            expect.objectContaining({ url: e.url, excerpt: `${e.name} is owned by its workers as a cooperative.` }),
          ],
        },
      ]);
    }
    // A kept quote re-checks offline against the stored snapshot of its page.
    const quote = tessel.evidence[0]!;
    const snapshot = (await runtime.pageSnapshot(quote.content_sha256))!;
    expect(snapshot.slice(quote.span.start, quote.span.end)).toBe(quote.excerpt);
    expect(recheckCitation(snapshot, quote)).toBe(true);

    // Two generators and one verifier per merged, checked candidate (not Hollin): children of the caller.
    expect(children).toHaveLength(2 + 5);
    expect(callsBy('generator-lists').length).toBe(3);
    expect(callsBy('generator-hunt').length).toBe(3);
    expect(callsBy('verifier').length).toBe(5 * 2);
    // Every child's first user message carries the objective verbatim; research children have exactly their tools.
    for (const role of ['generator-lists', 'generator-hunt', 'verifier'] as const) {
      for (const call of callsBy(role)) {
        expect(firstText(call)).toContain(OBJECTIVE);
        expect(call.tools.map((t) => t.name).sort()).toEqual(['read_page', 'submit_result', 'web_search']);
      }
    }
    expect(
      callsBy('verifier')
        .filter((c) => c.messages.length === 1)
        .map((c) => /^Candidate: (.*)$/m.exec(firstText(c))![1])
        .sort(),
    ).toEqual([
      'Marrow Ferry Company',
      'Penhallow Weather Bureau',
      'Quillon Glass',
      'Sorrel Rope Works',
      'Tessel Kelpworks',
    ]);

    // Priced once (2 credits) plus the children's model use, all on the caller's account.
    const ledger = await runtime.accounts.ledger('local');
    expect(
      ledger.filter((l) => l.kind === 'tool' && l.item === 'find_all').map((l) => [l.agent_id, l.credits]),
    ).toEqual([[agent_id, -2]]);
    for (const child of children) {
      expect(ledger.some((l) => l.agent_id === child.agent_id && l.kind === 'model')).toBe(true);
    }
    const account = await runtime.accounts.get('local');
    expect(account.reserved).toBe(0);
    await runtime.close();
  });

  it('leaves out an excluded entity, by name (any spelling) or by its page', async () => {
    const byName = await findAll({
      objective: OBJECTIVE,
      match_conditions: [COOPERATIVE],
      exclude: [{ name: 'Quillon Glass Ltd' }],
    });
    expect(entitiesOf(byName.result).map((e) => e.name)).toEqual(['Tessel Kelpworks', 'Penhallow Weather Bureau']);
    expect(byName.result).toMatchObject({ candidates_considered: 5, dropped: 2, estimated_total: 2 });
    expect(byName.callsBy('verifier').filter((c) => c.messages.length === 1)).toHaveLength(4);
    // The generators were told what to skip.
    expect(firstText(byName.callsBy('generator-lists')[0]!)).toContain('do not list these:\n- Quillon Glass Ltd');
    await byName.runtime.close();

    const byPage = await findAll({
      objective: OBJECTIVE,
      match_conditions: [COOPERATIVE],
      exclude: [{ name: 'Penhallow Met Office', url: page('penhallow-weather-bureau') }],
    });
    expect(entitiesOf(byPage.result).map((e) => e.name)).toEqual(['Tessel Kelpworks', 'Quillon Glass']);
    expect(byPage.result).toMatchObject({ candidates_considered: 5, dropped: 2, estimated_total: 2 });
    await byPage.runtime.close();
  });

  it('caps the entities at limit; the estimate still counts every match', async () => {
    const { runtime, result } = await findAll({ objective: OBJECTIVE, match_conditions: [COOPERATIVE], limit: 2 });
    expect(entitiesOf(result).map((e) => e.name)).toEqual(['Tessel Kelpworks', 'Quillon Glass']);
    expect(result).toMatchObject({ candidates_considered: 6, dropped: 2, estimated_total: 3 });
    await runtime.close();
  });

  it('a result too large for one tool result is kept whole as an artifact; the model sees the entities that fit', async () => {
    const { runtime, result, agent_id } = await findAll(
      { objective: OBJECTIVE, match_conditions: [COOPERATIVE] },
      { own: { maxOutputChars: 2_500 } },
    );
    const shown = entitiesOf(result);
    expect(shown.length).toBeGreaterThan(0);
    expect(shown.length).toBeLessThan(3);
    expect(JSON.stringify(result).length).toBeLessThanOrEqual(2_500);
    expect(result).toMatchObject({
      candidates_considered: 6,
      dropped: 2,
      estimated_total: 3,
      entities_total: 3,
      note: `Only the first ${shown.length} of 3 entities are shown; all 3 are in the JSON artifact ${result.artifact_id as string}.`,
    });
    const { artifact, data } = await runtime.getArtifact(agent_id, result.artifact_id as string);
    expect(artifact).toMatchObject({ name: 'find-all-entities.json', mime_type: 'application/json' });
    const whole = JSON.parse(new TextDecoder().decode(data)) as { entities: Entity[]; candidates_considered: number };
    expect(whole.entities.map((e) => e.name)).toEqual([
      'Tessel Kelpworks',
      'Quillon Glass',
      'Penhallow Weather Bureau',
    ]);
    expect(whole.entities.slice(0, shown.length)).toEqual(shown);
    expect(whole.candidates_considered).toBe(6);
    await runtime.close();
  });

  it('tells every child its turn limit, so that it submits before it runs out', () => {
    for (const g of GENERATOR_INSTRUCTIONS) expect(g).toContain(`at most ${FIND_ALL_LIMITS.generatorSteps} turns`);
    expect(VERIFIER_INSTRUCTIONS).toContain(`at most ${FIND_ALL_LIMITS.verifierSteps} turns`);
  });

  it('without match conditions returns every candidate with checked evidence, and runs no verifiers', async () => {
    const { runtime, result, children } = await findAll({ objective: 'companies of the Veloran Archipelago' });
    expect(entitiesOf(result).map((e) => e.name)).toEqual([
      'Tessel Kelpworks',
      'Quillon Glass',
      'Penhallow Weather Bureau',
      'Marrow Ferry Company',
      'Sorrel Rope Works',
    ]);
    expect(entitiesOf(result).every((e) => e.matched_conditions.length === 0)).toBe(true);
    // lists: Tessel, Quillon, Penhallow, Marrow (4); hunt: Tessel, Quillon, Sorrel (3); both 2: 4·3/2
    expect(result).toMatchObject({ candidates_considered: 6, dropped: 1, estimated_total: 6 });
    expect(children).toHaveLength(2);
    await runtime.close();
  });

  it('fails at once with not_configured when web_search has no provider, and says so in the tool status', async () => {
    const { runtime, result, children } = await findAll({ objective: OBJECTIVE }, { search: false });
    expect(result.error).toContain('find_all needs web_search');
    expect(children).toHaveLength(0);
    const status = runtime.toolStatus().find((s) => s.name === 'find_all')!;
    expect(status).toMatchObject({ ready: false, offered: true });
    expect(status.detail).toContain('web_search');
    await runtime.close();
  });
});

describe('find_all: names and domains', () => {
  it('normalises case, diacritics, punctuation, a leading "the" and legal forms', () => {
    expect(normaliseEntityName('Tessel Kelpworks Co.')).toBe('tessel kelpworks');
    expect(normaliseEntityName('TESSEL  KELPWORKS, Inc.')).toBe('tessel kelpworks');
    expect(normaliseEntityName('The Société Générale S.A.')).toBe('societe generale');
    expect(normaliseEntityName('Smith & Co.')).toBe('smith');
    expect(normaliseEntityName('Smith and Company Ltd')).toBe('smith');
    expect(normaliseEntityName('Müller GmbH')).toBe('muller');
    expect(normaliseEntityName('Ørsted A/S')).toBe('orsted');
    expect(normaliseEntityName('Straße Holdings L.L.C.')).toBe('strasse holdings');
    expect(normaliseEntityName("O'Brien's Bakery")).toBe('obriens bakery');
    expect(normaliseEntityName('Kelp-Works (Tessel)')).toBe('kelp works tessel');
    // never the last word: a company called "The Company" keeps its name
    expect(normaliseEntityName('The Company')).toBe('company');
    expect(normaliseEntityName('Co')).toBe('co');
  });

  it('finds the registrable domain by the public-suffix list', () => {
    expect(registrableDomain('https://shop.example.co.uk/about')).toBe('example.co.uk');
    expect(registrableDomain('https://www.example.com')).toBe('example.com');
    expect(registrableDomain('https://alice.github.io/x')).toBe('alice.github.io');
    expect(registrableDomain('http://127.0.0.1:8080/x')).toBe('127.0.0.1');
    expect(registrableDomain('http://[::1]/x')).toBe('::1');
    expect(registrableDomain('example.com')).toBeNull();
    expect(registrableDomain('ftp://example.com/')).toBeNull();
  });

  const quote = (url: string) => ({ url, excerpt: 'a quote long enough' });
  const sub = (
    generator: number,
    name: string,
    url: string,
    checked = true,
  ): CandidateSubmission<{ url: string; excerpt: string }> => ({
    generator,
    name,
    url,
    description: `${name}.`,
    evidence: checked ? [quote(url)] : [],
  });

  it('merges by normalised name, or by a domain or page that names one entity', () => {
    const { candidates, dropped } = mergeCandidates([
      sub(0, 'Tessel Kelpworks', 'https://tessel-kelp.example/'),
      sub(0, 'Ardent Salt', 'https://ardentsalt.example/'),
      sub(1, 'Tessel Kelpworks Co.', 'https://other.example/tessel'),
      // another name, the same site (another page of it)
      sub(1, 'Tessel Kelp Cooperative', 'https://www.tessel-kelp.example/about'),
      sub(1, 'Ardent Salt Company', 'https://ardentsalt.example/'),
    ]);
    expect(dropped).toBe(0);
    expect(candidates.map((c) => [c.name, c.spellings, c.found_by])).toEqual([
      ['Tessel Kelpworks', ['Tessel Kelpworks', 'Tessel Kelpworks Co.', 'Tessel Kelp Cooperative'], [0, 1]],
      ['Ardent Salt', ['Ardent Salt', 'Ardent Salt Company'], [0, 1]],
    ]);
    expect(candidates[0]!.url).toBe('https://tessel-kelp.example/');
    expect(candidates[0]!.evidence).toHaveLength(3);
  });

  it('does not merge by a domain or page that one generator used for two names (a wiki, a list)', () => {
    const { candidates } = mergeCandidates([
      sub(0, 'Tessel Kelpworks', 'https://wiki.example/Tessel'),
      sub(0, 'Quillon Glass', 'https://wiki.example/Quillon'),
      sub(1, 'Sorrel Rope Works', 'https://wiki.example/Sorrel'),
      // the same page as generator 0's Quillon Glass, which names only it: one entity
      sub(1, 'Quillon Glassworks', 'https://wiki.example/Quillon'),
      // a list page generator 1 used for two names: no merge by it
      sub(1, 'Marrow Ferries', 'https://list.example/companies'),
      sub(1, 'Ardent Salt', 'https://list.example/companies'),
    ]);
    expect(candidates.map((c) => c.spellings)).toEqual([
      ['Tessel Kelpworks'],
      ['Quillon Glass', 'Quillon Glassworks'],
      ['Sorrel Rope Works'],
      ['Marrow Ferries'],
      ['Ardent Salt'],
    ]);
  });

  it('drops an entity none of whose spellings has checked evidence; an unchecked spelling joins by name only', () => {
    const { candidates, dropped } = mergeCandidates([
      sub(0, 'Tessel Kelpworks', 'https://tessel-kelp.example/'),
      sub(1, 'TESSEL KELPWORKS LTD', 'https://elsewhere.example/', false),
      // unchecked: its URL does not make it Tessel Kelpworks
      sub(1, 'Hollin Net Makers', 'https://tessel-kelp.example/', false),
      sub(1, 'Hollin Net Makers Co', 'https://hollin.example/', false),
    ]);
    expect(candidates.map((c) => [c.name, c.spellings, c.found_by])).toEqual([
      ['Tessel Kelpworks', ['Tessel Kelpworks', 'TESSEL KELPWORKS LTD'], [0]],
    ]);
    expect(dropped).toBe(1); // the two spellings of Hollin Net Makers are one dropped candidate
  });

  it('excludes by name, by page, and by a home page’s whole site', () => {
    const subs = [
      sub(0, 'Tessel Kelpworks', 'https://tessel-kelp.example/'),
      sub(0, 'Quillon Glass', 'https://wiki.example/Quillon'),
      sub(0, 'Sorrel Rope Works', 'https://wiki.example/Sorrel'),
      sub(0, 'Ardent Salt', 'https://ardentsalt.example/'),
    ];
    const names = (exclude: Array<{ name: string; url?: string }>) =>
      mergeCandidates(subs, exclude).candidates.map((c) => c.name);
    expect(names([{ name: 'the tessel kelpworks, inc.' }])).toEqual([
      'Quillon Glass',
      'Sorrel Rope Works',
      'Ardent Salt',
    ]);
    expect(names([{ name: 'x', url: 'https://wiki.example/Quillon/' }])).toEqual([
      'Tessel Kelpworks',
      'Sorrel Rope Works',
      'Ardent Salt',
    ]);
    // a home page stands for its site …
    expect(names([{ name: 'x', url: 'https://www.ardentsalt.example' }])).toEqual([
      'Tessel Kelpworks',
      'Quillon Glass',
      'Sorrel Rope Works',
    ]);
    // … a deeper page only for itself, even on a site that is an entity's own
    expect(names([{ name: 'x', url: 'https://ardentsalt.example/news' }])).toHaveLength(4);
  });

  it('estimates the total by capture–recapture, and not without overlap', () => {
    expect(estimateTotal([[0, 1], [0, 1], [0]])).toBe(3);
    expect(estimateTotal([[0, 1], [0], [0], [1], [1], [1]])).toBe(12); // 3·4/1
    expect(estimateTotal([[0, 1], [0, 1], [0], [0], [1]])).toBe(6); // 4·3/2
    expect(estimateTotal([[0], [1]])).toBeUndefined();
    expect(estimateTotal([])).toBeUndefined();
  });
});
