/**
 * The built-in web tools (README.md#tools) through a real runtime: a scripted model calls `read_page`, `web_search` and
 * a custom tool's `ctx.fetch`, and the tests look at what the model saw next, what reached the loopback servers, what
 * was recorded and what was billed. Only loopback addresses are ever contacted: private and public names are made to
 * *resolve* to their addresses by a fake lookup, and a safety net on `net.connect` stops anything else.
 */
import { createHash } from 'node:crypto';
import type http from 'node:http';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  AgentRuntime,
  defineTool,
  memoryStorage,
  type BuiltinToolsOptions,
  type RuntimeOptions,
} from 'agentry-runtime';
import { scriptedModel } from 'agentry-runtime/testing';
import { openTestRuntime, type TestRuntime } from '../support/runtime.js';
import {
  fakeLookup,
  goalOf,
  playGoal,
  refuseNonLoopbackConnections,
  requestsOf,
  resultSeenAt,
  startLoopbackServer,
  toolsOffered,
  type LoopbackServer,
  type PlannedCall,
} from './web-fixtures.js';

const violations = refuseNonLoopbackConnections();

const ARTICLE_TITLE = 'Durable agents on SQLite';
const ARTICLE_SENTENCE = 'Every step of an agent is committed to SQLite before the next one starts.';
const ARTICLE = `<!doctype html>
<html><head><title>${ARTICLE_TITLE}</title></head>
<body>
  <nav><a href="/">Home</a> | <a href="/about">About</a></nav>
  <article>
    <h1>${ARTICLE_TITLE}</h1>
    <p>${ARTICLE_SENTENCE} A crash loses at most the step in flight, and the runtime resumes from the last one.</p>
    <p>Credits are reserved before each model call and each tool call, so a budget can never be overshot, even by
    ten thousand sub-agents working at once. See <a href="/credits">how credits work</a>.</p>
  </article>
  <footer>Copyright nobody</footer>
</body></html>`;

/** Names the fake resolver knows; everything else is an unknown host. */
const lookup = fakeLookup({
  'internal.test': ['10.0.0.5'],
  // A public address first: every address a name resolves to is checked, not only the first.
  'mixed.test': ['93.184.215.14', '10.0.0.7'],
  'loopback.test': ['127.0.0.1'],
  'metadata.test': ['169.254.169.254'],
});

let site: LoopbackServer;
let site6: LoopbackServer;
const requestsSeen = () => site.seen.length + site6.seen.length;

function serveSite(_req: http.IncomingMessage, res: http.ServerResponse, url: URL): void {
  const redirect = (location: string) => res.writeHead(302, { location }).end();
  switch (url.pathname) {
    case '/article':
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(ARTICLE);
      return;
    case '/moved':
      redirect('/article');
      return;
    case '/to-private':
      redirect('http://10.0.0.1/');
      return;
    case '/to-internal':
      redirect('http://internal.test/admin');
      return;
    case '/to-v6-loopback':
      redirect(`${site6.base}/secret`);
      return;
    case '/plain':
      res.writeHead(200, { 'content-type': 'text/plain' }).end('hello from loopback');
      return;
    case '/huge':
      // 6.5 MB of text: more than read_page reads (5 MB by default)
      res.writeHead(200, { 'content-type': 'text/plain' }).end('huge page. '.repeat(650_000));
      return;
    default:
      res.writeHead(200, { 'content-type': 'text/plain' }).end('secret: this must never reach a model');
  }
}

const opened: AgentRuntime[] = [];

/** A runtime on memory storage whose scripted model plays the tool calls of each agent's goal. */
async function openRuntime(options: Omit<RuntimeOptions, 'model' | 'clock'> = {}): Promise<TestRuntime> {
  const t = await openTestRuntime(playGoal, options);
  opened.push(t.runtime);
  return t;
}

