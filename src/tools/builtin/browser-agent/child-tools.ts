/**
 * @module tools/builtin/browser-agent/child-tools
 * The browser child's tools, named and shaped after Playwright MCP's, which models already know. Each call:
 *
 * 1. finds the child's browser state — durable, under the child's own id (`browser-session`), so a resumed or
 *    recovered child goes on where it was — and its settings (allowed domains, start URL), which the spawning call
 *    wrote in its own durable state before spawning: the child reaches them through its spawn key, which comes from the
 *    runtime, not from the model;
 * 2. opens the child's context in the pool if it has none (after a pause, a crash or at the start) and reopens the last
 *    URL (cookies are not kept across a pause);
 * 3. does its action, checks where the page ended up (allowed domains; blocked requests are reported), takes the
 *    snapshot the answer carries, and records the step: its Playwright line for the replay script, the URL, and the
 *    loop detector's state. A loop ends the child at once with `termination_reason: "loop_detected"`.
 *
 * Answers carry `action`, `url` and `elapsed_ms`, so the child's transcript says what it did where, and billing can
 * meter browser time per action.
 */
import { AgentryError } from '../../../errors.js';
import { takeBlocked, type BrowserPool, type BrowserSession } from '../../../browser/browser-pool.js';
import { replayCode, replayLocator, type ReplayStep } from '../../../browser/replay.js';
import { pageDigest, refLocator, renderSnapshot, snapshotPage, type PageSnapshot } from '../../../browser/snapshot.js';
import type { PlatformServices } from '../../platform.js';
import { defineTool, ToolCompletion, type Tool, type ToolContext } from '../../define-tool.js';
import { z } from 'zod';
import { actionKey, emptyLoopState, observeAction, type LoopDetectorOptions, type LoopState } from './loop-detector.js';
import type { Locator, Page } from 'playwright-core';

/** The key of the child's browser state in its tool states (no tool call has this id). */
export const BROWSER_STATE_KEY = 'browser-session';
/** Time an action may take (a click, a navigation's load). */
const ACTION_TIMEOUT_MS = 15_000;
const NAVIGATION_TIMEOUT_MS = 30_000;
/**
 * Credits per second of browser time (0.12 a minute, about $0.0012): each action is metered by its own duration.
 * `prices.tools.<tool name>` overrides it per tool.
 */
export const BROWSER_SECOND_PRICE = 0.002;
/** The most an action can take (reopening, the action, leaving a disallowed page, the snapshot): what is reserved. */
const BROWSER_METER = { unit: 'browser_second', maxUnits: () => 120 };

/** What the spawning call keeps in its durable state before it spawns (read by the child's tools). */
export interface BrowserCallSettings {
  task: string;
  start_url?: string | undefined;
  allowed_domains?: string[] | undefined;
}

/** The child's durable browser state. */
export interface BrowserChildState {
  last_url: string | null;
  steps: ReplayStep[];
  /** The child's screenshot artifacts, oldest first. */
  screenshots: string[];
  loop: LoopState;
  actions: number;
  /** Set when the loop detector ended the child. */
  loop_reason?: string;
}

/** What the child's tools share: the pool, the runtime's services (storage) and the loop detector's settings. */
export interface BrowserChildDeps {
  pool: BrowserPool;
  services(): PlatformServices | undefined;
  loop?: LoopDetectorOptions;
  snapshotChars?: number;
}

interface Live {
  settings: BrowserCallSettings;
  state: BrowserChildState;
  session: BrowserSession;
  page: Page;
}

/** True when `host` is one of `domains` or under one of them. */
export function domainAllowed(host: string, domains: readonly string[] | undefined): boolean {
  if (!domains || domains.length === 0) return true;
  const h = host
    .toLowerCase()
    .replace(/\.$/, '')
    .replace(/^\[|\]$/g, '');
  return domains.some((d) => h === d || h.endsWith(`.${d}`));
}

function hostOf(url: string): string | undefined {
  try {
    const u = new URL(url);
    return u.protocol === 'http:' || u.protocol === 'https:' ? u.hostname : undefined;
  } catch {
    return undefined;
  }
}

/** Rejects with the pause or delete reason as soon as one comes: a closing context must not hold the call. */
function orStop<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(new AgentryError('invalid_state', 'The browser agent was stopped'));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new AgentryError('invalid_state', 'The browser agent was paused or stopped'));
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

