/**
 * @module builtins
 * The composition root of the built-in tools: it builds the guarded fetch, page reading and the web_search backend
 * from `AgentRuntime.open({ builtinTools })` and the environment (the variables README.md#tools names), and hands them
 * to the core as a {@link ToolPlatform}. The core never imports a backend; this module is the one place that does.
 */
import { z } from 'zod';
import { parseArgs } from './base/validate.js';
import { AgentryError } from './errors.js';
import {
  CODE_AGENT_BACKENDS,
  CODE_AGENT_TOOL_NAME,
  codeAgentTool,
  type CodeAgentBackend,
} from './tools/builtin/code-agent/index.js';
import { deepResearchTool } from './tools/builtin/deep-research/index.js';
import { enrichTool } from './tools/builtin/enrich/index.js';
import { findAllTool } from './tools/builtin/find-all/index.js';
import { MONITOR_TOOL_NAME, monitorTool } from './tools/builtin/monitor/index.js';
import { BROWSER_AGENT_TOOL_NAME, browserAgentTool } from './tools/builtin/browser-agent/index.js';
import { MESSAGE_PERSON_TOOL_NAME, messagePersonTool } from './tools/builtin/message-person.js';
import { MessagingOptionsSchema, messagingFromConfig, twilioHost } from './messaging/config.js';
import { readPageTool } from './tools/builtin/read-page.js';
import { webSearchTool } from './tools/builtin/web-search.js';
import { normaliseUrlForMatch } from './tools/citations.js';
import type { PageContent } from './tools/define-tool.js';
import type { BuiltinToolsOptions, ToolPlatform, ToolStatus } from './tools/platform.js';
import { parseAllowList } from './web/address-policy.js';
import type { GuardedFetch, GuardedFetchOptions } from './web/guarded-fetch.js';
import { searchProviderFromEnv, searchProviderSetupHint } from './web/search/from-env.js';

/** The page reader's default body cap (web/page-reader.ts), without loading the reader. */
const PAGE_MAX_BYTES = 5 * 1024 * 1024;

/**
 * A guarded fetch made on first use: its HTTP client (undici) loads only when a tool first reaches the network, so
 * importing agentry stays light. Its options are checked now, at the door.
 */
function lazyGuardedFetch(options: GuardedFetchOptions): GuardedFetch {
  parseAllowList([...(options.allow ?? []), ...(options.env?.['AGENTRY_FETCH_ALLOW']?.split(',') ?? [])]);
  let made: Promise<GuardedFetch> | undefined;
  const get = () => (made ??= import('./web/guarded-fetch.js').then((m) => m.createGuardedFetch(options)));
  const fetch = async (input: string | URL, init?: Parameters<GuardedFetch>[1]) => (await get())(input, init);
  return Object.assign(fetch, {
    async close() {
      if (made) await (await made).close();
    },
  });
}

const OptionsSchema = z
  .object({
    only: z.array(z.string().min(1)).optional(),
    search: z
      .custom<NonNullable<BuiltinToolsOptions['search']>>(
        (v) => typeof (v as { search?: unknown })?.search === 'function',
        'must be a SearchProvider',
      )
      .optional(),
    fetch: z
      .object({
        allow: z.array(z.string()).optional(),
        maxBytes: z.number().int().positive().optional(),
        timeoutMs: z.number().int().positive().optional(),
        lookup: z.function().optional(),
      })
      .strict()
      .optional(),
    env: z.record(z.string(), z.string().optional()).optional(),
    dataDir: z.string().min(1).optional(),
    codeAgent: z
      .object({
        backend: z.enum(CODE_AGENT_BACKENDS).optional(),
        maxTurns: z.number().int().min(1).max(1_000).optional(),
        maxOutputTokens: z.number().int().min(256).max(128_000).optional(),
        sandboxSlots: z
          .object({
            slots: z.number().int().min(1).max(10_000).optional(),
            perAccount: z.number().int().min(1).max(10_000).optional(),
          })
          .strict()
          .optional(),
      })
      .strict()
      .optional(),
    browser: z
      .object({
        executablePath: z.string().min(1).optional(),
        idleMs: z.number().int().nonnegative().optional(),
        maxContexts: z.number().int().positive().max(64).optional(),
      })
      .strict()
      .optional(),
    messaging: MessagingOptionsSchema.optional(),
  })
  .strict();

/** Base URLs the operator configured for search backends: trusted, so reachable even on a private address. */
const SEARCH_URL_VARIABLES = [
  'SEARXNG_URL',
  'AGENTRY_BRAVE_BASE_URL',
  'AGENTRY_TAVILY_BASE_URL',
  'AGENTRY_EXA_BASE_URL',
];

function configuredHosts(env: NodeJS.ProcessEnv): string[] {
  const hosts: string[] = [];
  for (const name of SEARCH_URL_VARIABLES) {
    const value = env[name]?.trim();
    if (!value) continue;
    try {
      hosts.push(new URL(value).hostname.replace(/^\[|\]$/g, ''));
    } catch {
      // searchProviderFromEnv names the malformed variable
    }
  }
  return hosts;
}

