/**
 * spawn_browser_agent under the scripted model in real headless Chromium against a local shop: a browser
 * child fills a search form, submits it, opens a result and returns a code that only the detail
 * page's script writes in; its screenshot decodes as a PNG; its replay script, run with node, reaches the same page;
 * a child that clicks a dead button ends as `loop_detected`; pause and delete close the child's context within 2 s
 * while its model is thinking, and a resumed child reopens its last URL; 20 browser agents through 4 contexts leave no
 * Chromium process behind.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { PNG } from 'pngjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentRuntime, ModelRequest, ToolResultBlock } from 'agentry-runtime';
import type { ScriptedTurn } from 'agentry-runtime/testing';
import type { BrowserPool } from '../../src/browser/browser-pool.js';
import { BROWSER_AGENT_TOOL_NAME, type BrowserAgentTool } from '../../src/tools/builtin/browser-agent/index.js';
import { BROWSER_INSTRUCTIONS } from '../../src/tools/builtin/browser-agent/prompts.js';
import { eventually, openTestRuntime, type TestRuntime } from '../support/runtime.js';
import {
  browserMarkers,
  browserProcesses,
  browserSkipReason,
  chromium,
  runBrowser,
  startSite,
  type Site,
} from './support.js';
import { skippable } from '../support/skip.js';

const root = join(import.meta.dirname, '..', '..');
const isBrowserChild = (req: ModelRequest) => req.system === BROWSER_INSTRUCTIONS;
const lastResult = (req: ModelRequest): ToolResultBlock | undefined =>
  (req.messages.at(-1)!.content as ToolResultBlock[]).find((b) => b.type === 'tool_result');
const lastJson = (req: ModelRequest) => JSON.parse(lastResult(req)!.content) as Record<string, unknown>;
/** The ref of `- <role> "<name>" [ref=eN]` in the page the last tool result showed. */
const refOf = (req: ModelRequest, role: string, name: string): string => {
  const page = String(lastJson(req).page);
  const m = new RegExp(`- ${role} "${name}"[^\\n]*\\[ref=([a-z0-9]+)\\]`).exec(page);
  if (!m) throw new Error(`no ${role} "${name}" in:\n${page}`);
  return m[1]!;
};

type ChildTurn = (req: ModelRequest) => ScriptedTurn;

/** The lead calls spawn_browser_agent with `input`; the child plays `child`; the lead's last turn is kept in `seen`. */
function script(input: Record<string, unknown>, child: ChildTurn[], seen: { result?: ToolResultBlock }) {
  return (req: ModelRequest, { turnIndex }: { turnIndex: number }): ScriptedTurn => {
    if (isBrowserChild(req)) return child[Math.min(turnIndex, child.length - 1)]!(req);
    if (turnIndex === 0) return { toolCalls: [{ name: BROWSER_AGENT_TOOL_NAME, input }] };
    seen.result = lastResult(req);
    return { text: 'Done.' };
  };
}

function poolOf(runtime: AgentRuntime): BrowserPool {
  // The pool is the runtime's own (one browser per runtime); tests reach it through the platform's tool list.
  const platform = (runtime as unknown as { platform: { tools: Array<{ name: string }> } }).platform;
  return (platform.tools.find((t) => t.name === BROWSER_AGENT_TOOL_NAME) as BrowserAgentTool).pool;
}

async function open(script: Parameters<typeof openTestRuntime>[0], maxContexts = 4): Promise<TestRuntime> {
  return openTestRuntime(script, {
    builtinTools: {
      only: [BROWSER_AGENT_TOOL_NAME],
      fetch: {
        allow: ['127.0.0.1/32'],
        lookup: async (host: string) => [{ address: host === 'shop.test' ? '127.0.0.1' : '127.0.0.3', family: 4 }],
      },
      browser: { ...(chromium.found ? { executablePath: chromium.path } : {}), maxContexts, idleMs: 60_000 },
    },
    defaultAccount: { id: 'local', credits: 10_000 },
  });
}

function runNode(script: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--input-type=module'], {
      cwd: root,
      env: { PATH: process.env.PATH, ...(chromium.found ? { AGENTRY_CHROMIUM_PATH: chromium.path } : {}) },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d));
    child.stderr.on('data', (d: Buffer) => (stderr += d));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(script);
  });
}

