/**
 * Migration 8 (PostgreSQL): goal search through a pg_trgm index over the first 4,096 characters of each goal,
 * ASCII-folded: the expression agents.ts searches (GOAL_SEARCH_EXPRESSION). pg_trgm ships with PostgreSQL and is a
 * trusted extension, but a role may still be refused it (or the contrib package be missing): then the migration goes
 * on without the index, and a search is the same LIKE bounded by its statement timeout and match cap
 * (storage/search.ts). The extension goes into `public` when it is not there yet, so that no schema of agentry's (a
 * tenant's, a test's) owns it. And the console's sign-in cap counts an account's live sessions through an index.
 */
import type { Migration } from './migration.js';

export const migration: Migration = {
  version: 8,
  name: 'goal search index, sessions by account',
  up: `
DO $$
 DECLARE ext_schema name;
 BEGIN
   BEGIN
     CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public;
   EXCEPTION WHEN others THEN
     RAISE NOTICE 'agentry: pg_trgm is not available (%), goal search runs without its index', SQLERRM;
   END;
   SELECT n.nspname INTO ext_schema FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'pg_trgm';
   IF ext_schema IS NOT NULL THEN
     EXECUTE format(
       'CREATE INDEX agents_goal_trgm ON agents USING gin '
       '((translate(left(goal, 4096), %L, %L)) %I.gin_trgm_ops)',
       'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz', ext_schema);
   END IF;
 END $$;
CREATE INDEX console_sessions_account ON console_sessions (account_id, expires_at);
`,
};