/** The coding backend: the option, else AGENTRY_CODE_AGENT_BACKEND, else the runtime's own child. */
function codeAgentBackend(option: CodeAgentBackend | undefined, env: NodeJS.ProcessEnv): CodeAgentBackend {
  const value = option ?? (env['AGENTRY_CODE_AGENT_BACKEND']?.trim() || 'runtime');
  if (!(CODE_AGENT_BACKENDS as readonly string[]).includes(value)) {
    throw new AgentryError(
      'invalid_request',
      `AGENTRY_CODE_AGENT_BACKEND must be one of ${CODE_AGENT_BACKENDS.join(', ')}, got ${JSON.stringify(value)}`,
    );
  }
  return value as CodeAgentBackend;
}

/** Builds the built-in tools and their services. */
export function createBuiltinPlatform(options: BuiltinToolsOptions): ToolPlatform {
  const o = parseArgs(OptionsSchema, options, 'builtinTools options') as BuiltinToolsOptions;
  const env = o.env ?? process.env;
  const fetchOptions = {
    env,
    ...(o.fetch?.maxBytes !== undefined ? { maxBytes: o.fetch.maxBytes } : {}),
    ...(o.fetch?.timeoutMs !== undefined ? { timeoutMs: o.fetch.timeoutMs } : {}),
    ...(o.fetch?.lookup !== undefined ? { lookup: o.fetch.lookup } : {}),
  };
  const fetch = lazyGuardedFetch({ ...fetchOptions, allow: o.fetch?.allow ?? [] });
  // The search backend's own requests go to a host the operator chose (SearXNG often runs on localhost): its host is
  // allowed for them, and only for them.
  const searchFetch = lazyGuardedFetch({
    ...fetchOptions,
    allow: [...(o.fetch?.allow ?? []), ...configuredHosts(env)],
  });
  const search = o.search ?? searchProviderFromEnv(env, searchFetch);
  // message_person: Twilio's base URL is the operator's (AGENTRY_TWILIO_BASE_URL may point at a proxy or a test server
  // on a private address), so its host is allowed for the SMS transport's own requests, and only for them.
  const twilioFetch = lazyGuardedFetch({
    ...fetchOptions,
    allow: [...(o.fetch?.allow ?? []), twilioHost(o.messaging, env)],
  });
  const messaging = messagingFromConfig(o.messaging, env, (url, init) => twilioFetch(url, init));
  // Its sandbox (bubblewrap) is probed on the first call; workspaces under defaultDataDir() (/var/lib/agentry for root).
  const codeAgent = codeAgentTool({
    ...(o.dataDir !== undefined ? { dataDir: o.dataDir } : {}),
    backend: codeAgentBackend(o.codeAgent?.backend, env),
    ...(o.codeAgent?.sandboxSlots !== undefined ? { sandboxSlots: o.codeAgent.sandboxSlots } : {}),
    ...(o.codeAgent?.maxTurns !== undefined || o.codeAgent?.maxOutputTokens !== undefined
      ? {
          claudeCode: {
            ...(o.codeAgent.maxTurns !== undefined ? { maxTurns: o.codeAgent.maxTurns } : {}),
            ...(o.codeAgent.maxOutputTokens !== undefined ? { maxOutputTokens: o.codeAgent.maxOutputTokens } : {}),
          },
        }
      : {}),
  });
  // The browser starts on the first call; its pages obey the guarded fetch's address rules and allow list.
  const browserAgent = browserAgentTool({
    allow: parseAllowList([...(o.fetch?.allow ?? []), ...(env['AGENTRY_FETCH_ALLOW']?.split(',') ?? [])]),
    env,
    ...(o.fetch?.lookup !== undefined ? { lookup: o.fetch.lookup } : {}),
    ...(o.browser?.executablePath !== undefined ? { executablePath: o.browser.executablePath } : {}),
    ...(o.browser?.idleMs !== undefined ? { idleMs: o.browser.idleMs } : {}),
    ...(o.browser?.maxContexts !== undefined ? { maxContexts: o.browser.maxContexts } : {}),
  });
  // Its checks between calls go through the same guarded fetch; AGENTRY_MONITOR_MIN_INTERVAL_S is read from `env`.
  // `render: true` monitors read pages through the browser agent's pool (same address rules, a context per read).
  const monitor = monitorTool({
    fetch: (url, init) => fetch(url, init),
    render: async (url, init) => {
      const ready = browserAgent.readiness();
      if (!ready.ready) throw new Error(`render: true needs the browser: ${ready.detail}`);
      const { renderedFetch } = await import('./browser/rendered-fetch.js');
      return renderedFetch(browserAgent.pool)(url, init);
    },
    env,
  });
  const tools = [
    webSearchTool({ provider: search, missing: searchProviderSetupHint() }),
    readPageTool(),
    deepResearchTool({ missing: search ? null : searchProviderSetupHint() }),
    findAllTool({ missing: search ? null : searchProviderSetupHint() }),
    enrichTool({ missing: search ? null : searchProviderSetupHint() }),
    codeAgent,
    browserAgent,
    monitor,
    messagePersonTool({ messenger: messaging.messenger }),
  ];
  const names = tools.map((t) => t.name);
  for (const name of o.only ?? []) {
    if (!names.includes(name)) {
      throw new AgentryError(
        'invalid_request',
        `builtinTools.only: there is no built-in tool ${JSON.stringify(name)}; the built-in tools are ${names.join(', ')}`,
      );
    }
  }
  const offered = new Set(o.only ?? names);
  const statuses: ToolStatus[] = [
    {
      name: 'web_search',
      source: 'builtin',
      ready: search !== null,
      detail: search ? `provider ${search.name}` : `not configured: ${searchProviderSetupHint()}`,
      offered: offered.has('web_search'),
    },
    {
      name: 'read_page',
      source: 'builtin',
      ready: true,
      detail: 'guarded fetch (public addresses only unless AGENTRY_FETCH_ALLOW opens more)',
      offered: offered.has('read_page'),
    },
    {
      name: 'deep_research',
      source: 'builtin',
      ready: search !== null,
      detail: search
        ? `research children with web_search (${search.name}) and read_page`
        : `its research children need web_search: ${searchProviderSetupHint()}`,
      offered: offered.has('deep_research'),
    },
    {
      name: 'find_all',
      source: 'builtin',
      ready: search !== null,
      detail: search
        ? `candidate generators and one verifier per candidate, with web_search (${search.name}) and read_page`
        : `its research children need web_search: ${searchProviderSetupHint()}`,
      offered: offered.has('find_all'),
    },
    {
      name: 'enrich',
      source: 'builtin',
      ready: search !== null,
      detail: search
        ? `one research child per entity with web_search (${search.name}) and read_page`
        : `its research children need web_search: ${searchProviderSetupHint()}`,
      offered: offered.has('enrich'),
    },
    {
      name: CODE_AGENT_TOOL_NAME,
      source: 'builtin',
      // Read when asked: the sandbox's probe runs on the first call, and from then on its answer is shown.
      get ready() {
        return codeAgent.readiness().ready;
      },
      get detail() {
        return codeAgent.readiness().detail;
      },
      offered: offered.has(CODE_AGENT_TOOL_NAME),
    },
    {
      // The coding child's Grep is ripgrep: without it the child works, and its Grep calls fail.
      name: `${CODE_AGENT_TOOL_NAME}/Grep`,
      source: 'builtin',
      get ready() {
        return codeAgent.grepReadiness().ready;
      },
      get detail() {
        return `the coding child's Grep: ${codeAgent.grepReadiness().detail}`;
      },
      offered: offered.has(CODE_AGENT_TOOL_NAME),
    },
    {
      name: BROWSER_AGENT_TOOL_NAME,
      source: 'builtin',
      get ready() {
        return browserAgent.readiness().ready;
      },
      get detail() {
        return browserAgent.readiness().detail;
      },
      offered: offered.has(BROWSER_AGENT_TOOL_NAME),
    },
    {
      name: MONITOR_TOOL_NAME,
      source: 'builtin',
      ready: true,
      detail: `durable timers + guarded fetch, or the browser with render: true (checks at least ${monitor.minIntervalS} s apart)`,
      offered: offered.has(MONITOR_TOOL_NAME),
    },
    {
      name: MESSAGE_PERSON_TOOL_NAME,
      source: 'builtin',
      ready: messaging.ready,
      detail: messaging.detail,
      offered: offered.has(MESSAGE_PERSON_TOOL_NAME),
    },
  ];
  return {
    fetch,
    // The page reader cuts a long body itself and keeps what it read (`truncated: true`); the guard's own cap would
    // fail the whole read instead, so the reader's is the one that applies here.
    async readPage(url, { maxChars, signal }): Promise<PageContent> {
      // The reader (a DOM, Readability, turndown) loads on the first page read.
      const { readPage } = await import('./web/page-reader.js');
      return readPage((u, init) => fetch(u, { ...init, maxBytes: Number.MAX_SAFE_INTEGER }), url, {
        maxBytes: o.fetch?.maxBytes ?? PAGE_MAX_BYTES,
        ...(maxChars !== undefined ? { maxChars } : {}),
        ...(signal ? { signal } : {}),
      });
    },
    pageUrlKey: normaliseUrlForMatch,
    tools,
    offered,
    status: () => statuses,
    agentsDeleted: async (ids) => {
      await Promise.all([codeAgent.agentsDeleted(ids), browserAgent.agentsDeleted(ids)]);
    },
    async attach(services) {
      codeAgent.attach(services);
      browserAgent.attach(services);
      // Registers the check timers' handler before recovery and the timer loop start.
      monitor.attach(services);
      // Outbox entries a crash left queued become `unknown` (never re-sent) before recovery runs any agent.
      await messaging.messenger.attach(services);
    },
    async close() {
      await Promise.all([
        fetch.close(),
        searchFetch.close(),
        twilioFetch.close(),
        messaging.messenger.close(),
        browserAgent.close(),
      ]);
    },
  };
}