/** Runs one agent that makes `calls`, and returns its id once it is done. */
async function runAgent(t: TestRuntime, calls: PlannedCall[]): Promise<string> {
  const { agent_id } = await t.runtime.create({ goal: goalOf(calls) });
  const agent = await t.runtime.waitFor(agent_id);
  expect(agent.status).toBe('COMPLETED');
  return agent_id;
}

/** The URL a table row means, with the servers' ports filled in. */
const at = (template: string) => template.replaceAll('{P}', String(site.port)).replaceAll('{P6}', String(site6.port));

beforeAll(async () => {
  site = await startLoopbackServer(serveSite);
  // Without IPv6 loopback there is nothing to listen on, and nothing a broken guard could reach at [::1] either.
  site6 = await startLoopbackServer(serveSite, '::1').catch(() => ({
    port: site.port,
    base: `http://[::1]:${site.port}`,
    seen: [],
    close: async () => {},
  }));
});

afterEach(() => {
  expect(violations).toEqual([]);
});

afterAll(async () => {
  await Promise.all(opened.map((r) => r.close()));
  await Promise.all([site.close(), site6.close()]);
});

const FETCH_TESTS: BuiltinToolsOptions['fetch'] = { lookup };

describe('read_page called by the model refuses every form of a non-public address (SSRF)', () => {
  let t: TestRuntime;
  beforeAll(async () => {
    t = await openRuntime({ builtinTools: { env: {}, fetch: FETCH_TESTS } });
  });

  // [what, URL ({P}: the IPv4 server's port, {P6}: the IPv6 one's), what the error the model sees must say]
  const REFUSED: Array<[string, string, string[]]> = [
    ['IPv4 loopback', 'http://127.0.0.1:{P}/', ['Refused http://127.0.0.1:{P}/', '127.0.0.1 is a loopback address']],
    ['short IPv4 (127.1)', 'http://127.1:{P}/', ['Refused http://127.0.0.1:{P}/', 'a loopback address']],
    ['decimal IPv4 (2130706433)', 'http://2130706433:{P}/', ['127.0.0.1 is a loopback address']],
    ['hexadecimal IPv4 (0x7f000001)', 'http://0x7f000001:{P}/', ['127.0.0.1 is a loopback address']],
    ['octal IPv4 (0177.0.0.1)', 'http://0177.0.0.1:{P}/', ['127.0.0.1 is a loopback address']],
    ['IPv6 loopback', 'http://[::1]:{P6}/', ['Refused http://[::1]:{P6}/', '[::1] is a loopback address']],
    ['IPv4-mapped IPv6 loopback', 'http://[::ffff:127.0.0.1]:{P}/', ['[::ffff:7f00:1] is a loopback address']],
    ['IPv4 unspecified (0.0.0.0 reaches this host)', 'http://0.0.0.0:{P}/', ['0.0.0.0 is an unspecified address']],
    ['IPv6 unspecified', 'http://[::]:{P6}/', ['[::] is an unspecified address']],
    [
      'cloud metadata',
      'http://169.254.169.254/latest/meta-data/',
      ['Refused http://169.254.169.254/latest/meta-data/', '169.254.169.254 is a cloud metadata address'],
    ],
    ['AWS IPv6 metadata', 'http://[fd00:ec2::254]/latest/meta-data/', ['a cloud metadata address']],
    ['private 10/8', 'http://10.0.0.1/', ['10.0.0.1 is a private address']],
    ['private 192.168/16', 'http://192.168.1.1/', ['192.168.1.1 is a private address']],
    ['private 172.16/12', 'http://172.16.0.1/', ['172.16.0.1 is a private address']],
    ['carrier-grade NAT', 'http://100.64.0.1/', ['100.64.0.1 is a carrier-grade NAT (shared) address']],
    ['IPv4 link-local', 'http://169.254.1.1/', ['169.254.1.1 is a link-local address']],
    ['IPv6 unique-local', 'http://[fd00::1]/', ['[fd00::1] is a unique-local (private) address']],
    ['IPv6 link-local', 'http://[fe80::1]/', ['[fe80::1] is a link-local address']],
    ['NAT64 of a private address', 'http://[64:ff9b::a00:1]/', ['a private address']],
    ['multicast', 'http://224.0.0.1/', ['224.0.0.1 is a multicast address']],
    [
      'a name resolving to a private address',
      'http://internal.test/',
      ['internal.test resolves to 10.0.0.5, a private address'],
    ],
    [
      'a name resolving to a public and a private address',
      'http://mixed.test/',
      ['mixed.test resolves to 10.0.0.7, a private address'],
    ],
    [
      'a name resolving to loopback',
      'http://loopback.test:{P}/',
      ['loopback.test resolves to 127.0.0.1, a loopback address'],
    ],
    [
      'a name resolving to the metadata address',
      'http://metadata.test/latest/meta-data/',
      ['metadata.test resolves to 169.254.169.254, a cloud metadata address'],
    ],
    [
      'credentials in the URL',
      'http://user:pass@127.0.0.1:{P}/',
      ['Refused http://127.0.0.1:{P}/', 'embedded credentials (user:password@)'],
    ],
    ['a file: URL', 'file:///etc/passwd', ['invalid input for read_page', 'must be an http(s) URL']],
    ['an ftp: URL', 'ftp://example.com/', ['invalid input for read_page', 'must be an http(s) URL']],
  ];

  it.each(REFUSED)('%s: %s', async (_what, template, expected) => {
    const before = requestsSeen();
    const id = await runAgent(t, [{ name: 'read_page', input: { url: at(template) } }]);

    const seen = resultSeenAt(t.model, id, 1);
    expect(seen.is_error).toBe(true);
    expect(seen.content).toMatch(/^Error: /);
    for (const text of expected) expect(seen.content).toContain(at(text));
    if (!expected[0]!.startsWith('invalid input')) {
      expect(seen.content).toContain('Refused');
      expect(seen.content).not.toContain('secret');
    }
    expect(requestsSeen()).toBe(before);
    expect(await t.storage.listPageReads([id])).toEqual([]);
  });

  it('offers read_page and says it is ready', async () => {
    const id = await runAgent(t, []);
    expect(toolsOffered(t.model, id)).toContain('read_page');
    expect(t.runtime.toolStatus().find((s) => s.name === 'read_page')).toMatchObject({
      source: 'builtin',
      ready: true,
      offered: true,
    });
  });
});

