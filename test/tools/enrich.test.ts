/**
 * enrich under the scripted model, against the 30-page fictional corpus served on loopback and a local search
 * provider: one research child per entity; a value reaches the caller only with a citation whose excerpt is on a page
 * a child of the call read, coerced to its field's type; two checked pages that disagree make a conflict.
 */
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelRequest, Tool, ToolResultBlock } from 'agentry-runtime';
import type { ScriptedTurn } from 'agentry-runtime/testing';
import { CitationChecker, recheckCitation, type PageRead } from '../../src/tools/citations.js';
import { childBudget, coerceValue, enrichTool, sameValueKey } from '../../src/tools/builtin/enrich/index.js';
import { ENRICH_INSTRUCTIONS_START, enrichGoal, enrichInstructions } from '../../src/tools/builtin/enrich/prompts.js';
import { assembleRow, type EnrichField } from '../../src/tools/builtin/enrich/rows.js';
import { corpusSearch, serveCorpus, type CorpusServer } from '../fixtures/corpus/veloran.js';
import { openTestRuntime } from '../support/runtime.js';

let corpus: CorpusServer;
beforeAll(async () => {
  corpus = await serveCorpus();
});
afterAll(async () => {
  await corpus.close();
});

const firstText = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
const lastToolResults = (req: ModelRequest) =>
  (req.messages.at(-1)!.content as ToolResultBlock[]).filter((b) => b.type === 'tool_result');
const entityOf = (req: ModelRequest) => firstText(req).split('\n\n')[1]!;

type Cite = { url: string; excerpt: string };
type Answer = {
  value: string | number | boolean | null;
  citations: Cite[];
  confidence: number;
  other_values?: Array<{ value: string | number | boolean | null; citations: Cite[]; confidence: number }>;
  note?: string;
};

/** What one child does: search (unless its page was given), read these pages, submit these answers. */
interface ChildPlan {
  query?: string;
  read: string[];
  submit: () => Record<string, Answer>;
}

const cite = (slug: string, excerpt: string): Cite => ({ url: corpus.urlOf(slug), excerpt });

const COMPANY_FIELDS = [
  { name: 'founded', description: 'the year the company was founded', type: 'number' },
  { name: 'island', description: 'the island it was founded on', type: 'string' },
  { name: 'headquarters', description: 'the town where it is headquartered', type: 'string' },
  { name: 'ceo', description: 'the name of its chief executive', type: 'string' },
] as const;

const NO_CEO: Answer = { value: null, citations: [], confidence: 0, note: 'No page I read names a chief executive.' };

