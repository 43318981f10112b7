/**
 * Research with checked citations, offline: deep_research writes a cited report on a topic, and find_all lists the
 * entities that meet a condition — and in both, a citation reaches the caller only if a research child of the call
 * read its page and the quoted excerpt is on it. The invented citation the scripted researcher slips in is dropped
 * and counted. Run: npx tsx examples/research.ts
 *
 * Everything is the real runtime — SQLite, the step loop, credits, research children, the guarded fetch, the citation
 * check — except the stand-ins that make it run without a key or a network: the fictional "Veloran" wiki of the tests
 * (30 pages on loopback, with a local search provider over them), and a scripted model that plays the researchers.
 *
 * Against the real web and Claude: set ANTHROPIC_API_KEY and a search key (BRAVE_API_KEY, TAVILY_API_KEY, EXA_API_KEY
 * or SEARXNG_URL), drop the stand-ins, and ask for it in a goal:
 *
 *   const runtime = await AgentRuntime.open();
 *   await runtime.create({ goal: 'Use deep_research (depth "deep") on the history of the Marrow Lighthouse' });
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentRuntime, sqliteStorage, type ModelRequest, type ToolResultBlock } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { GENERATOR_INSTRUCTIONS, VERIFIER_INSTRUCTIONS } from '../src/tools/builtin/find-all/prompts.js';
import { corpusSearch, serveCorpus } from '../test/fixtures/corpus/veloran.js';

const corpus = await serveCorpus();
const companyPage = (slug: string) => corpus.urlOf(`company-${slug}`);
const firstText = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
const lastResult = (req: ModelRequest) =>
  (req.messages.at(-1)!.content as ToolResultBlock[]).find((b) => b.type === 'tool_result')!;

const COOPERATIVES = ['tessel-kelpworks', 'quillon-glass', 'penhallow-weather-bureau'];
const NAMES: Record<string, string> = {
  'tessel-kelpworks': 'Tessel Kelpworks',
  'quillon-glass': 'Quillon Glass',
  'penhallow-weather-bureau': 'Penhallow Weather Bureau',
  'marrow-ferry-company': 'Marrow Ferry Company',
};

/** The stand-in for Claude: each kind of agent plays its part, told apart by its instructions. */
function play(req: ModelRequest, turn: number): ScriptedTurn {
  // deep_research's researcher: search, read the top hit, submit a report with one real and one invented citation
  if (req.system.startsWith('You are a careful web researcher')) {
    if (turn === 0) return { toolCalls: [{ name: 'web_search', input: { query: 'Marrow Lighthouse tower tall' } }] };
    if (turn === 1) {
      const { results } = JSON.parse(lastResult(req).content) as { results: Array<{ url: string }> };
      return { toolCalls: [{ name: 'read_page', input: { url: results[0]!.url } }] };
    }
    const report = {
      report: 'The Marrow Lighthouse was first lit in 1889 [1] and its tower is 41 metres tall [2]. It is haunted [3].',
      citations: [
        { n: 1, url: corpus.urlOf('marrow-lighthouse'), excerpt: 'was first lit in 1889' },
        {
          n: 2,
          url: corpus.urlOf('marrow-lighthouse'),
          excerpt: 'The tower of the Marrow Lighthouse is 41 metres tall',
        },
        { n: 3, url: corpus.urlOf('marrow-lighthouse'), excerpt: 'the ghost of a keeper walks the gallery' },
      ],
    };
    return { toolCalls: [{ name: 'submit_result', input: report }] };
  }
  // find_all's candidate generators: read four company pages, propose them (one with an invented quote)
  if (GENERATOR_INSTRUCTIONS.includes(req.system)) {
    const slugs = Object.keys(NAMES);
    if (turn === 0) return { toolCalls: [{ name: 'web_search', input: { query: 'Veloran company' } }] };
    if (turn === 1) return { toolCalls: slugs.map((s) => ({ name: 'read_page', input: { url: companyPage(s) } })) };
    const candidates = slugs.map((s) => ({
      name: NAMES[s],
      url: companyPage(s),
      description: `${NAMES[s]}, a company of the archipelago`,
      evidence: [{ url: companyPage(s), excerpt: `${NAMES[s]} was founded in` }],
    }));
    return { toolCalls: [{ name: 'submit_result', input: { candidates } }] };
  }
  // find_all's verifiers: read the candidate's page and say whether it is a cooperative, quoting it
  if (req.system === VERIFIER_INSTRUCTIONS) {
    const url = /^URL: (.*)$/m.exec(firstText(req))![1]!;
    if (turn === 0) return { toolCalls: [{ name: 'read_page', input: { url } }] };
    const slug = url.split('/company-')[1]!;
    const met = COOPERATIVES.includes(slug);
    const excerpt = met
      ? `${NAMES[slug]} is owned by its workers as a cooperative`
      : `${NAMES[slug]} is a family-owned company`;
    return {
      toolCalls: [
        {
          name: 'submit_result',
          input: { matched_conditions: [{ name: 'cooperative', met, evidence: [{ url, excerpt }] }] },
        },
      ],
    };
  }
  // the lead agents: call the tool their goal names, then report
  const goal = firstText(req);
  if (turn === 0 && goal.startsWith('Research')) {
    return { toolCalls: [{ name: 'deep_research', input: { topic: 'The Marrow Lighthouse', depth: 'quick' } }] };
  }
  if (turn === 0) {
    const input = {
      objective: 'companies of the Veloran Archipelago that are cooperatives',
      entity_type: 'company',
      match_conditions: [{ name: 'cooperative', description: 'owned by its workers as a cooperative' }],
    };
    return { toolCalls: [{ name: 'find_all', input }] };
  }
  return { text: lastResult(req).content };
}

