/**
 * Migration 10 (PostgreSQL): until this release, migrations 1 to 9 were built from the code's schema constants of the
 * day, so what a database got at one version depended on the build that created it, and a fresh database differed
 * from an upgraded one. The migrations are now frozen as they were released; this one brings a database made by any
 * earlier build to the schema a fresh one has. Each statement does nothing where there is nothing to change.
 */
import type { Migration } from './migration.js';

export const migration: Migration = {
  version: 10,
  name: 'one schema whatever build created the database',
  up: `
-- Migration 4's float function, before it took the worker and share: migration 5 created the new one beside it.
DROP FUNCTION IF EXISTS agentry_float_grow(text, text, bigint, bigint);
-- The claim function of an early build of migration 5 (claims became two plain statements, which use the indexes).
DROP FUNCTION IF EXISTS agentry_claim(text, text[], integer, bigint);
-- The first build of migration 5 made new agents unclaimable until woken.
ALTER TABLE agents ALTER COLUMN wake_requested SET DEFAULT true;
-- The first build of migration 6 kept the index of lease owners.
DROP INDEX IF EXISTS agents_lease_owner;
`,
};
