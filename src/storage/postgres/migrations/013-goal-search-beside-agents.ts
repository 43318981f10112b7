/**
 * Migration 13 (PostgreSQL): goal search moves out of `agents` into `agent_goals`, one row per agent written once
 * when the agent is inserted (a goal never changes), with migration 8's trigram index on it. An agent's row gets a
 * new version at every step (counters, lease, status), and almost every such update changes an indexed column
 * (status, the lease owner, updated_at), so it writes an entry into every index of `agents`: the trigram index made
 * each of them extract and insert the goal's trigrams again, about a tenth of the server's time on a fan-out. The
 * searched text is stored as searched: the goal's first 4,096 characters, ASCII-folded (agents.ts,
 * GOAL_SEARCH_EXPRESSION). Without pg_trgm (migration 8 went on without it) the table has no index, and a search is
 * the same bounded LIKE as before.
 */
import type { Migration } from './migration.js';

export const migration: Migration = {
  version: 13,
  name: 'goal search beside the agents',
  up: `
CREATE TABLE agent_goals (
  agent_id TEXT PRIMARY KEY,
  search_text TEXT NOT NULL
);
INSERT INTO agent_goals (agent_id, search_text)
  SELECT agent_id, translate(left(goal, 4096), 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz') FROM agents;
DROP INDEX IF EXISTS agents_goal_trgm;
DO $$
 DECLARE ext_schema name;
 BEGIN
   SELECT n.nspname INTO ext_schema FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'pg_trgm';
   IF ext_schema IS NOT NULL THEN
     EXECUTE format('CREATE INDEX agent_goals_trgm ON agent_goals USING gin (search_text %I.gin_trgm_ops)', ext_schema);
   END IF;
 END $$;
`,
};