describe('read_page with builtinTools.fetch.allow = [127.0.0.1/32]', () => {
  let t: TestRuntime;
  beforeAll(async () => {
    t = await openRuntime({ builtinTools: { env: {}, fetch: { ...FETCH_TESTS, allow: ['127.0.0.1/32'] } } });
  });

  it('reads the loopback page it refused before, and records the read with the SHA-256 of its text', async () => {
    const before = site.seen.length;
    const url = `${site.base}/article`;
    const id = await runAgent(t, [{ name: 'read_page', input: { url } }]);

    const seen = resultSeenAt(t.model, id, 1);
    expect(seen.is_error).toBeUndefined();
    const page = JSON.parse(seen.content) as Record<string, unknown>;
    expect(Object.keys(page).sort()).toEqual(['content', 'final_url', 'links', 'title', 'truncated', 'url']);
    expect(page).toMatchObject({ url, final_url: url, title: ARTICLE_TITLE, truncated: false });
    expect(page.content).toContain(ARTICLE_SENTENCE);
    expect(page.content).not.toContain('Copyright nobody');
    expect(page.links).toContainEqual({ text: 'how credits work', url: `${site.base}/credits` });

    expect(site.seen.slice(before).map((r) => `${r.method} ${r.path}`)).toEqual(['GET /article']);
    expect(site.seen.at(-1)!.headers.accept).toContain('text/html');

    const reads = await t.storage.listPageReads([id]);
    expect(reads).toHaveLength(1);
    const read = reads[0]!;
    expect(read).toMatchObject({
      agent_id: id,
      tool_use_id: seen.tool_use_id,
      url,
      final_url: url,
      title: ARTICLE_TITLE,
    });
    expect(read.content_sha256).toMatch(/^[0-9a-f]{64}$/);
    const text = await t.storage.getPageText(read.content_sha256);
    expect(text).toContain(ARTICLE_SENTENCE);
    expect(createHash('sha256').update(text!).digest('hex')).toBe(read.content_sha256);
  });

  it.each(['http://127.1:{P}/plain', 'http://2130706433:{P}/plain', 'http://[::ffff:127.0.0.1]:{P}/plain'])(
    'the allowed range is open in every notation: %s',
    async (template) => {
      const id = await runAgent(t, [{ name: 'read_page', input: { url: at(template) } }]);
      const seen = resultSeenAt(t.model, id, 1);
      expect(seen.is_error).toBeUndefined();
      expect(JSON.parse(seen.content)).toMatchObject({ content: 'hello from loopback' });
    },
  );

  it('reads a page larger than the body cap up to the cap and says it was truncated', async () => {
    const id = await runAgent(t, [{ name: 'read_page', input: { url: `${site.base}/huge`, max_chars: 1_000 } }]);
    const seen = resultSeenAt(t.model, id, 1);
    expect(seen.is_error).toBeUndefined();
    const page = JSON.parse(seen.content) as { truncated: boolean; content: string };
    expect(page.truncated).toBe(true);
    expect(page.content.startsWith('huge page.')).toBe(true);
  });

  it('follows a redirect inside the allowed range and records the final URL', async () => {
    const id = await runAgent(t, [{ name: 'read_page', input: { url: `${site.base}/moved` } }]);
    const page = JSON.parse(resultSeenAt(t.model, id, 1).content) as { url: string; final_url: string };
    expect(page).toMatchObject({ url: `${site.base}/moved`, final_url: `${site.base}/article` });
    expect(await t.storage.listPageReads([id])).toMatchObject([
      { url: `${site.base}/moved`, final_url: `${site.base}/article`, title: ARTICLE_TITLE },
    ]);
  });

  it.each([
    ['/to-private', 'Refused http://10.0.0.1/ (redirected from {BASE}/to-private): 10.0.0.1 is a private address'],
    [
      '/to-internal',
      'Refused http://internal.test/admin (redirected from {BASE}/to-internal): internal.test resolves to 10.0.0.5',
    ],
    ['/to-v6-loopback', '(redirected from {BASE}/to-v6-loopback): [::1] is a loopback address'],
  ])('refuses a redirect from the allowed page to a range it does not open: %s', async (path, message) => {
    const before = { v4: site.seen.length, v6: site6.seen.length };
    const id = await runAgent(t, [{ name: 'read_page', input: { url: `${site.base}${path}` } }]);
    const seen = resultSeenAt(t.model, id, 1);
    expect(seen.is_error).toBe(true);
    expect(seen.content).toContain(message.replace('{BASE}', site.base));
    expect(site.seen.slice(before.v4).map((r) => r.path)).toEqual([path]);
    expect(site6.seen.length).toBe(before.v6);
    expect(await t.storage.listPageReads([id])).toEqual([]);
  });

  it('still refuses what the allow list does not open', async () => {
    const before = requestsSeen();
    const id = await runAgent(t, [
      { name: 'read_page', input: { url: `${site6.base}/` } },
      { name: 'read_page', input: { url: 'http://10.0.0.1/' } },
    ]);
    expect(resultSeenAt(t.model, id, 1)).toMatchObject({ is_error: true, content: expect.stringContaining('[::1]') });
    expect(resultSeenAt(t.model, id, 2)).toMatchObject({
      is_error: true,
      content: expect.stringContaining('10.0.0.1'),
    });
    expect(requestsSeen()).toBe(before);
  });
});

