/**
 * The console's credits page over HTTP: a page of the account's ledger at a time (the newest 100, then older pages by
 * keyset), and the spend by model and by tool summed by the storage. It never reads the account's whole ledger: the
 * storage's `listLedger` is refused while the page is read. In Chromium (skipped without it, failed under
 * AGENTRY_CI_STRICT=1), the settings page shows the newest 100 entries and pages to older ones.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHROMIUM_FLAGS } from '../../src/browser/browser-pool.js';
import type { LedgerEntry } from '../../src/core/accounts.js';
import { CONSOLE_LEDGER_PAGE_ROWS } from '../../src/http/console/api.js';
import { browserSkipReason, chromium, runBrowser } from '../browser/support.js';
import { skippable } from '../support/skip.js';
import { openConsoleBed, signIn, type ConsoleBed } from './support.js';

let bed: ConsoleBed;
beforeAll(async () => {
  bed = await openConsoleBed();
});
afterAll(async () => {
  await bed?.close();
});

interface CreditsBody {
  balance: number;
  by_model: Array<{ item: string; credits: number; tokens_in: number; tokens_out: number; count: number }>;
  by_tool: Array<{ item: string; credits: number; count: number }>;
  recent: Array<LedgerEntry & { seq: number }>;
  older: number | null;
}

/** Spend summed from the ledger's entries, as the page used to sum them. */
function summed(entries: LedgerEntry[], kind: 'model' | 'tool') {
  const sums = new Map<
    string,
    { item: string; credits: number; tokens_in: number; tokens_out: number; count: number }
  >();
  for (const e of entries) {
    if (e.kind !== kind || e.item === null) continue;
    const s = sums.get(e.item) ?? { item: e.item, credits: 0, tokens_in: 0, tokens_out: 0, count: 0 };
    s.credits = Math.round((s.credits - e.credits) * 1e6) / 1e6;
    s.tokens_in += e.tokens_in;
    s.tokens_out += e.tokens_out;
    s.count += 1;
    sums.set(e.item, s);
  }
  return [...sums.values()].sort((x, y) => y.credits - x.credits);
}

describe('the credits page', () => {
  /** An account with 150 charges of two models and a tool between 100 top-ups: 251 ledger rows. */
  async function accountWithLedger(name: string) {
    const { account, apiKey } = await bed.runtime.accounts.create({ name, credits: 10_000 });
    const accountId = account.account_id;
    const items = ['svc-1-lite', 'svc-1-ultra', 'web_search'] as const;
    for (let i = 0; i < 150; i++) {
      const item = items[i % 3]!;
      await bed.runtime.storage.settle([
        {
          reservation_id: `r-${i}`,
          root_id: 'none',
          ledger: {
            account_id: accountId,
            agent_id: null,
            kind: item === 'web_search' ? 'tool' : 'model',
            item,
            tokens_in: item === 'web_search' ? 0 : 100 + i,
            tokens_out: item === 'web_search' ? 0 : 10 + i,
            created_at: new Date().toISOString(),
            cost: 1_000 * (i + 1),
          },
        },
      ]);
      if (i < 100) await bed.runtime.accounts.addCredits(accountId, 0.5);
    }
    return { accountId, key: apiKey!.key };
  }

  it('pages the ledger newest first by keyset, 100 rows a page, with the spend summed by the storage', async () => {
    const { accountId, key } = await accountWithLedger('ledger');
    const ledger = await bed.runtime.accounts.ledger(accountId);
    expect(ledger).toHaveLength(251);

    const cookie = await signIn(bed.origin, key);
    const read = async (query = '') => {
      const response = await fetch(`${bed.origin}/console/api/credits${query}`, { headers: { cookie } });
      expect(response.status, await response.clone().text()).toBe(200);
      return (await response.json()) as CreditsBody;
    };

    // The account's whole ledger is not read for the page: refused while it is.
    const storage = bed.runtime.storage as { listLedger: unknown };
    const listLedger = storage.listLedger;
    storage.listLedger = () => Promise.reject(new Error('the credits page read the whole ledger'));
    const pages: CreditsBody[] = [];
    try {
      for (let page = await read(); ; page = await read(`?before=${page.older}`)) {
        pages.push(page);
        if (page.older === null || pages.length > 10) break;
      }
    } finally {
      storage.listLedger = listLedger;
    }

    expect(pages.map((p) => p.recent.length)).toEqual([CONSOLE_LEDGER_PAGE_ROWS, CONSOLE_LEDGER_PAGE_ROWS, 51]);
    // Newest first, page after page, and together the whole ledger exactly once.
    const rows = pages.flatMap((p) => p.recent);
    expect(rows.map(({ seq: _seq, ...entry }) => entry)).toEqual([...ledger].reverse());
    expect(new Set(rows.map((r) => r.seq)).size).toBe(251);
    // Every page carries the same sums: the account's, not the page's.
    for (const page of pages) {
      expect(page.by_model).toEqual(summed(ledger, 'model'));
      expect(page.by_tool).toEqual(summed(ledger, 'tool'));
      expect(page.balance).toBe((await bed.runtime.accounts.get(accountId)).balance);
    }
    expect(pages[0]!.by_model.map((s) => s.count)).toEqual([50, 50]);

    // A position that is not one is refused; one below every row is an empty last page.
    const bad = await fetch(`${bed.origin}/console/api/credits?before=abc`, { headers: { cookie } });
    expect(bad.status).toBe(400);
    expect(await read('?before=1')).toMatchObject({ recent: [], older: null });
  });

  it.runIf(runBrowser)(
    skippable('the settings page shows the newest 100 entries, then older ones', browserSkipReason),
    { timeout: 60_000 },
    async () => {
      if (!chromium.found) throw new Error(chromium.reason);
      const { key } = await accountWithLedger('ledger-page');
      const { chromium: playwright } = await import('playwright-core');
      const browser = await playwright.launch({ executablePath: chromium.path, headless: true, args: CHROMIUM_FLAGS });
      try {
        const page = await (await browser.newContext({ baseURL: bed.origin })).newPage();
        await page.goto('/console/sign-in');
        await page.getByLabel('API key', { exact: true }).fill(key);
        await page.getByRole('button', { name: 'Sign in', exact: true }).click();
        await page.getByRole('heading', { name: 'Agents', level: 1 }).waitFor();
        await page.goto('/console/settings');
        const entries = page.locator('section[aria-labelledby="credits"] .table-wrap').last().locator('tbody tr');
        await page.getByRole('heading', { name: 'Latest ledger entries' }).waitFor();
        await expect.poll(() => entries.count()).toBe(100);
        await page.getByRole('button', { name: 'Older entries' }).click();
        await page.getByRole('heading', { name: 'Older ledger entries' }).waitFor();
        await expect.poll(() => entries.count()).toBe(100);
        await page.getByRole('button', { name: 'Older entries' }).click();
        await expect.poll(() => entries.count()).toBe(51);
        expect(await page.getByRole('button', { name: 'Older entries' }).count()).toBe(0);
        await page.getByRole('button', { name: 'Latest entries' }).click();
        await page.getByRole('heading', { name: 'Latest ledger entries' }).waitFor();
        await expect.poll(() => entries.count()).toBe(100);
      } finally {
        await browser.close();
      }
    },
  );
});
