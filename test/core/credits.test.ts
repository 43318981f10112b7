import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, memoryStorage, sqliteStorage, type AgentryError, type StorageAdapter } from 'agentry-runtime';
import { openTestRuntime } from '../support/runtime.js';

const lookup = defineTool({
  name: 'lookup',
  description: 'priced lookup',
  input: z.object({ q: z.string() }),
  price: 0.75,
  idempotent: true,
  run: ({ q }) => `result for ${q}`,
});

describe('credits', () => {
  it('settles exactly the price table, to the micro-credit, for both models and tools', async () => {
    const script = [
      {
        toolCalls: [
          { name: 'lookup', input: { q: 'a' } },
          { name: 'lookup', input: { q: 'b' } },
        ],
        usage: { inputTokens: 1_234, outputTokens: 567, cacheReadInputTokens: 100, cacheCreationInputTokens: 10 },
      },
      { text: 'done', usage: { inputTokens: 2_001, outputTokens: 33 } },
    ];
    const { runtime } = await openTestRuntime(script, {
      tools: [lookup],
      defaultAccount: { id: 'local', credits: 50 },
    });
    const lite = await runtime.create({ goal: 'lite', model: 'svc-1-lite' });
    const ultra = await runtime.create({ goal: 'ultra', model: 'svc-1-ultra' });
    const a = await runtime.waitFor(lite.agent_id);
    const b = await runtime.waitFor(ultra.agent_id);
    expect([a.status, b.status]).toEqual(['COMPLETED', 'COMPLETED']);

    // micro-credits: lite 100 / 500 per token, ultra 500 / 2,500 per token; a cache read bills 0.1× and a cache
    // write 1.25× the input price
    const liteModel = 1_234 * 100 + 100 * 10 + 10 * 125 + 567 * 500 + 2_001 * 100 + 33 * 500;
    const ultraModel = 1_234 * 500 + 100 * 50 + 10 * 625 + 567 * 2_500 + 2_001 * 500 + 33 * 2_500;
    const tools = 2 * 750_000;
    expect(Math.round(a.credits_spent * 1e6)).toBe(liteModel + tools);
    expect(Math.round(b.credits_spent * 1e6)).toBe(ultraModel + tools);
    expect(a.token_count).toBe(1_234 + 100 + 10 + 567 + 2_001 + 33);

    const ledger = await runtime.storage.listLedger('local');
    const spend = ledger.filter((l) => l.amount < 0);
    expect(spend.filter((l) => l.kind === 'tool')).toHaveLength(4);
    expect(spend.filter((l) => l.kind === 'model')).toHaveLength(4);
    const account = await runtime.storage.getAccount('local');
    expect(account!.balance).toBe(50_000_000 - liteModel - ultraModel - 2 * tools);
    expect((await runtime.accounts.ledger('local')).reduce((s, l) => s + l.credits * 1e6, 0)).toBeCloseTo(
      account!.balance,
      0,
    );
    await runtime.close();
  });

  it('a small balance ends OUT_OF_CREDITS with balance >= 0; after a top-up and resume it COMPLETES', async () => {
    const turn = {
      toolCalls: [{ name: 'lookup', input: { q: 'x' } }],
      usage: { inputTokens: 5_000, outputTokens: 500 },
    };
    const { runtime } = await openTestRuntime([turn, turn, turn, { text: 'done' }], {
      tools: [lookup],
      defaultAccount: { id: 'local', credits: 3 },
      limits: { maxOutputTokens: 1_000 },
    });
    const { agent_id } = await runtime.create({ goal: 'needs more than 3 credits' });
    const stopped = await runtime.waitFor(agent_id);
    expect(stopped.status).toBe('OUT_OF_CREDITS');
    const before = await runtime.accounts.get('local');
    expect(before.balance).toBeGreaterThanOrEqual(0);
    expect(before.reserved).toBe(0);
    await runtime.accounts.addCredits('local', 10);
    await runtime.resume(agent_id);
    expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
    await runtime.close();
  });

  it('max_credits caps a whole agent without overspend', async () => {
    const turn = {
      toolCalls: [{ name: 'lookup', input: { q: 'x' } }],
      usage: { inputTokens: 5_000, outputTokens: 500 },
    };
    const { runtime } = await openTestRuntime(() => turn, { tools: [lookup], limits: { maxOutputTokens: 1_000 } });
    const { agent_id } = await runtime.create({ goal: 'capped', maxCredits: 4 });
    const agent = await runtime.waitFor(agent_id);
    expect(agent.status).toBe('OUT_OF_CREDITS');
    expect(agent.credits_spent).toBeLessThanOrEqual(4);
    expect((await runtime.accounts.get('local')).balance).toBeCloseTo(100 - agent.credits_spent, 6);
    await runtime.close();
  });

  for (const kind of ['memory', 'sqlite'] as const) {
    it(`200 agents racing for a balance that covers only some never drive it below zero (${kind})`, async () => {
      const dir = mkdtempSync(join(tmpdir(), 'agentry-credits-'));
      const storage: StorageAdapter = kind === 'memory' ? memoryStorage() : sqliteStorage({ path: join(dir, 'a.db') });
      const turn = {
        toolCalls: [{ name: 'lookup', input: { q: 'x' } }],
        usage: { inputTokens: 2_000, outputTokens: 200 },
      };
      const { runtime } = await openTestRuntime(
        [turn, turn, { text: 'done', usage: { inputTokens: 2_000, outputTokens: 200 } }],
        {
          storage,
          tools: [lookup],
          defaultAccount: { id: 'local', credits: 150 },
          limits: { maxOutputTokens: 300 },
          concurrency: { runSlots: 200, models: 50, tools: 50 },
        },
      );
      const violations: string[] = [];
      runtime.on('credits.charged', () => {
        void (async () => {
          const account = await storage.getAccount('local');
          if (!account || account.balance < 0 || account.reserved < 0 || account.reserved > account.balance) {
            violations.push(JSON.stringify(account));
          }
        })();
      });
      const ids = [];
      let refusedAtCreate = 0;
      for (let i = 0; i < 200; i++) {
        // Agents run while later ones are created; once the balance is spent, create() refuses (402).
        try {
          ids.push((await runtime.create({ goal: `agent ${i}` })).agent_id);
        } catch (err) {
          expect((err as AgentryError).code).toBe('insufficient_credits');
          refusedAtCreate++;
        }
      }
      const finals = await Promise.all(ids.map((id) => runtime.waitFor(id)));
      const counts = finals.reduce<Record<string, number>>(
        (c, a) => ({ ...c, [a.status]: (c[a.status] ?? 0) + 1 }),
        {},
      );
      expect(counts.COMPLETED).toBeGreaterThan(0);
      expect((counts.OUT_OF_CREDITS ?? 0) + refusedAtCreate).toBeGreaterThan(0);
      expect((counts.COMPLETED ?? 0) + (counts.OUT_OF_CREDITS ?? 0)).toBe(ids.length);
      await runtime.whenIdle();
      const account = (await storage.getAccount('local'))!;
      const ledger = await storage.listLedger('local');
      expect(account.balance).toBeGreaterThanOrEqual(0);
      expect(account.reserved).toBe(0);
      expect(ledger.reduce((s, l) => s + l.amount, 0)).toBe(account.balance);
      const spent = finals.reduce((s, a) => s + Math.round(a.credits_spent * 1e6), 0);
      expect(spent).toBe(150_000_000 - account.balance);
      expect(violations).toEqual([]);
      await runtime.close();
      rmSync(dir, { recursive: true, force: true });
    });
  }
});