const dir = mkdtempSync(join(tmpdir(), 'agentry-research-'));
const runtime = await AgentRuntime.open({
  storage: sqliteStorage({ path: join(dir, 'research.db') }),
  model: scriptedModel({ turns: (req, { turnIndex }) => play(req, turnIndex) }),
  builtinTools: { search: corpusSearch(corpus), env: {}, fetch: { allow: ['127.0.0.1/32'] } },
  defaultAccount: { id: 'local', credits: 100 },
});

try {
  for (const goal of ['Research the Marrow Lighthouse', 'Find the cooperatives of Veloran']) {
    const { agent_id } = await runtime.create({ goal });
    const agent = await runtime.waitFor(agent_id);
    const { messages } = await runtime.get(agent_id);
    const result = JSON.parse(messages.at(-1)!.text) as Record<string, unknown>;
    console.log(`\n# ${goal} — ${agent.status}, ${agent.credits_spent.toFixed(3)} credits spent by the lead agent`);
    if ('report' in result) {
      console.log(`report: ${String(result.report)}`);
      for (const c of result.citations as Array<{ n: number; url: string; excerpt: string; content_sha256: string }>) {
        const snapshot = await runtime.pageSnapshot(c.content_sha256);
        console.log(
          `  [${c.n}] ${c.url.replace(corpus.base, '')} "${c.excerpt}" (snapshot: ${snapshot?.length} chars)`,
        );
      }
      console.log(
        `dropped citations: ${String(result.dropped_citations)}, sources read: ${String(result.sources_read)}`,
      );
    } else {
      for (const e of result.entities as Array<{ name: string; evidence: Array<{ excerpt: string }> }>) {
        console.log(`  ${e.name} — "${e.evidence[0]?.excerpt}"`);
      }
      console.log(`candidates considered: ${String(result.candidates_considered)}, dropped: ${String(result.dropped)}`);
    }
    if (agent.status !== 'COMPLETED') process.exitCode = 1;
  }
} finally {
  await runtime.close();
  await corpus.close();
  rmSync(dir, { recursive: true, force: true });
}