describe('ctx.fetch in a custom tool goes through the same guard', () => {
  const httpGet = defineTool({
    name: 'http_get',
    description: 'GET a URL and return its status and body',
    input: z.object({ url: z.string() }),
    idempotent: true,
    async run({ url }, ctx) {
      const res = await ctx.fetch(url);
      return { status: res.status, body: await res.text() };
    },
  });

  it('refuses a loopback URL without an allow list, before any request', async () => {
    const t = await openRuntime({ tools: [httpGet], builtinTools: { env: {}, fetch: FETCH_TESTS } });
    const before = requestsSeen();
    const id = await runAgent(t, [
      { name: 'http_get', input: { url: `${site.base}/plain` } },
      { name: 'http_get', input: { url: 'http://internal.test/' } },
    ]);
    expect(resultSeenAt(t.model, id, 1)).toMatchObject({
      is_error: true,
      content: expect.stringContaining(`Refused ${site.base}/plain: 127.0.0.1 is a loopback address`),
    });
    expect(resultSeenAt(t.model, id, 2)).toMatchObject({
      is_error: true,
      content: expect.stringContaining('internal.test resolves to 10.0.0.5, a private address'),
    });
    expect(requestsSeen()).toBe(before);
  });

  it('reaches it with builtinTools.fetch.allow, and still refuses a redirect out of the allowed range', async () => {
    const t = await openRuntime({
      tools: [httpGet],
      builtinTools: { env: {}, fetch: { ...FETCH_TESTS, allow: ['127.0.0.1/32'] } },
    });
    const id = await runAgent(t, [
      { name: 'http_get', input: { url: `${site.base}/plain` } },
      { name: 'http_get', input: { url: `${site.base}/to-private` } },
    ]);
    const ok = resultSeenAt(t.model, id, 1);
    expect(ok.is_error).toBeUndefined();
    expect(JSON.parse(ok.content)).toEqual({ status: 200, body: 'hello from loopback' });
    expect(resultSeenAt(t.model, id, 2)).toMatchObject({
      is_error: true,
      content: expect.stringContaining('Refused http://10.0.0.1/'),
    });
    // ctx.fetch is not read_page: nothing is recorded as read.
    expect(await t.storage.listPageReads([id])).toEqual([]);
  });
});

