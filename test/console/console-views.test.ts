/**
 * What the console shows of a run, in Chromium: a running tree's totals and live counts against the API's, the
 * agent's timeline, a phone-sized screen, and an accessibility check (axe-core) of every page. Skipped without
 * Chromium (failed under AGENTRY_CI_STRICT=1), like the other browser suites.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHROMIUM_FLAGS } from '../../src/browser/browser-pool.js';
import { chromium, runBrowser } from '../browser/support.js';
import { eventually, insertTree, openConsoleBed, type Account, type ConsoleBed } from './support.js';

type Counts = Partial<Record<string, number>>;

/** axe-core's browser build, added to pages by the tests only (the console's CSP would refuse it: contexts bypass it). */
const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

interface AxeViolation {
  id: string;
  impact: string | null;
  help: string;
  nodes: Array<{ target: unknown[] }>;
}

describe.runIf(runBrowser)('what the console shows of a run', () => {
  let bed: ConsoleBed;
  let browser: Browser;

  beforeAll(async () => {
    if (!chromium.found) throw new Error(chromium.reason);
    const { chromium: playwright } = await import('playwright-core');
    browser = await playwright.launch({ executablePath: chromium.path, headless: true, args: CHROMIUM_FLAGS });
    bed = await openConsoleBed();
  });
  afterAll(async () => {
    await browser?.close();
    await bed?.close();
  });

  async function signedIn(account: Account, options: Parameters<Browser['newContext']>[0] = {}) {
    const context = await browser.newContext({ baseURL: bed.origin, ...options });
    const page = await context.newPage();
    await page.goto('/console/sign-in');
    await page.getByLabel('API key', { exact: true }).fill(account.key);
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.getByRole('heading', { name: 'Agents', level: 1 }).waitFor();
    return { context, page };
  }

  /** The children's counts by status as the page shows them (null before it shows any). */
  const pageCounts = (page: Page): Promise<Counts | null> =>
    page.evaluate(() => {
      const spans = Array.from(document.querySelectorAll<HTMLElement>('.counts [data-status]'));
      if (spans.length === 0) return null;
      return Object.fromEntries(
        spans.map((s) => [s.dataset.status!, Number(s.querySelector('.n')!.textContent!.replace(/,/g, ''))]),
      );
    });

  it(
    'a 220-child tree: the counts are never more than 2 s behind the API, also while the parent sends no event; ' +
      'tree credits match the ledger within 1 %',
    { timeout: 180_000 },
    async () => {
      const { account, apiKey } = await bed.runtime.accounts.create({ name: 'fan-out', credits: 1_000 });
      const owner = { id: account.account_id, key: apiKey!.key };
      const { context, page } = await signedIn(owner);
      const tag = `fan-${randomUUID().slice(0, 8)}`;
      const parent = await bed.runtime.create({
        goal: `Check 220 items [fanout-gate 220 ${tag}]`,
        accountId: owner.id,
      });
      // When the parent told its event stream anything that could refresh a page (a status or a progress): a page
      // that counted only on those would show the counts of the last one.
      const parentSaid: number[] = [];
      const heard = ({ agent }: { agent: { agent_id: string } }) => {
        if (agent.agent_id === parent.agent_id) parentSaid.push(Date.now());
      };
      const unsubscribe = [bed.runtime.on('agent.status', heard), bed.runtime.on('agent.progress', heard)];
      await page.goto(`/console/agents/${parent.agent_id}`);

      // The run moves at the test's pace. Its 220 children get 128 run slots and 64 model calls at once (the
      // defaults), so 92 wait STARTING_UP; each child's model call waits for its gate. First ten children whose call is
      // in flight finish one by one, 800 ms apart, each letting a waiting child start: STARTING_UP falls and COMPLETED
      // rises for 8 s while the parent, which counts its children again only every 1 in 20 of them that finish, says
      // nothing. (A page that reads the counts again a second after each of the parent's events, and once more for
      // events that came meanwhile, catches up for about 3 s after the parent's last; 8 s outlasts that.) Then every
      // gate opens.
      const gates = Array.from({ length: 220 }, (_, i) => `[gate ${tag}-${i + 1}]`);
      const released = new Set<string>();
      const paced = (async () => {
        await eventually(
          () => bed.waitingGates().filter((g) => g.startsWith(`[gate ${tag}-`)).length >= 10,
          'ten children calling the model',
          30_000,
        );
        for (let n = 0; n < 10; n++) {
          const next = bed.waitingGates().find((g) => g.startsWith(`[gate ${tag}-`) && !released.has(g));
          if (next !== undefined) {
            released.add(next);
            bed.release(next);
          }
          await new Promise((r) => setTimeout(r, 800)); // the model's pace, as `[child]`'s delayMs is
        }
        for (const g of gates) bed.release(g);
      })();

      // The API's counts, sampled between the page's: [time the request was sent, time it answered, counts].
      const api: Array<{ sent: number; answered: number; counts: Counts }> = [];
      // Read through the runtime, which is what the API answers: the HTTP API's per-account rate limit (shared with the
      // page's own calls) would refuse a loop this tight.
      const sampleApi = async () => {
        const sent = Date.now();
        const { agent } = await bed.runtime.get(parent.agent_id, { accountId: owner.id });
        api.push({ sent, answered: Date.now(), counts: agent.sub_agents?.by_status ?? {} });
        return agent.status;
      };
      const shown: Array<{ at: number; counts: Counts }> = [];
      for (let status = await sampleApi(); status !== 'COMPLETED'; status = await sampleApi()) {
        const counts = await pageCounts(page);
        if (counts !== null) shown.push({ at: Date.now(), counts });
        if (Date.now() - api[0]!.sent > 120_000) throw new Error('the tree did not finish in 2 minutes');
      }
      await paced;
      for (const off of unsubscribe) off();
      await context.close().catch(() => {});

      // The run had a stretch of at least 6 s in which the parent said nothing while eight or more of its children
      // finished: a page that refreshed its counts on the parent's events would have fallen more than 2 s behind.
      const marks = [api[0]!.sent, ...parentSaid.filter((t) => t > api[0]!.sent), api[api.length - 1]!.answered];
      const quiet = marks.slice(1).map((end, i) => {
        const done = api.filter((s) => s.sent >= marks[i]! && s.answered <= end).map((s) => s.counts.COMPLETED ?? 0);
        return { ms: end - marks[i]!, finished: done.length === 0 ? 0 : Math.max(...done) - Math.min(...done) };
      });
      expect(
        quiet.filter((q) => q.ms >= 6_000 && q.finished >= 8),
        JSON.stringify(quiet),
      ).not.toEqual([]);

      // Each count the page showed was the API's at some moment of the 2 s before: between the least and the most
      // the API said over that window. STARTING_UP only falls and COMPLETED only rises once the children exist, so the
      // window's bounds bracket every value the server held in it.
      expect(shown.length).toBeGreaterThan(5);
      const stale: string[] = [];
      for (const { at, counts } of shown) {
        const window = api.filter((s) => s.answered >= at - 2_000 && s.sent <= at);
        for (const status of ['STARTING_UP', 'COMPLETED']) {
          const seen = window.map((s) => s.counts[status] ?? 0);
          const n = counts[status] ?? 0;
          if (seen.length > 0 && (n < Math.min(...seen) || n > Math.max(...seen))) {
            stale.push(
              `${status} ${n} at +${at - shown[0]!.at} ms, API said ${Math.min(...seen)}–${Math.max(...seen)}`,
            );
          }
        }
      }
      expect(stale).toEqual([]);
      // The moving part of the run was seen, not only its end.
      expect(shown.some(({ counts }) => (counts.COMPLETED ?? 0) < 220)).toBe(true);

      // Tree credits against the ledger of the account (it has only this tree).
      const ledger = await bed.runtime.accounts.ledger(owner.id);
      const spent = ledger.filter((e) => e.kind === 'model' || e.kind === 'tool').reduce((t, e) => t - e.credits, 0);
      expect(spent).toBeGreaterThan(0);
      // The API's status form carries the same sums.
      const fromApi = (await (
        await fetch(`${bed.origin}/api/agents/${parent.agent_id}`, { headers: { 'x-api-key': owner.key } })
      ).json()) as { agent: { tree: { agents: number; credits_spent: number; by_status: Counts } } };
      expect(fromApi.agent.tree.agents).toBe(221);
      expect(fromApi.agent.tree.by_status).toEqual({ COMPLETED: 221 });
      expect(Math.abs(fromApi.agent.tree.credits_spent - spent)).toBeLessThan(1e-6);
      const check = await browser.newContext({ baseURL: bed.origin });
      const again = await check.newPage();
      await again.goto('/console/sign-in');
      await again.getByLabel('API key', { exact: true }).fill(owner.key);
      await again.getByRole('button', { name: 'Sign in', exact: true }).click();
      await again.getByRole('heading', { name: 'Agents', level: 1 }).waitFor();
      await again.goto(`/console/agents/${parent.agent_id}`);
      const treeCredits = again.locator('.tree-credits');
      await treeCredits.waitFor();
      const shownCredits = Number((await treeCredits.textContent())!.replace(/,/g, ''));
      expect(Math.abs(shownCredits - spent) / spent).toBeLessThan(0.01);
      // The list shows the tree's cost too, not the root's own.
      await again.goto('/console/agents');
      const row = again.getByRole('row').filter({ hasText: 'Check 220 items' });
      await row.waitFor();
      await expect.poll(async () => (await row.textContent()) ?? '').toContain('220');
      expect(await row.textContent()).toContain(shownCredits.toFixed(4));
      await check.close();
    },
  );

  it(
    'a tree whose calls wait for credits says how many, with the balance and what is held; a top-up clears it',
    { timeout: 60_000 },
    async () => {
      const children = 5;
      // About two children's model calls can hold their credits at once on 5 credits; they hold them for good.
      const { account, apiKey } = await bed.runtime.accounts.create({ name: 'waits', credits: 5 });
      const owner = { id: account.account_id, key: apiKey!.key };
      const { context, page } = await signedIn(owner);
      const parent = await bed.runtime.create({ goal: `Hold credits [fanout-hold ${children}]`, accountId: owner.id });
      await page.goto(`/console/agents/${parent.agent_id}`);

      // Every child has asked for its credits: it holds them, or it waits. The runtime says how many wait.
      const holds = (bed.runtime as unknown as { parts: { credits: { openHoldsOf(id: string): number } } }).parts
        .credits;
      const childIds = async () => (await bed.runtime.list({ parentId: parent.agent_id, limit: 100 })).data;
      let waiting = 0;
      await expect
        .poll(
          async () => {
            const kids = await childIds();
            waiting = (await bed.runtime.creditWaits(parent.agent_id)).calls;
            const holding = kids.filter((k) => holds.openHoldsOf(k.agent_id) > 0).length;
            return kids.length === children && waiting > 0 && waiting + holding === children;
          },
          { timeout: 20_000 },
        )
        .toBe(true);
      const credits = await bed.runtime.accounts.get(owner.id);
      const hint = page.locator('.hint');
      await expect
        .poll(() => hint.textContent(), { timeout: 10_000 })
        .toMatch(new RegExp(`^${waiting} calls waiting for credits: balance [0-9.,]+, held [0-9.,]+\\.`));
      const [, balance, held] = /balance ([0-9,]+\.[0-9]{4}), held ([0-9,]+\.[0-9]{4})\./.exec(
        (await hint.textContent())!,
      )!;
      expect(Number(balance!.replace(/,/g, ''))).toBeCloseTo(credits.balance, 4);
      expect(Number(held!.replace(/,/g, ''))).toBeCloseTo(credits.reserved, 4);
      expect(await hint.isVisible()).toBe(true);

      // A top-up lets every waiting call through: the hint goes.
      await bed.runtime.accounts.addCredits(owner.id, 100);
      await expect.poll(() => hint.textContent(), { timeout: 10_000 }).toBe('');
      expect(await hint.isVisible()).toBe(false);
      expect((await bed.runtime.creditWaits(parent.agent_id)).calls).toBe(0);
      await context.close();
      await bed.runtime.delete(parent.agent_id);
    },
  );

  /** A parent with a few children and a leaf with a tool call, for the pages below. */
  async function someAgents(owner: Account) {
    const parent = await bed.runtime.create({ goal: 'Check 3 items [fanout 3]', accountId: owner.id });
    const leaf = await bed.runtime.create({ goal: 'Take notes [steps-a11y]', accountId: owner.id });
    bed.release('[steps-a11y]#0');
    await bed.runtime.waitFor(parent.agent_id);
    return { parent: parent.agent_id, leaf: leaf.agent_id };
  }

  it('at 390 × 844: no page scrolls sideways, and "Sign out" is in view', { timeout: 120_000 }, async () => {
    const { account, apiKey } = await bed.runtime.accounts.create({ name: 'phone', credits: 100 });
    const owner = { id: account.account_id, key: apiKey!.key };
    const { parent, leaf } = await someAgents(owner);
    const { context, page } = await signedIn(owner, { viewport: { width: 390, height: 844 } });
    for (const path of [
      '/console/agents',
      '/console/settings',
      `/console/agents/${parent}`,
      `/console/agents/${leaf}`,
    ]) {
      await page.goto(path);
      // Measured once the page's first answers are in (its table rows, or its facts).
      await page.locator('main td, main .facts dd').first().waitFor();
      const widths = await page.evaluate(() => ({
        scroll: document.documentElement.scrollWidth,
        client: document.documentElement.clientWidth,
      }));
      expect(widths.scroll, `${path} is wider than the screen`).toBeLessThanOrEqual(widths.client);
      const signOut = page.getByRole('button', { name: 'Sign out', exact: true });
      expect(await signOut.isVisible()).toBe(true);
      const box = (await signOut.boundingBox())!;
      expect(box.x).toBeGreaterThanOrEqual(0);
      expect(box.x + box.width, `${path}: Sign out is cut off`).toBeLessThanOrEqual(390);
    }
    await context.close();
  });

  it('axe-core finds no serious or critical violation on any console page', { timeout: 120_000 }, async () => {
    const { account, apiKey } = await bed.runtime.accounts.create({ name: 'axe', credits: 100 });
    const owner = { id: account.account_id, key: apiKey!.key };
    const { parent, leaf } = await someAgents(owner);
    const context = await browser.newContext({ baseURL: bed.origin, bypassCSP: true });
    const page = await context.newPage();
    const found: string[] = [];
    const check = async (name: string) => {
      await page.addScriptTag({ content: AXE });
      const violations = await page.evaluate(async () => {
        const axe = (window as unknown as { axe: { run(): Promise<{ violations: AxeViolation[] }> } }).axe;
        return (await axe.run()).violations;
      });
      for (const v of violations) {
        if (v.impact === 'serious' || v.impact === 'critical') {
          found.push(`${name}: ${v.id} (${v.impact}) ${v.help} at ${JSON.stringify(v.nodes.map((n) => n.target))}`);
        }
      }
    };
    await page.goto('/console/sign-in');
    await page.getByLabel('API key', { exact: true }).waitFor();
    await check('sign-in');
    await page.getByLabel('API key', { exact: true }).fill('agk_wrong');
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.getByRole('alert').filter({ hasText: /./ }).waitFor();
    await check('sign-in, refused');
    await page.getByLabel('API key', { exact: true }).fill(owner.key);
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.getByRole('heading', { name: 'Agents', level: 1 }).waitFor();
    await page.getByRole('link', { name: 'Check 3 items [fanout 3]' }).waitFor();
    await check('agents');
    await page.goto('/console/settings');
    await page.getByRole('heading', { name: 'API keys' }).waitFor();
    await page.getByRole('row').filter({ hasText: 'agk_' }).first().waitFor();
    await check('settings');
    await page.goto(`/console/agents/${parent}`);
    await page.locator('.vlist-row').first().waitFor();
    await check('agent with sub-agents');
    await page.goto(`/console/agents/${leaf}`);
    await page.getByRole('heading', { name: 'Take notes [steps-a11y]' }).waitFor();
    await page.locator('.facts dd').first().waitFor();
    await check('agent');
    await page.getByRole('button', { name: 'Sign out', exact: true }).click();
    await page.getByText('You signed out.').waitFor();
    await check('signed out');
    await context.close();
    expect(found).toEqual([]);
  });

  it(
    'the agent page lays the run out on a timeline: model calls sum to its tokens and credits, a pause and a resume show',
    { timeout: 120_000 },
    async () => {
      const { account, apiKey } = await bed.runtime.accounts.create({ name: 'timeline', credits: 100 });
      const owner = { id: account.account_id, key: apiKey!.key };
      const { context, page } = await signedIn(owner);
      const created = await bed.runtime.create({ goal: 'Three steps [steps-tl]', accountId: owner.id });
      await page.goto(`/console/agents/${created.agent_id}`);
      await page.getByRole('status').filter({ hasText: 'live' }).waitFor();
      bed.release('[steps-tl]#0');
      // The first step's tool call is on the timeline; the second model call now waits on its gate: pause it there.
      await page.locator('.tl-tool').first().waitFor();
      await page.getByRole('button', { name: 'Pause', exact: true }).click();
      await page.locator('.tl-status .badge', { hasText: 'PAUSED' }).waitFor();
      await page.getByRole('button', { name: 'Resume', exact: true }).click();
      await page.locator('.tl-status .badge', { hasText: 'ACTIVE' }).waitFor();
      bed.release('[steps-tl]#1');
      bed.release('[steps-tl]#2');
      await page.getByRole('status').filter({ hasText: 'finished' }).waitFor();
      await page.locator('.tl-message', { hasText: 'step 3: all done' }).waitFor();

      const { agent } = await bed.runtime.get(created.agent_id);
      const rows = await page.locator('.timeline > li').evaluateAll((items) =>
        items.map((li) => ({
          kind: li.className,
          at: li.querySelector('time')?.getAttribute('datetime') ?? '',
          tokens: Number(li.getAttribute('data-tokens') ?? 0),
          credits: Number(li.getAttribute('data-credits') ?? 0),
          text: li.textContent ?? '',
        })),
      );
      const models = rows.filter((r) => r.kind.includes('tl-model'));
      const tools = rows.filter((r) => r.kind.includes('tl-tool'));
      expect(models.length).toBeGreaterThanOrEqual(3);
      expect(tools.length).toBe(2);
      expect(models.reduce((t, r) => t + r.tokens, 0)).toBe(agent.token_count);
      // Each model call shows the latency its ledger row stored.
      expect(models.filter((r) => r.text.includes('latency not recorded'))).toEqual([]);
      expect(models.every((r) => /· [0-9][^·]*s · in /.test(r.text))).toBe(true);
      const spent = [...models, ...tools].reduce((t, r) => t + r.credits, 0);
      expect(Math.abs(spent - agent.credits_spent)).toBeLessThan(1e-6);
      // The model calls' credits are the ledger's model rows for this agent.
      const ledger = await bed.runtime.accounts.ledger(owner.id);
      const modelCredits = ledger.filter((e) => e.kind === 'model').reduce((t, e) => t - e.credits, 0);
      expect(Math.abs(models.reduce((t, r) => t + r.credits, 0) - modelCredits)).toBeLessThan(1e-6);

      // In time order, the pause before the resume, both after the first tool call and before the end.
      const times = rows.map((r) => r.at);
      expect(times.every((t) => t !== '')).toBe(true);
      expect([...times].sort()).toEqual(times);
      const index = (test: (r: (typeof rows)[number]) => boolean) => rows.findIndex(test);
      const paused = index((r) => r.kind.includes('tl-status') && r.text.includes('PAUSED'));
      const resumed = index(
        (r) => r.kind.includes('tl-status') && r.text.includes('ACTIVE') && r.text.includes('from PAUSED'),
      );
      const firstTool = index((r) => r.kind.includes('tl-tool'));
      const done = index((r) => r.text.includes('step 3: all done'));
      expect(firstTool).toBeGreaterThanOrEqual(0);
      expect(paused).toBeGreaterThan(firstTool);
      expect(resumed).toBeGreaterThan(paused);
      expect(done).toBeGreaterThan(resumed);
      await context.close();
    },
  );

  it('opens the children of a child below the list: a tree, a level at a time', { timeout: 60_000 }, async () => {
    const { account, apiKey } = await bed.runtime.accounts.create({ name: 'nested', credits: 10 });
    const owner = { id: account.account_id, key: apiKey!.key };
    const parentId = await insertTree(bed.runtime, owner.id, 5);
    const first = (await bed.runtime.list({ parentId, limit: 100 })).data.find((c) => c.goal.includes('number 1:'))!;
    const row = (await bed.runtime.storage.getAgent(first.agent_id))!;
    await bed.runtime.storage.insertAgents(
      [0, 1].map((i) => ({
        ...row,
        agent_id: randomUUID(),
        parent_id: row.agent_id,
        spawn_key: `toolu_nested#${i}`,
        goal: `Grandchild ${i + 1} of child 1`,
      })),
      [],
      [],
    );
    const { context, page } = await signedIn(owner);
    await page.goto(`/console/agents/${parentId}`);
    await page.getByRole('button', { name: '2 below', exact: true }).click();
    await page.getByRole('heading', { name: /Sub-agents of #1/ }).waitFor();
    await page.getByRole('link', { name: 'Grandchild 2 of child 1' }).waitFor();
    await page.getByRole('button', { name: '2 below', exact: true }).click();
    await page.getByRole('link', { name: 'Grandchild 2 of child 1' }).waitFor({ state: 'detached' });
    await context.close();
  });
});
