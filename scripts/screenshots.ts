/**
 * Regenerates the console screenshots of README.md and docs/console.md (docs/images/console-*.png): a runtime on memory
 * storage with a scripted model, a few agents in different states (one with 10,000 sub-agents), the console served on a
 * free port, and the system's Chromium (playwright-core; never a downloaded browser) visiting each main page, at a
 * desktop width and at 390 px.
 *
 *   npm run screenshots          # or: npx tsx scripts/screenshots.ts [output folder]
 */
import { mkdirSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import { z } from 'zod';
import { AgentRuntime, defineTool, memoryStorage } from '../src/index.js';
import { startServer } from '../src/http/index.js';
import { scriptedModel } from '../src/testing/index.js';
import { CHROMIUM_FLAGS } from '../src/browser/browser-pool.js';
import { findChromium } from '../src/browser/chromium-path.js';
import type { AgentRow } from '../src/storage/adapter.js';

const out = resolve(process.argv[2] ?? 'docs/images');
const where = findChromium();
if (!where.found) {
  console.error(`screenshots: ${where.reason}`);
  process.exit(1);
}

const lookupPrice = defineTool({
  name: 'lookup_price',
  description: 'The price of a product in a shop.',
  input: z.object({ product: z.string(), shop: z.string() }),
  price: 0.2,
  idempotent: true,
  run: async ({ product, shop }) => ({ product, shop, price_eur: product.includes('Air') ? 1199 : 1349 }),
});

const model = scriptedModel({
  record: false,
  turns: (request, { turnIndex }) => {
    const goal = JSON.stringify(request.messages[0] ?? '');
    if (goal.includes('support tickets')) return { text: 'Reading the tickets…', delayMs: 3_600_000 };
    if (goal.includes('laptops')) {
      return turnIndex === 0
        ? {
            text: 'I will look up the current prices first.',
            toolCalls: [
              { name: 'lookup_price', input: { product: 'MacBook Air 15"', shop: 'shop.example' } },
              { name: 'lookup_price', input: { product: 'ThinkPad X1 Carbon', shop: 'shop.example' } },
            ],
            usage: { inputTokens: 1_850, outputTokens: 140 },
          }
        : {
            text:
              'Recommendation: the MacBook Air 15" at €1,199.\n\n' +
              '- MacBook Air 15": €1,199, 18 h battery\n- ThinkPad X1 Carbon: €1,349, better keyboard\n\n' +
              'For most people the Air is the better value.',
            usage: { inputTokens: 2_400, outputTokens: 210 },
          };
    }
    return { text: 'Done: 3 of 3 checks passed.' };
  },
});

const runtime = await AgentRuntime.open({ storage: memoryStorage(), model, tools: [lookupPrice], builtinTools: false });
const { account, apiKey } = await runtime.accounts.create({ name: 'Acme Research', credits: 250 });
const scope = { accountId: account.account_id };
await runtime.accounts.createApiKey(account.account_id, { name: 'ci deploy' });

const laptops = await runtime.create({ goal: 'Compare the prices of two laptops and recommend one', ...scope });
await runtime.waitFor(laptops.agent_id);
await runtime.waitFor((await runtime.create({ goal: 'Check that the status page answers', ...scope })).agent_id);
const paused = await runtime.create({ goal: 'Summarise this week’s support tickets (draft)', ...scope });
await runtime.pause(paused.agent_id, scope);
await runtime.create({ goal: 'Summarise this week’s support tickets', ...scope });
const parentId = await insertFanOut(account.account_id, 10_000);

const server = await startServer(runtime, { port: 0, console: true });
const { chromium } = await import('playwright-core');
const browser = await chromium.launch({ executablePath: where.path, headless: true, args: CHROMIUM_FLAGS });
mkdirSync(out, { recursive: true });
try {
  const context = await browser.newContext({ baseURL: server.url, viewport: { width: 1200, height: 860 } });
  const page = await context.newPage();
  const shot = async (name: string) => {
    await page.screenshot({ path: `${out}/console-${name}.png` });
    console.log(`wrote ${out}/console-${name}.png`);
  };

  await page.goto('/console/sign-in');
  await page.getByLabel('API key', { exact: true }).waitFor();
  await shot('sign-in');
  await page.getByLabel('API key', { exact: true }).fill(apiKey!.key);
  await page.getByRole('button', { name: 'Sign in', exact: true }).click();
  await page.getByRole('link', { name: 'Compare the prices of two laptops and recommend one' }).waitFor();
  await page.getByLabel('Goal', { exact: true }).fill('Find three suppliers of recycled packaging in Germany');
  await shot('agents');

  await page.goto(`/console/agents/${laptops.agent_id}`);
  await page.getByText('For most people the Air is the better value.').waitFor();
  await page.locator('.tool-call summary').first().click();
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: `${out}/console-agent.png`, fullPage: true });
  console.log(`wrote ${out}/console-agent.png`);

  await page.goto(`/console/agents/${parentId}`);
  await page.getByText('10,000 sub-agents', { exact: true }).waitFor();
  await page.locator('.tree-credits').waitFor();
  await page.getByLabel('Search sub-agents', { exact: true }).fill('item 98');
  await page.getByText('111 sub-agents match').waitFor();
  await page.evaluate(() => document.getElementById('sub-agents')?.scrollIntoView());
  await shot('sub-agents');

  const phone = await browser.newContext({ baseURL: server.url, viewport: { width: 390, height: 844 } });
  const small = await phone.newPage();
  await small.goto('/console/sign-in');
  await small.getByLabel('API key', { exact: true }).fill(apiKey!.key);
  await small.getByRole('button', { name: 'Sign in', exact: true }).click();
  await small.goto(`/console/agents/${laptops.agent_id}`);
  await small.getByText('For most people the Air is the better value.').waitFor();
  await small.screenshot({ path: `${out}/console-phone.png` });
  console.log(`wrote ${out}/console-phone.png`);
  await phone.close();

  await page.goto('/console/settings');
  await page.getByLabel('Key name', { exact: true }).fill('staging');
  await page.getByRole('button', { name: 'Create key', exact: true }).click();
  await page.locator('.full-key').waitFor();
  await page.getByRole('row').filter({ hasText: 'staging' }).waitFor();
  await shot('settings');
  await context.close();
} finally {
  await browser.close();
  await server.close();
  for (const agent of (await runtime.list({ limit: 100 })).data) await runtime.delete(agent.agent_id).catch(() => {});
  await runtime.close();
}

