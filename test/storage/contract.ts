/**
 * The one behaviour every {@link StorageAdapter} must have. `memoryStorage()` is the reference; each adapter's test
 * file only builds an adapter and calls {@link storageContract}. Timestamps are fixed, so runs are deterministic.
 */
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type {
  AccountRow,
  AgentRow,
  ApiKeyRow,
  ArtifactLimits,
  ArtifactRow,
  ChildSpec,
  ConsoleSessionRow,
  IdempotencyRecord,
  LedgerRow,
  MessageRow,
  MonitorRow,
  OptOutRow,
  OutboxRateLimits,
  OutboxRow,
  PageReadRow,
  Settlement,
  StorageAdapter,
  TimerRow,
  ToolCallRow,
  TurnRow,
} from '../../src/storage/adapter.js';
import { AGENT_STATUSES } from '../../src/base/status.js';
import { MAX_STATUS_MARKS } from '../../src/storage/adapter.js';
import { MAX_NEEDLE_CHARS, MAX_SEARCH_MATCHES, SEARCH_PREFIX_CHARS } from '../../src/storage/search.js';

export interface StorageUnderTest {
  /** A fresh, empty adapter; the suite calls `init()` on it. */
  storage: StorageAdapter;
  /** A new adapter over the same data, for after `close()`; the suite calls `init()` on it. Omit if not durable. */
  reopen?: () => Promise<StorageAdapter>;
  /** Removes what the adapter left behind (files, schemas); called after `close()`. */
  cleanup?: () => Promise<void>;
}

// ---- fixtures ---------------------------------------------------------------------------------------------------

const T0 = Date.UTC(2025, 0, 1);
/** The fixed timestamp `seconds` after 2025-01-01T00:00:00.000Z. */
export const at = (seconds: number): string => new Date(T0 + seconds * 1000).toISOString();

const ACCT = 'acct-a';

/** An account row for tests: subscribed, nothing held, created at `at(0)`. */
export function account(id: string, balance: number, extra: Partial<AccountRow> = {}): AccountRow {
  return { id, name: `Account ${id}`, subscription_active: true, balance, reserved: 0, created_at: at(0), ...extra };
}

/** A root agent row of the test account for tests, ACTIVE, created at `at(0)`. */
export function agent(id: string, extra: Partial<AgentRow> = {}): AgentRow {
  return {
    agent_id: id,
    account_id: ACCT,
    parent_id: null,
    root_id: id,
    spawn_key: null,
    goal: `goal of ${id}`,
    model: 'svc-1-lite',
    status: 'ACTIVE',
    progress: 0,
    status_message: '',
    token_count: 0,
    message_count: 1,
    credits_spent: 0,
    sub_agent_count: 0,
    max_credits: null,
    tree_spent: 0,
    tree_reserved: 0,
    step_count: 0,
    started: true,
    active_ms: 0,
    active_since: at(0),
    plan: null,
    spec: null,
    created_at: at(0),
    updated_at: at(0),
    trace_context: null,
    ...extra,
  };
}

function child(id: string, parent: AgentRow, extra: Partial<AgentRow> = {}): AgentRow {
  return agent(id, {
    account_id: parent.account_id,
    parent_id: parent.agent_id,
    root_id: parent.root_id,
    status: 'STARTING_UP',
    started: false,
    active_since: null,
    ...extra,
  });
}

function message(agentId: string, n: number, role: MessageRow['role'] = 'ASSISTANT'): MessageRow {
  return {
    message_id: `${agentId}/m${n}`,
    agent_id: agentId,
    role,
    text: `message ${n} of ${agentId}`,
    timestamp: at(n),
  };
}

function turn(agentId: string, idx: number): TurnRow {
  const role = idx % 2 === 0 ? 'user' : 'assistant';
  return {
    agent_id: agentId,
    idx,
    role,
    content: JSON.stringify([{ type: 'text', text: `turn ${idx}` }]),
    created_at: at(idx),
  };
}

function toolCall(agentId: string, toolUseId: string, turnIdx: number, extra: Partial<ToolCallRow> = {}): ToolCallRow {
  return {
    agent_id: agentId,
    tool_use_id: toolUseId,
    turn_idx: turnIdx,
    name: 'web_search',
    input: JSON.stringify({ query: toolUseId }),
    status: 'started',
    idempotent: true,
    result: null,
    is_error: false,
    updated_at: at(turnIdx),
    ...extra,
  };
}

function settlement(
  reservationId: string,
  of: AgentRow,
  cost: number,
  extra: Partial<Settlement['ledger']> = {},
): Settlement {
  return {
    reservation_id: reservationId,
    root_id: of.root_id,
    ledger: {
      account_id: of.account_id,
      agent_id: of.agent_id,
      kind: 'model',
      item: 'svc-1-lite',
      tokens_in: 100,
      tokens_out: 20,
      created_at: at(5),
      cost,
      ...extra,
    },
  };
}

function apiKey(id: string, accountId: string): ApiKeyRow {
  return {
    id,
    account_id: accountId,
    name: `key ${id}`,
    hash: `hash-of-${id}`,
    last4: id.slice(-4),
    created_at: at(1),
  };
}

const SPEC: ChildSpec = {
  instructions: 'Extract the price of the product on the page. Say "n/a" — never guess.',
  tools: ['read_page', 'web_search'],
  result_schema: { type: 'object', properties: { price: { type: ['number', 'null'] } }, required: ['price'] },
  max_steps: 8,
};

function artifact(agentId: string, artifactId: string, size: number, extra: Partial<ArtifactRow> = {}): ArtifactRow {
  return {
    artifact_id: artifactId,
    agent_id: agentId,
    account_id: ACCT,
    name: `${artifactId}.png`,
    mime_type: 'image/png',
    size,
    created_at: at(size),
    ...extra,
  };
}

/** `size` bytes that differ from artifact to artifact (every byte value occurs, 0 and 255 included). */
const bytes = (size: number, seed = 0): Uint8Array => Uint8Array.from({ length: size }, (_, i) => (i * 7 + seed) % 256);

const sha256 = (text: string): string => createHash('sha256').update(text, 'utf8').digest('hex');

/** A page read of `text` by a call of `agentId`, with the text's hash. */
function pageRead(agentId: string, toolUseId: string, text: string, extra: Partial<PageReadRow> = {}): PageReadRow {
  return {
    agent_id: agentId,
    tool_use_id: toolUseId,
    url: `https://example.com/${toolUseId}`,
    final_url: `https://www.example.com/${toolUseId}`,
    title: `Page read by ${toolUseId}`,
    content_sha256: sha256(text),
    retrieved_at: at(20),
    ...extra,
  };
}

/** Inserts an agent with its goal message and first turn. */
async function insertWithLog(s: StorageAdapter, a: AgentRow): Promise<void> {
  await s.insertAgents([a], [message(a.agent_id, 0, 'USER')], [turn(a.agent_id, 0)]);
}

const sorted = (ids: readonly string[]): string[] => [...ids].sort();

async function expectLedgerInvariant(s: StorageAdapter, accountId: string): Promise<void> {
  const acct = await s.getAccount(accountId);
  const ledger = await s.listLedger(accountId);
  expect(ledger.reduce((sum, row) => sum + row.amount, 0)).toBe(acct!.balance);
  expect(acct!.balance).toBeGreaterThanOrEqual(0);
}

// ---- the suite --------------------------------------------------------------------------------------------------