const PLANS: Record<string, ChildPlan> = {
  'Tessel Kelpworks': {
    query: 'Tessel Kelpworks founded headquartered',
    read: ['company-tessel-kelpworks'],
    submit: () => ({
      founded: {
        value: 1921,
        citations: [cite('company-tessel-kelpworks', 'Tessel Kelpworks was founded in 1921 on Tessel Island')],
        confidence: 0.95,
      },
      island: {
        value: 'Tessel',
        citations: [cite('company-tessel-kelpworks', 'was founded in 1921 on Tessel Island')],
        confidence: 0.9,
      },
      headquarters: {
        value: 'Brightwater',
        citations: [cite('company-tessel-kelpworks', 'is headquartered in Brightwater')],
        confidence: 0.9,
      },
      ceo: NO_CEO,
    }),
  },
  'Quillon Glass': {
    query: 'Quillon Glass company',
    read: ['company-quillon-glass'],
    submit: () => ({
      founded: {
        value: '1954', // a numeric string: coerced to the number
        citations: [
          cite('company-quillon-glass', 'Quillon Glass was founded in 1954 on Quillon Island'),
          // invented: on a page it read, but the page never says it
          cite('company-quillon-glass', 'Quillon Glass was founded in 1954 by the glassmaker Ada Venn'),
        ],
        confidence: 0.9,
      },
      island: {
        value: 'Quillon',
        citations: [cite('company-quillon-glass', 'founded in 1954 on Quillon Island')],
        confidence: 0.9,
      },
      headquarters: {
        value: 'Hollin',
        citations: [cite('company-quillon-glass', 'headquartered in Hollin')],
        confidence: 0.8,
      },
      // an invented value with an invented citation
      ceo: {
        value: 'Ada Venn',
        citations: [cite('company-quillon-glass', 'Its chief executive is the glassmaker Ada Venn')],
        confidence: 0.6,
      },
    }),
  },
  'Sorrel Rope Works': {
    query: 'Sorrel Rope Works',
    read: ['company-sorrel-rope-works'],
    submit: () => ({
      founded: {
        value: '1909',
        citations: [cite('company-sorrel-rope-works', 'Sorrel Rope Works was founded in 1909')],
        confidence: 0.9,
      },
      island: {
        value: 'Sorrel',
        citations: [cite('company-sorrel-rope-works', 'was founded in 1909 on Sorrel Island')],
        confidence: 0.9,
      },
      headquarters: {
        value: 'Gullsway',
        citations: [cite('company-sorrel-rope-works', 'It employs 215 people and is headquartered in Gullsway.')],
        confidence: 0.9,
      },
      // cited to a page nobody read
      ceo: {
        value: 'Tom Sorrel',
        citations: [cite('tourism-guide', 'The rope works are run by Tom Sorrel')],
        confidence: 0.5,
      },
    }),
  },
  'Marrow Ferry Company': {
    // its page is given: no search
    read: ['company-marrow-ferry-company'],
    submit: () => ({
      founded: {
        value: '1898',
        citations: [cite('company-marrow-ferry-company', 'Marrow Ferry Company was founded in 1898')],
        confidence: 0.9,
      },
      island: {
        value: 'Marrow',
        citations: [cite('company-marrow-ferry-company', 'founded in 1898 on Marrow Island')],
        confidence: 0.9,
      },
      headquarters: {
        value: 'Cobble Reach',
        citations: [cite('company-marrow-ferry-company', 'is headquartered in Cobble Reach')],
        confidence: 0.9,
      },
      ceo: NO_CEO,
    }),
  },
  'Marrow Lighthouse': {
    query: 'Marrow Lighthouse metres',
    read: ['marrow-lighthouse', 'tourism-guide'],
    submit: () => ({
      height_m: {
        value: 41,
        citations: [cite('marrow-lighthouse', 'The tower of the Marrow Lighthouse is 41 metres tall')],
        confidence: 0.6,
        other_values: [
          {
            value: '38 metres',
            citations: [cite('tourism-guide', 'The Marrow Lighthouse, 38 metres high, is open to visitors')],
            confidence: 0.4,
          },
        ],
      },
      first_lit: {
        value: '1889',
        citations: [cite('marrow-lighthouse', 'was first lit in 1889')],
        confidence: 0.9,
      },
    }),
  },
};

/** The model: the lead agent calls enrich once with `input`; each child plays its plan. */
function enrichScript(input: Record<string, unknown>, seen: { result?: Record<string, unknown> }) {
  return (req: ModelRequest, { turnIndex }: { turnIndex: number }): ScriptedTurn => {
    if (req.system.startsWith(ENRICH_INSTRUCTIONS_START)) {
      const plan = PLANS[entityOf(req)];
      if (!plan) throw new Error(`no plan for ${entityOf(req)}`);
      const steps: ScriptedTurn[] = [
        ...(plan.query ? [{ toolCalls: [{ name: 'web_search', input: { query: plan.query } }] }] : []),
        { toolCalls: plan.read.map((slug) => ({ name: 'read_page', input: { url: corpus.urlOf(slug) } })) },
        { toolCalls: [{ name: 'submit_result', input: { fields: plan.submit() } }] },
      ];
      if (plan.query && turnIndex === 1) {
        // the pages it reads were among its search results
        const { results } = JSON.parse(lastToolResults(req)[0]!.content) as { results: Array<{ url: string }> };
        for (const slug of plan.read.slice(0, 1)) expect(results.map((r) => r.url)).toContain(corpus.urlOf(slug));
      }
      return steps[turnIndex]!;
    }
    if (turnIndex === 0) return { toolCalls: [{ name: 'enrich', input }] };
    const [result] = lastToolResults(req);
    if (result!.is_error) throw new Error(`enrich failed: ${result!.content}`);
    seen.result = JSON.parse(result!.content) as Record<string, unknown>;
    return { text: 'Done.' };
  };
}

