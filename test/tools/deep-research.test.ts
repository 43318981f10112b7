/**
 * deep_research under the scripted model, against a 30-page fictional corpus served on loopback and a local search
 * provider: a citation reaches the caller only if a child of the call read its page and the excerpt is on it.
 */
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelRequest, ToolResultBlock } from 'agentry';
import type { ScriptedTurn } from 'agentry/testing';
import { recheckCitation } from '../../src/tools/citations.js';
import { removeMarkers } from '../../src/tools/builtin/deep-research/index.js';
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
function researchScript(depth: 'quick' | 'standard' | 'deep', seen: { result?: Record<string, unknown> }) {
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
    if (turnIndex === 0) {
      return {
        toolCalls: [{ name: 'deep_research', input: { topic: 'The Marrow Lighthouse and Tessel Kelpworks', depth } }],
      };
    }
    seen.result = JSON.parse(lastToolResult(req).content) as Record<string, unknown>;
    return { text: 'Done.' };
  };
}

async function research(depth: 'quick' | 'standard' | 'deep') {
  const seen: { result?: Record<string, unknown> } = {};
  const search = corpusSearch(corpus);
  const t = await openTestRuntime(researchScript(depth, seen), {
    builtinTools: { search, env: {}, fetch: { allow: ['127.0.0.1/32'] } },
    defaultAccount: { id: 'local', credits: 1_000 },
  });
  const { agent_id } = await t.runtime.create({ goal: 'Tell me about the Marrow Lighthouse' });
  const agent = await t.runtime.waitFor(agent_id);
  expect(agent.status).toBe('COMPLETED');
  return { ...t, agent_id, result: seen.result!, search };
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
    expect(result.dropped_citations).toBe(1); // the writer's invented bat citation
    expect(result.sources_read).toBe(2);
    expect(result.report).toBe(
      'The Marrow Lighthouse is 41 metres tall [1]. Tessel Kelpworks dates from 1921 [2]. Bats live there.',
    );
    await runtime.close();
  });

  it('quick depth runs one researcher and checks the same way', async () => {
    const { runtime, result } = await research('quick');
    expect((result.citations as unknown[]).length).toBe(1);
    expect(result.dropped_citations).toBe(2);
    await runtime.close();
  });

  it('removes only the markers of dropped citations, in every marker form', () => {
    const kept = new Set([1, 3]);
    expect(removeMarkers('A [1]. B [2]. C [1][2][3]. D [2, 3]. E [4].', kept)).toBe('A [1]. B. C [1][3]. D [3]. E.');
  });
});
