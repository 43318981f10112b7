/**
 * PostgreSQL goal search beside the agents: the searched text of a goal is written once, with the agent, into
 * `agent_goals` (the agents' own rows get a new version at every step; the trigram index is not on them), and it
 * goes with the agent's tree. Needs the PostgreSQL server of the other postgres suites; with AGENTRY_CI_STRICT=1 a
 * missing server fails the suite instead of skipping it.
 */
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { postgresStorage } from '../../src/storage/postgres/index.js';
import { dropSchemas, newSchemaName, POSTGRES_TEST_URL, postgresUnreachable } from '../support/postgres.js';
import { skippable } from '../support/skip.js';
import { account, agent, at } from './contract.js';

const url = POSTGRES_TEST_URL;
const strict = process.env.AGENTRY_CI_STRICT === '1';
const unreachable = await postgresUnreachable();
const skip = unreachable !== null && !strict;

describe('what the PostgreSQL goal search tests need', () => {
  it.skipIf(skip)(
    skippable('PostgreSQL answers at AGENTRY_TEST_POSTGRES_URL (needed by the goal search tests)', skip && unreachable),
    () => {
      expect(unreachable).toBeNull();
    },
  );
});

describe('PostgreSQL goal search beside the agents', () => {
  const schemas: string[] = [];
  afterAll(() => dropSchemas(schemas));

  it.skipIf(skip)('writes the searched text with the agents and deletes it with their tree', async () => {
    const schema = newSchemaName('agentry_goals');
    schemas.push(schema);
    const storage = postgresStorage({ connectionString: url, schema, exclusive: true });
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    const goals = async () =>
      (await admin.query(`SELECT agent_id, search_text FROM "${schema}".agent_goals ORDER BY agent_id`)).rows;
    try {
      await storage.init();
      await storage.createAccount(account('acct-a', 1_000_000));
      const root = agent('r1', { goal: 'Find the CAT pictures' });
      const kid = agent('k1', { goal: 'Sort the Dog photos', parent_id: 'r1', root_id: 'r1', status: 'STARTING_UP' });
      await storage.insertAgents([root, kid], [], []);
      expect(await goals()).toEqual([
        { agent_id: 'k1', search_text: 'sort the dog photos' },
        { agent_id: 'r1', search_text: 'find the cat pictures' },
      ]);
      const search = { account_id: 'acct-a', order: 'oldest' as const, limit: 10, offset: 0, budget_ms: 10_000 };
      expect((await storage.searchAgents({ ...search, goal_contains: 'dog' })).rows.map((r) => r.agent_id)).toEqual([
        'k1',
      ]);

      // Gone with the tree, so the same id can be used again, and is found by its new goal only.
      await storage.deleteAgentTree('r1');
      expect(await goals()).toEqual([]);
      await storage.insertAgents([agent('r1', { goal: 'Feed the fish', created_at: at(5) })], [], []);
      expect((await storage.searchAgents({ ...search, goal_contains: 'cat' })).total).toBe(0);
      expect((await storage.searchAgents({ ...search, goal_contains: 'FISH' })).rows.map((r) => r.agent_id)).toEqual([
        'r1',
      ]);
    } finally {
      await storage.close();
      await admin.end();
    }
  });
});