async function enrich(input: Record<string, unknown>, own?: { maxOutputChars: number }) {
  const seen: { result?: Record<string, unknown> } = {};
  const search = corpusSearch(corpus);
  const t = await openTestRuntime(enrichScript(input, seen), {
    builtinTools: {
      search,
      env: {},
      fetch: { allow: ['127.0.0.1/32'] },
      // with an enrich of its own, the built-in one is left out
      ...(own ? { only: ['web_search', 'read_page'] } : {}),
    },
    ...(own ? { tools: [enrichTool(own) as Tool] } : {}),
    defaultAccount: { id: 'local', credits: 1_000 },
  });
  const { agent_id } = await t.runtime.create({ goal: 'Fill in the table' });
  const agent = await t.runtime.waitFor(agent_id);
  expect(agent.status, agent.status_message).toBe('COMPLETED');
  return { ...t, agent_id, result: seen.result!, search };
}

type Row = {
  entity: { name: string; url?: string };
  fields: Record<
    string,
    {
      value: unknown;
      citations: Array<{ url: string; excerpt: string; content_sha256: string; span: { start: number; end: number } }>;
      confidence: number;
      reason?: string;
    }
  >;
  conflicts?: Array<{ field: string; values: Array<{ value: unknown; citations: Array<{ url: string }> }> }>;
};

