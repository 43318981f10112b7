/**
 * deep_research under the scripted model, against a 30-page fictional corpus served on loopback and a local search
 * provider: a citation reaches the caller only if a child of the call read its page and the excerpt is on it.
 */
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelRequest, Tool, ToolResultBlock } from 'agentry-runtime';
import type { ScriptedTurn } from 'agentry-runtime/testing';
import { recheckCitation } from '../../src/tools/citations.js';
import { DEPTHS, deepResearchTool, removeMarkers } from '../../src/tools/builtin/deep-research/index.js';
import {
  PLANNER_INSTRUCTIONS,
  PLANNER_STEPS,
  WRITER_INSTRUCTIONS,
  WRITER_STEPS,
  researcherInstructions,
} from '../../src/tools/builtin/deep-research/prompts.js';
import { corpusSearch, serveCorpus, type CorpusServer } from '../fixtures/corpus/veloran.js';
import { openTestRuntime } from '../support/runtime.js';

let corpus: CorpusServer;
beforeAll(async () => {
  corpus = await serveCorpus();
});
afterAll(async () => {
  await corpus.close();
});

const KEPT = 'The tower of the Marrow Lighthouse is 41 metres tall';
const INVENTED = 'The Marrow Lighthouse was painted bright green in 1990';

const firstText = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
const lastToolResult = (req: ModelRequest) =>
  (req.messages.at(-1)!.content as ToolResultBlock[]).find((b) => b.type === 'tool_result')!;

type Report = { report: string; citations: Array<{ n: number; url: string; excerpt: string }> };

/** The model: the lead agent calls deep_research once; planner, researchers and writer play their parts. */
function researchScript(
  depth: 'quick' | 'standard' | 'deep',
  seen: { result?: Record<string, unknown>; writerGoal?: string },
  writer: 'submits' | 'never submits' = 'submits',
  /** What the lead agent does first, a turn each; then it calls deep_research. */
  before: ScriptedTurn[] = [],
) {
  return (req: ModelRequest, { turnIndex }: { turnIndex: number }): ScriptedTurn => {
    if (req.system.startsWith('You plan web research')) {
      return {
        toolCalls: [
          {
            name: 'submit_result',
            input: { sub_questions: ['How tall is the Marrow Lighthouse?', 'When was Tessel Kelpworks founded?'] },
          },
        ],
      };
    }
    if (req.system.startsWith('You are a careful web researcher')) {
      // the question is the goal's last paragraph (the topic may be quoted before it)
      const question = firstText(req).split('\n\n').at(-1)!;
      const lighthouse = /lighthouse/i.test(question);
      if (turnIndex === 0) {
        return {
          toolCalls: [
            {
              name: 'web_search',
              input: { query: lighthouse ? 'Marrow Lighthouse tall' : 'Tessel Kelpworks founded' },
            },
          ],
        };
      }
      if (turnIndex === 1) {
        const { results } = JSON.parse(lastToolResult(req).content) as { results: Array<{ url: string }> };
        return { toolCalls: [{ name: 'read_page', input: { url: results[0]!.url } }] };
      }
      const report: Report = lighthouse
        ? {
            report: 'The lighthouse is 41 metres tall [1]. It is open in summer [2]. It was painted green [3].',
            citations: [
              { n: 1, url: corpus.urlOf('marrow-lighthouse'), excerpt: KEPT },
              // a page nobody read: the tourism guide says this, but the child never opened it
              { n: 2, url: corpus.urlOf('tourism-guide'), excerpt: 'is open to visitors in summer' },
              // on a page it read, but the page never says it
              { n: 3, url: corpus.urlOf('marrow-lighthouse'), excerpt: INVENTED },
            ],
          }
        : {
            report: 'Tessel Kelpworks was founded in 1921 [1].',
            citations: [
              {
                n: 1,
                url: corpus.urlOf('company-tessel-kelpworks'),
                excerpt: 'Tessel Kelpworks was founded in 1921 on Tessel Island',
              },
            ],
          };
      return { toolCalls: [{ name: 'submit_result', input: report }] };
    }
    if (req.system.startsWith('You write the final research report')) {
      const goal = firstText(req);
      seen.writerGoal = goal;
      if (writer === 'never submits') return { text: 'I am still thinking about it.' };
      expect(goal).toContain(KEPT); // the checked finding is passed on …
      expect(goal).not.toContain(INVENTED); // … the dropped one is not
      const report: Report = {
        report:
          'The Marrow Lighthouse is 41 metres tall [1]. Tessel Kelpworks dates from 1921 [2]. Bats live there [3].',
        citations: [
          { n: 1, url: corpus.urlOf('marrow-lighthouse'), excerpt: KEPT },
          {
            n: 2,
            url: corpus.urlOf('company-tessel-kelpworks'),
            excerpt: 'Tessel Kelpworks was founded in 1921 on Tessel Island',
          },
          { n: 3, url: corpus.urlOf('veloran-birds'), excerpt: 'bats roost in the lighthouse every winter' },
        ],
      };
      return { toolCalls: [{ name: 'submit_result', input: report }] };
    }
    // the lead agent
    if (turnIndex < before.length) return before[turnIndex]!;
    if (turnIndex === before.length) {
      return {
        toolCalls: [{ name: 'deep_research', input: { topic: 'The Marrow Lighthouse and Tessel Kelpworks', depth } }],
      };
    }
    seen.result = JSON.parse(lastToolResult(req).content) as Record<string, unknown>;
    return { text: 'Done.' };
  };
}

