import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AgentryError } from '../../src/errors.js';
import type { AgentRow } from '../../src/storage/adapter.js';
import { sqliteStorage } from '../../src/storage/sqlite/index.js';
import { MIGRATIONS, SCHEMA_VERSION, migrate } from '../../src/storage/sqlite/migrations.js';
import { prepareStatements } from '../../src/storage/sqlite/statements.js';
import { at, storageContract } from './contract.js';

function tempDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'agentry-sqlite-'));
}

storageContract('sqlite', async () => {
  const dir = tempDir();
  const file = path.join(dir, 'agentry.db');
  return {
    storage: sqliteStorage({ path: file }),
    reopen: async () => sqliteStorage({ path: file }),
    cleanup: async () => fs.rmSync(dir, { recursive: true, force: true }),
  };
});

/** An account with 100 micro-credits, for the tests that need one row of it. */
const ACCOUNT = { id: 'acct', name: 'a', subscription_active: true, balance: 100, reserved: 0, created_at: at(0) };

describe('sqliteStorage', () => {
  let dir: string;
  let file: string;
  beforeEach(() => {
    dir = tempDir();
    file = path.join(dir, 'agentry.db');
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  /** Reads the file with a connection of its own, as an operator would. */
  function inspect<T>(read: (db: Database.Database) => T): T {
    const db = new Database(file, { readonly: true });
    try {
      return read(db);
    } finally {
      db.close();
    }
  }
  const migrationRows = () =>
    inspect((db) => db.prepare('SELECT version, name, applied_at FROM schema_migrations ORDER BY version').all());

  it('records every migration on a new file, and does not run them again on reopen', async () => {
    expect(MIGRATIONS.map((m) => m.version)).toEqual(MIGRATIONS.map((_, i) => i + 1));
    expect(SCHEMA_VERSION).toBe(11);
    const first = sqliteStorage({ path: file });
    await first.init();
    await first.createAccount({
      id: 'a',
      name: 'A',
      subscription_active: true,
      balance: 7,
      reserved: 0,
      created_at: at(0),
    });
    await first.close();
    const rows = migrationRows();
    expect(rows).toEqual([
      { version: 1, name: 'initial schema', applied_at: expect.any(String) },
      { version: 2, name: 'leaner hot path', applied_at: expect.any(String) },
      { version: 3, name: 'child specs, tool state, artifacts, pages read', applied_at: expect.any(String) },
      { version: 4, name: 'durable timers, monitors', applied_at: expect.any(String) },
      { version: 5, name: 'message outbox and opt-outs', applied_at: expect.any(String) },
      { version: 6, name: 'console: api key last use, sessions', applied_at: expect.any(String) },
      { version: 7, name: 'trace context and retention', applied_at: expect.any(String) },
      { version: 8, name: 'goal search index, sessions by account', applied_at: expect.any(String) },
      { version: 9, name: 'ledger: prompt-cache tokens', applied_at: expect.any(String) },
      { version: 10, name: 'ledger by agent', applied_at: expect.any(String) },
      { version: 11, name: 'model call latency, status marks', applied_at: expect.any(String) },
    ]);

    const second = sqliteStorage({ path: file });
    await second.init();
    await second.init();
    expect((await second.getAccount('a'))?.balance).toBe(7);
    await second.close();
    expect(migrationRows()).toEqual(rows);
  });

  it("reads an agent's ledger rows through the ledger_agent index, newest first, without a sort", async () => {
    const storage = sqliteStorage({ path: file });
    await storage.init();
    await storage.close();
    const plan = inspect((db) => {
      const { source } = prepareStatements(db).listAgentLedgerNewest as unknown as { source: string };
      return db
        .prepare<[string, number], { detail: string }>(`EXPLAIN QUERY PLAN ${source}`)
        .all('agent-1', 10)
        .map((r) => r.detail);
    });
    // One range search of the index (read backwards for DESC): no scan of the ledger, no temporary sort.
    expect(plan).toEqual([expect.stringContaining('USING INDEX ledger_agent (agent_id=?)')]);
  });

  it("pages an account's ledger, sums its spend and lists an agent's tool calls through existing indexes", async () => {
    const storage = sqliteStorage({ path: file });
    await storage.init();
    await storage.close();
    const plans = inspect((db) => {
      const statements = prepareStatements(db) as unknown as Record<string, { source: string }>;
      const plan = (name: string, ...args: unknown[]) =>
        db
          .prepare(`EXPLAIN QUERY PLAN ${statements[name]!.source}`)
          .all(...args)
          .map((r) => (r as { detail: string }).detail);
      return {
        page: plan('listLedgerPage', 'acct', 1000, 101),
        spend: plan('sumLedgerSpend', 'acct'),
        toolCalls: plan('listAgentToolCallsNewest', 'agent-1', 5001),
      };
    });
    // A range of the (account_id, seq) index read backwards: no scan of the ledger, no sort.
    expect(plans.page).toEqual([expect.stringContaining('USING INDEX ledger_account (account_id=? AND seq<?)')]);
    // The account's rows only, through the same index (the grouping may sort them: it is per account, one query).
    expect(plans.spend.join('\n')).toContain('USING INDEX ledger_account (account_id=?)');
    expect(plans.spend.join('\n')).not.toMatch(/SCAN ledger(?! USING)/);
    // One range of (agent_id, turn_idx) with its rowid, read backwards: no sort.
    expect(plans.toolCalls).toEqual([expect.stringContaining('USING INDEX tool_calls_turn (agent_id=?)')]);
  });

  it('migrates a version-1 database forward with its agents, turns and ledger intact', async () => {
    // A version-1 file, as the first release wrote it.
    const old = new Database(file);
    migrate(old, MIGRATIONS.slice(0, 1));
    old.close();
    const v1 = sqliteStorage({ path: file });
    // open it with version-1 code paths only through SQL: write rows the way version 1 stored them
    const raw = new Database(file);
    raw.exec(
      `INSERT INTO accounts (id, name, subscription_active, balance, reserved, created_at) VALUES ('acct', 'A', 1, 500, 0, '${at(0)}')`,
    );
    raw.exec(
      `INSERT INTO agents (agent_id, account_id, parent_id, root_id, spawn_key, goal, model, status, progress, status_message, ` +
        `token_count, message_count, credits_spent, sub_agent_count, max_credits, tree_spent, tree_reserved, step_count, started, ` +
        `active_ms, active_since, plan, created_at, updated_at) VALUES ('ag', 'acct', NULL, 'ag', NULL, 'goal', 'svc-1-lite', ` +
        `'PAUSED', 0.5, 'Paused', 10, 1, 0, 0, NULL, 0, 0, 1, 1, 0, NULL, NULL, '${at(0)}', '${at(1)}')`,
    );
    raw.exec(
      `INSERT INTO turns (agent_id, idx, role, content, created_at) VALUES ('ag', 0, 'user', '[{"type":"text","text":"goal"}]', '${at(0)}')`,
    );
    raw.exec(
      `INSERT INTO turns (agent_id, idx, role, content, created_at) VALUES ('ag', 1, 'assistant', '[{"type":"text","text":"hi"}]', '${at(1)}')`,
    );
    raw.exec(
      `INSERT INTO ledger (account_id, agent_id, kind, item, tokens_in, tokens_out, amount, created_at) VALUES ('acct', NULL, 'topup', NULL, 0, 0, 500, '${at(0)}')`,
    );
    raw.close();

    await v1.init(); // migrates 1 -> 2 -> 3
    expect(migrationRows().map((r) => (r as { version: number }).version)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    expect(await v1.getAgent('ag')).toMatchObject({ status: 'PAUSED', plan: null, spec: null, trace_context: null });
    // Migration 8 indexed the goals already stored: the search finds them.
    const search = { account_id: 'acct', parent_id: null, order: 'newest', offset: 0, limit: 10 } as const;
    expect((await v1.searchAgents({ ...search, goal_contains: 'GOA' })).rows.map((a) => a.agent_id)).toEqual(['ag']);
    expect((await v1.listTurns('ag')).map((t) => t.content)).toEqual([
      '[{"type":"text","text":"goal"}]',
      '[{"type":"text","text":"hi"}]',
    ]);
    expect(await v1.listAgentIdsByStatus(['PAUSED'])).toEqual(['ag']);
    expect((await v1.listLedger('acct')).map((l) => l.amount)).toEqual([500]);
    // and it keeps working: the next turn continues the log
    await v1.commitStep({
      agent_id: 'ag',
      turns: [{ agent_id: 'ag', idx: 2, role: 'user', content: '[]', created_at: at(2) }],
      patch: { updated_at: at(2) },
    });
    expect(await v1.listTurns('ag')).toHaveLength(3);
    await v1.close();
  });

  it('opens in WAL mode with every table of the schema', async () => {
    const storage = sqliteStorage({ path: file, busyTimeoutMs: 100 });
    await storage.init();
    const tables = inspect((db) =>
      db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
        .pluck()
        .all(),
    );
    const journal = inspect((db) => db.pragma('journal_mode', { simple: true }));
    await storage.close();
    expect(journal).toBe('wal');
    expect(tables).toEqual([
      'accounts',
      'agent_goal_search',
      'agent_goal_search_config',
      'agent_goal_search_content',
      'agent_goal_search_data',
      'agent_goal_search_docsize',
      'agent_goal_search_idx',
      'agents',
      'api_keys',
      'artifact_data',
      'artifacts',
      'console_sessions',
      'idempotency_keys',
      'ledger',
      'message_opt_outs',
      'messages',
      'monitor_changes',
      'monitors',
      'outbox',
      'page_reads',
      'pages',
      'reservations',
      'schema_migrations',
      'status_marks',
      'timers',
      'tool_calls',
      'tool_state',
      'turns',
    ]);
  });

  it('migrates a version-2 database forward: its agents read back with spec null, and the new tables work', async () => {
    const old = new Database(file);
    expect(migrate(old, MIGRATIONS.slice(0, 2))).toEqual([1, 2]);
    const columns = `agent_id, account_id, parent_id, root_id, spawn_key, goal, model, status, progress, status_message, token_count, message_count, credits_spent, sub_agent_count, max_credits, tree_spent, tree_reserved, step_count, started, active_ms, active_since, plan, created_at, updated_at`;
    old.exec(
      `INSERT INTO accounts (id, name, subscription_active, balance, reserved, created_at) VALUES ('acct', 'A', 1, 500, 0, '${at(0)}');` +
        `INSERT INTO agents (${columns}) VALUES ('root', 'acct', NULL, 'root', NULL, 'goal', 'svc-1-lite', 'ACTIVE', 0.5, 'Working', ` +
        `10, 1, 3, 1, 900, 3, 0, 2, 1, 1500, '${at(1)}', '{"steps":[]}', '${at(0)}', '${at(2)}');` +
        `INSERT INTO agents (${columns}) VALUES ('kid', 'acct', 'root', 'root', 'call_1:0', 'sub-goal', 'svc-1-lite', 'STARTING_UP', 0, '', ` +
        `0, 1, 0, 0, NULL, 0, 0, 0, 0, 0, NULL, NULL, '${at(1)}', '${at(1)}');` +
        `INSERT INTO turns (agent_id, idx, role, content, created_at) VALUES ('root', 0, 'user', '[]', '${at(0)}');`,
    );
    old.close();

    const storage = sqliteStorage({ path: file });
    await storage.init(); // migrates 2 -> 3
    try {
      expect(migrationRows().map((r) => (r as { version: number }).version)).toEqual([
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
      ]);
      const root: AgentRow = {
        agent_id: 'root',
        account_id: 'acct',
        parent_id: null,
        root_id: 'root',
        spawn_key: null,
        goal: 'goal',
        model: 'svc-1-lite',
        status: 'ACTIVE',
        progress: 0.5,
        status_message: 'Working',
        token_count: 10,
        message_count: 1,
        credits_spent: 3,
        sub_agent_count: 1,
        max_credits: 900,
        tree_spent: 3,
        tree_reserved: 0,
        step_count: 2,
        started: true,
        active_ms: 1500,
        active_since: at(1),
        plan: '{"steps":[]}',
        spec: null,
        created_at: at(0),
        updated_at: at(2),
        trace_context: null,
      };
      expect(await storage.getAgent('root')).toEqual(root);
      expect((await storage.listAgents({ limit: 10 })).rows.map((a) => [a.agent_id, a.spec])).toEqual([
        ['kid', null],
        ['root', null],
      ]);
      expect((await storage.findAgentsBySpawnKey('root', 'call_1:')).map((a) => a.spec)).toEqual([null]);
      expect(await storage.listTurns('root')).toHaveLength(1);
      // What the new version adds works on the old rows.
      await storage.insertAgents([{ ...root, agent_id: 'k2', parent_id: 'root', spec: '{"tools":[]}' }], [], []);
      expect((await storage.getAgent('k2'))?.spec).toBe('{"tools":[]}');
      await storage.putToolState('kid', 'tu_1', '{"phase":1}');
      expect(await storage.getToolState('kid', 'tu_1')).toBe('{"phase":1}');
      const row = {
        artifact_id: 'a1',
        agent_id: 'root',
        account_id: 'acct',
        name: 'a.bin',
        mime_type: 'application/octet-stream',
        size: 2,
        created_at: at(3),
      };
      await storage.putArtifact(row, new Uint8Array([0, 255]), { maxBytes: 10, maxBytesPerAgent: 10 });
      expect(await storage.getArtifact('root', 'a1')).toEqual({ row, data: new Uint8Array([0, 255]) });
    } finally {
      await storage.close();
    }
  });

  // --- migration 5 (message_person's outbox)
  it('migrates a version-4 database forward to the outbox: its agents stay, and the outbox and opt-outs work', async () => {
    const old = new Database(file);
    expect(migrate(old, MIGRATIONS.slice(0, 4))).toEqual([1, 2, 3, 4]);
    old
      .prepare(
        'INSERT INTO accounts (id, name, subscription_active, balance, reserved, created_at) VALUES (?, ?, 1, 500, 0, ?)',
      )
      .run('acct', 'A', at(0));
    old.close();
    const storage = sqliteStorage({ path: file });
    await storage.init(); // migrates 4 -> 5
    try {
      expect(migrationRows().map((r) => (r as { version: number }).version)).toEqual([
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
      ]);
      expect((await storage.getAccount('acct'))?.balance).toBe(500);
      const row = {
        message_id: 'm1',
        agent_id: 'ag',
        account_id: 'acct',
        tool_use_id: 'tu_1',
        channel: 'sms' as const,
        to: '+49301234567',
        subject: null,
        body_hash: 'h',
        status: 'queued' as const,
        provider_id: null,
        error: null,
        created_at: at(1),
        sent_at: null,
      };
      const limits = { agent: { max: 1, since: at(0) }, account: { max: 1, since: at(0) } };
      expect(await storage.queueOutbox(row, limits)).toBeNull();
      expect(await storage.queueOutbox({ ...row, message_id: 'm2', tool_use_id: 'tu_2' }, limits)).toEqual({
        reason: 'agent_rate',
        count: 1,
      });
      await storage.putOptOut({
        account_id: 'acct',
        channel: 'sms',
        recipient: '+49301234567',
        reason: 'STOP',
        at: at(2),
      });
      expect(await storage.markQueuedOutboxUnknown('crashed')).toEqual([
        { ...row, status: 'unknown', error: 'crashed' },
      ]);
      expect(await storage.countOutbox('ag')).toEqual({ unknown: 1 });
    } finally {
      await storage.close();
    }
  });

  it('keeps one row per page text, and deletes artifact bytes with their agents', async () => {
    const storage = sqliteStorage({ path: file });
    await storage.init();
    const text = 'the page';
    const sha = createHash('sha256').update(text).digest('hex');
    try {
      await storage.createAccount(ACCOUNT);
      const base = {
        account_id: 'acct',
        parent_id: null,
        spawn_key: null,
        goal: 'g',
        model: 'svc-1-lite',
        status: 'ACTIVE' as const,
        progress: 0,
        status_message: '',
        token_count: 0,
        message_count: 0,
        credits_spent: 0,
        sub_agent_count: 0,
        max_credits: null,
        tree_spent: 0,
        tree_reserved: 0,
        step_count: 0,
        started: true,
        active_ms: 0,
        active_since: null,
        plan: null,
        spec: null,
        created_at: at(0),
        updated_at: at(0),
      };
      await storage.insertAgents(
        [
          { ...base, agent_id: 'a', root_id: 'a' },
          { ...base, agent_id: 'b', root_id: 'b' },
        ],
        [],
        [],
      );
      const read = (agentId: string, toolUseId: string) => ({
        agent_id: agentId,
        tool_use_id: toolUseId,
        url: 'https://example.com/',
        final_url: 'https://example.com/',
        title: 'Example',
        content_sha256: sha,
        retrieved_at: at(1),
      });
      await storage.recordPageRead(read('a', 'tu_1'), text);
      await storage.recordPageRead(read('a', 'tu_2'), text);
      await storage.recordPageRead(read('b', 'tu_3'), text);
      const limits = { maxBytes: 1 << 20, maxBytesPerAgent: 1 << 21 };
      for (const agentId of ['a', 'b']) {
        await storage.putArtifact(
          {
            artifact_id: 'x',
            agent_id: agentId,
            account_id: 'acct',
            name: 'x.bin',
            mime_type: 'application/octet-stream',
            size: 100_000,
            created_at: at(2),
          },
          new Uint8Array(100_000).fill(1),
          limits,
        );
      }
      const count = (table: string) =>
        inspect((db) => db.prepare(`SELECT count(*) FROM ${table}`).pluck().get() as number);
      expect([count('pages'), count('page_reads'), count('artifacts'), count('artifact_data')]).toEqual([1, 3, 2, 2]);
      await storage.deleteAgentTree('a');
      expect([count('pages'), count('page_reads'), count('artifacts'), count('artifact_data')]).toEqual([1, 1, 1, 1]);
      expect(inspect((db) => db.prepare('SELECT length(data) FROM artifact_data').pluck().get())).toBe(100_000);
    } finally {
      await storage.close();
    }
  });

  it('refuses a database written by a newer schema', async () => {
    const storage = sqliteStorage({ path: file });
    await storage.init();
    await storage.close();
    const db = new Database(file);
    db.prepare("INSERT INTO schema_migrations (version, name, applied_at) VALUES (99, 'future', ?)").run(at(0));
    db.close();
    await expect(sqliteStorage({ path: file }).init()).rejects.toMatchObject({ code: 'invalid_request' });
  });

  it('sees a top-up made by another process before it refuses a hold', async () => {
    const server = sqliteStorage({ path: file });
    const cli = sqliteStorage({ path: file });
    await server.init();
    await cli.init();
    try {
      await server.createAccount(ACCOUNT);
      expect(
        await server.reserve({ id: 'r1', account_id: 'acct', agent_id: 'x', root_id: 'x', amount: 100 }),
      ).toBeNull();
      expect(await server.reserve({ id: 'r2', account_id: 'acct', agent_id: 'x', root_id: 'x', amount: 50 })).toBe(
        'account',
      );
      await cli.addCredits({
        account_id: 'acct',
        agent_id: null,
        kind: 'topup',
        item: null,
        tokens_in: 0,
        tokens_out: 0,
        amount: 50,
        created_at: at(1),
      });
      expect(
        await server.reserve({ id: 'r3', account_id: 'acct', agent_id: 'x', root_id: 'x', amount: 50 }),
      ).toBeNull();
      expect(await server.reserve({ id: 'r4', account_id: 'acct', agent_id: 'x', root_id: 'x', amount: 1 })).toBe(
        'account',
      );
    } finally {
      await server.close();
      await cli.close();
    }
  });

  it('opens read-only beside the writer: sees its commits, refuses every write, takes no runner lock', async () => {
    const writer = sqliteStorage({ path: file });
    await writer.init();
    const reader = sqliteStorage({ path: file, readonly: true });
    await reader.init();
    try {
      await writer.createAccount(ACCOUNT);
      expect(await reader.getAccount('acct')).toEqual(ACCOUNT);
      expect(reader.sharedLocation?.()).toEqual({ kind: 'sqlite', path: file });
      await expect(reader.createAccount({ ...ACCOUNT, id: 'other' })).rejects.toMatchObject({ code: 'invalid_state' });
      await expect(reader.acquireRunnerLock?.()).rejects.toMatchObject({ code: 'invalid_state' });
      expect(await writer.getAccount('other')).toBeNull();
    } finally {
      await reader.close();
      await writer.close();
    }
    // A reader never creates a database.
    await expect(sqliteStorage({ path: path.join(dir, 'missing.db'), readonly: true }).init()).rejects.toMatchObject({
      code: 'invalid_request',
    });
    expect(sqliteStorage({ path: ':memory:' }).sharedLocation?.()).toBeNull();
  });

  it("moves its change counter on another connection's commit, and only then", async () => {
    const writer = sqliteStorage({ path: file });
    await writer.init();
    const reader = sqliteStorage({ path: file, readonly: true });
    await reader.init();
    try {
      const before = reader.changeCounter();
      expect(reader.changeCounter()).toBe(before);
      await reader.getAccount('acct'); // reading changes nothing
      expect(reader.changeCounter()).toBe(before);
      const writerBefore = writer.changeCounter();
      await writer.createAccount(ACCOUNT);
      expect(reader.changeCounter()).not.toBe(before);
      expect(writer.changeCounter()).toBe(writerBefore); // its own commits do not count
    } finally {
      await reader.close();
      await writer.close();
    }
  });

  it('checks its options at the door', () => {
    for (const bad of [{ path: '' }, { busyTimeoutMs: -1 }, { busyTimeoutMs: 1.5 }, { pth: 'x.db' }]) {
      let thrown: unknown;
      try {
        sqliteStorage(bad as never);
      } catch (err) {
        thrown = err;
      }
      expect(AgentryError.isInstance(thrown) && thrown.code).toBe('invalid_request');
    }
  });

  it('says so when used before init() or after close()', async () => {
    const storage = sqliteStorage({ path: file });
    await expect(storage.getAccount('a')).rejects.toThrow(/init\(\)/);
    await storage.init();
    await storage.close();
    await storage.close();
    await expect(storage.listAccounts()).rejects.toThrow(/init\(\)/);
  });

  it('names the file when it cannot be opened', async () => {
    const storage = sqliteStorage({ path: path.join(dir, 'missing-dir', 'x.db') });
    await expect(storage.init()).rejects.toMatchObject({
      code: 'invalid_request',
      message: expect.stringContaining('missing-dir'),
    });
  });
});