/** Reads the settings the spawning call wrote, through the child's spawn key. */
async function settingsOf(services: PlatformServices, ctx: ToolContext, tool: string): Promise<BrowserCallSettings> {
  const row = await services.storage.getAgent(ctx.agent.agent_id);
  const key = row?.spawn_key;
  const callId = key ? key.split(/[#/]/)[0] : undefined;
  const text = row?.parent_id && callId ? await services.storage.getToolState(row.parent_id, callId) : null;
  const settings = text ? (JSON.parse(text) as { settings?: BrowserCallSettings }).settings : undefined;
  if (!settings) {
    throw new AgentryError(
      'invalid_request',
      `${tool} works only in a child of spawn_browser_agent (agent ${ctx.agent.agent_id} is not one)`,
    );
  }
  return settings;
}

export async function readChildState(services: PlatformServices, childId: string): Promise<BrowserChildState | null> {
  const text = await services.storage.getToolState(childId, BROWSER_STATE_KEY);
  return text ? (JSON.parse(text) as BrowserChildState) : null;
}

/** The browser child's tools (without submit_result, which the runtime adds). */
export function browserChildTools(deps: BrowserChildDeps): Tool[] {
  const servicesOrFail = (tool: string): PlatformServices => {
    const services = deps.services();
    if (!services) {
      throw new AgentryError(
        'not_configured',
        `${tool} needs the runtime's services: register spawn_browser_agent through builtinTools, not as a custom tool`,
      );
    }
    return services;
  };

  /** Opens (or finds) the child's browser, reopening the last URL or the start URL on a fresh context. */
  async function live(ctx: ToolContext, tool: string, stop: AbortSignal, navigating: boolean): Promise<Live> {
    const services = servicesOrFail(tool);
    const settings = await settingsOf(services, ctx, tool);
    const state = (await readChildState(services, ctx.agent.agent_id)) ?? {
      last_url: null,
      steps: [],
      screenshots: [],
      loop: emptyLoopState(),
      actions: 0,
    };
    const session = await deps.pool.open(ctx.agent.agent_id, stop);
    const { page } = session;
    if (page.url() === 'about:blank') {
      const reopen = state.last_url ?? (navigating ? undefined : settings.start_url);
      if (reopen) {
        await orStop(
          page.goto(reopen, { timeout: NAVIGATION_TIMEOUT_MS }).catch(() => undefined),
          stop,
        );
        if (state.last_url === null) state.steps.push({ code: replayCode.goto(reopen) });
        state.last_url = page.url();
      }
    }
    return { settings, state, session, page };
  }

  type Outcome = { code?: string; note?: string; extra?: Record<string, unknown> };

  /**
   * Runs one action with the bookkeeping every action shares; `act` does the browser work and says what replays it.
   */
  async function step(
    tool: string,
    input: Record<string, unknown>,
    ctx: ToolContext,
    act: (l: Live, stop: AbortSignal) => Promise<Outcome>,
    options: { navigating?: boolean; observing?: boolean } = {},
  ) {
    const started = performance.now();
    const stop = AbortSignal.any([ctx.signal, ctx.pauseSignal]);
    const l = await live(ctx, tool, stop, options.navigating ?? false);
    // Browser time is billed per second of the action itself (waiting for a free context is not).
    const billedFrom = performance.now();
    try {
      const services = servicesOrFail(tool);
      const before = l.state.loop.last_digest;
      takeBlocked(l.session);
      let outcome: Outcome;
      try {
        outcome = await orStop(act(l, stop), stop);
      } catch (error) {
        if (stop.aborted) throw error;
        // A failed action left the page as it was: the same one failing again and again is a loop too.
        const failed = observeAction(l.state.loop, actionKey(tool, input), before ?? '', before ?? '', deps.loop);
        l.state.loop = failed.state;
        l.state.actions++;
        await services.storage.putToolState(ctx.agent.agent_id, BROWSER_STATE_KEY, JSON.stringify(l.state));
        if (failed.loop) {
          return new ToolCompletion({
            summary: `Stopped: loop detected — ${failed.loop} (it failed each time).`,
            final_url: l.state.last_url ?? l.page.url(),
            data: null,
            termination_reason: 'loop_detected',
          });
        }
        // An action that failed still leaves the page somewhere: say where, with the blocked requests if any.
        const blocked = takeBlocked(l.session);
        const why = blocked.length > 0 ? ` Blocked: ${blocked.map((b) => `${b.url} (${b.reason})`).join('; ')}.` : '';
        throw new AgentryError(
          'invalid_request',
          `${tool} failed on ${l.page.url()}: ${(error as Error).message.split('\n')[0]}.${why}`,
        );
      }
      // Where the page ended up must be allowed: a link or a redirect may have left the allowed domains.
      const host = hostOf(l.page.url());
      let leftDomains: string | undefined;
      if (host !== undefined && !domainAllowed(host, l.settings.allowed_domains)) {
        leftDomains = l.page.url();
        await orStop(returnTo(l.page, l.state.last_url ?? 'about:blank'), stop);
      }
      const snap: PageSnapshot = await orStop(
        snapshotPage(l.page, {
          ...(deps.snapshotChars !== undefined ? { maxChars: deps.snapshotChars } : {}),
          previous: l.session.lastSnapshot,
        }),
        stop,
      );
      l.session.lastSnapshot = { url: snap.url, full: snap.full };
      const after = pageDigest(snap.url, snap.full);
      const blocked = takeBlocked(l.session);
      if (outcome.code && !leftDomains) l.state.steps.push({ code: outcome.code });
      l.state.last_url = snap.url === 'about:blank' ? l.state.last_url : snap.url;
      l.state.actions++;
      const observed = observeAction(l.state.loop, actionKey(tool, input), before ?? '', after, deps.loop);
      l.state.loop = observed.state;
      if (observed.loop) l.state.loop_reason = observed.loop;
      await services.storage.putToolState(ctx.agent.agent_id, BROWSER_STATE_KEY, JSON.stringify(l.state));
      const elapsed_ms = Math.round(performance.now() - started);
      if (observed.loop) {
        // Ends the child now: its result says why, and the parent reports termination_reason "loop_detected".
        return new ToolCompletion({
          summary: `Stopped: loop detected — ${observed.loop}.`,
          final_url: snap.url,
          data: null,
          termination_reason: 'loop_detected',
        });
      }
      if (leftDomains) {
        throw new AgentryError(
          'invalid_request',
          `Blocked: ${leftDomains} is outside the allowed domains (${(l.settings.allowed_domains ?? []).join(', ')}); ` +
            `the browser went back to ${snap.url}.`,
        );
      }
      return {
        action: tool,
        url: snap.url,
        elapsed_ms,
        ...(outcome.extra ?? {}),
        ...(blocked.length > 0
          ? { blocked_requests: blocked.slice(0, 10).map((b) => ({ url: b.url, reason: b.reason })) }
          : {}),
        ...(outcome.note ? { note: outcome.note } : {}),
        ...(options.observing && tool !== 'browser_snapshot' ? {} : { page: renderSnapshot(snap) }),
      };
    } finally {
      ctx.meter((performance.now() - billedFrom) / 1000);
    }
  }

  /** The element named by `ref` (preferred) or by visible text / label, and a locator that replays it. */
  async function target(
    l: Live,
    spec: { ref?: string | undefined; text?: string | undefined; label?: string | undefined },
  ): Promise<{ locator: Locator; code: string }> {
    const { page } = l;
    if (spec.ref) {
      const locator = refLocator(page, spec.ref);
      if ((await locator.count()) === 0) {
        throw new AgentryError(
          'invalid_request',
          `No element [ref=${spec.ref}] on the page: take a new browser_snapshot`,
        );
      }
      // The refs the model used are those of the snapshot it was shown.
      const full =
        l.session.lastSnapshot?.full ?? (await page.ariaSnapshot({ mode: 'ai', timeout: ACTION_TIMEOUT_MS }));
      return { locator, code: await replayLocator(page, full, spec.ref, locator) };
    }
    if (spec.text !== undefined) {
      const t = JSON.stringify(spec.text);
      const locator = page
        .getByRole('button', { name: spec.text })
        .or(page.getByRole('link', { name: spec.text }))
        .or(page.getByText(spec.text))
        .first();
      return {
        locator,
        code: `page.getByRole('button', { name: ${t} }).or(page.getByRole('link', { name: ${t} })).or(page.getByText(${t})).first()`,
      };
    }
    if (spec.label !== undefined) {
      const t = JSON.stringify(spec.label);
      const locator = page.getByLabel(spec.label).or(page.getByPlaceholder(spec.label)).first();
      return { locator, code: `page.getByLabel(${t}).or(page.getByPlaceholder(${t})).first()` };
    }
    throw new AgentryError(
      'invalid_request',
      'Name the element: give `ref` from the latest snapshot, or its text/label',
    );
  }

  /** Navigates to `url`, again if a late commit (an error page) interrupts it; never throws. */
  async function returnTo(page: Page, url: string): Promise<void> {
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        await page.goto(url, { timeout: NAVIGATION_TIMEOUT_MS });
        return;
      } catch (error) {
        if (!/interrupted by another navigation/.test((error as Error).message)) return;
      }
    }
  }

  const settle = (page: Page) => page.waitForLoadState('load', { timeout: ACTION_TIMEOUT_MS }).catch(() => undefined);

  const ref = z
    .string()
    .regex(/^[a-z0-9]{1,20}$/i, 'a ref like e12 from the latest snapshot')
    .optional();

  const navigate = defineTool({
    name: 'browser_navigate',
    price: BROWSER_SECOND_PRICE,
    meter: BROWSER_METER,
    description: 'Navigate to a URL (http or https).',
    input: z.object({ url: z.string().min(1).max(8_000).describe('The URL to open') }),
    idempotent: true,
    describe: ({ url }) => `Opening ${url}`,
    run: (input, ctx) =>
      step(
        'browser_navigate',
        input,
        ctx,
        async (l) => {
          const host = hostOf(input.url);
          if (host === undefined) {
            throw new AgentryError('invalid_request', `Only http and https URLs can be opened, not ${input.url}`);
          }
          if (!domainAllowed(host, l.settings.allowed_domains)) {
            throw new AgentryError(
              'invalid_request',
              `Blocked: ${host} is outside the allowed domains (${(l.settings.allowed_domains ?? []).join(', ')})`,
            );
          }
          try {
            await l.page.goto(input.url, { timeout: NAVIGATION_TIMEOUT_MS });
          } catch (error) {
            const blocked = takeBlocked(l.session);
            // Chromium commits its error page after goto() has failed, and that late commit would interrupt the
            // child's next navigation: go back to where the child was, so the page is where the model thinks.
            await l.page
              .waitForURL((u) => u.protocol === 'chrome-error:', { waitUntil: 'commit', timeout: 3_000 })
              .catch(() => undefined);
            await returnTo(l.page, l.state.last_url ?? 'about:blank');
            if (blocked.length > 0) {
              throw new AgentryError(
                'invalid_request',
                `Blocked: the navigation to ${input.url} was refused — ${blocked
                  .map((b) => `${b.url}: ${b.reason}`)
                  .join('; ')}`,
              );
            }
            throw error;
          }
          return { code: replayCode.goto(input.url) };
        },
        { navigating: true },
      ),
  });

  const snapshot = defineTool({
    name: 'browser_snapshot',
    price: BROWSER_SECOND_PRICE,
    meter: BROWSER_METER,
    description:
      'The current page as an accessibility tree: every element you can act on has a [ref=eN] to use with the ' +
      'other tools. Large pages are shortened (main region, or what changed since your last snapshot).',
    input: z.object({}),
    idempotent: true,
    describe: () => 'Reading the page',
    run: (input, ctx) => step('browser_snapshot', input, ctx, async () => ({}), { observing: true }),
  });

  const click = defineTool({
    name: 'browser_click',
    price: BROWSER_SECOND_PRICE,
    meter: BROWSER_METER,
    description: 'Click an element: `ref` from the latest snapshot, or its visible `text`.',
    input: z.object({ ref, text: z.string().min(1).max(500).optional() }),
    idempotent: false,
    describe: ({ ref: r, text }) => `Clicking ${r ?? text ?? ''}`,
    run: (input, ctx) =>
      step('browser_click', input, ctx, async (l) => {
        const t = await target(l, input);
        await t.locator.click({ timeout: ACTION_TIMEOUT_MS });
        await settle(l.page);
        return { code: replayCode.click(t.code) };
      }),
  });

  const type = defineTool({
    name: 'browser_type',
    price: BROWSER_SECOND_PRICE,
    meter: BROWSER_METER,
    description:
      "Type text into a field (replacing its content): `ref` from the latest snapshot, or the field's `label`. " +
      'With `submit: true`, press Enter afterwards.',
    input: z.object({
      ref,
      label: z.string().min(1).max(500).optional(),
      text: z.string().max(10_000),
      submit: z.boolean().optional(),
    }),
    idempotent: false,
    // Not the text itself: it may be a password, and the status message is public.
    describe: ({ ref: r, label }) => `Typing into ${r ?? label ?? 'a field'}`,
    run: (input, ctx) =>
      step('browser_type', input, ctx, async (l) => {
        const t = await target(l, input);
        await t.locator.fill(input.text, { timeout: ACTION_TIMEOUT_MS });
        let code = replayCode.fill(t.code, input.text);
        if (input.submit) {
          await t.locator.press('Enter', { timeout: ACTION_TIMEOUT_MS });
          await settle(l.page);
          code += `\n  ${replayCode.submit(t.code)}`;
        }
        return { code };
      }),
  });

  const select = defineTool({
    name: 'browser_select_option',
    price: BROWSER_SECOND_PRICE,
    meter: BROWSER_METER,
    description:
      'Choose options in a select box: `ref` from the latest snapshot, or its `label`; `values` by value or text.',
    input: z.object({
      ref,
      label: z.string().min(1).max(500).optional(),
      values: z.array(z.string()).min(1).max(50),
    }),
    idempotent: true,
    describe: ({ values }) => `Selecting ${values.join(', ')}`,
    run: (input, ctx) =>
      step('browser_select_option', input, ctx, async (l) => {
        const t = await target(l, input);
        await t.locator.selectOption(input.values, { timeout: ACTION_TIMEOUT_MS });
        return { code: replayCode.select(t.code, input.values) };
      }),
  });

  const press = defineTool({
    name: 'browser_press_key',
    price: BROWSER_SECOND_PRICE,
    meter: BROWSER_METER,
    description: 'Press a key on the focused element, e.g. `Enter`, `ArrowDown`, `Escape`, `Control+a`.',
    input: z.object({ key: z.string().min(1).max(50) }),
    idempotent: false,
    describe: ({ key }) => `Pressing ${key}`,
    run: (input, ctx) =>
      step('browser_press_key', input, ctx, async (l) => {
        await l.page.keyboard.press(input.key);
        await settle(l.page);
        return { code: replayCode.press(input.key) };
      }),
  });

  const back = defineTool({
    name: 'browser_navigate_back',
    price: BROWSER_SECOND_PRICE,
    meter: BROWSER_METER,
    description: 'Go back to the previous page.',
    input: z.object({}),
    idempotent: false,
    describe: () => 'Going back',
    run: (input, ctx) =>
      step('browser_navigate_back', input, ctx, async (l) => {
        await l.page.goBack({ timeout: NAVIGATION_TIMEOUT_MS });
        return { code: replayCode.back() };
      }),
  });

  const waitFor = defineTool({
    name: 'browser_wait_for',
    price: BROWSER_SECOND_PRICE,
    meter: BROWSER_METER,
    description: 'Wait until `text` appears on the page, or for `time_s` seconds (at most 30).',
    input: z.object({
      text: z.string().min(1).max(500).optional(),
      time_s: z.number().min(0).max(30).optional(),
    }),
    idempotent: true,
    describe: ({ text }) => (text ? `Waiting for ${JSON.stringify(text)}` : 'Waiting'),
    run: (input, ctx) =>
      step('browser_wait_for', input, ctx, async (l) => {
        if (input.text !== undefined) {
          await l.page
            .getByText(input.text)
            .first()
            .waitFor({ timeout: (input.time_s ?? ACTION_TIMEOUT_MS / 1000) * 1000 });
          return { code: replayCode.waitText(input.text) };
        }
        await l.page.waitForTimeout((input.time_s ?? 1) * 1000);
        return { code: replayCode.waitTime(input.time_s ?? 1) };
      }),
  });

  const screenshot = defineTool({
    name: 'browser_take_screenshot',
    price: BROWSER_SECOND_PRICE,
    meter: BROWSER_METER,
    description: 'Take a PNG screenshot of the visible page; it is kept for the caller (you get its artifact id).',
    input: z.object({}),
    idempotent: false,
    describe: () => 'Taking a screenshot',
    run: (input, ctx) =>
      step(
        'browser_take_screenshot',
        input,
        ctx,
        async (l) => {
          const png = await l.page.screenshot({ type: 'png', timeout: ACTION_TIMEOUT_MS });
          const kept = await ctx.artifacts.put({
            name: `screenshot-${l.state.screenshots.length + 1}.png`,
            mime_type: 'image/png',
            data: png,
          });
          l.state.screenshots.push(kept.artifact_id);
          return { extra: { artifact_id: kept.artifact_id, bytes: kept.size } };
        },
        { observing: true },
      ),
  });

  return [navigate, snapshot, click, type, select, press, back, waitFor, screenshot] as Tool[];
}