async function research(
  depth: 'quick' | 'standard' | 'deep',
  writer: 'submits' | 'never submits' = 'submits',
  before: ScriptedTurn[] = [],
  own?: { maxOutputChars: number },
) {
  const seen: { result?: Record<string, unknown>; writerGoal?: string } = {};
  const search = corpusSearch(corpus);
  const t = await openTestRuntime(researchScript(depth, seen, writer, before), {
    builtinTools: {
      search,
      env: {},
      fetch: { allow: ['127.0.0.1/32'] },
      // with a deep_research of its own, the built-in one is left out
      ...(own ? { only: ['web_search', 'read_page'] } : {}),
    },
    ...(own ? { tools: [deepResearchTool(own) as Tool] } : {}),
    defaultAccount: { id: 'local', credits: 1_000 },
  });
  const { agent_id } = await t.runtime.create({ goal: 'Tell me about the Marrow Lighthouse' });
  const agent = await t.runtime.waitFor(agent_id);
  expect(agent.status).toBe('COMPLETED');
  return { ...t, agent_id, result: seen.result!, search, writerGoal: seen.writerGoal };
}

describe('deep_research', () => {
  it('keeps a citation whose excerpt is on a page a child read; drops one to a page never read and an invented one', async () => {
    const { runtime, result, agent_id } = await research('standard');
    expect(result.dropped_citations).toBe(2);
    expect(result.sources_read).toBe(1);
    const citations = result.citations as Array<Record<string, unknown>>;
    expect(citations).toHaveLength(1);
    expect(citations[0]).toMatchObject({
      n: 1,
      url: corpus.urlOf('marrow-lighthouse'),
      title: 'Marrow Lighthouse',
      excerpt: KEPT,
    });
    // the markers of the dropped citations are gone from the report
    expect(result.report).toBe('The lighthouse is 41 metres tall [1]. It is open in summer. It was painted green.');

    // the kept citation re-checks offline against the stored snapshot of the page
    const sha = citations[0]!.content_sha256 as string;
    const snapshot = await runtime.pageSnapshot(sha);
    expect(createHash('sha256').update(snapshot!).digest('hex')).toBe(sha);
    const span = citations[0]!.span as { start: number; end: number };
    expect(snapshot!.slice(span.start, span.end)).toBe(KEPT);
    expect(recheckCitation(snapshot!, { excerpt: KEPT, span })).toBe(true);

    // the research child is an ordinary sub-agent of the caller, billed to the same account
    const children = await runtime.list({ parentId: agent_id });
    expect(children.data).toHaveLength(1);
    const ledger = await runtime.accounts.ledger('local');
    expect(ledger.some((l) => l.agent_id === children.data[0]!.agent_id && l.kind === 'model')).toBe(true);
    await runtime.close();
  });

  it('deep: a planner, one researcher per sub-question in parallel, and a writer that sees only checked findings', async () => {
    const { runtime, result, agent_id, search } = await research('deep');
    expect(search.queries.sort()).toEqual(['Marrow Lighthouse tall', 'Tessel Kelpworks founded']);
    const children = await runtime.list({ parentId: agent_id, limit: 10 });
    expect(children.data).toHaveLength(4); // planner, two researchers, writer
    const citations = result.citations as Array<{ n: number; url: string }>;
    expect(citations.map((c) => c.n)).toEqual([1, 2]);
    // the researcher's two (a page never read, an invented excerpt) and the writer's invented bat citation
    expect(result.dropped_citations).toBe(3);
    expect(result.sources_read).toBe(2);
    expect(result.report).toBe(
      'The Marrow Lighthouse is 41 metres tall [1]. Tessel Kelpworks dates from 1921 [2]. Bats live there.',
    );
    await runtime.close();
  });

  it('a page the lead agent read itself (not a child of the call) does not vouch for a citation', async () => {
    const { runtime, result } = await research('standard', 'submits', [
      { toolCalls: [{ name: 'read_page', input: { url: corpus.urlOf('tourism-guide') } }] },
    ]);
    expect(result.dropped_citations).toBe(2);
    expect((result.citations as Array<{ url: string }>).map((c) => c.url)).toEqual([corpus.urlOf('marrow-lighthouse')]);
    await runtime.close();
  });

  it('a page read by a child of another call of the same agent does not vouch, even when one call id prefixes the other', async () => {
    let out: Record<string, unknown> | undefined;
    const citeTourismGuide = {
      name: 'submit_result',
      input: {
        report: 'It is open in summer [1].',
        citations: [{ n: 1, url: corpus.urlOf('tourism-guide'), excerpt: 'is open to visitors in summer' }],
      },
    };
    const script = (req: ModelRequest, { turnIndex }: { turnIndex: number }): ScriptedTurn => {
      if (req.system.startsWith('You are a careful web researcher')) {
        // the first call's researcher reads the page; the second's cites it without reading it
        const reads = firstText(req).includes('first') && turnIndex === 0;
        return {
          toolCalls: [reads ? { name: 'read_page', input: { url: corpus.urlOf('tourism-guide') } } : citeTourismGuide],
        };
      }
      if (turnIndex === 0) return { toolCalls: [{ id: 'call_12', name: 'deep_research', input: { topic: 'first' } }] };
      if (turnIndex === 1) return { toolCalls: [{ id: 'call_1', name: 'deep_research', input: { topic: 'second' } }] };
      out = JSON.parse(lastToolResult(req).content) as Record<string, unknown>;
      return { text: 'Done.' };
    };
    const t = await openTestRuntime(script, {
      builtinTools: { search: corpusSearch(corpus), env: {}, fetch: { allow: ['127.0.0.1/32'] } },
      defaultAccount: { id: 'local', credits: 1_000 },
    });
    const { agent_id } = await t.runtime.create({ goal: 'Research twice' });
    expect((await t.runtime.waitFor(agent_id)).status).toBe('COMPLETED');
    expect(out).toMatchObject({
      citations: [],
      dropped_citations: 1,
      sources_read: 0,
      report: 'It is open in summer.',
    });
    await t.runtime.close();
  });

  it('deep: the writer is not shown the markers of a finding whose citation was dropped', async () => {
    const { runtime, writerGoal } = await research('deep');
    expect(writerGoal).toContain('The lighthouse is 41 metres tall [1]. It is open in summer. It was painted green.');
    expect(writerGoal).not.toMatch(/\[[23]\]/);
    await runtime.close();
  });

  it('deep: a writer that never submits still leaves the checked findings, renumbered, with their citations', async () => {
    const { runtime, result } = await research('deep', 'never submits');
    const citations = result.citations as Array<{ n: number; url: string; excerpt: string }>;
    expect(citations.map((c) => [c.n, c.url])).toEqual([
      [1, corpus.urlOf('marrow-lighthouse')],
      [2, corpus.urlOf('company-tessel-kelpworks')],
    ]);
    expect(result.report).toContain('How tall is the Marrow Lighthouse?');
    expect(result.report).toContain(
      'The lighthouse is 41 metres tall [1]. It is open in summer. It was painted green.',
    );
    expect(result.report).toContain('Tessel Kelpworks was founded in 1921 [2].');
    expect(result.dropped_citations).toBe(2);
    await runtime.close();
  });

  it('quick depth runs one researcher and checks the same way', async () => {
    const { runtime, result } = await research('quick');
    expect((result.citations as unknown[]).length).toBe(1);
    expect(result.dropped_citations).toBe(2);
    await runtime.close();
  });

  it('an output too large for one tool result is kept whole as an artifact; the model sees the report and what fits', async () => {
    const { runtime, result, agent_id } = await research('deep', 'submits', [], { maxOutputChars: 650 });
    expect(JSON.stringify(result).length).toBeLessThanOrEqual(650);
    expect(result.report).toBe(
      'The Marrow Lighthouse is 41 metres tall [1]. Tessel Kelpworks dates from 1921 [2]. Bats live there.',
    );
    const shown = result.citations as Array<{ n: number }>;
    expect(shown.length).toBeLessThan(2);
    expect(result).toMatchObject({
      dropped_citations: 3,
      sources_read: 2,
      citations_total: 2,
      note: `Only the first ${shown.length} of 2 citations are shown; the whole output is the JSON artifact ${result.artifact_id as string}.`,
    });
    const { artifact, data } = await runtime.getArtifact(agent_id, result.artifact_id as string);
    expect(artifact).toMatchObject({ name: 'deep-research.json', mime_type: 'application/json' });
    const whole = JSON.parse(new TextDecoder().decode(data)) as { report: string; citations: Array<{ n: number }> };
    expect(whole.report).toBe(result.report);
    expect(whole.citations.map((c) => c.n)).toEqual([1, 2]);
    await runtime.close();
  });

  it('a report too large alone is cut to fit, and the model is told', async () => {
    const { runtime, result } = await research('deep', 'submits', [], { maxOutputChars: 370 });
    expect(JSON.stringify(result).length).toBeLessThanOrEqual(370);
    expect(result.report).toMatch(/^The Marrow.* \[…\]$/);
    expect(result.citations).toEqual([]);
    expect(result.note).toMatch(/^The report is cut\. Only the first 0 of 2 citations are shown; the whole output is/);
    await runtime.close();
  });

  it('tells every child its turn limit, so that it submits before it runs out', () => {
    const { searches, pages, steps } = DEPTHS.quick;
    expect(researcherInstructions({ searches, pages, steps })).toContain(`at most ${steps} turns`);
    expect(PLANNER_INSTRUCTIONS).toContain(`at most ${PLANNER_STEPS} turns`);
    expect(WRITER_INSTRUCTIONS).toContain(`at most ${WRITER_STEPS} turns`);
  });

  it('removes only the markers of dropped citations, in every marker form', () => {
    const kept = new Set([1, 3]);
    expect(removeMarkers('A [1]. B [2]. C [1][2][3]. D [2, 3]. E [4].', kept)).toBe('A [1]. B. C [1][3]. D [3]. E.');
  });
});