describe('web_search end to end', () => {
  let brave: LoopbackServer;
  let braveAnswer: (res: http.ServerResponse) => void;
  const BRAVE_RESULTS = {
    type: 'search',
    web: {
      results: [
        {
          title: 'Agentry: <strong>durable</strong> agents',
          url: 'https://agentry.example/docs',
          description: 'Agents that survive a restart &amp; never <strong>overspend</strong>.',
          page_age: '2024-05-06T07:08:09',
        },
        { title: 'Second result', url: 'https://blog.example/post', description: 'Another one.' },
      ],
    },
  };
  const braveEnv = () => ({ BRAVE_API_KEY: 'k', AGENTRY_BRAVE_BASE_URL: brave.base });

  beforeAll(async () => {
    brave = await startLoopbackServer((_req, res) => braveAnswer(res));
  });
  afterAll(() => brave.close());

  it('sends the documented Brave request and shows the model normalised results; toolStatus says brave', async () => {
    braveAnswer = (res) =>
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(BRAVE_RESULTS));
    const t = await openRuntime({ builtinTools: { env: braveEnv(), fetch: FETCH_TESTS } });
    const before = brave.seen.length;
    const id = await runAgent(t, [{ name: 'web_search', input: { query: 'durable agents sqlite', max_results: 3 } }]);

    const requests = brave.seen.slice(before);
    expect(requests).toHaveLength(1);
    const request = requests[0]!;
    expect(request.method).toBe('GET');
    expect(request.path).toBe('/res/v1/web/search');
    expect(Object.fromEntries(request.query)).toEqual({ q: 'durable agents sqlite', count: '3' });
    expect(request.headers['x-subscription-token']).toBe('k');
    expect(request.headers.accept).toBe('application/json');

    const seen = resultSeenAt(t.model, id, 1);
    expect(seen.is_error).toBeUndefined();
    expect(JSON.parse(seen.content)).toEqual({
      provider: 'brave',
      results: [
        {
          title: 'Agentry: durable agents',
          url: 'https://agentry.example/docs',
          snippet: 'Agents that survive a restart & never overspend.',
          published_at: '2024-05-06T07:08:09.000Z',
        },
        { title: 'Second result', url: 'https://blog.example/post', snippet: 'Another one.' },
      ],
    });

    expect(toolsOffered(t.model, id)).toEqual(expect.arrayContaining(['web_search', 'read_page']));
    expect(t.runtime.toolStatus().find((s) => s.name === 'web_search')).toEqual({
      name: 'web_search',
      source: 'builtin',
      ready: true,
      detail: 'provider brave',
      offered: true,
    });
  });

  it("opens the search provider's host to the search only: read_page on it is still refused", async () => {
    const t = await openRuntime({ builtinTools: { env: braveEnv(), fetch: FETCH_TESTS } });
    const before = brave.seen.length;
    const id = await runAgent(t, [{ name: 'read_page', input: { url: `${brave.base}/res/v1/web/search?q=x` } }]);
    expect(resultSeenAt(t.model, id, 1)).toMatchObject({
      is_error: true,
      content: expect.stringContaining('127.0.0.1 is a loopback address'),
    });
    expect(brave.seen.length).toBe(before);
  });

  it('without a provider web_search is still offered, fails naming what to set, and toolStatus says why', async () => {
    const t = await openRuntime({ builtinTools: { env: {}, fetch: FETCH_TESTS } });
    const id = await runAgent(t, [{ name: 'web_search', input: { query: 'anything' } }]);

    const spec = requestsOf(t.model, id)[0]!.tools.find((s) => s.name === 'web_search');
    expect(spec).toBeDefined();
    expect(spec!.input_schema).toMatchObject({ type: 'object', required: ['query'] });
    const seen = resultSeenAt(t.model, id, 1);
    expect(seen.is_error).toBe(true);
    expect(seen.content).toBe(
      'Error: web_search needs one of BRAVE_API_KEY, TAVILY_API_KEY, EXA_API_KEY or SEARXNG_URL',
    );

    const status = t.runtime.toolStatus().find((s) => s.name === 'web_search');
    expect(status).toMatchObject({ source: 'builtin', ready: false, offered: true });
    expect(status!.detail).toContain('not configured');
    expect(status!.detail).toContain('BRAVE_API_KEY');
  });

  it('a 401 from the provider reaches the model as a clear error, without retries', async () => {
    braveAnswer = (res) =>
      res.writeHead(401, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          type: 'ErrorResponse',
          error: {
            code: 'SUBSCRIPTION_TOKEN_INVALID',
            detail: 'The provided subscription token is invalid.',
            status: 401,
          },
        }),
      );
    const t = await openRuntime({ builtinTools: { env: braveEnv(), fetch: FETCH_TESTS } });
    const before = brave.seen.length;
    const id = await runAgent(t, [{ name: 'web_search', input: { query: 'durable agents' } }]);

    const seen = resultSeenAt(t.model, id, 1);
    expect(seen.is_error).toBe(true);
    expect(seen.content).toBe(
      'Error: the Brave API key was refused (check BRAVE_API_KEY): ' +
        'The provided subscription token is invalid (SUBSCRIPTION_TOKEN_INVALID)',
    );
    expect(brave.seen.length - before).toBe(1);
  });

  it('bills each call of web_search and read_page at its price (failed calls too) as ledger rows of kind tool', async () => {
    braveAnswer = (res) =>
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(BRAVE_RESULTS));
    const t = await openRuntime({
      builtinTools: { env: braveEnv(), fetch: { ...FETCH_TESTS, allow: ['127.0.0.1/32'] } },
    });
    const id = await runAgent(t, [
      { name: 'web_search', input: { query: 'durable agents' } },
      { name: 'read_page', input: { url: `${site.base}/article` } },
      { name: 'web_search', input: { query: 'credits' } },
      { name: 'read_page', input: { url: 'http://10.0.0.1/' } },
    ]);
    expect(resultSeenAt(t.model, id, 4).is_error).toBe(true);

    const ledger = (await t.storage.listLedger('local')).filter((row) => row.agent_id === id);
    const tools = ledger.filter((row) => row.kind === 'tool');
    expect(tools.map((row) => [row.item, row.amount])).toEqual([
      ['web_search', -500_000],
      ['read_page', -50_000],
      ['web_search', -500_000],
      ['read_page', -50_000],
    ]);
    for (const row of tools) expect(row).toMatchObject({ account_id: 'local', tokens_in: 0, tokens_out: 0 });
    const spent = ledger.reduce((sum, row) => sum - row.amount, 0);
    const agent = await t.runtime.waitFor(id);
    expect(Math.round(agent.credits_spent * 1e6)).toBe(spent);
  });

  it('bills a price set in the price table instead of the tool’s own', async () => {
    const t = await openRuntime({
      prices: { tools: { read_page: 0.2 } },
      builtinTools: { env: {}, fetch: { ...FETCH_TESTS, allow: ['127.0.0.1/32'] } },
    });
    const id = await runAgent(t, [{ name: 'read_page', input: { url: `${site.base}/plain` } }]);
    const tools = (await t.storage.listLedger('local')).filter((r) => r.agent_id === id && r.kind === 'tool');
    expect(tools.map((row) => [row.item, row.amount])).toEqual([['read_page', -200_000]]);
  });
});

