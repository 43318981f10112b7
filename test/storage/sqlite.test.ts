import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AgentryError } from '../../src/errors.js';
import { sqliteStorage } from '../../src/storage/sqlite/index.js';
import { MIGRATIONS, SCHEMA_VERSION, migrate } from '../../src/storage/sqlite/migrations.js';
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
    expect(SCHEMA_VERSION).toBe(2);
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
    ]);

    const second = sqliteStorage({ path: file });
    await second.init();
    await second.init();
    expect((await second.getAccount('a'))?.balance).toBe(7);
    await second.close();
    expect(migrationRows()).toEqual(rows);
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

    await v1.init(); // migrates 1 -> 2
    expect(migrationRows().map((r) => (r as { version: number }).version)).toEqual([1, 2]);
    expect((await v1.getAgent('ag'))?.status).toBe('PAUSED');
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
      'agents',
      'api_keys',
      'idempotency_keys',
      'ledger',
      'messages',
      'reservations',
      'schema_migrations',
      'tool_calls',
      'turns',
    ]);
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