/** A paused parent with `n` finished (or a few failed) children, written straight to storage: nothing runs. */
async function insertFanOut(accountId: string, n: number): Promise<string> {
  const now = new Date().toISOString();
  const row = (id: string, goal: string): AgentRow => ({
    agent_id: id,
    account_id: accountId,
    parent_id: null,
    root_id: id,
    spawn_key: null,
    goal,
    model: 'svc-1-lite',
    status: 'PAUSED',
    progress: 0.62,
    status_message: `Waiting for 3,800 of ${n.toLocaleString('en-US')} sub-agents`,
    token_count: 12_331,
    message_count: 1,
    credits_spent: 41_500,
    sub_agent_count: 0,
    max_credits: null,
    tree_spent: 0,
    tree_reserved: 0,
    step_count: 2,
    started: true,
    active_ms: 0,
    active_since: null,
    plan: null,
    spec: null,
    created_at: now,
    updated_at: now,
  });
  const id = randomUUID();
  const goal = 'Check 10,000 product pages for broken images';
  await runtime.storage.insertAgents(
    [row(id, goal)],
    [{ message_id: randomUUID(), agent_id: id, role: 'USER', text: goal, timestamp: now }],
    [],
  );
  for (let from = 0; from < n; from += 1000) {
    const rows: AgentRow[] = [];
    for (let i = from; i < Math.min(n, from + 1000); i += 1) {
      const status = i % 50 === 7 ? 'FAILED' : i < 6200 ? 'COMPLETED' : 'PAUSED';
      rows.push({
        ...row(randomUUID(), `Check product page for item ${i + 1}`),
        parent_id: id,
        root_id: id,
        spawn_key: `toolu_screens#${i}`,
        status,
        progress: status === 'PAUSED' ? 0 : 1,
        status_message: '',
      });
    }
    await runtime.storage.insertAgents(rows, [], []);
  }
  return id;
}