export function storageContract(name: string, makeStorage: () => Promise<StorageUnderTest>): void {
  describe(`StorageAdapter contract: ${name}`, () => {
    let sut: StorageUnderTest;
    let s: StorageAdapter;

    beforeEach(async () => {
      sut = await makeStorage();
      s = sut.storage;
      await s.init();
    });

    afterEach(async () => {
      await s.close();
      await sut.cleanup?.();
    });

    describe('lifecycle', () => {
      it('has a kind and an idempotent init()', async () => {
        expect(s.kind).toMatch(/^[a-z]+$/);
        await s.createAccount(account(ACCT, 10));
        await s.init();
        expect((await s.getAccount(ACCT))?.balance).toBe(10);
      });
    });

    describe('accounts', () => {
      it('creates and reads an account; reserved always starts at 0', async () => {
        await s.createAccount(account(ACCT, 1_000, { reserved: 99, subscription_active: false }));
        expect(await s.getAccount(ACCT)).toEqual(account(ACCT, 1_000, { subscription_active: false }));
        expect(await s.getAccount('nope')).toBeNull();
      });

      it('writes a positive opening balance as a topup ledger row, and a zero one not at all', async () => {
        await s.createAccount(account(ACCT, 1_000));
        await s.createAccount(account('acct-b', 0));
        expect(await s.listLedger(ACCT)).toEqual([
          {
            account_id: ACCT,
            agent_id: null,
            kind: 'topup',
            item: null,
            tokens_in: 0,
            tokens_out: 0,
            amount: 1_000,
            created_at: at(0),
          },
        ]);
        expect(await s.listLedger('acct-b')).toEqual([]);
      });

      it('refuses a second account with the same id', async () => {
        await s.createAccount(account(ACCT, 5));
        await expect(s.createAccount(account(ACCT, 7))).rejects.toThrow();
        expect((await s.getAccount(ACCT))?.balance).toBe(5);
        expect(await s.listLedger(ACCT)).toHaveLength(1);
      });

      it('lists accounts in creation order', async () => {
        for (const id of ['acct-z', 'acct-a', 'acct-m']) await s.createAccount(account(id, 1));
        expect((await s.listAccounts()).map((a) => a.id)).toEqual(['acct-z', 'acct-a', 'acct-m']);
      });

      it('switches the subscription', async () => {
        await s.createAccount(account(ACCT, 0));
        expect(await s.setSubscription(ACCT, false)).toEqual(account(ACCT, 0, { subscription_active: false }));
        expect((await s.getAccount(ACCT))?.subscription_active).toBe(false);
        expect((await s.setSubscription(ACCT, true))?.subscription_active).toBe(true);
        expect(await s.setSubscription('nope', true)).toBeNull();
      });

      it('adds credits with a ledger row, and ignores unknown accounts', async () => {
        await s.createAccount(account(ACCT, 100));
        await s.createAccount(account('acct-b', 100));
        const refund: LedgerRow = {
          account_id: ACCT,
          agent_id: 'agent-1',
          kind: 'refund',
          item: 'web_search',
          tokens_in: 0,
          tokens_out: 0,
          amount: 25,
          created_at: at(3),
        };
        const topup: LedgerRow = {
          ...refund,
          agent_id: null,
          kind: 'topup',
          item: null,
          amount: 500,
          created_at: at(4),
        };
        expect((await s.addCredits(refund))?.balance).toBe(125);
        expect(await s.addCredits(topup)).toEqual(account(ACCT, 625));
        expect(await s.addCredits({ ...topup, account_id: 'nope' })).toBeNull();
        expect(await s.listLedger('nope')).toEqual([]);
        expect((await s.listLedger(ACCT)).slice(1)).toEqual([refund, topup]);
        expect(await s.listLedger('acct-b')).toHaveLength(1);
        await expectLedgerInvariant(s, ACCT);
      });

      it("lists one agent's own ledger rows, oldest first, the newest up to a limit", async () => {
        await s.createAccount(account(ACCT, 100));
        await s.createAccount(account('acct-b', 100));
        const row = (agentId: string | null, amount: number, accountId = ACCT): LedgerRow => ({
          account_id: accountId,
          agent_id: agentId,
          kind: agentId === null ? 'topup' : 'refund',
          item: agentId === null ? null : 'web_search',
          tokens_in: 0,
          tokens_out: 0,
          amount,
          created_at: at(amount),
        });
        // agent-1's rows interleaved with another agent's, the account's top-ups and another account's agent.
        const written = [
          row('agent-1', 1),
          row('agent-2', 2),
          row(null, 3),
          { ...row('agent-1', 4), tokens_in: 9, tokens_cache_read: 7 },
          row('agent-3', 5, 'acct-b'),
          row('agent-1', 6),
          row('agent-2', 7),
          row('agent-1', 8),
        ];
        for (const r of written) await s.addCredits(r);
        const own = written.filter((r) => r.agent_id === 'agent-1');

        expect(await s.listAgentLedger('agent-1', 10)).toEqual({ rows: own, truncated: false });
        expect(await s.listAgentLedger('agent-1', 4)).toEqual({ rows: own, truncated: false });
        // Past the limit: the newest rows, still oldest first, and `truncated`.
        expect(await s.listAgentLedger('agent-1', 2)).toEqual({ rows: own.slice(2), truncated: true });
        expect(await s.listAgentLedger('agent-1', 1)).toEqual({ rows: own.slice(3), truncated: true });
        expect(await s.listAgentLedger('agent-3', 5)).toEqual({ rows: [written[4]], truncated: false });
        expect(await s.listAgentLedger('nope', 5)).toEqual({ rows: [], truncated: false });
      });

      it("pages an account's ledger newest first by keyset, other accounts' rows left out", async () => {
        await s.createAccount(account(ACCT, 100));
        await s.createAccount(account('acct-b', 100));
        const row = (amount: number, accountId = ACCT): LedgerRow => ({
          account_id: accountId,
          agent_id: null,
          kind: 'refund',
          item: 'web_search',
          tokens_in: 0,
          tokens_out: 0,
          amount,
          created_at: at(amount),
        });
        // Interleaved with another account's rows, after each account's opening top-up.
        for (const amount of [1, 2, 3, 4, 5]) {
          await s.addCredits(row(amount));
          await s.addCredits(row(amount * 10, 'acct-b'));
        }
        const amounts = (page: { rows: LedgerRow[] }) => page.rows.map((r) => r.amount);

        const first = await s.listLedgerPage(ACCT, { limit: 2 });
        expect(amounts(first)).toEqual([5, 4]);
        expect(first.rows[0]).toMatchObject({ ...row(5), seq: expect.any(Number) });
        expect(first.next_before).toBe(first.rows[1]!.seq);
        const second = await s.listLedgerPage(ACCT, { limit: 2, before: first.next_before! });
        expect(amounts(second)).toEqual([3, 2]);
        const last = await s.listLedgerPage(ACCT, { limit: 2, before: second.next_before! });
        expect(amounts(last)).toEqual([1, 100]); // down to the opening top-up
        expect(last.next_before).toBeNull();
        // A page that ends exactly at the oldest row says there is nothing older.
        expect((await s.listLedgerPage(ACCT, { limit: 6 })).next_before).toBeNull();
        expect(amounts(await s.listLedgerPage(ACCT, { limit: 100 }))).toEqual([5, 4, 3, 2, 1, 100]);
        // seq increases with the ledger's order.
        const seqs = (await s.listLedgerPage(ACCT, { limit: 100 })).rows.map((r) => r.seq);
        expect([...seqs].sort((x, y) => y - x)).toEqual(seqs);
        expect(amounts(await s.listLedgerPage('acct-b', { limit: 1 }))).toEqual([50]);
        expect(await s.listLedgerPage('nope', { limit: 5 })).toEqual({ rows: [], next_before: null });
        expect(await s.listLedgerPage(ACCT, { limit: 5, before: 1 })).toEqual({ rows: [], next_before: null });
      });

      it("sums an account's model and tool spend by item in the storage", async () => {
        await s.createAccount(account(ACCT, 10_000));
        await s.createAccount(account('acct-b', 10_000));
        const a = agent('spender');
        const b = agent('other-spender', { account_id: 'acct-b' });
        await s.insertAgents([a, b], [], []);
        await s.settle([
          settlement('r1', a, 300, { tokens_in: 100, tokens_out: 20 }),
          settlement('r2', a, 200, { tokens_in: 50, tokens_out: 5 }),
          settlement('r3', a, 40, { kind: 'tool', item: 'web_search', tokens_in: 0, tokens_out: 0 }),
          settlement('r4', a, 700, { item: 'svc-1-ultra', tokens_in: 7, tokens_out: 3 }),
          settlement('r5', b, 999, { tokens_in: 1, tokens_out: 1 }),
        ]);
        // A refund of a tool is no spend on it: only `model` and `tool` rows are summed.
        await s.addCredits({
          account_id: ACCT,
          agent_id: 'spender',
          kind: 'refund',
          item: 'web_search',
          tokens_in: 0,
          tokens_out: 0,
          amount: 40,
          created_at: at(9),
        });
        const sums = (await s.sumLedgerSpend(ACCT)).sort((x, y) => (x.item < y.item ? -1 : 1));
        expect(sums).toEqual([
          { kind: 'model', item: 'svc-1-lite', amount: -500, tokens_in: 150, tokens_out: 25, count: 2 },
          { kind: 'model', item: 'svc-1-ultra', amount: -700, tokens_in: 7, tokens_out: 3, count: 1 },
          { kind: 'tool', item: 'web_search', amount: -40, tokens_in: 0, tokens_out: 0, count: 1 },
        ]);
        expect(await s.sumLedgerSpend('nope')).toEqual([]);
      });
    });

    describe('reservations', () => {
      let root: AgentRow;
      beforeEach(async () => {
        await s.createAccount(account(ACCT, 1_000));
        root = agent('root', { max_credits: 600 });
        await s.insertAgents([root, child('kid', root)], [], []);
      });

      it('holds the amount on the account and on the root of the tree', async () => {
        expect(
          await s.reserve({ id: 'r1', account_id: ACCT, agent_id: 'kid', root_id: 'root', amount: 200 }),
        ).toBeNull();
        expect((await s.getAccount(ACCT))?.reserved).toBe(200);
        expect((await s.getAccount(ACCT))?.balance).toBe(1_000);
        expect((await s.getAgent('root'))?.tree_reserved).toBe(200);
        expect((await s.getAgent('kid'))?.tree_reserved).toBe(0);
      });

      it("refuses with 'account' when the available balance (balance - reserved) does not cover it", async () => {
        await s.createAccount(account('small', 100));
        const small = agent('small-root', { account_id: 'small' });
        await s.insertAgents([small], [], []);
        const req = { account_id: 'small', agent_id: 'small-root', root_id: 'small-root' };
        expect(await s.reserve({ ...req, id: 'a', amount: 60 })).toBeNull();
        expect(await s.reserve({ ...req, id: 'b', amount: 41 })).toBe('account');
        expect(await s.reserve({ ...req, id: 'c', amount: 40 })).toBeNull(); // exactly what is left
        expect(await s.reserve({ ...req, id: 'd', amount: 1 })).toBe('account');
        expect((await s.getAccount('small'))?.reserved).toBe(100);
        expect(await s.reserve({ ...req, id: 'e', account_id: 'nope', amount: 1 })).toBe('account');
      });

      it("refuses with 'tree_cap' when tree_spent + tree_reserved would pass the root's max_credits", async () => {
        const req = { account_id: ACCT, agent_id: 'kid', root_id: 'root' };
        expect(await s.reserve({ ...req, id: 'r1', amount: 400 })).toBeNull();
        expect(await s.reserve({ ...req, id: 'r2', amount: 201 })).toBe('tree_cap');
        expect(await s.settle([settlement('r1', (await s.getAgent('kid'))!, 300)])).toEqual([300]);
        expect(await s.reserve({ ...req, id: 'r3', amount: 301 })).toBe('tree_cap');
        expect(await s.reserve({ ...req, id: 'r4', amount: 300 })).toBeNull(); // 300 spent + 300 held = the cap
        expect(await s.reserve({ ...req, id: 'r5', amount: 1 })).toBe('tree_cap');
        // A refusal holds nothing.
        expect((await s.getAccount(ACCT))?.reserved).toBe(300);
        expect((await s.getAgent('root'))?.tree_reserved).toBe(300);
      });

      it('checks the account before the tree cap', async () => {
        expect(await s.reserve({ id: 'r1', account_id: ACCT, agent_id: 'kid', root_id: 'root', amount: 5_000 })).toBe(
          'account',
        );
      });

      it('has no cap without max_credits', async () => {
        await s.insertAgents([agent('free')], [], []);
        expect(
          await s.reserve({ id: 'r1', account_id: ACCT, agent_id: 'free', root_id: 'free', amount: 1_000 }),
        ).toBeNull();
      });

      it('releases a hold; unknown and already released ids are ignored', async () => {
        await s.reserve({ id: 'r1', account_id: ACCT, agent_id: 'kid', root_id: 'root', amount: 100 });
        await s.reserve({ id: 'r2', account_id: ACCT, agent_id: 'kid', root_id: 'root', amount: 50 });
        await s.release('r1');
        await s.release('r1');
        await s.release('nope');
        expect((await s.getAccount(ACCT))?.reserved).toBe(50);
        expect((await s.getAgent('root'))?.tree_reserved).toBe(50);
        expect(await s.listLedger(ACCT)).toHaveLength(1);
      });

      it('releases every hold of the agents given (releaseAgentReservations)', async () => {
        await s.insertAgents([child('kid2', root), child('kid3', root)], [], []);
        const hold = (id: string, agentId: string, amount: number) =>
          s.reserve({ id, account_id: ACCT, agent_id: agentId, root_id: 'root', amount });
        await hold('a1', 'kid', 10);
        await hold('a2', 'kid', 20);
        await hold('b1', 'kid2', 40);
        await hold('c1', 'kid3', 80);
        expect(await s.releaseAgentReservations(['kid', 'kid2', 'unknown'])).toBe(3);
        expect((await s.getAccount(ACCT))?.reserved).toBe(80);
        expect((await s.getAgent('root'))?.tree_reserved).toBe(80);
        expect(await s.releaseAgentReservations(['kid', 'kid2'])).toBe(0);
        expect(await s.releaseAgentReservations([])).toBe(0);
        await s.release('c1');
        expect((await s.getAccount(ACCT))?.reserved).toBe(0);
      });
    });

    describe('settlement', () => {
      let root: AgentRow;
      let kid: AgentRow;
      beforeEach(async () => {
        await s.createAccount(account(ACCT, 1_000));
        root = agent('root', { max_credits: 10_000 });
        kid = child('kid', root);
        await s.insertAgents([root, kid], [], []);
      });

      it('drops the hold, debits the cost, writes a negative ledger row and counts the spend on agent and tree', async () => {
        await s.reserve({ id: 'r1', account_id: ACCT, agent_id: 'kid', root_id: 'root', amount: 200 });
        expect(await s.settle([settlement('r1', kid, 150)])).toEqual([150]);
        expect(await s.getAccount(ACCT)).toEqual(account(ACCT, 850));
        const r = await s.getAgent('root');
        expect([r?.tree_spent, r?.tree_reserved, r?.credits_spent]).toEqual([150, 0, 0]);
        expect((await s.getAgent('kid'))?.credits_spent).toBe(150);
        expect((await s.listLedger(ACCT)).at(-1)).toEqual({
          account_id: ACCT,
          agent_id: 'kid',
          kind: 'model',
          item: 'svc-1-lite',
          tokens_in: 100,
          tokens_out: 20,
          amount: -150,
          created_at: at(5),
        });
        await expectLedgerInvariant(s, ACCT);
      });

      it('keeps the prompt-cache token counts of a model call, by settle and by a step commit', async () => {
        await s.reserve({ id: 'r1', account_id: ACCT, agent_id: 'kid', root_id: 'root', amount: 200 });
        await s.reserve({ id: 'r2', account_id: ACCT, agent_id: 'root', root_id: 'root', amount: 200 });
        await s.settle([settlement('r1', kid, 50, { tokens_cache_write: 30, tokens_cache_read: 60 })]);
        await s.commitStep({
          agent_id: 'root',
          settlements: [settlement('r2', root, 40, { tokens_cache_read: 90 })],
          patch: { updated_at: at(6) },
        });
        const rows = (await s.listLedger(ACCT)).filter((l) => l.kind === 'model');
        expect(rows.map((l) => [l.tokens_in, l.tokens_cache_write, l.tokens_cache_read, l.amount])).toEqual([
          [100, 30, 60, -50],
          [100, undefined, 90, -40],
        ]);
        await expectLedgerInvariant(s, ACCT);
      });

      it("keeps a model call's latency, by settle, by a step commit and by commits batched together", async () => {
        await s.insertAgents([agent('other')], [], []);
        await s.settle([settlement('r1', kid, 10, { latency_ms: 1_234 })]);
        await s.commitStep({
          agent_id: 'root',
          settlements: [settlement('r2', root, 20, { latency_ms: 0 }), settlement('r3', root, 5, { kind: 'tool' })],
          patch: { updated_at: at(6) },
        });
        // Started together: a backend that groups commits writes these in one batch.
        await Promise.all([
          s.commitStep({
            agent_id: 'root',
            settlements: [settlement('r4', root, 30, { latency_ms: 987_654 })],
            patch: { updated_at: at(7) },
          }),
          s.commitStep({
            agent_id: 'other',
            settlements: [settlement('r5', agent('other'), 40, { latency_ms: 42 })],
            patch: { updated_at: at(7) },
          }),
          // The same agent twice in a batch goes one commit at a time.
          s.commitStep({
            agent_id: 'root',
            settlements: [settlement('r6', root, 50)],
            patch: { updated_at: at(8) },
          }),
        ]);
        const latencies = (rows: LedgerRow[]) => rows.map((l) => [l.agent_id, -l.amount, l.latency_ms]);
        expect(latencies((await s.listAgentLedger('root', 10)).rows)).toEqual([
          ['root', 20, 0],
          ['root', 5, undefined],
          ['root', 30, 987_654],
          ['root', 50, undefined],
        ]);
        expect((await s.listAgentLedger('kid', 10)).rows).toEqual([
          {
            account_id: ACCT,
            agent_id: 'kid',
            kind: 'model',
            item: 'svc-1-lite',
            tokens_in: 100,
            tokens_out: 20,
            amount: -10,
            created_at: at(5),
            latency_ms: 1_234,
          },
        ]);
        expect(latencies((await s.listAgentLedger('other', 10)).rows)).toEqual([['other', 40, 42]]);
        // The account's ledger carries them too; a row without one has no such field.
        const all = await s.listLedger(ACCT);
        expect(all.filter((l) => 'latency_ms' in l).map((l) => l.latency_ms)).toEqual([1_234, 0, 987_654, 42]);
        await expectLedgerInvariant(s, ACCT);
      });

      it('debits a settlement whose hold is already gone', async () => {
        await s.reserve({ id: 'r1', account_id: ACCT, agent_id: 'kid', root_id: 'root', amount: 200 });
        await s.release('r1');
        expect(await s.settle([settlement('r1', kid, 70), settlement('never-held', root, 30)])).toEqual([70, 30]);
        expect(await s.getAccount(ACCT)).toEqual(account(ACCT, 900));
        expect((await s.getAgent('root'))?.tree_spent).toBe(100);
        expect((await s.getAgent('root'))?.credits_spent).toBe(30);
        await expectLedgerInvariant(s, ACCT);
      });

      it('clamps the charge at the balance, so the balance never goes below zero', async () => {
        await s.reserve({ id: 'r1', account_id: ACCT, agent_id: 'kid', root_id: 'root', amount: 1_000 });
        expect(await s.settle([settlement('r1', kid, 2_500), settlement('r2', kid, 10)])).toEqual([1_000, 0]);
        expect(await s.getAccount(ACCT)).toEqual(account(ACCT, 0));
        expect((await s.listLedger(ACCT)).map((l) => l.amount)).toEqual([1_000, -1_000, 0]);
        expect((await s.getAgent('kid'))?.credits_spent).toBe(1_000);
        expect((await s.getAgent('root'))?.tree_spent).toBe(1_000);
        await expectLedgerInvariant(s, ACCT);
      });

      it('charges nothing to an unknown account but still drops the hold', async () => {
        await s.reserve({ id: 'r1', account_id: ACCT, agent_id: 'kid', root_id: 'root', amount: 100 });
        expect(await s.settle([settlement('r1', kid, 50, { account_id: 'nope' })])).toEqual([0]);
        expect(await s.listLedger('nope')).toEqual([]);
        expect(await s.getAccount(ACCT)).toEqual(account(ACCT, 1_000));
        expect((await s.getAgent('root'))?.tree_reserved).toBe(0);
      });

      it('keeps sum(ledger) === balance >= 0 and the holds consistent under any sequence of operations', async () => {
        type Op =
          | { op: 'reserve'; amount: number }
          | { op: 'settle'; pick: number; cost: number }
          | { op: 'release'; pick: number }
          | { op: 'topup'; amount: number };
        const opArb: fc.Arbitrary<Op> = fc.oneof(
          fc.record({ op: fc.constant('reserve' as const), amount: fc.integer({ min: 1, max: 400 }) }),
          fc.record({ op: fc.constant('settle' as const), pick: fc.nat(), cost: fc.integer({ min: 0, max: 600 }) }),
          fc.record({ op: fc.constant('release' as const), pick: fc.nat() }),
          fc.record({ op: fc.constant('topup' as const), amount: fc.integer({ min: 1, max: 300 }) }),
        );
        let run = 0;
        await fc.assert(
          fc.asyncProperty(fc.array(opArb, { maxLength: 25 }), async (ops) => {
            run++;
            const acct = `prop-${run}`;
            const tree = agent(`prop-root-${run}`, { account_id: acct, max_credits: 2_000 });
            await s.createAccount(account(acct, 500));
            await s.insertAgents([tree], [], []);
            // The model: what the adapter should hold.
            let balance = 500;
            let spent = 0;
            const holds = new Map<string, number>();
            let n = 0;
            for (const o of ops) {
              const ids = [...holds.keys()];
              if (o.op === 'reserve') {
                const id = `${acct}/r${n++}`;
                const held = [...holds.values()].reduce((x, y) => x + y, 0);
                const expected =
                  balance - held < o.amount ? 'account' : spent + held + o.amount > 2_000 ? 'tree_cap' : null;
                expect(
                  await s.reserve({
                    id,
                    account_id: acct,
                    agent_id: tree.agent_id,
                    root_id: tree.agent_id,
                    amount: o.amount,
                  }),
                ).toBe(expected);
                if (expected === null) holds.set(id, o.amount);
              } else if (o.op === 'settle') {
                const id = ids.length ? ids[o.pick % ids.length]! : `${acct}/gone`;
                const charge = Math.min(o.cost, balance);
                expect(await s.settle([settlement(id, tree, o.cost)])).toEqual([charge]);
                holds.delete(id);
                balance -= charge;
                spent += charge;
              } else if (o.op === 'release') {
                const id = ids.length ? ids[o.pick % ids.length]! : `${acct}/gone`;
                await s.release(id);
                holds.delete(id);
              } else {
                await s.addCredits({
                  account_id: acct,
                  agent_id: null,
                  kind: 'topup',
                  item: null,
                  tokens_in: 0,
                  tokens_out: 0,
                  amount: o.amount,
                  created_at: at(9),
                });
                balance += o.amount;
              }
              const held = [...holds.values()].reduce((x, y) => x + y, 0);
              expect(await s.getAccount(acct)).toMatchObject({ balance, reserved: held });
              expect(await s.getAgent(tree.agent_id)).toMatchObject({
                tree_spent: spent,
                tree_reserved: held,
                credits_spent: spent,
              });
              await expectLedgerInvariant(s, acct);
            }
          }),
          { seed: 20_250_101, numRuns: 30 },
        );
      });
    });

    describe('api keys', () => {
      it('inserts, lists by account, finds by hash and deletes only within the account', async () => {
        const [k1, k2, k3] = [apiKey('key-1111', 'acct-a'), apiKey('key-2222', 'acct-a'), apiKey('key-3333', 'acct-b')];
        for (const k of [k1, k2, k3]) await s.insertApiKey(k);
        await s.createAccount(account('acct-b', 5));
        expect(await s.listApiKeys('acct-a')).toEqual([k1, k2]);
        expect(await s.listApiKeys('acct-b')).toEqual([k3]);
        expect(await s.listApiKeys('nope')).toEqual([]);
        expect(await s.findApiKeyByHash('hash-of-key-2222')).toEqual(k2);
        expect(await s.findApiKeyByHash('hash-of-nothing')).toBeNull();
        expect(await s.findAccountByKeyHash('hash-of-key-3333')).toEqual(account('acct-b', 5));
        expect(await s.findAccountByKeyHash('hash-of-key-1111')).toBeNull(); // its account does not exist
        expect(await s.findAccountByKeyHash('hash-of-nothing')).toBeNull();
        expect(await s.deleteApiKey('acct-b', 'key-1111')).toBe(false);
        expect(await s.deleteApiKey('acct-a', 'key-1111')).toBe(true);
        expect(await s.deleteApiKey('acct-a', 'key-1111')).toBe(false);
        expect(await s.findApiKeyByHash('hash-of-key-1111')).toBeNull();
        expect(await s.findAccountByKeyHash('hash-of-key-1111')).toBeNull();
        expect(await s.listApiKeys('acct-a')).toEqual([k2]);
      });
    });

    describe('api key last use', () => {
      const key = (id: string, account: string, hash: string): ApiKeyRow => ({
        id,
        account_id: account,
        name: id,
        hash,
        last4: hash.slice(-4),
        created_at: at(0),
      });

      it('keeps the latest use of each key, per account, and forgets it with the key', async () => {
        await s.createAccount(account('acct-b', 0));
        await s.insertApiKey(key('k1', ACCT, 'h1'));
        await s.insertApiKey(key('k2', ACCT, 'h2'));
        await s.insertApiKey(key('k3', 'acct-b', 'h3'));
        expect(await s.apiKeysLastUsed(ACCT)).toEqual({});
        await s.touchApiKey('h1', at(10));
        await s.touchApiKey('h1', at(5)); // earlier: ignored
        await s.touchApiKey('h3', at(7));
        await s.touchApiKey('unknown', at(8));
        expect(await s.apiKeysLastUsed(ACCT)).toEqual({ k1: at(10) });
        await s.touchApiKey('h2', at(20));
        await s.touchApiKey('h1', at(30));
        expect(await s.apiKeysLastUsed(ACCT)).toEqual({ k1: at(30), k2: at(20) });
        expect(await s.apiKeysLastUsed('acct-b')).toEqual({ k3: at(7) });
        await s.deleteApiKey(ACCT, 'k1');
        expect(await s.apiKeysLastUsed(ACCT)).toEqual({ k2: at(20) });
        // The key rows themselves are as inserted.
        expect(await s.listApiKeys(ACCT)).toEqual([key('k2', ACCT, 'h2')]);
      });
    });

    describe('console sessions', () => {
      const session = (id: string, expires: number, extra: Partial<ConsoleSessionRow> = {}): ConsoleSessionRow => ({
        id_hash: id,
        account_id: ACCT,
        key_hash: 'h1',
        key_id: 'k1',
        expires_at: at(expires),
        ended: null,
        ...extra,
      });

      it('stores, ends (upsert) and reads sessions, and deletes the expired ones', async () => {
        expect(await s.getConsoleSession('s1')).toBeNull();
        await s.putConsoleSession(session('s1', 100));
        await s.putConsoleSession(session('s2', 10));
        expect(await s.getConsoleSession('s1')).toEqual(session('s1', 100));
        const ended = session('s1', 100, { ended: '{"code":"unauthorized","message":"You signed out."}' });
        await s.putConsoleSession(ended);
        expect(await s.getConsoleSession('s1')).toEqual(ended);
        expect(await s.deleteExpiredConsoleSessions(at(50))).toBe(1);
        expect(await s.getConsoleSession('s2')).toBeNull();
        expect(await s.getConsoleSession('s1')).toEqual(ended);
        expect(await s.deleteExpiredConsoleSessions(at(50))).toBe(0);
      });
    });

    describe('agents', () => {
      beforeEach(async () => {
        await s.createAccount(account(ACCT, 1_000));
      });

      it('round-trips every field, with booleans, nulls, fractions and JSON text intact', async () => {
        const root = agent('root', {
          max_credits: 5_000_000,
          plan: JSON.stringify({ steps: [{ title: 'look', status: 'done' }] }),
          progress: 0.25,
          status_message: 'Searching: "ünïcødé" 🚀',
          token_count: 1234,
          step_count: 3,
          active_ms: 4500,
          tree_spent: 10,
          tree_reserved: 0, // not stored: the sum of the tree's open holds
          credits_spent: 5,
          message_count: 6,
          updated_at: at(7),
        });
        const kid = child('kid', root, {
          spawn_key: 'call_1:0',
          goal: 'line one\nline two',
          trace_context: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
        });
        // Every column holds a value no other column has, so a column read into the wrong field shows.
        const grandchild = child('grandchild', kid, {
          spawn_key: 'call_9:3',
          model: 'svc-1-ultra',
          status: 'PAUSED',
          started: true,
          active_since: at(30),
          plan: '{"p":1}',
          sub_agent_count: 31,
          token_count: 32,
          message_count: 33,
          credits_spent: 34,
          max_credits: 35,
          tree_spent: 36,
          tree_reserved: 0,
          step_count: 38,
          active_ms: 39,
          progress: 0.4,
          status_message: 'status of grandchild',
          created_at: at(41),
          updated_at: at(42),
        });
        await s.insertAgents([root, kid, grandchild], [], []);
        expect(await s.getAgent('root')).toEqual({ ...root, sub_agent_count: 1 });
        expect(await s.getAgent('kid')).toEqual({ ...kid, sub_agent_count: 1 });
        expect(await s.getAgent('grandchild')).toEqual(grandchild);
        expect((await s.listAgents({ limit: 10 })).rows).toEqual([
          grandchild,
          { ...kid, sub_agent_count: 1 },
          { ...root, sub_agent_count: 1 },
        ]);
        expect(await s.findAgentsBySpawnKey('kid', 'call_9')).toEqual([grandchild]);
        expect(await s.getAgent('nope')).toBeNull();
      });

      it("inserts first messages and turns, and bumps each existing parent's sub_agent_count", async () => {
        const root = agent('root');
        await insertWithLog(s, root);
        const kids = [child('k1', root), child('k2', root)];
        await s.insertAgents(
          kids,
          kids.map((k) => message(k.agent_id, 0, 'USER')),
          kids.map((k) => turn(k.agent_id, 0)),
        );
        expect((await s.getAgent('root'))?.sub_agent_count).toBe(2);
        // A parent and its child in one batch.
        const mid = child('mid', root);
        await s.insertAgents([mid, child('leaf', mid)], [], []);
        expect((await s.getAgent('mid'))?.sub_agent_count).toBe(1);
        expect((await s.getAgent('root'))?.sub_agent_count).toBe(3);
        expect(await s.listMessages('k2')).toEqual([message('k2', 0, 'USER')]);
        expect(await s.listTurns('k1')).toEqual([turn('k1', 0)]);
        expect(await s.listMessages('root')).toEqual([message('root', 0, 'USER')]);
      });

      it('inserts all or nothing', async () => {
        const root = agent('root');
        await insertWithLog(s, root);
        const fresh = child('fresh', root);
        await expect(
          s.insertAgents([fresh, agent('root')], [message('fresh', 0, 'USER')], [turn('fresh', 0)]),
        ).rejects.toThrow();
        expect(await s.getAgent('fresh')).toBeNull();
        expect(await s.listMessages('fresh')).toEqual([]);
        expect(await s.listTurns('fresh')).toEqual([]);
        expect(await s.getAgent('root')).toEqual(root);
        expect(await s.listMessages('root')).toEqual([message('root', 0, 'USER')]);
      });

      it('inserts a large batch in order: an id that exists names itself and writes nothing; goals are searchable', async () => {
        const root = agent('root');
        await insertWithLog(s, root);
        // 150 children: more than one SQL statement's worth where a backend batches rows.
        const kids = Array.from({ length: 150 }, (_, i) => child(`k${i}`, root, { goal: `kid number ${i}` }));
        const clash = [...kids.slice(0, 100), agent('root'), ...kids.slice(100)];
        await expect(s.insertAgents(clash, [], [])).rejects.toThrow('agent root exists');
        expect(await s.getAgent('k0')).toBeNull();
        expect((await s.getAgent('root'))?.sub_agent_count).toBe(0);
        await s.insertAgents(
          kids,
          kids.map((k) => message(k.agent_id, 0, 'USER')),
          kids.map((k) => turn(k.agent_id, 0)),
        );
        expect((await s.getAgent('root'))?.sub_agent_count).toBe(150);
        expect(await s.getAgent('k149')).toEqual(kids[149]);
        expect(await s.listTurns('k120')).toEqual([turn('k120', 0)]);
        const found = await s.searchAgents({
          account_id: root.account_id,
          parent_id: 'root',
          goal_contains: 'kid number 14',
          order: 'oldest',
          offset: 0,
          limit: 100,
        });
        expect(found.rows.map((a) => a.agent_id)).toEqual([
          'k14',
          ...Array.from({ length: 10 }, (_, i) => `k${140 + i}`),
        ]);
      });

      it('finds children by spawn key prefix, in creation order', async () => {
        const p = agent('p');
        const other = agent('other');
        await s.insertAgents([p, other], [], []);
        const keys = ['call_1:1', 'call_1:0', 'call_10:0', 'call_2:0', 'a%b:0', 'a_b:0', 'axb:0', '😀:0', '😁:0'];
        await s.insertAgents(
          [
            ...keys.map((k, i) => child(`c${i}`, p, { spawn_key: k })),
            child('no-key', p),
            child('elsewhere', other, { spawn_key: 'call_1:5' }),
          ],
          [],
          [],
        );
        const find = async (prefix: string) => (await s.findAgentsBySpawnKey('p', prefix)).map((a) => a.spawn_key);
        expect(await find('call_1:')).toEqual(['call_1:1', 'call_1:0']);
        expect(await find('call_1')).toEqual(['call_1:1', 'call_1:0', 'call_10:0']);
        expect(await find('a_b')).toEqual(['a_b:0']);
        expect(await find('a%')).toEqual(['a%b:0']);
        expect(await find('😀')).toEqual(['😀:0']);
        expect(await find('')).toEqual(keys);
        expect(await find('zzz')).toEqual([]);
        expect(await s.findAgentsBySpawnKey('nope', 'call_1')).toEqual([]);
        expect(await s.findAgentsBySpawnKey('p', 'call_1:1')).toEqual([await s.getAgent('c0')]);
      });

      it('counts children by status, by spawn key prefix', async () => {
        const p = agent('p');
        await s.insertAgents([p, agent('other')], [], []);
        await s.insertAgents(
          [
            child('a0', p, { spawn_key: 'call_1:0' }),
            child('a1', p, { spawn_key: 'call_1:1', status: 'COMPLETED' }),
            child('a2', p, { spawn_key: 'call_1:2', status: 'COMPLETED' }),
            child('a3', p, { spawn_key: 'call_1:3', status: 'FAILED' }),
            child('b0', p, { spawn_key: 'call_2:0', status: 'COMPLETED' }),
            child('n0', p),
            child('o0', (await s.getAgent('other'))!, { spawn_key: 'call_1:0' }),
          ],
          [],
          [],
        );
        expect(await s.countChildrenByStatus('p', 'call_1:')).toEqual({ STARTING_UP: 1, COMPLETED: 2, FAILED: 1 });
        await s.changeStatus('a0', { from: ['STARTING_UP'], to: 'ACTIVE' }, at(1));
        expect(await s.countChildrenByStatus('p', 'call_1:')).toEqual({ ACTIVE: 1, COMPLETED: 2, FAILED: 1 });
        expect(await s.countChildrenByStatus('p', 'call_2:')).toEqual({ COMPLETED: 1 });
        expect(await s.countChildrenByStatus('p', '')).toEqual({ ACTIVE: 1, COMPLETED: 3, FAILED: 1 });
        expect(await s.countChildrenByStatus('p', 'call_3:')).toEqual({});
        expect(await s.countChildrenByStatus('nope', 'call_1:')).toEqual({});
        await s.deleteAgentTree('a1');
        expect(await s.countChildrenByStatus('p', 'call_1:')).toEqual({ ACTIVE: 1, COMPLETED: 1, FAILED: 1 });
      });

      it('lists ids by status, oldest first', async () => {
        const root = agent('root');
        await s.insertAgents(
          [
            root,
            child('k1', root),
            agent('done', { status: 'COMPLETED' }),
            child('k2', root),
            agent('paused', { status: 'PAUSED' }),
          ],
          [],
          [],
        );
        expect(await s.listAgentIdsByStatus(['STARTING_UP', 'ACTIVE'])).toEqual(['root', 'k1', 'k2']);
        expect(await s.listAgentIdsByStatus(['PAUSED', 'COMPLETED'])).toEqual(['done', 'paused']);
        expect(await s.listAgentIdsByStatus(['FAILED'])).toEqual([]);
        expect(await s.listAgentIdsByStatus([])).toEqual([]);
      });

      it('changes status only from the statuses given (compare-and-set)', async () => {
        await s.insertAgents([agent('a', { progress: 0.5, status_message: 'Working' })], [], []);
        expect(await s.changeStatus('a', { from: ['PAUSED', 'STARTING_UP'], to: 'ACTIVE' }, at(5))).toBeNull();
        expect(await s.getAgent('a')).toMatchObject({ status: 'ACTIVE', updated_at: at(0) });
        const paused = await s.changeStatus(
          'a',
          {
            from: ['ACTIVE', 'STARTING_UP'],
            to: 'PAUSED',
            patch: { active_ms: 5_000, active_since: null, status_message: 'Paused' },
          },
          at(5),
        );
        expect(paused).toEqual(
          agent('a', {
            status: 'PAUSED',
            progress: 0.5,
            status_message: 'Paused',
            active_ms: 5_000,
            active_since: null,
            updated_at: at(5),
          }),
        );
        expect(await s.getAgent('a')).toEqual(paused);
        const resumed = await s.changeStatus(
          'a',
          { from: ['PAUSED'], to: 'ACTIVE', patch: { active_since: at(9), started: true, progress: 0.75 } },
          at(9),
        );
        expect(resumed).toMatchObject({
          status: 'ACTIVE',
          active_since: at(9),
          started: true,
          progress: 0.75,
          active_ms: 5_000,
        });
        expect(await s.changeStatus('nope', { from: ['ACTIVE'], to: 'PAUSED' }, at(9))).toBeNull();
        // A field given as undefined is not given (exactOptionalPropertyTypes is off, so callers may write this).
        const again = await s.changeStatus(
          'a',
          { from: ['ACTIVE'], to: 'PAUSED', patch: { progress: undefined, active_since: undefined, active_ms: 9_000 } },
          at(10),
        );
        expect(again).toMatchObject({ status: 'PAUSED', progress: 0.75, active_since: at(9), active_ms: 9_000 });
        expect(await s.getAgent('a')).toEqual(again);
      });

      describe('status marks', () => {
        const pause = { from: ['ACTIVE'] as const, to: 'PAUSED' as const, patch: { status_message: 'Paused' } };
        const resume = { from: ['PAUSED'] as const, to: 'ACTIVE' as const, patch: { status_message: 'Resuming' } };

        it('keeps a marked status change with the change, and nothing for an unmarked or refused one', async () => {
          await s.insertAgents([agent('a', { status_message: 'Working' }), agent('b')], [], []);
          expect(await s.listStatusMarks('a')).toEqual([]);
          await s.changeStatus('a', { ...pause, mark: true }, at(5));
          // Refused (not ACTIVE any more): no mark.
          expect(await s.changeStatus('a', { ...pause, mark: true }, at(6))).toBeNull();
          // A change to the same status marks a message alone (a wait for credits).
          await s.changeStatus(
            'a',
            { from: ['PAUSED'], to: 'PAUSED', patch: { status_message: 'Waiting for credits' }, mark: true },
            at(7),
          );
          await s.changeStatus('a', { ...resume, mark: true }, at(8));
          // Unmarked: the routine moves of every agent.
          await s.changeStatus('a', { from: ['ACTIVE'], to: 'COMPLETED', patch: { status_message: 'Done' } }, at(9));
          await s.changeStatus('b', { ...pause, mark: true }, at(10));
          expect(await s.listStatusMarks('a')).toEqual([
            { agent_id: 'a', at: at(5), status: 'PAUSED', previous: 'ACTIVE', message: 'Paused' },
            { agent_id: 'a', at: at(7), status: 'PAUSED', previous: 'PAUSED', message: 'Waiting for credits' },
            { agent_id: 'a', at: at(8), status: 'ACTIVE', previous: 'PAUSED', message: 'Resuming' },
          ]);
          expect(await s.listStatusMarks('b')).toEqual([
            { agent_id: 'b', at: at(10), status: 'PAUSED', previous: 'ACTIVE', message: 'Paused' },
          ]);
          expect(await s.listStatusMarks('nope')).toEqual([]);
        });

        it('refuses a marked change that does not name exactly one status to move from, and writes nothing', async () => {
          await s.insertAgents([agent('a')], [], []);
          for (const from of [[], ['ACTIVE', 'PAUSED']] as const) {
            await expect(
              s.changeStatus('a', { from, to: 'PAUSED', patch: { status_message: 'Paused' }, mark: true }, at(1)),
            ).rejects.toThrow(/exactly one status to move from/);
          }
          expect((await s.getAgent('a'))!.status).toBe('ACTIVE');
          expect(await s.listStatusMarks('a')).toEqual([]);
          // Unmarked, several statuses to move from are fine.
          expect(
            await s.changeStatus(
              'a',
              { from: ['ACTIVE', 'PAUSED'], to: 'PAUSED', patch: { status_message: 'x' } },
              at(2),
            ),
          ).not.toBeNull();
        });

        it('marks changes started together, of several agents and of one agent twice', async () => {
          await s.insertAgents([agent('a'), agent('b'), agent('c')], [], []);
          await Promise.all([
            s.changeStatus('a', { ...pause, mark: true }, at(1)),
            s.changeStatus('b', { ...pause, mark: true }, at(1)),
            s.changeStatus('c', { ...pause, mark: false }, at(1)),
            s.changeStatus('a', { ...resume, mark: true }, at(2)),
          ]);
          expect((await s.listStatusMarks('a')).map((m) => m.status)).toEqual(['PAUSED', 'ACTIVE']);
          expect((await s.listStatusMarks('b')).map((m) => m.status)).toEqual(['PAUSED']);
          expect(await s.listStatusMarks('c')).toEqual([]);
        });

        it(`keeps the newest ${MAX_STATUS_MARKS} of an agent`, async () => {
          await s.insertAgents([agent('a'), agent('b')], [], []);
          await s.changeStatus('b', { ...pause, mark: true }, at(0));
          const changes = MAX_STATUS_MARKS + 7;
          for (let i = 1; i <= changes; i++) {
            await s.changeStatus('a', { ...(i % 2 === 1 ? pause : resume), mark: true }, at(i));
          }
          const marks = await s.listStatusMarks('a');
          expect(marks).toHaveLength(MAX_STATUS_MARKS);
          expect(marks[0]!.at).toBe(at(changes - MAX_STATUS_MARKS + 1));
          expect(marks.at(-1)!.at).toBe(at(changes));
          expect(await s.listStatusMarks('b')).toHaveLength(1);
        });

        it('deletes them with the agent and its subtree', async () => {
          const root = agent('root');
          const kid = child('kid', root, { status: 'ACTIVE' });
          await s.insertAgents([root, kid, agent('other')], [], []);
          for (const id of ['root', 'kid', 'other']) await s.changeStatus(id, { ...pause, mark: true }, at(1));
          await s.deleteAgentTree('root');
          expect(await s.listStatusMarks('root')).toEqual([]);
          expect(await s.listStatusMarks('kid')).toEqual([]);
          expect(await s.listStatusMarks('other')).toHaveLength(1);
          // An agent inserted again under the same id starts with none.
          await s.insertAgents([agent('kid')], [], []);
          expect(await s.listStatusMarks('kid')).toEqual([]);
        });
      });

      describe('listAgents', () => {
        // Created in this order: r1, r2 (PAUSED), k1, k2 (children of r1), b1 (account b), r3, k3 (child of r3)
        beforeEach(async () => {
          await s.createAccount(account('acct-b', 1_000));
          const r1 = agent('r1');
          const r3 = agent('r3');
          await s.insertAgents([r1, agent('r2', { status: 'PAUSED' }), child('k1', r1), child('k2', r1)], [], []);
          await s.insertAgents([agent('b1', { account_id: 'acct-b' }), r3, child('k3', r3)], [], []);
        });
        const ids = (rows: AgentRow[]) => rows.map((a) => a.agent_id);

        it('lists newest first', async () => {
          const page = await s.listAgents({ limit: 100 });
          expect(ids(page.rows)).toEqual(['k3', 'r3', 'b1', 'k2', 'k1', 'r2', 'r1']);
          expect(page.rows[0]).toEqual(await s.getAgent('k3'));
          expect(typeof page.last).toBe('string');
          expect(await s.listAgents({ limit: 0 })).toEqual({ rows: [], last: null });
        });

        it('pages with the position of the last row', async () => {
          const seen: string[] = [];
          let after: string | undefined;
          const sizes: number[] = [];
          for (;;) {
            const page = await s.listAgents({ limit: 3, ...(after === undefined ? {} : { after }) });
            sizes.push(page.rows.length);
            seen.push(...ids(page.rows));
            if (page.last === null) break;
            after = page.last;
          }
          expect(sizes).toEqual([3, 3, 1, 0]);
          expect(seen).toEqual(['k3', 'r3', 'b1', 'k2', 'k1', 'r2', 'r1']);
        });

        it('keeps its place when rows are deleted or added between pages', async () => {
          const first = await s.listAgents({ limit: 2 });
          expect(ids(first.rows)).toEqual(['k3', 'r3']);
          await s.deleteAgentTree('b1');
          await s.insertAgents([agent('newest')], [], []);
          const next = await s.listAgents({ limit: 2, after: first.last! });
          expect(ids(next.rows)).toEqual(['k2', 'k1']);
        });

        it('filters by status, account and parent (null = roots only), alone and together', async () => {
          expect(ids((await s.listAgents({ limit: 100, status: 'STARTING_UP' })).rows)).toEqual(['k3', 'k2', 'k1']);
          expect(ids((await s.listAgents({ limit: 100, account_id: 'acct-b' })).rows)).toEqual(['b1']);
          expect(ids((await s.listAgents({ limit: 100, parent_id: null })).rows)).toEqual(['r3', 'b1', 'r2', 'r1']);
          expect(ids((await s.listAgents({ limit: 100, parent_id: 'r1' })).rows)).toEqual(['k2', 'k1']);
          expect(ids((await s.listAgents({ limit: 100, account_id: ACCT, parent_id: null })).rows)).toEqual([
            'r3',
            'r2',
            'r1',
          ]);
          expect(
            ids((await s.listAgents({ limit: 100, account_id: ACCT, parent_id: null, status: 'ACTIVE' })).rows),
          ).toEqual(['r3', 'r1']);
          expect(await s.listAgents({ limit: 100, status: 'FAILED' })).toEqual({ rows: [], last: null });
          const first = await s.listAgents({ limit: 1, account_id: ACCT, parent_id: null });
          const second = await s.listAgents({ limit: 2, account_id: ACCT, parent_id: null, after: first.last! });
          expect(ids(second.rows)).toEqual(['r2', 'r1']);
          const third = await s.listAgents({ limit: 2, account_id: ACCT, parent_id: null, after: second.last! });
          expect(third).toEqual({ rows: [], last: null });
        });
      });

      describe('searchAgents', () => {
        // Roots of acct-a: r1 "Find 50% of Cats", r2 "find dogs" (PAUSED), r3 "Ünïcode CATS"; r1's children c0..c4;
        // acct-b: b1 "find cats".
        beforeEach(async () => {
          await s.createAccount(account('acct-b', 1_000));
          const r1 = agent('r1', { goal: 'Find 50% of Cats' });
          await s.insertAgents([r1, agent('r2', { goal: 'find dogs', status: 'PAUSED' })], [], []);
          await s.insertAgents(
            [0, 1, 2, 3, 4].map((i) => child(`c${i}`, r1, { goal: `child ${i}: cat number ${i}` })),
            [],
            [],
          );
          await s.insertAgents(
            [agent('b1', { account_id: 'acct-b', goal: 'find cats' }), agent('r3', { goal: 'Ünïcode CATS' })],
            [],
            [],
          );
        });
        const ids = (rows: AgentRow[]) => rows.map((a) => a.agent_id);
        const base = { account_id: ACCT, parent_id: null, order: 'newest', offset: 0, limit: 100 } as const;

        it("lists one account's roots newest first, or a parent's children oldest first, with the total", async () => {
          const roots = await s.searchAgents(base);
          expect(ids(roots.rows)).toEqual(['r3', 'r2', 'r1']);
          expect(roots.total).toBe(3);
          expect(roots.rows[0]).toEqual(await s.getAgent('r3'));
          const kids = await s.searchAgents({ ...base, parent_id: 'r1', order: 'oldest' });
          expect(ids(kids.rows)).toEqual(['c0', 'c1', 'c2', 'c3', 'c4']);
          expect((await s.searchAgents({ ...base, account_id: 'acct-b' })).total).toBe(1);
          expect(await s.searchAgents({ ...base, parent_id: 'b1' })).toEqual({ rows: [], total: 0 });
        });

        it('pages by offset, the total on every page', async () => {
          const q = { ...base, parent_id: 'r1', order: 'oldest', limit: 2 } as const;
          expect(await s.searchAgents({ ...q, offset: 0 })).toMatchObject({ total: 5 });
          expect(ids((await s.searchAgents({ ...q, offset: 2 })).rows)).toEqual(['c2', 'c3']);
          expect(ids((await s.searchAgents({ ...q, offset: 4 })).rows)).toEqual(['c4']);
          expect(await s.searchAgents({ ...q, offset: 10 })).toEqual({ rows: [], total: 5 });
        });

        it('finds goal text, ASCII letters in either case, other characters and LIKE wildcards literally', async () => {
          expect(ids((await s.searchAgents({ ...base, goal_contains: 'CAT' })).rows)).toEqual(['r3', 'r1']);
          expect(ids((await s.searchAgents({ ...base, goal_contains: '50%' })).rows)).toEqual(['r1']);
          expect((await s.searchAgents({ ...base, goal_contains: '5_%' })).total).toBe(0);
          expect((await s.searchAgents({ ...base, goal_contains: '%' })).total).toBe(1);
          expect(ids((await s.searchAgents({ ...base, goal_contains: 'ünï' })).rows)).toEqual([]);
          expect(ids((await s.searchAgents({ ...base, goal_contains: 'Ünï' })).rows)).toEqual(['r3']);
          const kid = await s.searchAgents({ ...base, parent_id: 'r1', goal_contains: 'number 3' });
          expect(kid).toMatchObject({ total: 1, rows: [{ agent_id: 'c3' }] });
        });

        it('filters by status too', async () => {
          expect(ids((await s.searchAgents({ ...base, status: 'PAUSED' })).rows)).toEqual(['r2']);
          expect(ids((await s.searchAgents({ ...base, status: 'PAUSED', goal_contains: 'cat' })).rows)).toEqual([]);
          expect((await s.searchAgents({ ...base, parent_id: 'r1', status: 'STARTING_UP' })).total).toBe(5);
        });

        it('searches any agent of the account when no parent filter is given', async () => {
          const { parent_id: _p, ...anyParent } = base;
          const all = await s.searchAgents({ ...anyParent, goal_contains: 'cat' });
          expect(ids(all.rows)).toEqual(['r3', 'c4', 'c3', 'c2', 'c1', 'c0', 'r1']);
          expect(all.total).toBe(7);
          expect((await s.searchAgents(anyParent)).total).toBe(8);
        });

        it('is bounded: needle length, the searched prefix of a goal, the match cap', async () => {
          await expect(s.searchAgents({ ...base, goal_contains: 'x'.repeat(MAX_NEEDLE_CHARS + 1) })).rejects.toThrow(
            /at most 200 characters/,
          );
          const long = `${'a'.repeat(SEARCH_PREFIX_CHARS - 6)}needle${'b'.repeat(100)}late`;
          await s.insertAgents([agent('long', { goal: long })], [], []);
          expect(ids((await s.searchAgents({ ...base, goal_contains: 'NEEDLE' })).rows)).toEqual(['long']);
          expect((await s.searchAgents({ ...base, goal_contains: 'late' })).total).toBe(0);
          const many = Array.from({ length: MAX_SEARCH_MATCHES + 5 }, (_, i) =>
            agent(`m${String(i).padStart(5, '0')}`, { goal: `many ${i}` }),
          );
          await s.insertAgents(many, [], []);
          // A budget no loaded machine reaches: the cap, not the time, stops this search.
          const roomy = { ...base, budget_ms: 120_000 };
          const capped = await s.searchAgents({ ...roomy, goal_contains: 'many', limit: 3 });
          expect(capped).toMatchObject({ total: MAX_SEARCH_MATCHES, truncated: true });
          expect(ids(capped.rows)).toEqual(['m01004', 'm01003', 'm01002']);
          const last = await s.searchAgents({ ...roomy, goal_contains: 'many', offset: MAX_SEARCH_MATCHES - 1 });
          expect(ids(last.rows)).toEqual(['m00005']);
          expect(await s.searchAgents({ ...roomy, goal_contains: 'many 7' })).not.toHaveProperty('truncated');
        });
      });

      describe('trees', () => {
        // root -> (c1 -> g1), c2; holds on root, c1 and g1; a log on every agent.
        beforeEach(async () => {
          const root = agent('root', { max_credits: 1_000 });
          const c1 = child('c1', root);
          await s.insertAgents(
            [root, c1, child('g1', c1), child('c2', root)],
            ['root', 'c1', 'g1', 'c2'].map((id) => message(id, 0, 'USER')),
            ['root', 'c1', 'g1', 'c2'].map((id) => turn(id, 0)),
          );
          for (const id of ['root', 'c1', 'g1', 'c2']) {
            await s.putToolCalls([toolCall(id, `${id}-call`, 0)]);
          }
          await s.reserve({ id: 'h-root', account_id: ACCT, agent_id: 'root', root_id: 'root', amount: 100 });
          await s.reserve({ id: 'h-c1', account_id: ACCT, agent_id: 'c1', root_id: 'root', amount: 50 });
          await s.reserve({ id: 'h-g1', account_id: ACCT, agent_id: 'g1', root_id: 'root', amount: 25 });
        });

        it('lists descendants, not the agent itself', async () => {
          expect(sorted(await s.listDescendantIds('root'))).toEqual(['c1', 'c2', 'g1']);
          expect(await s.listDescendantIds('c1')).toEqual(['g1']);
          expect(await s.listDescendantIds('g1')).toEqual([]);
          expect(await s.listDescendantIds('nope')).toEqual([]);
        });

        it('sums each tree in one call: agents, credits, tokens, statuses and its time span', async () => {
          // Spend and tokens written straight in, as the loop's settlements leave them on each agent.
          await s.insertAgents(
            [
              agent('t-root', { credits_spent: 1_000, token_count: 10, created_at: at(1), updated_at: at(5) }),
              agent('t-c1', {
                parent_id: 't-root',
                root_id: 't-root',
                status: 'COMPLETED',
                credits_spent: 200,
                token_count: 20,
                created_at: at(2),
                updated_at: at(9),
              }),
              agent('t-g1', {
                parent_id: 't-c1',
                root_id: 't-root',
                status: 'STARTING_UP',
                credits_spent: 30,
                token_count: 3,
                created_at: at(3),
                updated_at: at(4),
              }),
            ],
            [],
            [],
          );
          const totals = await s.treeTotals(['t-root', 't-c1', 't-g1', 'nope', 't-root']);
          const byId = Object.fromEntries(totals.map((t) => [t.agent_id, t]));
          expect(Object.keys(byId).sort()).toEqual(['t-c1', 't-g1', 't-root']);
          expect(byId['t-root']).toEqual({
            agent_id: 't-root',
            account_id: ACCT,
            agents: 3,
            credits_spent: 1_230,
            tokens: 33,
            by_status: { ACTIVE: 1, COMPLETED: 1, STARTING_UP: 1 },
            first_created_at: at(1),
            last_updated_at: at(9),
          });
          expect(byId['t-c1']).toMatchObject({ agents: 2, credits_spent: 230, tokens: 23 });
          expect(byId['t-c1']!.by_status).toEqual({ COMPLETED: 1, STARTING_UP: 1 });
          expect(byId['t-g1']).toMatchObject({ agents: 1, credits_spent: 30, first_created_at: at(3) });
          expect(await s.treeTotals([])).toEqual([]);
        });

        it('deletes a subtree with its log and holds, and leaves the rest alone', async () => {
          const deleted = await s.deleteAgentTree('c1');
          expect(deleted[0]).toBe('c1');
          expect(sorted(deleted)).toEqual(['c1', 'g1']);
          for (const id of ['c1', 'g1']) {
            expect(await s.getAgent(id)).toBeNull();
            expect(await s.listMessages(id)).toEqual([]);
            expect(await s.listTurns(id)).toEqual([]);
            expect(await s.listToolCalls(id, 0)).toEqual([]);
          }
          expect(await s.getAccount(ACCT)).toMatchObject({ balance: 1_000, reserved: 100 });
          expect(await s.getAgent('root')).toMatchObject({ sub_agent_count: 1, tree_reserved: 100 });
          expect(await s.listDescendantIds('root')).toEqual(['c2']);
          expect(await s.listMessages('c2')).toEqual([message('c2', 0, 'USER')]);
          expect(await s.listToolCalls('c2', 0)).toEqual([toolCall('c2', 'c2-call', 0)]);
          // The released holds are really gone: the ids can be released again without effect.
          await s.release('h-c1');
          expect((await s.getAccount(ACCT))?.reserved).toBe(100);
        });

        it('deletes a whole tree, releasing all its holds', async () => {
          expect(sorted(await s.deleteAgentTree('root'))).toEqual(['c1', 'c2', 'g1', 'root']);
          expect(await s.getAccount(ACCT)).toMatchObject({ balance: 1_000, reserved: 0 });
          expect(await s.listAgents({ limit: 100 })).toEqual({ rows: [], last: null });
          expect(await s.listAgentIdsByStatus(AGENT_STATUSES)).toEqual([]);
          expect(await s.releaseAgentReservations(['root', 'c1', 'g1', 'c2'])).toBe(0);
          expect(await s.deleteAgentTree('root')).toEqual([]);
          await expectLedgerInvariant(s, ACCT);
        });

        it('leaves nothing behind that a new agent with the same id would inherit', async () => {
          await s.deleteAgentTree('root');
          const again = agent('c1');
          await s.insertAgents([again], [message('c1', 7, 'USER')], [turn('c1', 0)]);
          expect(await s.getAgent('c1')).toEqual(again);
          expect(await s.listMessages('c1')).toEqual([message('c1', 7, 'USER')]);
          expect(await s.listToolCalls('c1', 0)).toEqual([]);
          expect(await s.listDescendantIds('c1')).toEqual([]);
        });

        it('deletes the tool states, artifacts and page reads of the subtree, and keeps the page texts', async () => {
          const limits = { maxBytes: 100, maxBytesPerAgent: 100 };
          for (const id of ['root', 'c1', 'g1', 'c2']) {
            await s.putToolState(id, `${id}-call`, `{"of":"${id}"}`);
            await s.putArtifact(artifact(id, `${id}-art`, 5), bytes(5), limits);
            await s.recordPageRead(pageRead(id, `${id}-call`, `page of ${id}`), `page of ${id}`);
          }
          await s.deleteAgentTree('c1');
          for (const id of ['c1', 'g1']) {
            expect(await s.getToolState(id, `${id}-call`)).toBeNull();
            expect(await s.listArtifacts(id)).toEqual([]);
            expect(await s.getArtifact(id, `${id}-art`)).toBeNull();
            // Citations keep pointing at the text.
            expect(await s.getPageText(sha256(`page of ${id}`))).toBe(`page of ${id}`);
          }
          expect(await s.listPageReads(['root', 'c1', 'g1', 'c2'])).toEqual([
            pageRead('root', 'root-call', 'page of root'),
            pageRead('c2', 'c2-call', 'page of c2'),
          ]);
          for (const id of ['root', 'c2']) {
            expect(await s.getToolState(id, `${id}-call`)).toBe(`{"of":"${id}"}`);
            expect(await s.getArtifact(id, `${id}-art`)).toEqual({ row: artifact(id, `${id}-art`, 5), data: bytes(5) });
          }
          // Nothing is left for a new agent with a deleted id to inherit, not even its artifacts' share of the limit.
          await s.insertAgents([agent('g1')], [], []);
          expect(await s.getToolState('g1', 'g1-call')).toBeNull();
          expect(await s.listPageReads(['g1'])).toEqual([]);
          await s.putArtifact(artifact('g1', 'g1-art', 100), bytes(100), limits);
          expect(await s.listArtifacts('g1')).toEqual([artifact('g1', 'g1-art', 100)]);
          // Deleting the whole tree takes the rest.
          await s.deleteAgentTree('root');
          expect(await s.listPageReads(['root', 'c2'])).toEqual([]);
          expect(await s.listArtifacts('c2')).toEqual([]);
          expect(await s.getPageText(sha256('page of root'))).toBe('page of root');
        });

        it('returns [] for an unknown agent', async () => {
          expect(await s.deleteAgentTree('nope')).toEqual([]);
          expect((await s.getAgent('root'))?.sub_agent_count).toBe(2);
        });
      });
    });

    describe('counts and retention', () => {
      beforeEach(async () => {
        await s.createAccount(account(ACCT, 1_000));
      });

      it('counts agents by status across the whole database', async () => {
        expect(await s.countAgentsByStatus()).toEqual({});
        const root = agent('root');
        await s.insertAgents(
          [root, child('k1', root), child('k2', root), agent('done', { status: 'COMPLETED' })],
          [],
          [],
        );
        expect(await s.countAgentsByStatus()).toEqual({ ACTIVE: 1, STARTING_UP: 2, COMPLETED: 1 });
      });

      it('finds old finished roots oldest first, and forgets their work but keeps their rows and the ledger', async () => {
        const old = agent('old', { status: 'COMPLETED', updated_at: at(10) });
        const failed = agent('failed', { status: 'FAILED', updated_at: at(5) });
        const recent = agent('recent', { status: 'COMPLETED', updated_at: at(50) });
        const running = agent('running', { status: 'ACTIVE', updated_at: at(1) });
        const kid = child('kid', old, { status: 'COMPLETED', updated_at: at(2) });
        for (const a of [old, failed, recent, running, kid]) await insertWithLog(s, a);
        await s.putToolCalls([toolCall('kid', 't1', 0, { status: 'finished', result: '"r"' })]);
        await s.putToolState('kid', 't1', '{"n":1}');
        const ledgerBefore = await s.listLedger(ACCT);

        const query = { updatedBefore: at(20), limit: 10, withTranscript: true };
        expect(await s.listFinishedRoots({ ...query, statuses: ['COMPLETED'] })).toEqual(['old']);
        expect(await s.listFinishedRoots({ ...query, statuses: ['COMPLETED', 'FAILED'] })).toEqual(['failed', 'old']);
        expect(await s.listFinishedRoots({ ...query, statuses: ['COMPLETED', 'FAILED'], limit: 1 })).toEqual([
          'failed',
        ]);

        // 2 messages, 2 turns, 1 tool call, 1 tool state
        expect(await s.purgeAgentData(['old', 'kid'])).toBe(6);
        expect(await s.listTurns('old')).toEqual([]);
        expect(await s.listMessages('kid')).toEqual([]);
        expect(await s.listToolCalls('kid', 0)).toEqual([]);
        expect(await s.getToolState('kid', 't1')).toBeNull();
        expect(await s.getAgent('old')).toEqual({ ...old, sub_agent_count: 1 });
        expect(await s.getAgent('kid')).toEqual(kid);
        expect(await s.listLedger(ACCT)).toEqual(ledgerBefore);
        expect(await s.listTurns('recent')).toHaveLength(1);
        // Forgotten once: the sweep that looks for transcripts passes it by; one that deletes trees still finds it.
        expect(await s.listFinishedRoots({ ...query, statuses: ['COMPLETED'] })).toEqual([]);
        expect(await s.listFinishedRoots({ ...query, statuses: ['COMPLETED'], withTranscript: false })).toEqual([
          'old',
        ]);
        expect(await s.purgeAgentData([])).toBe(0);
      });
    });

    describe('step log', () => {
      let root: AgentRow;
      beforeEach(async () => {
        await s.createAccount(account(ACCT, 1_000));
        root = agent('root', { plan: '{"steps":[]}', status_message: 'Starting', progress: 0.1 });
        await insertWithLog(s, root);
      });

      it('returns empty logs for unknown agents', async () => {
        expect(await s.listMessages('nope')).toEqual([]);
        expect(await s.listTurns('nope')).toEqual([]);
        expect(await s.listToolCalls('nope', 0)).toEqual([]);
      });

      it('upserts tool calls by (agent_id, tool_use_id), listed per turn in first-recorded order', async () => {
        const [a, b, c] = [
          toolCall('root', 'tu_b', 1),
          toolCall('root', 'tu_a', 1, { idempotent: false }),
          toolCall('root', 'tu_c', 3),
        ];
        await s.putToolCalls([a, b, c]);
        expect(await s.listToolCalls('root', 1)).toEqual([a, b]);
        expect(await s.listToolCalls('root', 3)).toEqual([c]);
        expect(await s.listToolCalls('root', 2)).toEqual([]);
        const done = {
          ...a,
          status: 'finished' as const,
          result: '[{"type":"text","text":"ok"}]',
          is_error: true,
          updated_at: at(8),
        };
        await s.putToolCalls([done]);
        expect(await s.listToolCalls('root', 1)).toEqual([done, b]);
      });

      it("lists an agent's tool calls in one read, by turn then first-recorded order, the newest up to a limit", async () => {
        await s.insertAgents([agent('other')], [], []);
        const [a, b, c, d] = [
          toolCall('root', 'tu_z', 3),
          toolCall('root', 'tu_b', 1),
          toolCall('root', 'tu_a', 1, { idempotent: false }),
          toolCall('root', 'tu_c', 2),
        ];
        await s.putToolCalls([a, b, c]);
        await s.putToolCalls([d, toolCall('other', 'tu_x', 1)]);
        const done = { ...b, status: 'finished' as const, result: '[]', updated_at: at(9) };
        await s.putToolCalls([done]); // an upsert keeps the call's place
        expect(await s.listAgentToolCalls('root', 10)).toEqual({ rows: [done, c, d, a], truncated: false });
        expect(await s.listAgentToolCalls('root', 4)).toEqual({ rows: [done, c, d, a], truncated: false });
        expect(await s.listAgentToolCalls('root', 2)).toEqual({ rows: [d, a], truncated: true });
        expect(await s.listAgentToolCalls('root', 3)).toEqual({ rows: [c, d, a], truncated: true });
        expect(await s.listAgentToolCalls('nope', 5)).toEqual({ rows: [], truncated: false });
      });

      it('with onlyWhile, writes the calls only while their agent is in that status, and says whether it did', async () => {
        const started = toolCall('root', 'tu_1', 1, { status: 'started', idempotent: false });
        expect(await s.putToolCalls([started], 'PAUSED')).toBe(false);
        expect(await s.listToolCalls('root', 1)).toEqual([]);
        expect(await s.putToolCalls([started], (await s.getAgent('root'))!.status)).toBe(true);
        expect(await s.listToolCalls('root', 1)).toEqual([started]);
        expect(await s.putToolCalls([toolCall('ghost', 'tu_1', 0)], 'ACTIVE')).toBe(false);
      });

      it('drops tool calls, messages and turns of an agent that does not exist', async () => {
        await s.putToolCalls([toolCall('ghost', 'tu_1', 0)]);
        await s.insertAgents([agent('other')], [message('ghost', 0, 'USER')], [turn('ghost', 0)]);
        await s.insertAgents([agent('ghost')], [], []);
        expect(await s.listToolCalls('ghost', 0)).toEqual([]);
        expect(await s.listMessages('ghost')).toEqual([]);
        expect(await s.listTurns('ghost')).toEqual([]);
      });

      describe('commitStep', () => {
        it('appends turns and messages, upserts tool calls, settles and patches the agent in one go', async () => {
          await s.putToolCalls([toolCall('root', 'tu_1', 1, { status: 'pending' })]);
          await s.reserve({ id: 'r1', account_id: ACCT, agent_id: 'root', root_id: 'root', amount: 300 });
          const calls = [
            toolCall('root', 'tu_1', 1, { status: 'finished', result: '"hi"' }),
            toolCall('root', 'tu_2', 1),
          ];
          const result = await s.commitStep({
            agent_id: 'root',
            turns: [turn('root', 1), turn('root', 2)],
            messages: [message('root', 1), message('root', 2)],
            tool_calls: calls,
            settlements: [settlement('r1', root, 120)],
            patch: {
              progress: 0.5,
              status_message: 'Searching',
              plan: '{"steps":[1]}',
              token_count_delta: 150,
              step_count_delta: 1,
              updated_at: at(10),
            },
          });
          const expected = {
            ...root,
            progress: 0.5,
            status_message: 'Searching',
            plan: '{"steps":[1]}',
            token_count: 150,
            message_count: 3,
            step_count: 1,
            credits_spent: 120,
            tree_spent: 120,
            updated_at: at(10),
          };
          expect(result).toEqual({ agent: expected, statusChanged: false, charged: [120] });
          expect(await s.getAgent('root')).toEqual(expected);
          expect(await s.listTurns('root')).toEqual([turn('root', 0), turn('root', 1), turn('root', 2)]);
          expect(await s.listMessages('root')).toEqual([
            message('root', 0, 'USER'),
            message('root', 1),
            message('root', 2),
          ]);
          expect(await s.listToolCalls('root', 1)).toEqual(calls);
          expect(await s.getAccount(ACCT)).toEqual(account(ACCT, 880));
          await expectLedgerInvariant(s, ACCT);
        });

        it("keeps an assistant turn's thinking blocks byte for byte (signature, redacted_thinking, any text)", async () => {
          // The API refuses a thinking block that comes back changed: the log is opaque text, never re-encoded.
          const content = JSON.stringify([
            {
              type: 'thinking',
              thinking: 'Plan:  two spaces,\ttab, «quotes», emoji 🧠, \u2028 and "escapes"\n',
              signature: 'EqQBCkYIBxgCKkD+/=',
            },
            { type: 'redacted_thinking', data: 'RUNSWVBURUQ=.tag+/==' },
            { type: 'text', text: 'Looking.' },
            { type: 'tool_use', id: 'toolu_1', name: 'lookup', input: { n: 1 } },
          ]);
          const thinkingTurn: TurnRow = { ...turn('root', 1), role: 'assistant', content };
          await s.commitStep({ agent_id: 'root', turns: [thinkingTurn], patch: { updated_at: at(4) } });
          const stored = (await s.listTurns('root')).find((t) => t.idx === 1)!;
          expect(stored.content).toBe(content);
        });

        it('leaves fields the patch does not name, clears the plan with null, and works with nothing to append', async () => {
          const kept = await s.commitStep({ agent_id: 'root', patch: { updated_at: at(3) } });
          expect(kept).toEqual({ agent: { ...root, updated_at: at(3) }, statusChanged: false, charged: [] });
          const cleared = await s.commitStep({
            agent_id: 'root',
            messages: [],
            turns: [],
            patch: { plan: null, updated_at: at(4) },
          });
          expect(cleared.agent).toEqual({ ...root, plan: null, updated_at: at(4) });
        });

        it('applies a status change, with its patch, only from the statuses given', async () => {
          const refused = await s.commitStep({
            agent_id: 'root',
            turns: [turn('root', 1)],
            patch: { progress: 0.9, updated_at: at(6) },
            status: { from: ['PAUSED'], to: 'COMPLETED', patch: { progress: 1 } },
          });
          expect(refused.statusChanged).toBe(false);
          expect(refused.agent).toMatchObject({ status: 'ACTIVE', progress: 0.9, updated_at: at(6) });
          // Already in the target status: not a change, but the patch still applies.
          const already = await s.commitStep({
            agent_id: 'root',
            patch: { status_message: 'Still going', updated_at: at(6) },
            status: { from: ['PAUSED'], to: 'ACTIVE', patch: { progress: 0.1, started: true } },
          });
          expect(already.statusChanged).toBe(false);
          expect(already.agent).toMatchObject({ status: 'ACTIVE', progress: 0.9, status_message: 'Still going' });
          const done = await s.commitStep({
            agent_id: 'root',
            turns: [turn('root', 2)],
            messages: [message('root', 2)],
            patch: { progress: 0.95, status_message: 'Done', plan: undefined, step_count_delta: 1, updated_at: at(7) },
            status: {
              from: ['ACTIVE'],
              to: 'COMPLETED',
              patch: { progress: 1, status_message: undefined, active_ms: 7_000, active_since: null },
            },
          });
          expect(done.statusChanged).toBe(true);
          expect(done.agent).toEqual({
            ...root,
            status: 'COMPLETED',
            progress: 1,
            status_message: 'Done',
            message_count: 2,
            step_count: 1,
            active_ms: 7_000,
            active_since: null,
            updated_at: at(7),
          });
        });

        it('writes nothing at all, not even its settlements, when a turn does not continue the log', async () => {
          await s.reserve({ id: 'r1', account_id: ACCT, agent_id: 'root', root_id: 'root', amount: 300 });
          const before = {
            agent: await s.getAgent('root'),
            account: await s.getAccount(ACCT),
            ledger: await s.listLedger(ACCT),
            turns: await s.listTurns('root'),
            messages: await s.listMessages('root'),
          };
          for (const turns of [
            [turn('root', 2)],
            [turn('root', 0)],
            [turn('root', 1), turn('root', 3)],
            [turn('root', 1), turn('root', 1)],
          ]) {
            await expect(
              s.commitStep({
                agent_id: 'root',
                turns,
                messages: [message('root', 1)],
                tool_calls: [toolCall('root', 'tu_1', 1)],
                settlements: [settlement('r1', root, 100)],
                patch: { progress: 0.7, token_count_delta: 10, updated_at: at(9) },
                status: { from: ['ACTIVE'], to: 'COMPLETED' },
              }),
            ).rejects.toThrow();
          }
          expect(await s.getAgent('root')).toEqual(before.agent);
          expect(await s.getAccount(ACCT)).toEqual(before.account);
          expect(await s.listLedger(ACCT)).toEqual(before.ledger);
          expect(await s.listTurns('root')).toEqual(before.turns);
          expect(await s.listMessages('root')).toEqual(before.messages);
          expect(await s.listToolCalls('root', 1)).toEqual([]);
          // The hold is still there.
          await s.release('r1');
          expect((await s.getAccount(ACCT))?.reserved).toBe(0);
        });

        it('still settles when the agent is gone, and writes nothing else', async () => {
          await s.reserve({ id: 'r1', account_id: ACCT, agent_id: 'root', root_id: 'root', amount: 300 });
          await s.deleteAgentTree('root');
          const result = await s.commitStep({
            agent_id: 'root',
            turns: [turn('root', 5)],
            messages: [message('root', 1)],
            tool_calls: [toolCall('root', 'tu_1', 1)],
            settlements: [settlement('r1', root, 80)],
            patch: { updated_at: at(9) },
            status: { from: ['ACTIVE'], to: 'COMPLETED' },
          });
          expect(result).toEqual({ agent: null, statusChanged: false, charged: [80] });
          expect(await s.getAccount(ACCT)).toEqual(account(ACCT, 920));
          expect(await s.getAgent('root')).toBeNull();
          expect(await s.listTurns('root')).toEqual([]);
          expect(await s.listMessages('root')).toEqual([]);
          expect(await s.listToolCalls('root', 1)).toEqual([]);
          await expectLedgerInvariant(s, ACCT);
        });
      });
    });

    describe('child specs', () => {
      beforeEach(async () => {
        await s.createAccount(account(ACCT, 1_000));
      });

      it('round-trips the spec of a child through every read and write that answers an agent row', async () => {
        const parent = agent('p');
        const spec = JSON.stringify(SPEC);
        const withSpec = child('k-spec', parent, { spawn_key: 'call_1:0', spec });
        const without = child('k-plain', parent, { spawn_key: 'call_1:1' });
        await s.insertAgents([parent, withSpec, without], [], []);
        expect(await s.getAgent('k-spec')).toEqual(withSpec);
        expect((await s.getAgent('k-plain'))?.spec).toBeNull();
        expect((await s.getAgent('p'))?.spec).toBeNull();
        expect((await s.listAgents({ limit: 10, parent_id: 'p' })).rows).toEqual([without, withSpec]);
        expect(await s.findAgentsBySpawnKey('p', 'call_1:')).toEqual([withSpec, without]);
        expect(await s.findAgentsBySpawnKey('p', 'call_1:', { offset: 0, limit: 1 })).toEqual([withSpec]);
        const active = await s.changeStatus(
          'k-spec',
          { from: ['STARTING_UP'], to: 'ACTIVE', patch: { started: true } },
          at(1),
        );
        expect(active?.spec).toBe(spec);
        const stepped = await s.commitStep({
          agent_id: 'k-spec',
          patch: { progress: 0.5, updated_at: at(2) },
          status: { from: ['ACTIVE'], to: 'COMPLETED' },
        });
        expect(stepped.agent?.spec).toBe(spec);
        expect(JSON.parse((await s.getAgent('k-spec'))!.spec!)).toEqual(SPEC);
      });
    });

    describe('tool state', () => {
      beforeEach(async () => {
        await s.createAccount(account(ACCT, 1_000));
        await s.insertAgents([agent('a'), agent('b')], [], []);
      });

      it('sets, replaces and reads the state of a call, per agent and call', async () => {
        expect(await s.getToolState('a', 'tu_1')).toBeNull();
        await s.putToolState('a', 'tu_1', '{"phase":"started","sandbox":"sb-1"}');
        await s.putToolState('a', 'tu_2', '{"phase":"uploaded"}');
        await s.putToolState('b', 'tu_1', '"ünïcødé 🚀"');
        await s.putToolState('a', 'tu_1', '{"phase":"ran"}');
        expect(await s.getToolState('a', 'tu_1')).toBe('{"phase":"ran"}');
        expect(await s.getToolState('a', 'tu_2')).toBe('{"phase":"uploaded"}');
        expect(await s.getToolState('b', 'tu_1')).toBe('"ünïcødé 🚀"');
        expect(await s.getToolState('b', 'tu_2')).toBeNull();
        expect(await s.getToolState('nope', 'tu_1')).toBeNull();
      });

      it('ignores the state of a call of an agent that does not exist', async () => {
        await s.putToolState('ghost', 'tu_1', '{}');
        expect(await s.getToolState('ghost', 'tu_1')).toBeNull();
        await s.insertAgents([agent('ghost')], [], []);
        expect(await s.getToolState('ghost', 'tu_1')).toBeNull();
      });
    });

    describe('artifacts', () => {
      const limits: ArtifactLimits = { maxBytes: 10, maxBytesPerAgent: 25 };
      beforeEach(async () => {
        await s.createAccount(account(ACCT, 1_000));
        await s.insertAgents([agent('a'), agent('b')], [], []);
      });

      it('stores the bytes with their row, and lists the rows oldest first without bytes', async () => {
        const shot = artifact('a', 'art-2', 10, { name: 'screenshot.png' });
        const empty = artifact('a', 'art-1', 0, { name: 'empty.txt', mime_type: 'text/plain' });
        const other = artifact('b', 'art-1', 3);
        await s.putArtifact(shot, bytes(10), limits);
        await s.putArtifact(empty, new Uint8Array(0), limits);
        await s.putArtifact(other, bytes(3, 100), limits);
        expect(await s.listArtifacts('a')).toEqual([shot, empty]);
        expect(await s.listArtifacts('b')).toEqual([other]);
        expect(await s.listArtifacts('nope')).toEqual([]);
        const got = await s.getArtifact('a', 'art-2');
        expect(got).toEqual({ row: shot, data: bytes(10) });
        expect(got?.data).toBeInstanceOf(Uint8Array);
        expect(await s.getArtifact('a', 'art-1')).toEqual({ row: empty, data: new Uint8Array(0) });
        expect(await s.getArtifact('b', 'art-1')).toEqual({ row: other, data: bytes(3, 100) });
        expect(await s.getArtifact('b', 'art-2')).toBeNull();
        expect(await s.getArtifact('nope', 'art-1')).toBeNull();
      });

      it('hands out copies: changing the bytes given or returned changes nothing stored', async () => {
        const given = bytes(4);
        await s.putArtifact(artifact('a', 'x', 4), given, limits);
        given.fill(9);
        const first = await s.getArtifact('a', 'x');
        first!.data.fill(7);
        first!.row.size = 99;
        expect(await s.getArtifact('a', 'x')).toEqual({ row: artifact('a', 'x', 4), data: bytes(4) });
      });

      it('refuses an artifact past maxBytes, or one that takes its agent past maxBytesPerAgent', async () => {
        await expect(s.putArtifact(artifact('a', 'big', 11), bytes(11), limits)).rejects.toMatchObject({
          code: 'payload_too_large',
        });
        await s.putArtifact(artifact('a', 'x1', 10), bytes(10), limits);
        await s.putArtifact(artifact('a', 'x2', 10), bytes(10), limits);
        // 20 stored: 6 more would make 26.
        await expect(s.putArtifact(artifact('a', 'x3', 6), bytes(6), limits)).rejects.toMatchObject({
          code: 'payload_too_large',
        });
        await s.putArtifact(artifact('a', 'x4', 5), bytes(5), limits); // exactly 25
        await expect(s.putArtifact(artifact('a', 'x5', 1), bytes(1), limits)).rejects.toMatchObject({
          code: 'payload_too_large',
        });
        await s.putArtifact(artifact('a', 'x6', 0), new Uint8Array(0), limits);
        // The limit is per agent: another agent's artifacts do not count.
        await s.putArtifact(artifact('b', 'y1', 10), bytes(10), limits);
        expect((await s.listArtifacts('a')).map((r) => r.artifact_id)).toEqual(['x1', 'x2', 'x4', 'x6']);
        expect(await s.getArtifact('a', 'x3')).toBeNull();
        expect(await s.getArtifact('a', 'big')).toBeNull();
        // A larger per-agent limit lets more in: the limits are the caller's, per call.
        await s.putArtifact(artifact('a', 'x7', 10), bytes(10), { maxBytes: 10, maxBytesPerAgent: 35 });
        expect(await s.listArtifacts('a')).toHaveLength(5);
      });

      it('refuses an unknown agent, a size that is not the length of the bytes, and an id the agent already has', async () => {
        await expect(s.putArtifact(artifact('ghost', 'x', 3), bytes(3), limits)).rejects.toMatchObject({
          code: 'not_found',
        });
        await expect(s.putArtifact(artifact('a', 'x', 4), bytes(3), limits)).rejects.toMatchObject({
          code: 'invalid_request',
        });
        await s.putArtifact(artifact('a', 'x', 3), bytes(3), limits);
        await expect(s.putArtifact(artifact('a', 'x', 2, { name: 'other' }), bytes(2), limits)).rejects.toMatchObject({
          code: 'invalid_state',
        });
        expect(await s.getArtifact('a', 'x')).toEqual({ row: artifact('a', 'x', 3), data: bytes(3) });
        expect(await s.listArtifacts('ghost')).toEqual([]);
        await s.insertAgents([agent('ghost')], [], []);
        expect(await s.listArtifacts('ghost')).toEqual([]);
      });

      it('counts the artifacts of calls made at the same time, and a refusal touches no other write', async () => {
        const results = await Promise.allSettled([
          s.putArtifact(artifact('a', 'c1', 10), bytes(10, 1), limits),
          s.putToolState('a', 'tu_1', '{"n":1}'),
          s.putArtifact(artifact('a', 'c2', 10), bytes(10, 2), limits),
          s.putArtifact(artifact('a', 'c3', 10), bytes(10, 3), limits),
          s.recordPageRead(pageRead('a', 'tu_1', 'text'), 'text'),
          s.putArtifact(artifact('b', 'c4', 10), bytes(10, 4), limits),
        ]);
        expect(results.map((r) => r.status)).toEqual([
          'fulfilled',
          'fulfilled',
          'fulfilled',
          'rejected',
          'fulfilled',
          'fulfilled',
        ]);
        expect((results[3] as PromiseRejectedResult).reason).toMatchObject({ code: 'payload_too_large' });
        expect((await s.listArtifacts('a')).map((r) => r.artifact_id)).toEqual(['c1', 'c2']);
        expect((await s.getArtifact('a', 'c2'))?.data).toEqual(bytes(10, 2));
        expect((await s.listArtifacts('b')).map((r) => r.artifact_id)).toEqual(['c4']);
        expect(await s.getToolState('a', 'tu_1')).toBe('{"n":1}');
        expect(await s.listPageReads(['a'])).toEqual([pageRead('a', 'tu_1', 'text')]);
      });
    });

    describe('page reads', () => {
      beforeEach(async () => {
        await s.createAccount(account(ACCT, 1_000));
        await s.insertAgents([agent('a'), agent('b'), agent('c')], [], []);
      });

      it('lists the reads of several agents in the order they were recorded', async () => {
        const reads = [
          pageRead('a', 'tu_a1', 'alpha'),
          pageRead('b', 'tu_b1', 'beta'),
          pageRead('a', 'tu_a2', 'gamma', { title: 'Gämma — «ünïcødé» 🚀' }),
          pageRead('c', 'tu_c1', 'delta'),
          pageRead('b', 'tu_b2', 'alpha'),
        ];
        const texts = ['alpha', 'beta', 'gamma', 'delta', 'alpha'];
        for (const [i, r] of reads.entries()) await s.recordPageRead(r, texts[i]!);
        expect(await s.listPageReads(['b', 'a'])).toEqual([reads[0], reads[1], reads[2], reads[4]]);
        expect(await s.listPageReads(['c'])).toEqual([reads[3]]);
        expect(await s.listPageReads(['a', 'a', 'nope'])).toEqual([reads[0], reads[2]]);
        expect(await s.listPageReads(['nope'])).toEqual([]);
        expect(await s.listPageReads([])).toEqual([]);
        // The same call may read the same page twice: two reads.
        await s.recordPageRead(reads[3]!, 'delta');
        expect(await s.listPageReads(['c'])).toEqual([reads[3], reads[3]]);
      });

      it('keeps one text per hash, whoever read it', async () => {
        const text = '# Title\n\nA page with "quotes", ünïcødé and 🚀.\n'.repeat(50);
        await s.recordPageRead(pageRead('a', 'tu_1', text), text);
        await s.recordPageRead(pageRead('b', 'tu_2', text, { url: 'https://mirror.example.org/' }), text);
        await s.recordPageRead(pageRead('b', 'tu_3', ''), '');
        expect(await s.getPageText(sha256(text))).toBe(text);
        expect(await s.getPageText(sha256(''))).toBe('');
        expect(await s.getPageText(sha256('never read'))).toBeNull();
        expect((await s.listPageReads(['a', 'b'])).map((r) => r.content_sha256)).toEqual([
          sha256(text),
          sha256(text),
          sha256(''),
        ]);
      });

      it('refuses a read whose content_sha256 is not the hash of its text, and records nothing of it', async () => {
        const wrong = pageRead('a', 'tu_1', 'what the hash says');
        await expect(s.recordPageRead(wrong, 'what the page said')).rejects.toMatchObject({ code: 'invalid_request' });
        const upper = pageRead('a', 'tu_2', 'text', { content_sha256: sha256('text').toUpperCase() });
        await expect(s.recordPageRead(upper, 'text')).rejects.toMatchObject({ code: 'invalid_request' });
        expect(await s.listPageReads(['a'])).toEqual([]);
        expect(await s.getPageText(wrong.content_sha256)).toBeNull();
      });

      it('drops the read of an agent that does not exist, text and all', async () => {
        await s.recordPageRead(pageRead('ghost', 'tu_1', 'orphan text'), 'orphan text');
        expect(await s.listPageReads(['ghost'])).toEqual([]);
        expect(await s.getPageText(sha256('orphan text'))).toBeNull();
      });

      it('lists the reads of many agents at once', async () => {
        const ids = Array.from({ length: 1_200 }, (_, i) => `many-${i}`);
        await s.insertAgents(
          ids.map((id) => agent(id)),
          [],
          [],
        );
        // Recorded from the last agent to the first, so that recording order is not the order of the ids.
        const reads = [...ids].reverse().map((id) => pageRead(id, `tu_${id}`, `text of ${id}`));
        await Promise.all(reads.map((r) => s.recordPageRead(r, `text of ${r.agent_id}`)));
        expect(await s.listPageReads(ids)).toEqual(reads);
        expect(await s.listPageReads(ids.slice(0, 3))).toEqual(reads.slice(-3));
      });
    });

    // --- outbox (message_person)
    describe('outbox', () => {
      const limits = (max = 100, since = at(0)): OutboxRateLimits => ({
        agent: { max, since },
        account: { max, since },
      });
      const attempt = (agentId: string, call: string, extra: Partial<OutboxRow> = {}): OutboxRow => ({
        message_id: `msg-${agentId}-${call}`,
        agent_id: agentId,
        account_id: ACCT,
        tool_use_id: call,
        channel: 'email',
        to: 'ada@example.com',
        subject: 'Price alert',
        body_hash: sha256(`body of ${call}`),
        status: 'queued',
        provider_id: null,
        error: null,
        created_at: at(10),
        sent_at: null,
        ...extra,
      });

      it('records an attempt as queued, ends it once, lists and counts by agent', async () => {
        await insertWithLog(s, agent('a1'));
        const first = attempt('a1', 'tu_1');
        expect(await s.queueOutbox(first, limits())).toBeNull();
        const second = attempt('a1', 'tu_2', { channel: 'sms', to: '+4930123456', subject: null });
        expect(await s.queueOutbox(second, limits())).toBeNull();
        expect(await s.listOutbox('a1')).toEqual([first, second]);
        const sent = { status: 'sent', provider_id: '<x@agentry>', error: null, sent_at: at(11) } as const;
        expect(await s.finishOutbox(first.message_id, sent)).toEqual({ ...first, ...sent });
        // An attempt ends once: a later outcome leaves it as it is.
        expect(
          await s.finishOutbox(first.message_id, { status: 'failed', provider_id: null, error: 'late', sent_at: null }),
        ).toEqual({ ...first, ...sent });
        expect(await s.finishOutbox('missing', sent)).toBeNull();
        expect(await s.countOutbox('a1')).toEqual({ sent: 1, queued: 1 });
        expect(await s.countOutbox('nobody')).toEqual({});
        expect(await s.listOutbox('nobody')).toEqual([]);
      });

      it('allows one attempt per tool call', async () => {
        await insertWithLog(s, agent('a1'));
        await s.queueOutbox(attempt('a1', 'tu_1'), limits());
        const again = await s.queueOutbox(attempt('a1', 'tu_1', { message_id: 'other' }), limits());
        expect(again).toEqual({ reason: 'exists', existing: attempt('a1', 'tu_1') });
        expect(await s.listOutbox('a1')).toHaveLength(1);
      });

      it('refuses past the rate limits of the agent and of the account, counting only the window', async () => {
        await insertWithLog(s, agent('a1'));
        await insertWithLog(s, agent('a2'));
        await s.queueOutbox(attempt('a1', 'old', { created_at: at(1) }), limits());
        await s.queueOutbox(attempt('a1', 'tu_1', { created_at: at(5) }), limits());
        const window = (agentMax: number, accountMax: number): OutboxRateLimits => ({
          agent: { max: agentMax, since: at(5) },
          account: { max: accountMax, since: at(5) },
        });
        // The attempt at 1 s is outside the window: a1 has one attempt in it.
        expect(await s.queueOutbox(attempt('a1', 'tu_2'), window(1, 10))).toEqual({ reason: 'agent_rate', count: 1 });
        expect(await s.queueOutbox(attempt('a2', 'tu_1'), window(1, 1))).toEqual({ reason: 'account_rate', count: 1 });
        expect(await s.queueOutbox(attempt('a2', 'tu_1'), window(1, 2))).toBeNull();
        // Two calls racing for the last slot: one gets it.
        const racing = await Promise.all([
          s.queueOutbox(attempt('a1', 'r1'), window(10, 3)),
          s.queueOutbox(attempt('a2', 'r2'), window(10, 3)),
        ]);
        expect(racing.filter((r) => r === null)).toHaveLength(1);
        expect(racing.find((r) => r !== null)).toEqual({ reason: 'account_rate', count: 3 });
      });

      it('remembers opt-outs per account and channel, and refuses attempts to them', async () => {
        await insertWithLog(s, agent('a1'));
        const optOut: OptOutRow = {
          account_id: ACCT,
          channel: 'sms',
          recipient: '+4930123456',
          reason: 'Twilio 21610: unsubscribed',
          at: at(3),
        };
        await s.putOptOut(optOut);
        expect(await s.getOptOut(ACCT, 'sms', '+4930123456')).toEqual(optOut);
        expect(await s.getOptOut(ACCT, 'email', '+4930123456')).toBeNull();
        expect(await s.getOptOut('acct-b', 'sms', '+4930123456')).toBeNull();
        const sms = attempt('a1', 'tu_1', { channel: 'sms', to: '+4930123456', subject: null });
        expect(await s.queueOutbox(sms, limits())).toEqual({ reason: 'opted_out', opt_out: optOut });
        expect(await s.listOutbox('a1')).toEqual([]);
        const later = { ...optOut, reason: 'STOP received', at: at(4) };
        await s.putOptOut(later);
        expect(await s.getOptOut(ACCT, 'sms', '+4930123456')).toEqual(later);
        expect(await s.queueOutbox({ ...sms, account_id: 'acct-b' }, limits())).toBeNull();
      });

      it('marks queued attempts unknown after a crash, keeps them across a reopen, and outlives the agent', async () => {
        await insertWithLog(s, agent('a1'));
        await s.queueOutbox(attempt('a1', 'tu_1'), limits());
        await s.queueOutbox(attempt('a1', 'tu_2'), limits());
        await s.finishOutbox(attempt('a1', 'tu_2').message_id, {
          status: 'failed',
          provider_id: null,
          error: 'rejected',
          sent_at: null,
        });
        if (sut.reopen) {
          await s.close();
          s = await sut.reopen();
          await s.init();
        }
        const marked = await s.markQueuedOutboxUnknown('crashed');
        expect(marked).toEqual([attempt('a1', 'tu_1', { status: 'unknown', error: 'crashed' })]);
        expect(await s.markQueuedOutboxUnknown('again')).toEqual([]);
        expect(await s.countOutbox('a1')).toEqual({ unknown: 1, failed: 1 });
        await s.deleteAgentTree('a1');
        expect((await s.listOutbox('a1')).map((r) => r.status)).toEqual(['unknown', 'failed']);
      });
    });

    // monitors and durable timers
    describe('timers and monitors', () => {
      const timer = (id: string, agentId: string, dueAt: number, extra: Partial<TimerRow> = {}): TimerRow => ({
        timer_id: id,
        agent_id: agentId,
        due_at: dueAt,
        kind: 'monitor.check',
        payload: JSON.stringify({ id }),
        ...extra,
      });
      const monitor = (id: string, agentId: string, extra: Partial<MonitorRow> = {}): MonitorRow => ({
        monitor_id: id,
        agent_id: agentId,
        url: `https://example.com/${id}`,
        selector: null,
        ignore_selectors: '[]',
        condition: null,
        interval_s: 60,
        until: null,
        status: 'active',
        created_at: at(1),
        last_checked_at: at(1),
        next_check_at: at(61),
        changes: 0,
        last_error: null,
        failures: 0,
        etag: null,
        last_modified: null,
        content_sha256: null,
        content: null,
        render: false,
        ...extra,
      });

      beforeEach(async () => {
        await s.createAccount(account(ACCT, 1_000));
        await s.insertAgents([agent('root'), agent('kid', { parent_id: 'root', root_id: 'root' }), agent('b')], [], []);
      });

      it('reads only due timers, soonest first, and moves a timer by its id', async () => {
        expect(await s.nextTimerDue()).toBeNull();
        await s.putTimer(timer('t3', 'root', 3_000));
        await s.putTimer(timer('t1', 'b', 1_000));
        await s.putTimer(timer('t2', 'kid', 2_000, { kind: 'agent.wake', payload: 'null' }));
        expect(await s.nextTimerDue()).toBe(1_000);
        expect((await s.listDueTimers(2_000, 10)).map((t) => t.timer_id)).toEqual(['t1', 't2']);
        expect(await s.listDueTimers(2_500, 1)).toEqual([timer('t1', 'b', 1_000)]);
        await s.putTimer(timer('t1', 'b', 5_000));
        expect((await s.listDueTimers(3_000, 10)).map((t) => t.timer_id)).toEqual(['t2', 't3']);
        expect(await s.listDueTimers(999, 10)).toEqual([]);
      });

      it('deletes a timer only while it is still due at the time given', async () => {
        await s.putTimer(timer('t1', 'b', 1_000));
        expect(await s.deleteTimer('t1', 999)).toBe(false);
        expect(await s.deleteTimer('t1', 1_000)).toBe(true);
        expect(await s.deleteTimer('t1')).toBe(false);
        await s.putTimer(timer('t2', 'b', 1_000));
        expect(await s.deleteTimer('t2')).toBe(true);
        expect(await s.nextTimerDue()).toBeNull();
      });

      it('drops the timer of an agent that does not exist', async () => {
        await s.putTimer(timer('t1', 'ghost', 1_000));
        expect(await s.nextTimerDue()).toBeNull();
      });

      it('inserts a monitor with its timer once; the first one wins', async () => {
        const m = monitor('m1', 'root');
        expect(await s.insertMonitor(m, timer('c:m1', 'root', 61_000))).toEqual(m);
        expect(await s.insertMonitor({ ...m, url: 'https://other.example' }, timer('c:m1', 'root', 1))).toEqual(m);
        expect(await s.getMonitor('m1')).toEqual(m);
        expect(await s.nextTimerDue()).toBe(61_000);
        await s.insertMonitor(monitor('m2', 'root', { render: true }), null);
        await s.insertMonitor(monitor('m3', 'b'), null);
        expect((await s.listMonitors('root')).map((x) => [x.monitor_id, x.render])).toEqual([
          ['m1', false],
          ['m2', true],
        ]);
        expect((await s.insertMonitor(monitor('m2', 'root'), null)).render).toBe(true);
        expect(await s.getMonitor('nope')).toBeNull();
        await expect(s.insertMonitor(monitor('m4', 'ghost'), null)).rejects.toMatchObject({ code: 'not_found' });
      });

      it('updates a monitor with its queued change and next timer in one write', async () => {
        await s.insertMonitor(monitor('m1', 'root'), timer('c:m1', 'root', 61_000));
        const checked = monitor('m1', 'root', {
          last_checked_at: at(61),
          next_check_at: at(121),
          changes: 1,
          etag: '"v2"',
          content: 'Price: $45',
          content_sha256: 'f'.repeat(64),
        });
        const change = { agent_id: 'root', monitor_id: 'm1', change: '{"diff_summary":"x"}', created_at: at(61) };
        expect(await s.updateMonitor(checked, { change, timer: timer('c:m1', 'root', 121_000) })).toBe(true);
        expect(await s.getMonitor('m1')).toEqual(checked);
        expect(await s.listDueTimers(200_000, 10)).toEqual([timer('c:m1', 'root', 121_000)]);
        await s.updateMonitor(checked, { change: { ...change, change: '{"n":2}' } });
        const first = await s.nextMonitorChange('root');
        expect(first).toMatchObject({ ...change });
        expect(await s.nextMonitorChange('root', 'other')).toBeNull();
        expect(await s.nextMonitorChange('b')).toBeNull();
        await s.deleteMonitorChange(first!.seq);
        expect((await s.nextMonitorChange('root', 'm1'))?.change).toBe('{"n":2}');
        const cancelled = { ...checked, status: 'cancelled' as const, next_check_at: null };
        expect(await s.updateMonitor(cancelled, { dropTimer: 'c:m1' })).toBe(true);
        expect(await s.nextTimerDue()).toBeNull();
        // A check that ran during the cancel cannot bring the monitor (or its timer) back.
        expect(await s.updateMonitor(checked, { timer: timer('c:m1', 'root', 181_000) })).toBe(false);
        expect(await s.getMonitor('m1')).toEqual(cancelled);
        expect(await s.nextTimerDue()).toBeNull();
        expect(await s.updateMonitor(monitor('gone', 'root'), { timer: timer('x', 'root', 1) })).toBe(false);
        expect(await s.nextTimerDue()).toBeNull();
      });

      it('deletes timers, monitors and queued changes with their agent tree', async () => {
        await s.insertMonitor(monitor('m1', 'kid'), timer('c:m1', 'kid', 1_000));
        await s.insertMonitor(monitor('m2', 'b'), timer('c:m2', 'b', 2_000));
        await s.putTimer(timer('w:root', 'root', 500, { kind: 'agent.wake' }));
        await s.updateMonitor(monitor('m1', 'kid'), {
          change: { agent_id: 'kid', monitor_id: 'm1', change: '{}', created_at: at(2) },
        });
        await s.deleteAgentTree('root');
        expect(await s.getMonitor('m1')).toBeNull();
        expect(await s.nextMonitorChange('kid')).toBeNull();
        expect((await s.listDueTimers(10_000, 10)).map((t) => t.timer_id)).toEqual(['c:m2']);
        expect(await s.getMonitor('m2')).not.toBeNull();
      });

      it('keeps timers and monitors across close and reopen', async (ctx) => {
        if (!sut.reopen) ctx.skip('this storage keeps nothing across a reopen (in memory)');
        await s.insertMonitor(monitor('m1', 'root'), timer('c:m1', 'root', 61_000));
        await s.updateMonitor(monitor('m1', 'root', { changes: 1 }), {
          change: { agent_id: 'root', monitor_id: 'm1', change: '{"a":1}', created_at: at(3) },
        });
        await s.close();
        s = await sut.reopen!();
        await s.init();
        expect(await s.getMonitor('m1')).toEqual(monitor('m1', 'root', { changes: 1 }));
        expect(await s.listDueTimers(61_000, 10)).toEqual([timer('c:m1', 'root', 61_000)]);
        expect((await s.nextMonitorChange('root'))?.change).toBe('{"a":1}');
      });
    });

    describe('idempotency keys', () => {
      it('keeps the first record for a key, per account', async () => {
        const first: IdempotencyRecord = {
          account_id: ACCT,
          key: 'create-1',
          request_hash: 'h1',
          response: JSON.stringify({ agent_id: 'x' }),
          status: 201,
          created_at: at(1),
        };
        expect(await s.getIdempotency(ACCT, 'create-1')).toBeNull();
        await s.putIdempotency(first);
        await s.putIdempotency({ ...first, request_hash: 'h2', response: '{}', status: 400, created_at: at(2) });
        expect(await s.getIdempotency(ACCT, 'create-1')).toEqual(first);
        const other = { ...first, account_id: 'acct-b', status: 400 };
        await s.putIdempotency(other);
        expect(await s.getIdempotency('acct-b', 'create-1')).toEqual(other);
        expect(await s.getIdempotency(ACCT, 'create-2')).toBeNull();
      });
    });

    describe('durability', () => {
      it('keeps every account, key, agent, message, turn, tool call and ledger row across close and reopen', async (ctx) => {
        if (!sut.reopen) ctx.skip('this storage keeps nothing across a reopen (in memory)');
        await s.createAccount(account(ACCT, 10_000));
        await s.createAccount(account('acct-b', 0, { subscription_active: false }));
        await s.insertApiKey(apiKey('key-1111', ACCT));
        await s.insertApiKey(apiKey('key-2222', 'acct-b'));
        const root = agent('root', { max_credits: 9_000, plan: '{"steps":[]}', progress: 0.25 });
        const kids = Array.from({ length: 5 }, (_, i) => child(`kid-${i}`, root, { spawn_key: `call_1:${i}` }));
        await insertWithLog(s, root);
        await s.insertAgents(
          kids,
          kids.map((k) => message(k.agent_id, 0, 'USER')),
          kids.map((k) => turn(k.agent_id, 0)),
        );
        await s.reserve({ id: 'r1', account_id: ACCT, agent_id: 'root', root_id: 'root', amount: 500 });
        await s.reserve({ id: 'r2', account_id: ACCT, agent_id: 'kid-1', root_id: 'root', amount: 700 });
        await s.commitStep({
          agent_id: 'root',
          turns: [turn('root', 1), turn('root', 2)],
          messages: [message('root', 1)],
          tool_calls: [
            toolCall('root', 'tu_1', 1, { status: 'finished', result: '"ok"', is_error: true, idempotent: false }),
            toolCall('root', 'tu_2', 1),
          ],
          settlements: [settlement('r1', root, 321, { latency_ms: 2_345 })],
          patch: { progress: 0.5, token_count_delta: 99, step_count_delta: 1, updated_at: at(10) },
          status: { from: ['ACTIVE'], to: 'PAUSED', patch: { active_ms: 10_000, active_since: null } },
        });
        await s.changeStatus(
          'kid-2',
          { from: ['STARTING_UP'], to: 'ACTIVE', patch: { started: true, active_since: at(11) } },
          at(11),
        );
        await s.changeStatus(
          'kid-3',
          { from: ['STARTING_UP'], to: 'PAUSED', patch: { status_message: 'Paused' }, mark: true },
          at(11),
        );
        await s.addCredits({
          account_id: 'acct-b',
          agent_id: null,
          kind: 'topup',
          item: null,
          tokens_in: 0,
          tokens_out: 0,
          amount: 42,
          created_at: at(12),
        });
        await s.putIdempotency({
          account_id: ACCT,
          key: 'k',
          request_hash: 'h',
          response: '{"a":1}',
          status: 201,
          created_at: at(13),
        });

        const snapshot = async (st: StorageAdapter) => {
          const agents = await st.listAgents({ limit: 1_000 });
          const logs: Record<string, unknown> = {};
          for (const a of agents.rows) {
            logs[a.agent_id] = {
              messages: await st.listMessages(a.agent_id),
              turns: await st.listTurns(a.agent_id),
              calls: await Promise.all([0, 1, 2].map((i) => st.listToolCalls(a.agent_id, i))),
              marks: await st.listStatusMarks(a.agent_id),
            };
          }
          // Holds belong to the process that took them: an adapter may keep them across a reopen (PostgreSQL, shared
          // by several processes) or drop them (SQLite, one process); recovery releases them either way.
          const withoutHolds = <T extends { reserved?: number; tree_reserved?: number }>(r: T): T => ({
            ...r,
            ...('reserved' in r ? { reserved: 0 } : {}),
            ...('tree_reserved' in r ? { tree_reserved: 0 } : {}),
          });
          return {
            accounts: (await st.listAccounts()).map(withoutHolds),
            ledger: [await st.listLedger(ACCT), await st.listLedger('acct-b')],
            keys: [
              await st.listApiKeys(ACCT),
              await st.listApiKeys('acct-b'),
              await st.findApiKeyByHash('hash-of-key-2222'),
            ],
            agents: { ...agents, rows: agents.rows.map(withoutHolds) },
            logs,
            byStatus: await st.listAgentIdsByStatus(AGENT_STATUSES),
            descendants: sorted(await st.listDescendantIds('root')),
            spawned: (await st.findAgentsBySpawnKey('root', 'call_1:')).map(withoutHolds),
            idempotency: await st.getIdempotency(ACCT, 'k'),
          };
        };
        const before = await snapshot(s);
        expect(before.agents.rows).toHaveLength(6);
        expect(before.ledger[0]!.map((l) => l.latency_ms)).toEqual([undefined, 2_345]);
        expect((before.logs['kid-3'] as { marks: unknown[] }).marks).toHaveLength(1);
        await s.close();
        s = await sut.reopen!();
        await s.init();
        expect(await snapshot(s)).toEqual(before);

        // Whether or not the holds survived, releasing them leaves the settled balance; the ordering key survived:
        // a new agent lists first.
        await s.releaseAgentReservations(['root', 'kid-1']);
        expect(await s.getAccount(ACCT)).toMatchObject({ reserved: 0, balance: 10_000 - 321 });
        expect((await s.getAgent('root'))?.tree_reserved).toBe(0);
        await s.insertAgents([agent('after-reopen')], [], []);
        expect((await s.listAgents({ limit: 1 })).rows[0]?.agent_id).toBe('after-reopen');
        await expectLedgerInvariant(s, ACCT);
      });

      it('keeps specs, tool states, artifacts, page reads and page texts across close and reopen', async (ctx) => {
        if (!sut.reopen) ctx.skip('this storage keeps nothing across a reopen (in memory)');
        await s.createAccount(account(ACCT, 1_000));
        const root = agent('root');
        const kid = child('kid', root, { spawn_key: 'call_1:0', spec: JSON.stringify(SPEC) });
        await s.insertAgents([root, kid], [], []);
        const limits = { maxBytes: 1_000, maxBytesPerAgent: 1_500 };
        await s.putToolState('kid', 'tu_1', '{"phase":2}');
        await s.putArtifact(artifact('kid', 'shot', 1_000), bytes(1_000), limits);
        await s.putArtifact(artifact('root', 'note', 3, { mime_type: 'text/plain' }), bytes(3), limits);
        const text = 'The price is 42 €.';
        await s.recordPageRead(pageRead('kid', 'tu_1', text), text);
        await s.recordPageRead(pageRead('root', 'tu_2', text), text);
        await s.recordPageRead(pageRead('ghost', 'tu_3', 'unread'), 'unread');
        await s.recordPageRead(pageRead('kid', 'tu_4', 'gone reader'), 'gone reader');

        const snapshot = async (st: StorageAdapter) => ({
          kid: { ...(await st.getAgent('kid'))!, tree_reserved: 0 },
          spawned: (await st.findAgentsBySpawnKey('root', 'call_1:')).map((a) => a.spec),
          state: await st.getToolState('kid', 'tu_1'),
          artifacts: [await st.listArtifacts('kid'), await st.listArtifacts('root')],
          shot: await st.getArtifact('kid', 'shot'),
          note: await st.getArtifact('root', 'note'),
          reads: await st.listPageReads(['root', 'kid']),
          texts: [await st.getPageText(sha256(text)), await st.getPageText(sha256('unread'))],
        });
        const before = await snapshot(s);
        expect(before.kid.spec).toBe(JSON.stringify(SPEC));
        expect(before.shot?.data).toEqual(bytes(1_000));
        expect(before.reads).toHaveLength(3);
        await s.close();
        s = await sut.reopen!();
        await s.init();
        expect(await snapshot(s)).toEqual(before);
        // The per-agent total counts what was stored before the reopen; reads keep their order after it.
        await expect(s.putArtifact(artifact('kid', 'more', 501), bytes(501), limits)).rejects.toMatchObject({
          code: 'payload_too_large',
        });
        await s.putArtifact(artifact('kid', 'more', 500), bytes(500), limits);
        await s.recordPageRead(pageRead('root', 'tu_5', 'after'), 'after');
        expect((await s.listPageReads(['kid', 'root'])).map((r) => r.tool_use_id)).toEqual([
          'tu_1',
          'tu_2',
          'tu_4',
          'tu_5',
        ]);
        await s.deleteAgentTree('kid');
        expect(await s.getPageText(sha256('gone reader'))).toBe('gone reader');
      });
    });
  });
}