describe('enrich', () => {
  it('fills the fixture’s fields with checked citations; the unanswerable field is null with a reason', async () => {
    const entities = [
      { name: 'Tessel Kelpworks' },
      { name: 'Quillon Glass' },
      { name: 'Sorrel Rope Works' },
      { name: 'Marrow Ferry Company', url: corpus.urlOf('company-marrow-ferry-company') },
    ];
    const { runtime, model, result, agent_id, search } = await enrich({ entities, fields: COMPANY_FIELDS });
    const rows = result.rows as Row[];
    expect(rows.map((r) => r.entity)).toEqual(entities);
    const values = rows.map((r) => Object.fromEntries(Object.entries(r.fields).map(([k, f]) => [k, f.value])));
    expect(values).toEqual([
      { founded: 1921, island: 'Tessel', headquarters: 'Brightwater', ceo: null },
      { founded: 1954, island: 'Quillon', headquarters: 'Hollin', ceo: null },
      { founded: 1909, island: 'Sorrel', headquarters: 'Gullsway', ceo: null },
      { founded: 1898, island: 'Marrow', headquarters: 'Cobble Reach', ceo: null },
    ]);
    expect(rows.every((r) => r.conflicts === undefined)).toBe(true);

    // every value carries the citations that survived, as the page has them
    const [tessel, quillon, sorrel, ferry] = rows as [Row, Row, Row, Row];
    expect(tessel.fields.founded).toMatchObject({
      confidence: 0.95,
      citations: [
        {
          url: corpus.urlOf('company-tessel-kelpworks'),
          excerpt: 'Tessel Kelpworks was founded in 1921 on Tessel Island',
        },
      ],
    });
    expect(tessel.fields.founded!.reason).toBeUndefined();
    // the invented citation of Quillon's year is dropped; the value stands on the other one
    expect(quillon.fields.founded!.citations.map((c) => c.excerpt)).toEqual([
      'Quillon Glass was founded in 1954 on Quillon Island',
    ]);

    // the unanswerable field: null with a reason, never invented
    expect(tessel.fields.ceo).toEqual({
      value: null,
      citations: [],
      confidence: 0,
      reason: 'not found: No page I read names a chief executive.',
    });
    expect(ferry.fields.ceo!.value).toBeNull();
    expect(quillon.fields.ceo).toMatchObject({ value: null, citations: [], confidence: 0 });
    expect(quillon.fields.ceo!.reason).toMatch(/^"Ada Venn" has no checked citation \(excerpt_not_found: /);
    expect(sorrel.fields.ceo!.reason).toMatch(/^"Tom Sorrel" has no checked citation \(url_not_read: /);
    expect(result.dropped_citations).toBe(3);

    // one child per entity; its first message names the entity verbatim (and its page when given) and the fields;
    // it works with web_search, read_page and submit_result only
    const children = await runtime.list({ parentId: agent_id, limit: 10 });
    expect(children.data).toHaveLength(4);
    const childCalls = model.calls.filter((c) => c.system.startsWith(ENRICH_INSTRUCTIONS_START));
    for (const entity of entities) {
      const first = childCalls.find((c) => entityOf(c) === entity.name)!;
      expect(firstText(first)).toBe(enrichGoal(entity, [...COMPANY_FIELDS]));
      for (const f of COMPANY_FIELDS) expect(firstText(first)).toContain(`- ${f.name} (`);
      if (entity.url) expect(firstText(first)).toContain(entity.url);
      expect(first.tools.map((t) => t.name).sort()).toEqual(['read_page', 'submit_result', 'web_search']);
    }
    expect(search.queries.sort()).toEqual([
      'Quillon Glass company',
      'Sorrel Rope Works',
      'Tessel Kelpworks founded headquartered',
    ]);

    // a kept citation re-checks offline against the stored snapshot of its page
    const kept = sorrel.fields.headquarters!.citations[0]!;
    const snapshot = await runtime.pageSnapshot(kept.content_sha256);
    expect(createHash('sha256').update(snapshot!).digest('hex')).toBe(kept.content_sha256);
    expect(snapshot!.slice(kept.span.start, kept.span.end)).toBe(kept.excerpt);
    expect(recheckCitation(snapshot!, kept)).toBe(true);

    // the call is charged once, the children's model turns on the same account
    const ledger = await runtime.accounts.ledger('local');
    expect(ledger.filter((l) => l.kind === 'tool' && l.item === 'enrich').map((l) => [l.agent_id, l.credits])).toEqual([
      [agent_id, -1],
    ]);
    for (const child of children.data) {
      expect(ledger.some((l) => l.agent_id === child.agent_id && l.kind === 'model')).toBe(true);
    }
    await runtime.close();
  });

  it('reports a conflict when two pages it read disagree (the lighthouse: 41 vs 38 metres)', async () => {
    const { runtime, result } = await enrich({
      entities: [{ name: 'Marrow Lighthouse' }],
      fields: [
        { name: 'height_m', description: 'the height of the tower in metres', type: 'number' },
        { name: 'first_lit', description: 'the year it was first lit', type: 'number' },
      ],
    });
    const [row] = result.rows as [Row];
    expect(row.fields.first_lit).toMatchObject({ value: 1889, confidence: 0.9 });
    expect(row.fields.height_m).toEqual({
      value: null,
      citations: [],
      confidence: 0,
      reason: 'sources disagree: 41 vs 38 (see conflicts)',
    });
    expect(row.conflicts).toHaveLength(1);
    const conflict = row.conflicts![0]!;
    expect(conflict.field).toBe('height_m');
    expect(conflict.values.map((v) => [v.value, v.citations.map((c) => c.url)])).toEqual([
      [41, [corpus.urlOf('marrow-lighthouse')]],
      [38, [corpus.urlOf('tourism-guide')]],
    ]);
    expect(result.dropped_citations).toBe(0);
    await runtime.close();
  });

  it('a table too large for one tool result is kept whole as an artifact; the model sees the rows that fit', async () => {
    const entities = ['Tessel Kelpworks', 'Quillon Glass', 'Sorrel Rope Works'].map((name) => ({ name }));
    const { runtime, result, agent_id } = await enrich({ entities, fields: COMPANY_FIELDS }, { maxOutputChars: 3_000 });
    const shown = result.rows as Row[];
    expect(shown.length).toBeGreaterThan(0);
    expect(shown.length).toBeLessThan(3);
    expect(JSON.stringify(result).length).toBeLessThanOrEqual(3_000);
    expect(result).toMatchObject({
      rows_total: 3,
      dropped_citations: 3,
      note: `Only the first ${shown.length} of 3 rows are shown; the whole table (all 3 rows) is the JSON artifact ${result.artifact_id as string}.`,
    });
    const { artifact, data } = await runtime.getArtifact(agent_id, result.artifact_id as string);
    expect(artifact).toMatchObject({ name: 'enrich-rows.json', mime_type: 'application/json' });
    const whole = JSON.parse(new TextDecoder().decode(data)) as { rows: Row[]; dropped_citations: number };
    expect(whole.rows.map((r) => r.entity.name)).toEqual(entities.map((e) => e.name));
    expect(whole.rows.slice(0, shown.length)).toEqual(shown);
    expect(whole.rows.map((r) => r.fields.founded!.value)).toEqual([1921, 1954, 1909]);
    expect(whole.dropped_citations).toBe(3);
    await runtime.close();
  });

  it('rejects bad input at the door', async () => {
    const tool = enrichTool();
    const parse = (input: unknown) => tool.input.safeParse(input).success;
    const field = { name: 'founded', description: 'year', type: 'number' };
    expect(parse({ entities: [{ name: 'A' }], fields: [field] })).toBe(true);
    expect(parse({ entities: [], fields: [field] })).toBe(false);
    expect(parse({ entities: Array.from({ length: 1_001 }, (_, i) => ({ name: `e${i}` })), fields: [field] })).toBe(
      false,
    );
    expect(parse({ entities: [{ name: 'A' }], fields: [] })).toBe(false);
    expect(
      parse({ entities: [{ name: 'A' }], fields: Array.from({ length: 21 }, (_, i) => ({ ...field, name: `f${i}` })) }),
    ).toBe(false);
    expect(parse({ entities: [{ name: 'A' }], fields: [field, field] })).toBe(false); // duplicate names
    expect(parse({ entities: [{ name: 'A' }], fields: [{ ...field, name: 'has space' }] })).toBe(false);
    // a row's fields are a plain object: this name would set its prototype, not a field
    expect(parse({ entities: [{ name: 'A' }], fields: [{ ...field, name: '__proto__' }] })).toBe(false);
    expect(parse({ entities: [{ name: 'A' }], fields: [{ ...field, type: 'integer' }] })).toBe(false);
    expect(parse({ entities: [{ name: 'A', url: 'ftp://x.example' }], fields: [field] })).toBe(false);
    expect(childBudget(3)).toEqual({ steps: 16, searches: 4, pages: 6 });
    expect(enrichInstructions(childBudget(3))).toContain('at most 16 turns'); // told to the child
    expect(childBudget(20).steps).toBe(50);
  });

  it('fails at once, naming what to set, when web_search has no provider', async () => {
    const seen: { error?: string } = {};
    const t = await openTestRuntime(
      (req, { turnIndex }) => {
        if (turnIndex === 0) {
          return {
            toolCalls: [
              {
                name: 'enrich',
                input: { entities: [{ name: 'A' }], fields: [{ name: 'x', description: 'x', type: 'string' }] },
              },
            ],
          };
        }
        seen.error = lastToolResults(req)[0]!.content;
        return { text: 'ok' };
      },
      { builtinTools: { env: {} }, defaultAccount: { id: 'local', credits: 100 } },
    );
    const { agent_id } = await t.runtime.create({ goal: 'x' });
    await t.runtime.waitFor(agent_id);
    expect(seen.error).toMatch(/enrich needs web_search: .*BRAVE_API_KEY/);
    const status = t.runtime.toolStatus().find((s) => s.name === 'enrich');
    expect(status).toMatchObject({ ready: false, offered: true });
    expect((await t.runtime.list({ parentId: agent_id })).data).toHaveLength(0);
    await t.runtime.close();
  });
});

describe('enrich coercion', () => {
  it('number: numbers and numeric strings, with an optional unit; nothing that needs a guess', () => {
    expect(coerceValue('number', 41)).toEqual({ ok: true, value: 41 });
    expect(coerceValue('number', '41')).toEqual({ ok: true, value: 41 });
    expect(coerceValue('number', '41 metres')).toEqual({ ok: true, value: 41 });
    expect(coerceValue('number', ' 48,000 people ')).toEqual({ ok: true, value: 48_000 });
    expect(coerceValue('number', '-3.5 °C')).toEqual({ ok: true, value: -3.5 });
    expect(coerceValue('number', '1.2e3')).toEqual({ ok: true, value: 1_200 });
    // a scale word is part of the number, not a unit: "4.2 million" is 4,200,000, never 4.2
    expect(coerceValue('number', '4.2 million')).toEqual({ ok: true, value: 4_200_000 });
    expect(coerceValue('number', '1.1 billion euros')).toEqual({ ok: true, value: 1_100_000_000 });
    expect(coerceValue('number', '3 Thousand visitors')).toEqual({ ok: true, value: 3_000 });
    expect(coerceValue('number', '2.5bn')).toEqual({ ok: true, value: 2_500_000_000 });
    expect(coerceValue('number', '12k').ok).toBe(false);
    for (const bad of ['about 40', '38-41', '12,34', '41 metres (134 ft)', '', 'n/a', true, Number.NaN, Infinity]) {
      expect(coerceValue('number', bad).ok, String(bad)).toBe(false);
    }
    expect(coerceValue('number', null)).toEqual({ ok: false, reason: 'no value' });
  });

  it('date: ISO YYYY-MM-DD out, from ISO, date-times and written dates; a year alone or an ambiguous date is refused', () => {
    expect(coerceValue('date', '1921-03-12')).toEqual({ ok: true, value: '1921-03-12' });
    expect(coerceValue('date', '1921-3-2')).toEqual({ ok: true, value: '1921-03-02' });
    expect(coerceValue('date', '2024-02-29T23:30:00+05:00')).toEqual({ ok: true, value: '2024-02-29' });
    expect(coerceValue('date', '1921/03/12')).toEqual({ ok: true, value: '1921-03-12' });
    expect(coerceValue('date', '12 March 1921')).toEqual({ ok: true, value: '1921-03-12' });
    expect(coerceValue('date', '1st Sept 1921').ok).toBe(false); // "Sept" is neither the full name nor 3 letters
    expect(coerceValue('date', '1st Sep. 1921')).toEqual({ ok: true, value: '1921-09-01' });
    expect(coerceValue('date', 'March 12, 1921')).toEqual({ ok: true, value: '1921-03-12' });
    expect(coerceValue('date', 'march 12 1921')).toEqual({ ok: true, value: '1921-03-12' });
    expect(coerceValue('date', '2023-02-29')).toEqual({ ok: false, reason: 'not a valid date: "2023-02-29"' });
    expect(coerceValue('date', '1921-13-01').ok).toBe(false);
    expect(coerceValue('date', '31 April 1921').ok).toBe(false);
    expect(coerceValue('date', '1921')).toEqual({ ok: false, reason: 'only a year (1921), not a full date' });
    expect(coerceValue('date', 1921)).toEqual({ ok: false, reason: 'only a year (1921), not a full date' });
    expect(coerceValue('date', 'March 1921')).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/^only a month/),
    });
    expect(coerceValue('date', '03/04/2020')).toMatchObject({ ok: false, reason: expect.stringMatching(/^ambiguous/) });
    expect(coerceValue('date', 'yesterday').ok).toBe(false);
  });

  it('url: absolute http(s) only, as WHATWG href', () => {
    expect(coerceValue('url', 'https://Example.COM/a b')).toEqual({ ok: true, value: 'https://example.com/a%20b' });
    expect(coerceValue('url', ' http://example.com ')).toEqual({ ok: true, value: 'http://example.com/' });
    for (const bad of ['example.com', 'ftp://example.com/x', 'mailto:a@example.com', '/relative', 42]) {
      expect(coerceValue('url', bad).ok, String(bad)).toBe(false);
    }
  });

  it('boolean: true/false and yes/no in any case; string: trimmed text', () => {
    expect(coerceValue('boolean', true)).toEqual({ ok: true, value: true });
    expect(coerceValue('boolean', ' Yes ')).toEqual({ ok: true, value: true });
    expect(coerceValue('boolean', 'FALSE')).toEqual({ ok: true, value: false });
    expect(coerceValue('boolean', 'no')).toEqual({ ok: true, value: false });
    for (const bad of ['maybe', 1, 0, 'y', '']) expect(coerceValue('boolean', bad).ok, String(bad)).toBe(false);
    expect(coerceValue('string', '  Brightwater ')).toEqual({ ok: true, value: 'Brightwater' });
    expect(coerceValue('string', 1921)).toEqual({ ok: true, value: '1921' });
    expect(coerceValue('string', '   ').ok).toBe(false);
    expect(coerceValue('string', { a: 1 }).ok).toBe(false);
  });

  it('values that say the same thing share a key', () => {
    expect(sameValueKey('string', ' Cobble  Reach')).toBe(sameValueKey('string', 'cobble reach'));
    expect(sameValueKey('url', 'https://example.com/a/')).toBe(sameValueKey('url', 'https://example.com/a'));
    expect(sameValueKey('number', 41)).not.toBe(sameValueKey('number', 38));
  });
});

