/**
 * Web research, offline: an agent searches the web with `web_search`, reads the top result with `read_page` and
 * answers quoting it. Prints the tool status, the transcript (tool calls included), the pages read and what it spent.
 * Run: npx tsx examples/web-research.ts
 *
 * Everything here is the real runtime — SQLite storage, the step loop, credits, the built-in tools and the guarded
 * fetch they go through — except two stand-ins, so that it runs without a key or a network: a loopback HTTP server
 * plays the web (two small pages) and a SearXNG instance (`GET /search?q=…&format=json`), and a scripted model plays
 * Claude. The guarded fetch refuses loopback addresses, so the example opens `127.0.0.1/32` with `fetch.allow`.
 *
 * Against the real web: set BRAVE_API_KEY (or TAVILY_API_KEY, EXA_API_KEY, SEARXNG_URL) and ANTHROPIC_API_KEY, and
 * drop the stand-ins — the scripted model, the loopback server and `builtinTools` — so that the model and the search
 * provider come from the environment:
 *
 *   const runtime = await AgentRuntime.open({ storage: sqliteStorage({ path: 'research.db' }) });
 *
 * or, from the command line: BRAVE_API_KEY=… ANTHROPIC_API_KEY=sk-ant-… node bin/agentry.js run "<your question>"
 */
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  AgentRuntime,
  sqliteStorage,
  type ContentBlock,
  type ModelRequest,
  type ToolResultBlock,
} from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';

// ---------------------------------------------------------------------------------------------------------------
// The web, on loopback: two articles and a search engine that speaks SearXNG's JSON.
// ---------------------------------------------------------------------------------------------------------------
interface Article {
  path: string;
  title: string;
  paragraphs: string[];
}

const ARTICLES: Article[] = [
  {
    path: '/articles/durable-agents',
    title: 'Durable agents: checkpoint every step',
    paragraphs: [
      'An agent that runs for an hour will see a deploy, a crash or a full disk before it finishes.',
      'A durable agent runtime commits every step to its database before the next one starts, so a restart ' +
        'resumes the agent from its last step instead of from the beginning.',
      'Tool calls that are safe to repeat run again after a crash; the others are reported as unknown.',
    ],
  },
  {
    path: '/articles/credit-budgets',
    title: 'Credit budgets for agents',
    paragraphs: [
      'Each model call and each tool call reserves its worst-case price before it runs.',
      'The real cost is settled afterwards, so a budget is never overshot, even by many sub-agents at once.',
    ],
  },
];

function articleHtml(article: Article): string {
  return `<!doctype html><html><head><title>${article.title}</title></head><body>
<nav><a href="/">Home</a> · <a href="/about">About</a></nav>
<article><h1>${article.title}</h1>${article.paragraphs.map((p) => `<p>${p}</p>`).join('\n')}</article>
<footer>© Example Press</footer></body></html>`;
}

