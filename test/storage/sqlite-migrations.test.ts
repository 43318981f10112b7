/**
 * SQLite migrations: a database created at version 1 and upgraded ends with exactly the schema of a fresh one (its
 * `sqlite_schema`: every table, index, trigger and virtual table as SQLite keeps its text), its rows intact; and a
 * released migration's SQL never changes. The PostgreSQL adapter's twin is postgres-migrations.test.ts.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MIGRATIONS, SCHEMA_VERSION, migrate } from '../../src/storage/sqlite/migrations.js';
import { dumpSqliteSchema } from '../support/schema-dump.js';

const ALL_VERSIONS = MIGRATIONS.map((m) => m.version);

describe('SQLite migrations', () => {
  let dir: string;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agentry-sqlite-migrations-'));
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('migrates a version-1 database with rows to exactly the schema of a fresh one', () => {
    const old = new Database(path.join(dir, 'old.db'));
    const fresh = new Database(path.join(dir, 'fresh.db'));
    try {
      expect(migrate(old, MIGRATIONS.slice(0, 1))).toEqual([1]);
      old.exec(`
        INSERT INTO accounts (id, name, subscription_active, balance, reserved, created_at)
          VALUES ('acct', 'Old', 1, 5000000, 0, '2026-11-26T00:00:00.000Z');
        INSERT INTO agents (agent_id, account_id, root_id, goal, model, status, progress, status_message, token_count,
            message_count, credits_spent, sub_agent_count, tree_spent, tree_reserved, step_count, started, active_ms,
            created_at, updated_at)
          VALUES ('a1', 'acct', 'a1', 'Summarise the release notes', 'claude-sonnet', 'PAUSED', 0.5, 'paused', 120, 1,
            300, 0, 300, 0, 1, 1, 1500, '2026-11-26T00:00:00.000Z', '2026-11-26T00:00:01.000Z');
        INSERT INTO turns (agent_id, idx, role, content, created_at)
          VALUES ('a1', 0, 'user', '"Summarise the release notes"', '2026-11-26T00:00:00.000Z');
        INSERT INTO ledger (account_id, agent_id, kind, item, tokens_in, tokens_out, amount, created_at)
          VALUES ('acct', 'a1', 'model', 'claude-sonnet', 100, 20, -300, '2026-11-26T00:00:01.000Z');
      `);

      expect(migrate(old)).toEqual(ALL_VERSIONS.slice(1));
      expect(migrate(fresh)).toEqual(ALL_VERSIONS);
      expect(dumpSqliteSchema(old)).toEqual(dumpSqliteSchema(fresh));

      // The rows came through: the turn moved into migration 2's table, the goal into migration 8's search index.
      expect(old.prepare('SELECT content FROM turns').pluck().get()).toBe('"Summarise the release notes"');
      expect(old.prepare('SELECT rowid FROM agent_goal_search WHERE goal LIKE ?').pluck().all('%release%')).toEqual([
        1,
      ]);
      expect(old.prepare('SELECT tokens_cache_write, tokens_cache_read FROM ledger').get()).toEqual({
        tokens_cache_write: 0,
        tokens_cache_read: 0,
      });
    } finally {
      old.close();
      fresh.close();
    }
  });
});

describe('SQLite migrations as released', () => {
  it('are numbered 1, 2, 3, ... without gaps', () => {
    expect(ALL_VERSIONS).toEqual(ALL_VERSIONS.map((_, i) => i + 1));
    expect(SCHEMA_VERSION).toBe(ALL_VERSIONS.length);
  });

  // A released migration has run on databases that will never run it again: editing it would make their schema differ
  // from a fresh one's. Change the schema with a new migration; add its hash here when it is released.
  it('keep the SQL they were released with', () => {
    const sha = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 16);
    expect(Object.fromEntries(MIGRATIONS.map((m) => [m.version, `${m.name}: ${sha(m.up)}`]))).toEqual(RELEASED);
  });
});

/** Each released migration's name and the first 16 hex digits of its SQL's SHA-256. */
const RELEASED: Record<number, string> = {
  1: 'initial schema: 71a3aa7cf7597823',
  2: 'leaner hot path: 84574a4fa8df4b7a',
  3: 'child specs, tool state, artifacts, pages read: 5de4134554fae7d8',
  4: 'durable timers, monitors: 175ff9775a0f8cb7',
  5: 'message outbox and opt-outs: 950c21e2596f32a8',
  6: 'console: api key last use, sessions: 3a8aab71b347e031',
  7: 'trace context and retention: d525b4a898256a0c',
  8: 'goal search index, sessions by account: b27eee80342b8d2c',
  9: 'ledger: prompt-cache tokens: 737bff63dcf276cd',
  10: 'ledger by agent: 27a7f2fce234f010',
  11: 'model call latency, status marks: bee3cad6c7074b7f',
};
