/**
 * Network rules in the page, in real headless Chromium: a private address that is not
 * allowed is blocked as a navigation, as an image, as a fetch() from page script and as a redirect target — through
 * an IP literal and through a name that resolves to it; allowed, each loads. Also the pool's basics: one browser for
 * many contexts, a crashed browser started again, and what a missing playwright-core or Chromium says.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BrowserPool } from '../../src/browser/browser-pool.js';
import { findChromium } from '../../src/browser/chromium-path.js';
import { checkBrowserTarget } from '../../src/browser/network-rules.js';
import { renderSnapshot, snapshotPage } from '../../src/browser/snapshot.js';
import { parseAllowList } from '../../src/web/address-policy.js';
import {
  browserMarkers,
  browserProcesses,
  browserSkipReason,
  chromium,
  runBrowser,
  startSite,
  strict,
  type Site,
} from './support.js';
import { skippable } from '../support/skip.js';

// A name that resolves to the private host, as DNS would answer for a rebinding attacker's domain.
const lookup = async (host: string) =>
  host === 'private.test'
    ? [{ address: '127.0.0.2', family: 4 as const }]
    : [{ address: '127.0.0.1', family: 4 as const }];

// Stands in for what the browser tests below need: passes where Chromium is, is skipped with the reason on a user's
// machine without it, and fails under AGENTRY_CI_STRICT=1.
describe('what the browser tests of this file need', () => {
  it.skipIf(!chromium.found && !strict)(
    skippable(
      'Chromium is installed (needed by the 6 real-browser tests in this file)',
      !strict && !chromium.found && chromium.reason,
    ),
    () => {
      expect(chromium).toMatchObject({ found: true });
    },
  );
});

describe('finding the browser', () => {
  it('prefers the option, then AGENTRY_CHROMIUM_PATH, then PATH, and names what to install when there is none', () => {
    expect(findChromium({ executablePath: '/nonexistent/chrome' })).toMatchObject({
      found: false,
      reason: expect.stringMatching(
        /builtinTools\.browser\.executablePath is \/nonexistent\/chrome.*apt-get install chromium/,
      ),
    });
    expect(findChromium({ env: { AGENTRY_CHROMIUM_PATH: '/nope' } })).toMatchObject({
      found: false,
      reason: expect.stringContaining('AGENTRY_CHROMIUM_PATH is /nope'),
    });
    expect(findChromium({ env: { PATH: '/nonexistent' } })).toMatchObject({
      found: false,
      reason: expect.stringMatching(/no Chromium found on PATH \(chromium, chromium-browser, google-chrome\)/),
    });
  });

  it('checks targets like the guarded fetch: allowed networks and names, private ranges refused with a reason', async () => {
    const allow = parseAllowList(['127.0.0.1/32']);
    expect(await checkBrowserTarget('127.0.0.1', allow)).toEqual({ ok: true, address: '127.0.0.1' });
    expect(await checkBrowserTarget('127.0.0.2', allow)).toMatchObject({ ok: false, reason: /a loopback address/ });
    expect(await checkBrowserTarget('[::ffff:10.0.0.1]', allow)).toMatchObject({ ok: false, reason: /private/ });
    expect(await checkBrowserTarget('169.254.169.254', allow)).toMatchObject({ ok: false, reason: /metadata/ });
    expect(await checkBrowserTarget('private.test', allow, lookup)).toMatchObject({
      ok: false,
      reason:
        'private.test resolves to 127.0.0.2, a loopback address; allow it with AGENTRY_FETCH_ALLOW or builtinTools.fetch.allow',
    });
    expect(await checkBrowserTarget('private.test', parseAllowList(['private.test']), lookup)).toEqual({
      ok: true,
      address: '127.0.0.2',
    });
  });

  it('a missing playwright-core is not_configured naming the package', async () => {
    const pool = new BrowserPool({
      allow: parseAllowList([]),
      ...(chromium.found ? { executablePath: chromium.path } : { executablePath: process.execPath }),
      loadPlaywright: () => Promise.reject(new Error("Cannot find package 'playwright-core'")),
    });
    await expect(pool.open('a')).rejects.toMatchObject({
      code: 'not_configured',
      message: expect.stringContaining('npm install playwright-core'),
    });
    await pool.close();
  });
});

describe.skipIf(!runBrowser)(
  skippable('the page obeys the guarded fetch rules (real Chromium)', browserSkipReason),
  () => {
    let site: Site;
    let blockedPool: BrowserPool;
    let openPool: BrowserPool;
    beforeAll(async () => {
      site = await startSite();
      blockedPool = new BrowserPool({ allow: parseAllowList(['127.0.0.1/32']), lookup });
      openPool = new BrowserPool({ allow: parseAllowList(['127.0.0.1/32', '127.0.0.2/32']), lookup });
    });
    afterAll(async () => {
      await Promise.all([blockedPool?.close(), openPool?.close()]);
      await site?.close();
    });

    const titleAfter = async (pool: BrowserPool, key: string, path: string, expected: RegExp) => {
      const { page } = await pool.open(key);
      await page.goto(`${site.base}${path}`);
      await page.waitForFunction((re) => new RegExp(re).test(document.title), expected.source, { timeout: 10_000 });
      const title = await page.title();
      await pool.release(key); // a pool opens 4 contexts at once
      return title;
    };

    it('blocks a navigation to the private host, by address and by a name that resolves to it', async () => {
      const session = await blockedPool.open('nav');
      await expect(session.page.goto(`${site.other}/secret`)).rejects.toThrow(/ERR_EMPTY_RESPONSE/);
      // Chromium commits its error page after goto() failed; the next navigation waits for it.
      await session.page.waitForURL((u) => u.protocol === 'chrome-error:', { waitUntil: 'commit' });
      await expect(session.page.goto(`http://private.test:${site.otherPort}/secret`)).rejects.toThrow(/ERR_/);
      expect(session.blocked.map((b) => b.reason)).toEqual(
        expect.arrayContaining([
          expect.stringContaining('127.0.0.2 is a loopback address'),
          expect.stringContaining('private.test resolves to 127.0.0.2'),
        ]),
      );
      expect(site.otherHits).toEqual([]);
      await blockedPool.release('nav');
    });

    it('blocks an image, a fetch() from page script, a WebSocket and a redirect target', async () => {
      expect(await titleAfter(blockedPool, 'img', '/image', /img /)).toBe('img failed');
      expect(await titleAfter(blockedPool, 'fetch', '/fetch', /fetch /)).toBe('fetch failed');
      expect(await titleAfter(blockedPool, 'ws', '/websocket', /ws /)).toBe('ws failed');
      const { page, blocked } = await blockedPool.open('redirect');
      await expect(page.goto(`${site.base}/redirect`)).rejects.toThrow(/ERR_/);
      expect(blocked.at(-1)).toMatchObject({
        url: `${site.other}/secret`,
        reason: expect.stringContaining('loopback'),
      });
      expect(site.otherHits).toEqual([]);
    });

    it('loads each of them when the allow list opens the private host', async () => {
      const { page } = await openPool.open('nav');
      const res = await page.goto(`${site.other}/secret`);
      expect(res?.status()).toBe(200);
      expect(await page.textContent('h1')).toBe('Private host');
      expect(await titleAfter(openPool, 'img', '/image', /img /)).toBe('img loaded');
      expect(await titleAfter(openPool, 'fetch', '/fetch', /fetch /)).toBe('fetch secret-data');
      expect(await titleAfter(openPool, 'ws', '/websocket', /ws /)).toBe('ws hello');
      const r = await openPool.open('redirect');
      await r.page.goto(`${site.base}/redirect`);
      expect(r.page.url()).toBe(`${site.other}/secret`);
      expect(site.otherHits).toEqual(expect.arrayContaining(['/secret', '/pixel.gif', '/data', '/socket']));
    });

    it('caps a large snapshot: the main region, else what changed since the last one, else cut', async () => {
      const { page } = await openPool.open('snap');
      const links = (n: number, label: string) =>
        Array.from({ length: n }, (_, i) => `<a href="/${label}/${i}">${label} link number ${i}</a>`).join(' ');
      await page.setContent(`<nav>${links(200, 'nav')}</nav><main><h1>Main</h1><button>Buy</button></main>`);
      const main = await snapshotPage(page, { maxChars: 2_000 });
      expect(main.shown).toBe('main');
      expect(main.text).toMatch(/^ *- main \[ref=e\d+\]:\n +- heading "Main"/);
      expect(main.full.length).toBeGreaterThan(2_000);
      // no main region: the lines that changed since the last snapshot of the same page
      await page.setContent(`<div>${links(200, 'x')}</div><p id="p">before</p>`);
      const first = await snapshotPage(page, { maxChars: 2_000 });
      expect(first.shown).toBe('cut');
      expect(renderSnapshot(first)).toContain(`the first ${first.text.length} of ${first.full.length} characters`);
      await page.evaluate(() => (document.getElementById('p')!.textContent = 'after'));
      const next = await snapshotPage(page, { maxChars: 2_000, previous: { url: first.url, full: first.full } });
      expect(next.shown).toBe('diff');
      expect(next.text).toContain('after');
      expect(next.text).not.toContain('x link number 5');
      await openPool.release('snap');
    });

    it('closes an idle browser after idleMs and starts it again on the next open', async () => {
      const pool = new BrowserPool({ allow: parseAllowList(['127.0.0.1/32']), idleMs: 100 });
      await pool.open('a');
      const markers = browserMarkers(pool.home!);
      expect(markers.profileDirs, 'the profile dir of the running browser').toHaveLength(1);
      await pool.release('a');
      const deadline = Date.now() + 10_000;
      while (browserProcesses(markers).length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(browserProcesses(markers), 'processes of the idle browser').toEqual([]);
      expect(pool.home, 'the idle browser HOME').toBeUndefined();
      const again = await pool.open('b');
      await again.page.goto(`${site.base}/`);
      expect(pool.stats.launches).toBe(2);
      await pool.close();
    });

    it('runs one browser for many contexts and starts a new one after a crash', async () => {
      const pool = new BrowserPool({ allow: parseAllowList(['127.0.0.1/32']), maxContexts: 2 });
      const a = await pool.open('a');
      const b = await pool.open('b');
      expect(pool.stats.launches).toBe(1);
      expect(a.context).not.toBe(b.context);
      // a third waits for a slot
      let third = false;
      const c = pool.open('c').then((s) => ((third = true), s));
      await new Promise((r) => setImmediate(r));
      expect(third).toBe(false);
      expect(pool.keys()).toEqual(['a', 'b', 'c']);
      await pool.release('a');
      await c;
      expect(pool.stats.peakContexts).toBe(2);
      // crash: kill the browser's processes; the next open launches again
      const markers = browserMarkers(pool.home!);
      const pids = browserProcesses(markers);
      expect(pids.length).toBeGreaterThan(1);
      for (const pid of pids) process.kill(pid, 'SIGKILL');
      const deadline = Date.now() + 10_000;
      while (pool.keys().length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(pool.keys()).toEqual([]);
      const again = await pool.open('d');
      await again.page.goto(`${site.base}/`);
      expect(await again.page.title()).toBe('Shop');
      expect(pool.stats.launches).toBe(2);
      const second = browserMarkers(pool.home!);
      await pool.close();
      expect([...browserProcesses(markers), ...browserProcesses(second)]).toEqual([]);
    });
  },
);