describe('enrich rows', () => {
  const page = (url: string, text: string): PageRead => ({
    url,
    final_url: url,
    title: url,
    content_sha256: createHash('sha256').update(text).digest('hex'),
    retrieved_at: '2026-01-01T00:00:00.000Z',
    text,
  });
  const A = 'https://a.example/tower';
  const B = 'https://b.example/guide';
  const checker = new CitationChecker([
    page(A, 'The tower is 41 metres tall and was first lit on 12 March 1889.'),
    page(B, 'Guides give the tower as 41 m high. Its keeper was Ida Holm.'),
  ]);
  const fields: EnrichField[] = [
    { name: 'height', description: 'height in metres', type: 'number' },
    { name: 'first_lit', description: 'date first lit', type: 'date' },
    { name: 'keeper', description: 'the keeper', type: 'string' },
  ];
  const answer = (value: unknown, citations: Array<[string, string]>, extra: Record<string, unknown> = {}) => ({
    value,
    citations: citations.map(([url, excerpt]) => ({ url, excerpt })),
    confidence: 0.8,
    ...extra,
  });

  it('merges candidates that say the same thing into one value with all their citations', () => {
    const { row, dropped } = assembleRow(
      { name: 'Tower' },
      fields,
      {
        fields: {
          height: answer(41, [[A, 'The tower is 41 metres tall']], {
            other_values: [
              { value: '41 m', citations: [{ url: B, excerpt: 'give the tower as 41 m high' }], confidence: 0.9 },
            ],
          }),
          first_lit: answer('12 March 1889', [[A, 'was first lit on 12 March 1889']]),
          keeper: answer('Ida Holm', [[B, 'Its keeper was Ida Holm']]),
        },
      },
      checker,
    );
    expect(dropped).toBe(0);
    expect(row.conflicts).toBeUndefined();
    expect(row.fields.height).toMatchObject({ value: 41, confidence: 0.9 });
    expect(row.fields.height!.citations.map((c) => c.url)).toEqual([A, B]);
    expect(row.fields.first_lit!.value).toBe('1889-03-12');
    expect(row.fields.keeper!.value).toBe('Ida Holm');
  });

  it('a value invalid for its type is null with a reason, even with a checked citation', () => {
    const { row } = assembleRow(
      { name: 'Tower' },
      fields,
      { fields: { height: answer('forty-one', [[A, 'The tower is 41 metres tall']]) } },
      checker,
    );
    expect(row.fields.height).toEqual({
      value: null,
      citations: [],
      confidence: 0,
      reason: 'invalid number: not a number: "forty-one"',
    });
    // fields the child left out, each with its reason
    expect(row.fields.keeper!.reason).toBe('the research child did not report this field');
  });

  it('a candidate without a checked citation does not make a conflict', () => {
    const { row, dropped } = assembleRow(
      { name: 'Tower' },
      fields.slice(0, 1),
      {
        fields: {
          height: answer(41, [[A, 'The tower is 41 metres tall']], {
            other_values: [
              { value: 45, citations: [{ url: B, excerpt: 'the tower is 45 metres tall' }], confidence: 0.2 },
            ],
          }),
        },
      },
      checker,
    );
    expect(dropped).toBe(1);
    expect(row.conflicts).toBeUndefined();
    expect(row.fields.height!.value).toBe(41);
  });

  it('a child that submitted nothing leaves every field null with the reason', () => {
    const { row } = assembleRow({ name: 'Tower', url: A }, fields, undefined, checker);
    expect(row.entity).toEqual({ name: 'Tower', url: A });
    for (const f of fields) {
      expect(row.fields[f.name]).toEqual({
        value: null,
        citations: [],
        confidence: 0,
        reason: 'the research child for this entity did not submit a result',
      });
    }
  });
});
