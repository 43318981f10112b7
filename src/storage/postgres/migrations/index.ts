/**
 * @module storage/postgres/migrations
 * The PostgreSQL schema as numbered migrations, one file each, as the SQLite adapter keeps its own
 * (storage/sqlite/migrations.ts). A schema records the versions it has applied in `schema_migrations`; {@link migrate}
 * applies the missing ones in order, each in its own transaction with its version row, so a crash mid-migration leaves
 * the schema at the previous version.
 *
 * Each migration is literal SQL, frozen once released: never edit one, append the next number. A server-side function
 * that changes is written out whole again in the migration that changes it (`CREATE OR REPLACE`), so the schema of
 * any old version is in these files, and a database created at any version and upgraded ends with exactly the schema
 * of a fresh one (test/storage/postgres-migrations.test.ts compares them).
 */
import { AgentryError } from '../../../errors.js';
import type { Db } from '../db.js';
import type { Migration } from './migration.js';
import { migration as m001 } from './001-initial-schema.js';
import { migration as m002 } from './002-console-sessions.js';
import { migration as m003 } from './003-trace-context.js';
import { migration as m004 } from './004-step-functions.js';
import { migration as m005 } from './005-workers-and-leases.js';
import { migration as m006 } from './006-one-row-version-per-commit.js';
import { migration as m007 } from './007-notification-secret.js';
import { migration as m008 } from './008-goal-search.js';
import { migration as m009 } from './009-prompt-cache-tokens.js';
import { migration as m010 } from './010-one-schema-for-every-build.js';
import { migration as m011 } from './011-ledger-by-agent.js';
import { migration as m012 } from './012-latency-and-status-marks.js';
import { migration as m013 } from './013-goal-search-beside-agents.js';
import { migration as m014 } from './014-step-commit-answers-built-once.js';

export type { Migration } from './migration.js';

export const MIGRATIONS: readonly Migration[] = [
  m001,
  m002,
  m003,
  m004,
  m005,
  m006,
  m007,
  m008,
  m009,
  m010,
  m011,
  m012,
  m013,
  m014,
];

/** The schema version this code writes: the last migration's. */
export const SCHEMA_VERSION = MIGRATIONS.at(-1)?.version ?? 0;

/**
 * A fixed number for the advisory lock that serialises migrations, taken as (number, hash of the schema's name):
 * schemas on one database (tenants, parallel test suites) never wait for each other's.
 */
const MIGRATION_LOCK = 7_305_001;

/**
 * Brings `db`'s schema up to the last of `migrations` (creating the schema if missing). Safe to call on every open
 * and from several processes at once: each migration runs in a transaction that takes the migration lock and reads the
 * version first. Returns the versions applied now. Refuses a schema written by a newer agentry, whose tables and
 * functions this code does not know.
 */
export async function migrate(db: Db, migrations: readonly Migration[] = MIGRATIONS): Promise<number[]> {
  const latest = migrations.at(-1)?.version ?? 0;
  const applied: number[] = [];
  // Resolves to the version it applied, or 0 when there is none left.
  const applyNext = () =>
    db.tx(async (q): Promise<number> => {
      await q('SELECT pg_advisory_xact_lock($1::int, hashtext($2))', [MIGRATION_LOCK, db.schema]);
      await q(`CREATE SCHEMA IF NOT EXISTS ${db.schema}`);
      await q(
        `CREATE TABLE IF NOT EXISTS ${db.schema}.schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`,
      );
      const [row] = await q<{ current: number }>(
        `SELECT coalesce(max(version), 0) AS current FROM ${db.schema}.schema_migrations`,
      );
      const current = row?.current ?? 0;
      if (current > latest) {
        throw new AgentryError(
          'invalid_request',
          `The PostgreSQL schema ${db.schema} has schema version ${current}, newer than this agentry supports (${latest}). Upgrade agentry.`,
        );
      }
      const next = migrations.find((m) => m.version === current + 1);
      if (!next) return 0;
      await q(next.up);
      await q(`INSERT INTO ${db.schema}.schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`, [
        next.version,
        next.name,
        new Date().toISOString(),
      ]);
      return next.version;
    });
  for (let version = await applyNext(); version > 0; version = await applyNext()) applied.push(version);
  return applied;
}