/** SearXNG's `/search?q=…&format=json`: the articles sharing the most words with the query, best first. */
function searchResults(
  base: string,
  query: string,
): { results: Array<{ title: string; url: string; content: string }> } {
  const words = query.toLowerCase().match(/[a-z]{4,}/g) ?? [];
  const score = (a: Article) => {
    const text = `${a.title} ${a.paragraphs.join(' ')}`.toLowerCase();
    return words.filter((w) => text.includes(w)).length;
  };
  const ranked = ARTICLES.filter((a) => score(a) > 0).sort((a, b) => score(b) - score(a));
  return {
    results: ranked.map((a) => ({ title: a.title, url: `${base}${a.path}`, content: a.paragraphs[0]! })),
  };
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://localhost');
  const { port } = server.address() as AddressInfo;
  if (url.pathname === '/search') {
    // SearXNG answers JSON only when asked for it (and when its settings allow it).
    if (url.searchParams.get('format') !== 'json') return void res.writeHead(403).end('format not allowed');
    const body = searchResults(`http://127.0.0.1:${port}`, url.searchParams.get('q') ?? '');
    return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  }
  const article = ARTICLES.find((a) => a.path === url.pathname);
  if (!article) return void res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(articleHtml(article));
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

// ---------------------------------------------------------------------------------------------------------------
// The stand-in for Claude: it decides each turn from the conversation, as a model would.
// ---------------------------------------------------------------------------------------------------------------
const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
const lastResult = (req: ModelRequest): ToolResultBlock | undefined =>
  req.messages.at(-1)!.content.find((b): b is ToolResultBlock => b.type === 'tool_result');

const model = scriptedModel({
  record: false,
  turns: (req, { turnIndex }): ScriptedTurn => {
    if (turnIndex === 0) {
      return {
        text: 'I will search the web, then read the most relevant page before answering.',
        toolCalls: [{ name: 'web_search', input: { query: goalOf(req), max_results: 3 } }],
        usage: { inputTokens: 1_400, outputTokens: 60 },
      };
    }
    const result = lastResult(req);
    if (!result || result.is_error) {
      return { text: `I could not finish the research: ${result?.content ?? 'no tool result'}` };
    }
    if (turnIndex === 1) {
      const { results } = JSON.parse(result.content) as { results: Array<{ url: string; title: string }> };
      const top = results[0];
      if (!top) return { text: 'The search found nothing on this question.' };
      return {
        text: `The top result is "${top.title}"; reading it.`,
        toolCalls: [{ name: 'read_page', input: { url: top.url, max_chars: 5_000 } }],
        usage: { inputTokens: 1_900, outputTokens: 50 },
      };
    }
    const page = JSON.parse(result.content) as { title: string; final_url: string; content: string };
    const sentences = page.content.replace(/\s+/g, ' ').match(/[^.!?]+[.!?]/g) ?? [];
    const quote = (sentences.find((s) => /restart|resume/i.test(s)) ?? sentences[0] ?? page.content).trim();
    return {
      text: `According to "${page.title}" (${page.final_url}): "${quote}"`,
      usage: { inputTokens: 2_600, outputTokens: 90 },
    };
  },
});

// ---------------------------------------------------------------------------------------------------------------
// The runtime, on a temporary SQLite file.
// ---------------------------------------------------------------------------------------------------------------
function show(block: ContentBlock): string {
  const cut = (s: string) => (s.length > 160 ? `${s.slice(0, 159)}…` : s);
  if (block.type === 'text') return block.text;
  if (block.type === 'tool_use') return `→ ${block.name} ${JSON.stringify(block.input)}`;
  if (block.type === 'thinking' || block.type === 'redacted_thinking') return '(thought)';
  return `${block.is_error ? '✗' : '←'} ${cut(block.content.replace(/\s+/g, ' '))}`;
}

const dir = mkdtempSync(join(tmpdir(), 'agentry-web-research-'));
const runtime = await AgentRuntime.open({
  storage: sqliteStorage({ path: join(dir, 'research.db') }),
  model,
  builtinTools: {
    // Only what is given here counts: the process environment is not read for the built-in tools.
    env: { SEARXNG_URL: base },
    fetch: { allow: ['127.0.0.1/32'] },
  },
  defaultAccount: { id: 'local', credits: 10 },
});
try {
  console.log('agentry web research — the real runtime on SQLite, a loopback web and a scripted stand-in for Claude\n');
  console.log('tools:');
  for (const tool of runtime.toolStatus()) {
    console.log(`  ${tool.name.padEnd(24)} ${(tool.ready ? 'ready' : 'not ready').padEnd(10)} ${tool.detail}`);
  }

  const goal = 'How do durable agent runtimes survive a restart?';
  const created = await runtime.create({ goal });
  const agent = await runtime.waitFor(created.agent_id);

  console.log('\ntranscript:');
  for (const turn of await runtime.storage.listTurns(agent.agent_id)) {
    for (const block of JSON.parse(turn.content) as ContentBlock[]) {
      const who = turn.role === 'assistant' ? 'ASSISTANT' : block.type === 'tool_result' ? 'TOOL' : 'USER';
      console.log(`  [${who}] ${show(block)}`);
    }
  }
  console.log('\npages read:');
  for (const read of await runtime.storage.listPageReads([agent.agent_id])) {
    console.log(`  ${read.final_url}  "${read.title}"  sha256 ${read.content_sha256.slice(0, 12)}…`);
  }
  console.log(`\nstatus: ${agent.status}, ${agent.token_count} tokens, ${agent.credits_spent} credits spent`);
  if (agent.status !== 'COMPLETED') process.exitCode = 1;
} finally {
  await runtime.close();
  await new Promise((resolve) => server.close(resolve));
  rmSync(dir, { recursive: true, force: true });
}