describe('which built-in tools agents are offered (builtinTools)', () => {
  it("only: ['read_page'] offers read_page but not web_search", async () => {
    const t = await openRuntime({ builtinTools: { only: ['read_page'], env: {}, fetch: FETCH_TESTS } });
    const id = await runAgent(t, [{ name: 'web_search', input: { query: 'x' } }]);
    const offered = toolsOffered(t.model, id);
    expect(offered).toContain('read_page');
    expect(offered).not.toContain('web_search');
    expect(resultSeenAt(t.model, id, 1)).toMatchObject({
      is_error: true,
      content: 'Error: there is no tool named "web_search".',
    });
    const status = t.runtime.toolStatus().filter((s) => s.source === 'builtin');
    expect(status.map((s) => [s.name, s.offered])).toEqual([
      ['web_search', false],
      ['read_page', true],
      ['deep_research', false],
      ['find_all', false],
      ['enrich', false],
      ['spawn_claude_code_agent', false],
      ['spawn_claude_code_agent/Grep', false],
      ['spawn_browser_agent', false],
      ['monitor', false],
      ['message_person', false],
    ]);
  });

  it('false offers no built-in tool', async () => {
    const t = await openRuntime({ builtinTools: false });
    const id = await runAgent(t, []);
    const offered = toolsOffered(t.model, id);
    expect(offered).not.toContain('read_page');
    expect(offered).not.toContain('web_search');
    expect(offered).toContain('update_plan');
    expect(t.runtime.toolStatus().filter((s) => s.source === 'builtin')).toEqual([]);
  });

  it("only: ['nope'] fails open() with invalid_request naming the built-in tools", async () => {
    const open = AgentRuntime.open({
      storage: memoryStorage(),
      model: scriptedModel({ turns: [{ text: 'never' }] }),
      builtinTools: { only: ['nope'], env: {} },
    });
    await expect(open).rejects.toMatchObject({
      name: 'AgentryError',
      code: 'invalid_request',
      message:
        'builtinTools.only: there is no built-in tool "nope"; the built-in tools are web_search, read_page, deep_research, find_all, enrich, spawn_claude_code_agent, spawn_browser_agent, monitor, message_person',
    });
  });
});
