/**
 * The console in a real browser (playwright-core driving the system's Chromium; Firefox and WebKit are not installed
 * on this machine, so only Chromium runs here). Without Chromium the suite is skipped, saying why — except under
 * AGENTRY_CI_STRICT=1, where it fails.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHROMIUM_FLAGS } from '../../src/browser/browser-pool.js';
import { chromium, runBrowser, strict } from '../browser/support.js';
import { insertTree, openConsoleBed, XSS, type Account, type ConsoleBed } from './support.js';
import { skippable } from '../support/skip.js';

// Stands in for what the tests below need: passes where Chromium is, is skipped with the reason on a user's machine
// without it, and fails under AGENTRY_CI_STRICT=1.
describe('what the console browser tests need', () => {
  it.skipIf(!chromium.found && !strict)(
    skippable(
      'Chromium is installed (needed by the 7 console tests in this file)',
      !strict && !chromium.found && chromium.reason,
    ),
    () => {
      expect(chromium.found, chromium.found ? '' : chromium.reason).toBe(true);
    },
  );
});

describe.runIf(runBrowser)('the console in Chromium', () => {
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

  async function signedIn(account: Account = bed.a, options: Parameters<Browser['newContext']>[0] = {}) {
    const context = await browser.newContext({ baseURL: bed.origin, ...options });
    const page = await context.newPage();
    await page.goto('/console/agents'); // no session yet: sent to sign-in
    await page.waitForURL('**/console/sign-in');
    await page.getByLabel('API key', { exact: true }).fill(account.key);
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.getByRole('heading', { name: 'Agents', level: 1 }).waitFor();
    return { context, page };
  }

  const statusOf = (page: Page) => page.locator('section.card .badge').first();

  it('signs in; a named key is shown in full once, then only its last 4 characters; it works on the API until deleted', async () => {
    const { context, page } = await signedIn(bed.a, { permissions: ['clipboard-read', 'clipboard-write'] });
    await page.getByRole('link', { name: 'Settings', exact: true }).click();
    await page.getByRole('heading', { name: 'Settings', level: 1 }).waitFor();
    await expect.poll(() => page.getByText('Active', { exact: true }).count()).toBe(1);

    await page.getByLabel('Key name', { exact: true }).fill('deploy bot');
    const creation = page.waitForResponse(
      (r) => r.url().endsWith('/console/api/keys') && r.request().method() === 'POST',
    );
    await page.getByRole('button', { name: 'Create key', exact: true }).click();
    await creation;
    const key = (await page.locator('.full-key').textContent())!;
    expect(key).toMatch(/^agk_[A-Za-z0-9_-]{43}$/);
    await page.getByRole('region', { name: 'New key' }).getByRole('button', { name: 'Copy', exact: true }).click();
    await page.getByText('Copied.').waitFor();
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(key);

    // From here on, no response, cookie, storage or URL carries the full key.
    const later: string[] = [];
    page.on('response', (r) => {
      if (!(r.headers()['content-type'] ?? '').startsWith('text/event-stream')) {
        later.push(r.url());
        r.text().then(
          (t) => later.push(t, JSON.stringify(r.headers())),
          () => {},
        );
      }
    });
    await page.reload();
    const row = page.getByRole('row').filter({ hasText: 'deploy bot' });
    await row.waitFor();
    await expect.poll(() => row.textContent()).toContain(`agk_…${key.slice(-4)}`);
    expect(await page.content()).not.toContain(key);
    const cookies = await context.cookies();
    expect(cookies.map((c) => c.name)).toEqual(['agentry_console']);
    expect(cookies[0]).toMatchObject({ httpOnly: true, sameSite: 'Strict', path: '/console' });
    expect(cookies.some((c) => c.value.includes(key))).toBe(false);
    const stored = await page.evaluate(() =>
      JSON.stringify([{ ...localStorage }, { ...sessionStorage }, document.cookie]),
    );
    expect(stored).toBe('[{},{},""]');

    const api = (k: string) => fetch(`${bed.origin}/api/agents`, { headers: { 'x-api-key': k } });
    expect((await api(key)).status).toBe(200);
    await row.getByRole('button', { name: 'Delete', exact: true }).click();
    await row.getByRole('button', { name: 'Confirm deletion', exact: true }).click();
    await row.waitFor({ state: 'detached' });
    expect((await api(key)).status).toBe(401);
    await page.goto('/console/settings');
    await page.getByRole('heading', { name: 'API keys' }).waitFor();
    expect(later.length).toBeGreaterThan(5);
    expect(later.join('\n')).not.toContain(key);
    expect(page.url()).not.toContain(key);

    await page.getByRole('button', { name: 'Sign out', exact: true }).click();
    await page.waitForURL('**/console/sign-in');
    await page.getByText('You signed out.').waitFor();
    expect((await context.cookies()).filter((c) => c.value !== '')).toEqual([]);
    await page.goto('/console/settings');
    await page.waitForURL('**/console/sign-in');
    await context.close();
  });

  it('starts an agent through the form and shows it finish without a reload; the list follows live', async () => {
    const { context, page } = await signedIn();
    await page.getByLabel('Goal', { exact: true }).fill('Say the answer [gate-form]');
    await page.getByRole('button', { name: 'Start agent', exact: true }).click();
    await page.waitForURL(/\/console\/agents\/[0-9a-f-]{36}$/);
    await page.getByRole('heading', { name: 'Say the answer [gate-form]' }).waitFor();
    await expect.poll(() => statusOf(page).textContent()).toBe('ACTIVE');
    await page.getByRole('status').filter({ hasText: 'live' }).waitFor();
    await page.evaluate(() => ((window as unknown as { notReloaded: boolean }).notReloaded = true));
    bed.release('[gate-form]');
    await page.getByText('Finished: the answer is 42.').waitFor();
    await expect.poll(() => statusOf(page).textContent()).toBe('COMPLETED');
    await expect.poll(() => page.getByRole('status').textContent()).toBe('finished');
    expect(await page.getByLabel('Progress').evaluate((p) => (p as HTMLProgressElement).value)).toBe(1);
    expect(await page.evaluate(() => (window as unknown as { notReloaded?: boolean }).notReloaded)).toBe(true);
    await expect.poll(() => page.getByRole('button', { name: 'Pause', exact: true }).isDisabled()).toBe(true);
    expect(await page.getByRole('button', { name: 'Resume', exact: true }).isDisabled()).toBe(true);

    // The list shows an agent created meanwhile, without a reload.
    await page.getByRole('link', { name: 'Agents', exact: true }).click();
    await page.getByRole('link', { name: 'Say the answer [gate-form]' }).waitFor();
    await bed.runtime.create({ goal: 'Appears on its own', accountId: bed.a.id });
    await page.getByRole('link', { name: 'Appears on its own' }).waitFor();
    expect(await page.evaluate(() => (window as unknown as { notReloaded?: boolean }).notReloaded)).toBe(true);
    await context.close();
  });

  it('pauses and resumes one agent (a double click sends one request), and deletes another after asking', async () => {
    const one = await bed.runtime.create({ goal: 'Hold one [hold]', accountId: bed.a.id });
    const two = await bed.runtime.create({ goal: 'Hold two [hold]', accountId: bed.a.id });
    const { context, page } = await signedIn();
    const posts: string[] = [];
    page.on('request', (r) => r.method() !== 'GET' && posts.push(`${r.method()} ${new URL(r.url()).pathname}`));
    await page.goto(`/console/agents/${one.agent_id}`);
    await expect.poll(() => statusOf(page).textContent()).toBe('ACTIVE');
    const pause = page.getByRole('button', { name: 'Pause', exact: true });
    const resume = page.getByRole('button', { name: 'Resume', exact: true });
    await expect.poll(() => pause.isEnabled()).toBe(true);
    expect(await resume.isDisabled()).toBe(true);
    await pause.dblclick();
    await expect.poll(() => statusOf(page).textContent()).toBe('PAUSED');
    await expect.poll(() => resume.isEnabled()).toBe(true);
    expect(await pause.isDisabled()).toBe(true);
    expect(posts.filter((p) => p.endsWith('/pause'))).toHaveLength(1);
    expect((await bed.runtime.get(one.agent_id)).agent.status).toBe('PAUSED');
    await resume.dblclick();
    await expect.poll(() => statusOf(page).textContent()).toBe('ACTIVE');
    expect(posts.filter((p) => p.endsWith('/resume'))).toHaveLength(1);
    expect((await bed.runtime.get(one.agent_id)).agent.status).toBe('ACTIVE');

    // One stream per open agent page: leaving the page closes it.
    const firstStreamClosed = page.waitForEvent('requestfailed', (r) => r.url().endsWith(`${one.agent_id}/events`));
    await page.getByRole('link', { name: '← Back to the list' }).click();
    await firstStreamClosed;
    await page.goto(`/console/agents/${two.agent_id}`);
    await page.getByRole('heading', { name: 'Hold two [hold]' }).waitFor();
    await page.getByRole('button', { name: 'Delete', exact: true }).click();
    expect(posts.filter((p) => p.startsWith('DELETE'))).toHaveLength(0); // asked first
    await page.getByRole('button', { name: 'Confirm deletion', exact: true }).dblclick();
    await page.waitForURL('**/console/agents');
    expect(posts.filter((p) => p.startsWith('DELETE'))).toEqual([`DELETE /console/api/agents/${two.agent_id}`]);
    await expect(bed.runtime.get(two.agent_id)).rejects.toMatchObject({ code: 'not_found' });
    await context.close();
  });

  it('signs the page out when the subscription lapses, saying why', async () => {
    const { account, apiKey } = await bed.runtime.accounts.create({ name: 'lapsing', credits: 10 });
    const { context, page } = await signedIn({ id: account.account_id, key: apiKey!.key });
    await bed.runtime.accounts.unsubscribe(account.account_id);
    // The list asks again every 2 s; its next call is refused and the page says why.
    await page.waitForURL('**/console/sign-in');
    await page.getByRole('alert').filter({ hasText: 'The subscription of this account is not active' }).waitFor();
    expect((await context.cookies()).filter((c) => c.value !== '')).toHaveLength(0);
    await context.close();
  });

  it('shows goals, messages, tool calls, artifact and key names as text: nothing runs, nothing loads', async () => {
    const xss = await bed.runtime.create({ goal: `${XSS} [xss]`, accountId: bed.a.id });
    await bed.runtime.waitFor(xss.agent_id);
    // A monitor and an outbox entry whose page URL, recipient and error carry the payload too.
    const now = new Date().toISOString();
    await bed.runtime.storage.insertMonitor(
      {
        monitor_id: randomUUID(),
        agent_id: xss.agent_id,
        url: `javascript:alert('monitor')//${XSS}`,
        selector: null,
        ignore_selectors: '[]',
        condition: null,
        interval_s: 60,
        until: null,
        status: 'ended',
        created_at: now,
        last_checked_at: null,
        next_check_at: null,
        changes: 0,
        last_error: null,
        failures: 0,
        etag: null,
        last_modified: null,
        content_sha256: null,
        content: null,
        render: false,
      },
      null,
    );
    const limits = { max: 100, since: now };
    await bed.runtime.storage.queueOutbox(
      {
        message_id: randomUUID(),
        agent_id: xss.agent_id,
        account_id: bed.a.id,
        tool_use_id: 'toolu_xss',
        channel: 'email',
        to: `<img src=x onerror=alert('to')>@example.com`,
        subject: null,
        body_hash: '0'.repeat(64),
        status: 'queued',
        provider_id: null,
        error: null,
        created_at: now,
        sent_at: null,
      },
      { agent: limits, account: limits },
    );
    await bed.runtime.accounts.createApiKey(bed.a.id, {
      name: `<img src=x onerror=alert(1)><script>alert(2)</script> javascript:alert(3) [x](javascript:alert(4))`,
    });
    const { context, page } = await signedIn();
    const dialogs: string[] = [];
    const foreign: string[] = [];
    const errors: string[] = [];
    page.on('dialog', (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
    page.on('request', (r) => !r.url().startsWith(bed.origin) && foreign.push(r.url()));
    page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
    page.on('pageerror', (e) => errors.push(e.message));

    const response = await page.goto('/console/agents');
    const csp = response!.headers()['content-security-policy']!;
    expect(csp).toContain("script-src 'self'");
    expect(csp).not.toContain('unsafe-inline');
    await page
      .getByRole('link', { name: /onerror/ })
      .first()
      .waitFor();
    await page.goto(`/console/agents/${xss.agent_id}`);
    await expect.poll(() => statusOf(page).textContent()).toBe('COMPLETED');
    await page.locator('.tool-call').first().waitFor();
    for (const summary of await page.locator('.tool-call summary').all()) await summary.click();
    await page.getByText('# Heading', { exact: false }).waitFor();
    const text = (await page.locator('main').textContent())!;
    expect(text).toContain(`<script>alert('script')</script>`);
    expect(text).toContain(`[md link](javascript:alert('md'))`);
    expect(text).toContain('show_payload');
    expect(text).toContain(`javascript:alert('monitor')//`);
    expect(text).toContain(`<img src=x onerror=alert('to')>@example.com`);
    const artifact = page.locator('a[download]');
    expect(await artifact.textContent()).toBe(`${XSS}.html`);
    expect(await artifact.getAttribute('href')).toMatch(
      /^\/console\/api\/agents\/[0-9a-f-]{36}\/artifacts\/[0-9a-f-]{36}$/,
    );
    await page.goto('/console/settings');
    await page.getByText(/onerror=alert\(1\)/).waitFor();

    const dom = await page.evaluate(() => ({
      media: document.querySelectorAll('img, iframe, object, embed, svg, video, audio').length,
      scripts: Array.from(document.scripts).map((s) => s.getAttribute('src')),
      jsLinks: Array.from(document.querySelectorAll('a')).filter((a) => !a.getAttribute('href')?.startsWith('/'))
        .length,
      handlers: Array.from(document.querySelectorAll('*')).filter((e) =>
        Array.from(e.attributes).some((a) => a.name.startsWith('on')),
      ).length,
    }));
    expect(dom).toEqual({ media: 0, scripts: ['/console/assets/app.js'], jsLinks: 0, handlers: 0 });
    expect(dialogs).toEqual([]);
    expect(foreign).toEqual([]);
    expect(errors).toEqual([]);
    await context.close();
  });

  it('opens an agent with 10,000 children in under 2 s, under 2,000 DOM nodes, and finds child 9,876', async () => {
    const parent = await insertTree(bed.runtime, bed.a.id, 10_000);
    const { context, page } = await signedIn();
    const started = Date.now();
    await page.goto(`/console/agents/${parent}`);
    await page.getByRole('listitem').filter({ hasText: 'Child task number 1:' }).waitFor();
    await page.getByText('10,000 sub-agents').waitFor();
    const firstScreenMs = Date.now() - started;
    expect(firstScreenMs).toBeLessThanOrEqual(2_000);
    const nodes = () => page.evaluate(() => document.getElementsByTagName('*').length);
    expect(await nodes()).toBeLessThan(2_000);
    expect(await page.locator('.counts').textContent()).toMatch(/COMPLETED\s*6,000.*FAILED\s*2,000.*PAUSED\s*2,000/);

    await page.locator('.vlist').evaluate((el) => (el.scrollTop = 5_000 * 34));
    await page.getByRole('listitem').filter({ hasText: 'Child task number 5001:' }).waitFor();
    expect(await nodes()).toBeLessThan(2_000);

    await page.getByLabel('Search sub-agents', { exact: true }).fill('number 9876:');
    const hit = page.getByRole('link', { name: 'Child task number 9876: check item 9876' });
    await hit.waitFor();
    await page.getByText('1 sub-agent match').waitFor();
    await hit.click();
    await page.getByRole('heading', { name: 'Child task number 9876: check item 9876' }).waitFor();
    // The same first screen for 10 children, for the record (not asserted: timings are the bench's business).
    const small = await insertTree(bed.runtime, bed.a.id, 10);
    const smallStarted = Date.now();
    await page.goto(`/console/agents/${small}`);
    await page.getByRole('listitem').filter({ hasText: 'Child task number 1:' }).waitFor();
    console.log(
      `console: first screen with 10,000 children ${firstScreenMs} ms, with 10: ${Date.now() - smallStarted} ms`,
    );
    await context.close();
  });

  it('says "disconnected" while the server restarts, then catches up with nothing shown twice', async () => {
    // A whole restart: the server and the runtime close, and a new runtime opens the same SQLite file. The session
    // is a row of that file, so the page stays signed in.
    const dir = mkdtempSync(join(tmpdir(), 'agentry-console-restart-'));
    const restarting = await openConsoleBed({ sqlitePath: join(dir, 'agentry.db') });
    try {
      const agent = await restarting.runtime.create({ goal: 'Three steps [steps-r]', accountId: restarting.a.id });
      restarting.release('[steps-r]#0');
      const context = await browser.newContext({ baseURL: restarting.origin });
      const page = await context.newPage();
      await page.goto('/console/sign-in');
      await page.getByLabel('API key', { exact: true }).fill(restarting.a.key);
      await page.getByRole('button', { name: 'Sign in', exact: true }).click();
      await page.getByRole('heading', { name: 'Agents', level: 1 }).waitFor();
      const streams: Array<string | undefined> = [];
      page.on('request', (r) => r.url().endsWith('/events') && streams.push(r.headers()['last-event-id']));
      await page.goto(`/console/agents/${agent.agent_id}`);
      await page.getByText('step 1', { exact: true }).waitFor();
      await page.getByRole('status').filter({ hasText: 'live' }).waitFor();

      await restarting.restart(async () => {
        await page.getByRole('status').filter({ hasText: 'disconnected' }).waitFor();
        restarting.release('[steps-r]#1');
        restarting.release('[steps-r]#2');
      });

      await page.getByRole('status').filter({ hasText: 'finished' }).waitFor({ timeout: 20_000 });
      await expect.poll(() => statusOf(page).textContent()).toBe('COMPLETED');
      const transcript = await page.locator('.transcript li .text').allTextContents();
      expect(transcript).toEqual(['Three steps [steps-r]', 'step 1', 'step 2', 'step 3: all done']);
      // The first stream started from the beginning; a reconnect asked only for what came after message 2.
      expect(streams[0]).toBeUndefined();
      expect(streams.slice(1)).toContain('2');
      await context.close();
    } finally {
      await restarting.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