describe.skipIf(!runBrowser)(skippable('spawn_browser_agent in headless Chromium', browserSkipReason), () => {
  let site: Site;
  beforeAll(async () => {
    site = await startSite();
  });
  afterAll(async () => {
    await site?.close();
  });

  it('searches, opens a result, returns what the page script rendered, with a PNG screenshot and a replay that works', async () => {
    const seen: { result?: ToolResultBlock } = {};
    const childSaw: Array<Record<string, unknown>> = [];
    const see =
      (turn: ChildTurn): ChildTurn =>
      (req) => {
        if (lastResult(req)) childSaw.push(lastJson(req));
        return turn(req);
      };
    let code = '';
    const child: ChildTurn[] = [
      () => ({ toolCalls: [{ name: 'browser_snapshot', input: {} }] }),
      (req) => ({
        toolCalls: [
          { name: 'browser_select_option', input: { ref: refOf(req, 'combobox', 'Sort'), values: ['price'] } },
        ],
      }),
      (req) => ({
        toolCalls: [
          { name: 'browser_type', input: { ref: refOf(req, 'textbox', 'Search'), text: 'kettle', submit: true } },
        ],
      }),
      (req) => ({ toolCalls: [{ name: 'browser_click', input: { ref: refOf(req, 'link', 'Brass kettle') } }] }),
      () => ({ toolCalls: [{ name: 'browser_wait_for', input: { text: 'Product code' } }] }),
      (req) => {
        code = /Product code: ([A-Z]{2}-\d{4})/.exec(String(lastJson(req).page))?.[1] ?? 'not found';
        return { toolCalls: [{ name: 'browser_take_screenshot', input: {} }] };
      },
      (req) => ({
        toolCalls: [
          {
            name: 'submit_result',
            input: {
              summary: `The Brass kettle's product code is ${code}.`,
              final_url: String(lastJson(req).url),
              data: { code },
            },
          },
        ],
      }),
    ];
    const t = await open(
      script({ task: 'Find the product code of the brass kettle', start_url: `${site.base}/` }, child.map(see), seen),
    );
    const { agent_id } = await t.runtime.create({ goal: 'Get the kettle code' });
    const agent = await t.runtime.waitFor(agent_id, { signal: AbortSignal.timeout(60_000) });
    expect(agent.status).toBe('COMPLETED');
    expect(seen.result?.is_error).toBeFalsy();
    const out = JSON.parse(seen.result!.content) as {
      summary: string;
      final_url: string;
      data: { code: string };
      screenshots: string[];
      replay_artifact_id: string;
      termination_reason: string;
    };
    expect(out).toMatchObject({
      summary: "The Brass kettle's product code is ZX-4417.",
      final_url: `${site.base}/item/42`,
      data: { code: 'ZX-4417' },
      termination_reason: 'completed',
    });
    // Each step's action and URL are in the child's transcript.
    expect(childSaw.map((r) => [r.action, r.url])).toEqual([
      ['browser_snapshot', `${site.base}/`],
      ['browser_select_option', `${site.base}/`],
      ['browser_type', `${site.base}/search?q=kettle&sort=price`],
      ['browser_click', `${site.base}/item/42`],
      ['browser_wait_for', `${site.base}/item/42`],
      ['browser_take_screenshot', `${site.base}/item/42`],
    ]);
    expect(childSaw.every((r) => typeof r.elapsed_ms === 'number')).toBe(true);

    // The screenshot is the caller's artifact and a valid PNG of the viewport.
    expect(out.screenshots).toHaveLength(1);
    const shot = await t.storage.getArtifact(agent_id, out.screenshots[0]!);
    expect(shot?.row.mime_type).toBe('image/png');
    const png = PNG.sync.read(Buffer.from(shot!.data));
    expect([png.width, png.height]).toEqual([1280, 800]);

    // The replay script re-runs the flow with plain playwright-core and reaches the same page.
    const replay = await t.storage.getArtifact(agent_id, out.replay_artifact_id);
    const text = Buffer.from(replay!.data).toString('utf8');
    expect(text).toContain(`await page.goto("${site.base}/");`);
    expect(text).toContain('page.getByRole("link", { name: "Brass kettle", exact: true })');
    const ran = await runNode(text);
    expect(ran.stderr).toBe('');
    expect(JSON.parse(ran.stdout.trim())).toMatchObject({ final_url: `${site.base}/item/42` });

    // Browser time is billed per action (metered in seconds), beside the model's use.
    const browserRows = (await t.storage.listLedger('local')).filter((r) => r.item?.startsWith('browser_'));
    expect(browserRows.length).toBeGreaterThanOrEqual(6);
    expect(browserRows.every((r) => r.amount < 0 && r.kind === 'tool')).toBe(true);

    const markers = browserMarkers(poolOf(t.runtime).home!);
    expect(markers.profileDirs).toHaveLength(1);
    expect(browserProcesses(markers).length).toBeGreaterThan(1);
    await t.runtime.close();
    expect(browserProcesses(markers)).toEqual([]);
  });

  it('ends a child that clicks a dead button on an unchanged page as loop_detected', async () => {
    const seen: { result?: ToolResultBlock } = {};
    const child: ChildTurn[] = [
      () => ({ toolCalls: [{ name: 'browser_navigate', input: { url: `${site.base}/stuck` } }] }),
      () => ({ toolCalls: [{ name: 'browser_click', input: { text: 'Next' } }] }),
    ];
    const t = await open(script({ task: 'Get past the stuck page' }, child, seen));
    const { agent_id } = await t.runtime.create({ goal: 'Try the stuck page' });
    const agent = await t.runtime.waitFor(agent_id, { signal: AbortSignal.timeout(60_000) });
    expect(agent.status).toBe('COMPLETED');
    const out = JSON.parse(seen.result!.content) as Record<string, unknown>;
    expect(out).toMatchObject({
      termination_reason: 'loop_detected',
      final_url: `${site.base}/stuck`,
      summary: expect.stringContaining('the same action (browser_click'),
    });
    expect(Object.keys(out).sort()).toEqual(['data', 'final_url', 'screenshots', 'summary', 'termination_reason']);
    expect(out.replay_artifact_id).toBeUndefined();
    await t.runtime.close();
  });

  it('honours max_steps: a child that has not submitted by then ends as max_steps', async () => {
    const seen: { result?: ToolResultBlock } = {};
    const child: ChildTurn[] = [
      () => ({ toolCalls: [{ name: 'browser_navigate', input: { url: `${site.base}/` } }] }),
      () => ({ toolCalls: [{ name: 'browser_navigate', input: { url: `${site.base}/search?q=lamp` } }] }),
      () => ({ toolCalls: [{ name: 'browser_navigate', input: { url: `${site.base}/item/41` } }] }),
    ];
    const t = await open(script({ task: 'Wander', max_steps: 2 }, child, seen));
    const { agent_id } = await t.runtime.create({ goal: 'Wander' });
    await t.runtime.waitFor(agent_id, { signal: AbortSignal.timeout(60_000) });
    const out = JSON.parse(seen.result!.content) as { termination_reason: string; final_url: string };
    expect(out.termination_reason).toBe('max_steps');
    // Two model turns at most: the third page is never reached.
    expect(out.final_url).not.toContain('/item/');
    await t.runtime.close();
  });

  it('blocks a navigation outside allowed_domains and to a private host, and tells the child why', async () => {
    const seen: { result?: ToolResultBlock } = {};
    const errors: string[] = [];
    const child: ChildTurn[] = [
      () => ({
        toolCalls: [{ name: 'browser_navigate', input: { url: `http://localhost:${new URL(site.base).port}/` } }],
      }),
      (req) => {
        errors.push(lastResult(req)!.content);
        return { toolCalls: [{ name: 'browser_navigate', input: { url: `${site.other}/secret` } }] };
      },
      (req) => {
        errors.push(lastResult(req)!.content);
        return { toolCalls: [{ name: 'browser_navigate', input: { url: `${site.base}/` } }] };
      },
      // a redirect from an allowed page to an allowed address under a name outside allowed_domains
      () => ({ toolCalls: [{ name: 'browser_navigate', input: { url: `${site.base}/to-shop-name` } }] }),
      (req) => {
        errors.push(lastResult(req)!.content);
        return { toolCalls: [{ name: 'browser_snapshot', input: {} }] };
      },
      (req) => {
        errors.push(String(lastJson(req).url));
        return { toolCalls: [{ name: 'submit_result', input: { summary: 'blocked', final_url: '', data: null } }] };
      },
    ];
    const t = await open(script({ task: 'Try to leave', allowed_domains: ['127.0.0.1', '127.0.0.2'] }, child, seen));
    const { agent_id } = await t.runtime.create({ goal: 'Leave' });
    await t.runtime.waitFor(agent_id, { signal: AbortSignal.timeout(60_000) });
    expect(errors[0]).toMatch(/Blocked: localhost is outside the allowed domains \(127\.0\.0\.1, 127\.0\.0\.2\)/);
    expect(errors[1]).toMatch(/Blocked: the navigation to .*127\.0\.0\.2.* was refused — .*a loopback address/);
    expect(errors[2]).toMatch(
      /Blocked: http:\/\/shop\.test:\d+\/ is outside the allowed domains .* went back to http:\/\/127\.0\.0\.1:\d+\/\.$/,
    );
    expect(errors[3]).toBe(`${site.base}/`);
    expect(site.otherHits).toEqual([]);
    await t.runtime.close();
  });

  for (const how of ['pause', 'delete'] as const) {
    it(`${how} closes the child's context within 2 s while its model is thinking`, async () => {
      const seen: { result?: ToolResultBlock } = {};
      let resumedSaw: Record<string, unknown> | undefined;
      let thinking = 0;
      const child: ChildTurn[] = [
        () => ({ toolCalls: [{ name: 'browser_navigate', input: { url: `${site.base}/search?q=lamp` } }] }),
        () => {
          thinking++;
          // The first time: think for a minute (aborted by the pause). After the resume: look at the page.
          return thinking === 1
            ? { delayMs: 60_000, toolCalls: [{ name: 'browser_snapshot', input: {} }] }
            : { toolCalls: [{ name: 'browser_snapshot', input: {} }] };
        },
        (req) => {
          resumedSaw = lastJson(req);
          return {
            toolCalls: [
              { name: 'submit_result', input: { summary: 'ok', final_url: String(resumedSaw.url), data: null } },
            ],
          };
        },
      ];
      const t = await open(script({ task: 'Look at lamps' }, child, seen));
      const pool = poolOf(t.runtime);
      const { agent_id } = await t.runtime.create({ goal: 'Lamps' });
      await eventually(() => thinking === 1, 30_000, 'the child to start thinking');
      const [childId] = pool.keys();
      const session = await pool.current(childId!);
      expect(session).toBeDefined();
      const closed = new Promise<number>((resolve) => session!.context.once('close', () => resolve(performance.now())));
      const start = performance.now();
      if (how === 'pause') await t.runtime.pause(agent_id);
      else await t.runtime.delete(agent_id);
      const ms = (await closed) - start;
      if (process.env.BR_TIMES) console.log(`${how}: context closed after ${Math.round(ms)} ms`);
      expect(ms).toBeLessThan(2_000);
      expect(pool.has(childId!)).toBe(false);
      if (how === 'pause') {
        // Resumed, the child gets a fresh context on its last URL (cookies are not kept).
        await t.runtime.resume(agent_id);
        const agent = await t.runtime.waitFor(agent_id, { signal: AbortSignal.timeout(60_000) });
        expect(agent.status).toBe('COMPLETED');
        expect(resumedSaw).toMatchObject({ action: 'browser_snapshot', url: `${site.base}/search?q=lamp` });
        expect(String(resumedSaw!.page)).toContain('Brass lamp');
      }
      const markers = browserMarkers(pool.home!);
      await t.runtime.close();
      expect(browserProcesses(markers)).toEqual([]);
    });
  }

  it('runs 20 browser agents through 4 contexts and leaves no Chromium process behind', async () => {
    const child: ChildTurn[] = [
      () => ({ toolCalls: [{ name: 'browser_navigate', input: { url: `${site.base}/item/41` } }] }),
      () => ({ toolCalls: [{ name: 'browser_wait_for', input: { text: 'BL-1093' } }] }),
      (req) => ({
        toolCalls: [
          { name: 'submit_result', input: { summary: 'ok', final_url: String(lastJson(req).url), data: { n: 1 } } },
        ],
      }),
    ];
    const results: string[] = [];
    const t = await open((req, ctx) => {
      if (isBrowserChild(req)) return child[Math.min(ctx.turnIndex, 2)]!(req);
      if (ctx.turnIndex === 0)
        return { toolCalls: [{ name: BROWSER_AGENT_TOOL_NAME, input: { task: 'Read item 41' } }] };
      results.push(JSON.parse(lastResult(req)!.content).termination_reason as string);
      return { text: 'Done.' };
    });
    const pool = poolOf(t.runtime);
    const ids = await Promise.all(Array.from({ length: 20 }, (_, i) => t.runtime.create({ goal: `Item ${i}` })));
    const agents = await Promise.all(
      ids.map((a) => t.runtime.waitFor(a.agent_id, { signal: AbortSignal.timeout(120_000) })),
    );
    expect(agents.map((a) => a.status)).toEqual(Array(20).fill('COMPLETED'));
    expect(results).toEqual(Array(20).fill('completed'));
    expect(pool.stats.contextsOpened).toBe(20);
    expect(pool.stats.peakContexts).toBe(4);
    expect(pool.stats.launches).toBe(1);
    // The browser is still up (idle, no context): its processes, found by its HOME and its profile directory.
    const markers = browserMarkers(pool.home!);
    const during = browserProcesses(markers);
    if (process.env.BR_TIMES) console.log(`chromium processes before close: ${during.length}`);
    expect(during.length).toBeGreaterThan(1);
    await t.runtime.close();
    expect(browserProcesses(markers)).toEqual([]);
  }, 180_000);
});
