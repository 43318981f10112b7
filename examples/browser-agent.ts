/**
 * A browser agent, offline: the lead agent hands a task to `spawn_browser_agent`; a browser child drives a real
 * headless Chromium through a small shop — fills the search form, submits it, opens a result, waits for the code that
 * the product page's script writes in, takes a screenshot — and submits what it found. Prints the child's steps (each
 * action and the URL it left the page on), the result, the screenshot and the replay script the run left behind.
 * Run: npx tsx examples/browser-agent.ts   (needs Chromium: apt-get install chromium, or AGENTRY_CHROMIUM_PATH)
 *
 * Everything is the real runtime and a real browser, except two stand-ins so that it runs without a key or a network:
 * a loopback HTTP server plays the shop, and a scripted model plays Claude (it reads the refs of the page's
 * accessibility snapshot, as a model would). The browser's requests obey the guarded fetch's rules, which refuse
 * loopback addresses, so the example opens `127.0.0.1/32` with `fetch.allow`.
 *
 * Against the real web: set ANTHROPIC_API_KEY and drop the stand-ins (the scripted model, the server, `fetch.allow`):
 *
 *   const runtime = await AgentRuntime.open();
 *   await runtime.create({ goal: 'Use a browser agent to find the opening hours on https://example.com' });
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  AgentRuntime,
  memoryStorage,
  type ContentBlock,
  type ModelRequest,
  type ToolResultBlock,
} from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';

// ---------------------------------------------------------------------------------------------------------------
// The shop, on loopback: a search form, a result list, and product pages whose code only a browser can see.
// ---------------------------------------------------------------------------------------------------------------
const ITEMS = [
  { id: 41, name: 'Brass lamp', code: 'BL-1093' },
  { id: 42, name: 'Brass kettle', code: 'ZX-4417' },
];
const page = (title: string, body: string) =>
  `<!doctype html><html><head><title>${title}</title></head><body><main>${body}</main></body></html>`;

const server = http.createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://localhost');
  const send = (type: string, body: string) => res.writeHead(200, { 'content-type': type }).end(body);
  if (url.pathname === '/') {
    return send(
      'text/html',
      page(
        'Shop',
        '<h1>Shop</h1><form action="/search"><label>Search <input name="q"></label><button>Search</button></form>',
      ),
    );
  }
  if (url.pathname === '/search') {
    const q = (url.searchParams.get('q') ?? '').toLowerCase();
    const hits = ITEMS.filter((i) => i.name.toLowerCase().includes(q));
    return send(
      'text/html',
      page('Results', `<ul>${hits.map((i) => `<li><a href="/item/${i.id}">${i.name}</a></li>`).join('')}</ul>`),
    );
  }
  const item = /^\/item\/(\d+)$/.exec(url.pathname);
  if (item) {
    return send(
      'text/html',
      page(
        'Item',
        `<h1 id="name">Loading…</h1><p id="code"></p><script>fetch('/api/item/${item[1]}').then(r => r.json()).then(i => {
           document.getElementById('name').textContent = i.name;
           document.getElementById('code').textContent = 'Product code: ' + i.code; });</script>`,
      ),
    );
  }
  const api = /^\/api\/item\/(\d+)$/.exec(url.pathname);
  if (api) return send('application/json', JSON.stringify(ITEMS.find((i) => i.id === Number(api[1])) ?? null));
  res.writeHead(404).end('not found');
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

// ---------------------------------------------------------------------------------------------------------------
// The stand-in for Claude: the lead delegates; the browser child acts on the refs of each page it is shown.
// ---------------------------------------------------------------------------------------------------------------
const lastResult = (req: ModelRequest): ToolResultBlock | undefined =>
  req.messages.at(-1)!.content.find((b): b is ToolResultBlock => b.type === 'tool_result');
const shown = (req: ModelRequest) => JSON.parse(lastResult(req)?.content ?? '{}') as { page?: string; url?: string };
const ref = (req: ModelRequest, role: string, name: string) =>
  new RegExp(`- ${role} "${name}"[^\\n]*\\[ref=([a-z0-9]+)\\]`).exec(shown(req).page ?? '')?.[1] ?? 'missing';

const model = scriptedModel({
  record: false,
  turns: (req, { turnIndex }): ScriptedTurn => {
    const child = req.system?.startsWith('You operate a web browser');
    if (!child) {
      if (turnIndex === 0) {
        return {
          text: 'This needs a browser: the product page renders its code with JavaScript.',
          toolCalls: [
            {
              name: 'spawn_browser_agent',
              input: {
                task: 'Find the product code of the brass kettle',
                start_url: `${base}/`,
                allowed_domains: ['127.0.0.1'],
              },
            },
          ],
        };
      }
      const out = JSON.parse(lastResult(req)!.content) as { summary: string };
      return { text: out.summary };
    }
    const last = lastResult(req);
    if (last?.is_error) return { text: `Giving up: ${last.content}` };
    switch (turnIndex) {
      case 0:
        return { toolCalls: [{ name: 'browser_snapshot', input: {} }] };
      case 1:
        return {
          toolCalls: [
            { name: 'browser_type', input: { ref: ref(req, 'textbox', 'Search'), text: 'kettle', submit: true } },
          ],
        };
      case 2:
        return { toolCalls: [{ name: 'browser_click', input: { ref: ref(req, 'link', 'Brass kettle') } }] };
      case 3:
        return { toolCalls: [{ name: 'browser_wait_for', input: { text: 'Product code' } }] };
      case 4:
        return { toolCalls: [{ name: 'browser_take_screenshot', input: {} }] };
      default: {
        const code = /Product code: ([A-Z]{2}-\d{4})/.exec(JSON.stringify(req.messages.slice(-3)))?.[1] ?? null;
        return {
          toolCalls: [
            {
              name: 'submit_result',
              input: {
                summary: `The brass kettle's product code is ${code}.`,
                final_url: shown(req).url ?? '',
                data: { code },
              },
            },
          ],
        };
      }
    }
  },
});

const runtime = await AgentRuntime.open({
  storage: memoryStorage(),
  model,
  builtinTools: { only: ['spawn_browser_agent'], fetch: { allow: ['127.0.0.1/32'] } },
  defaultAccount: { id: 'local', credits: 100 },
});
try {
  const status = runtime.toolStatus().find((t) => t.name === 'spawn_browser_agent')!;
  console.log(`spawn_browser_agent: ${status.ready ? 'ready' : 'not ready'} — ${status.detail}\n`);
  if (!status.ready) {
    console.log('Install Chromium (apt-get install chromium) or set AGENTRY_CHROMIUM_PATH to run this example.');
  } else {
    const created = await runtime.create({ goal: 'What is the product code of the brass kettle in the shop?' });
    const agent = await runtime.waitFor(created.agent_id, { signal: AbortSignal.timeout(120_000) });
    const [child] = (await runtime.storage.listAgents({ parent_id: agent.agent_id, limit: 1 })).rows;
    console.log('browser child steps:');
    for (const turn of child ? await runtime.storage.listTurns(child.agent_id) : []) {
      for (const block of JSON.parse(turn.content) as ContentBlock[]) {
        if (block.type === 'tool_use') console.log(`  → ${block.name} ${JSON.stringify(block.input)}`);
        if (block.type === 'tool_result' && !block.is_error && block.content.startsWith('{')) {
          const r = JSON.parse(block.content) as { action?: string; url?: string; elapsed_ms?: number };
          if (r.action) console.log(`    ${r.action} → ${r.url} (${r.elapsed_ms} ms)`);
        }
      }
    }
    const turns = await runtime.storage.listTurns(agent.agent_id);
    const result = turns
      .flatMap((t) => JSON.parse(t.content) as ContentBlock[])
      .find((b): b is ToolResultBlock => b.type === 'tool_result');
    const out = JSON.parse(result!.content) as {
      final_url: string;
      data: unknown;
      screenshots: string[];
      replay_artifact_id?: string;
      termination_reason: string;
    };
    console.log(
      `\nresult: ${JSON.stringify({ final_url: out.final_url, data: out.data, termination_reason: out.termination_reason })}`,
    );
    for (const id of out.screenshots) {
      const shot = await runtime.storage.getArtifact(agent.agent_id, id);
      console.log(`screenshot: ${shot?.row.name}, ${shot?.data.length} bytes of PNG`);
    }
    if (out.replay_artifact_id) {
      const replay = await runtime.storage.getArtifact(agent.agent_id, out.replay_artifact_id);
      console.log(`\nreplay script (${replay?.row.name}), runs without a model:\n`);
      console.log(Buffer.from(replay!.data).toString('utf8'));
    }
    console.log(`status: ${agent.status}`);
    console.log(`answer: ${(await runtime.storage.listMessages(agent.agent_id)).at(-1)?.text}`);
    if (agent.status !== 'COMPLETED') process.exitCode = 1;
  }
} finally {
  await runtime.close();
  await new Promise((resolve) => server.close(resolve));
}
