/**
 * PostgreSQL migrations: a schema created at an old version and upgraded ends with exactly the schema of a fresh one
 * (columns, indexes, constraints, functions' definitions, triggers, privileges), its rows intact; schemas made by
 * earlier builds (fixtures dumped from them) upgrade to it too; a schema newer than the code is refused; and a
 * released migration's SQL never changes. Each test works in schemas of its own, dropped afterwards.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { AgentryError } from '../../src/errors.js';
import { AGENT_LEDGER_NEWEST } from '../../src/storage/postgres/accounts.js';
import { createDb } from '../../src/storage/postgres/db.js';
import { postgresStorage } from '../../src/storage/postgres/index.js';
import { MIGRATIONS, SCHEMA_VERSION, migrate } from '../../src/storage/postgres/migrations/index.js';
import { dropSchemas, newSchemaName, POSTGRES_TEST_URL, postgresUnreachable } from '../support/postgres.js';
import { dumpPgSchema } from '../support/schema-dump.js';
import { skippable } from '../support/skip.js';

const url = POSTGRES_TEST_URL;
const strict = process.env.AGENTRY_CI_STRICT === '1';
const unreachable = await postgresUnreachable();
const skip = unreachable !== null && !strict;
const ALL_VERSIONS = MIGRATIONS.map((m) => m.version);

describe('what the PostgreSQL migration tests need', () => {
  it.skipIf(skip)(
    skippable('PostgreSQL answers at AGENTRY_TEST_POSTGRES_URL (needed by the migration tests)', skip && unreachable),
    () => {
      expect(unreachable).toBeNull();
    },
  );
});

describe('PostgreSQL migrations', () => {
  const schemas: string[] = [];
  const pools: pg.Pool[] = [];
  afterAll(async () => {
    await Promise.all(pools.map((p) => p.end()));
    await dropSchemas(schemas);
  });

  /** A new schema's name, and the adapter's database access to it (its connections' search_path is the schema). */
  function newSchema() {
    const schema = newSchemaName('agentry_mig');
    schemas.push(schema);
    const pool = new pg.Pool({ connectionString: url, max: 2, options: `-c search_path=${schema}` });
    pools.push(pool);
    return { schema, db: createDb(pool, schema) };
  }

  /** Runs `fn` with a connection of its own, as an operator would. */
  async function withClient<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      return await fn(client);
    } finally {
      await client.end();
    }
  }

  /** A fresh schema at the current version, dumped. */
  async function freshSchemaDump() {
    const fresh = newSchema();
    expect(await migrate(fresh.db)).toEqual(ALL_VERSIONS);
    return withClient((c) => dumpPgSchema(c, fresh.schema));
  }

  // Migration 8 goes on without the trigram index when the role may not create pg_trgm. Both schemas here are made
  // by the same role on the same database, so they have the index or both lack it, and the comparison stays exact.
  it.skipIf(skip)('migrates a version-1 schema with rows to exactly the schema of a fresh one', async () => {
    const old = newSchema();
    expect(await migrate(old.db, MIGRATIONS.slice(0, 1))).toEqual([1]);
    await old.db.q(
      `INSERT INTO accounts (id, name, subscription_active, balance, reserved, created_at)
       VALUES ('acct', 'Old', true, 5000000, 0, '2026-11-26T00:00:00.000Z')`,
    );
    await old.db.q(
      `INSERT INTO agents (agent_id, account_id, root_id, goal, model, status, progress, status_message, token_count,
         message_count, credits_spent, sub_agent_count, tree_spent, tree_reserved, step_count, started, active_ms,
         created_at, updated_at)
       VALUES ('a1', 'acct', 'a1', 'Summarise the release notes', 'claude-sonnet', 'PAUSED', 0.5, 'paused', 120, 1,
         300, 0, 300, 0, 1, true, 1500, '2026-11-26T00:00:00.000Z', '2026-11-26T00:00:01.000Z')`,
    );
    await old.db.q(
      `INSERT INTO ledger (account_id, agent_id, kind, item, tokens_in, tokens_out, amount, created_at)
       VALUES ('acct', 'a1', 'model', 'claude-sonnet', 100, 20, -300, '2026-11-26T00:00:01.000Z')`,
    );

    expect(await migrate(old.db)).toEqual(ALL_VERSIONS.slice(1));
    const upgraded = await withClient((c) => dumpPgSchema(c, old.schema));
    expect(upgraded).toEqual(await freshSchemaDump());

    // The rows came through, with the later columns' defaults.
    const [agent] = await old.db.q('SELECT goal, status, wake_requested, lease_epoch::int, trace_context FROM agents');
    expect(agent).toEqual({
      goal: 'Summarise the release notes',
      status: 'PAUSED',
      wake_requested: true,
      lease_epoch: 0,
      trace_context: null,
    });
    const [entry] = await old.db.q('SELECT amount::int, tokens_cache_write::int, tokens_cache_read::int FROM ledger');
    expect(entry).toEqual({ amount: -300, tokens_cache_write: 0, tokens_cache_read: 0 });
  });

  // Before the migrations were frozen, each build ran them from its own code: these schemas were dumped from builds
  // whose migration 5 or 6 left something a fresh schema does not have (an old overload of agentry_float_grow,
  // agentry_claim, wake_requested false by default, the index of lease owners).
  it.skipIf(skip).each([
    ['v5-first-build.sql', 5],
    ['v5-claim-function.sql', 5],
    ['v6-first-build.sql', 6],
  ])('upgrades a schema made by an earlier build (%s) to exactly the schema of a fresh one', async (file, version) => {
    const old = newSchema();
    const dump = fs.readFileSync(new URL(`../fixtures/postgres/${file}`, import.meta.url), 'utf8');
    await withClient((c) => c.query(dump.replaceAll('agentry_fixture_schema', old.schema)));

    expect(await migrate(old.db)).toEqual(ALL_VERSIONS.slice(version));
    const upgraded = await withClient((c) => dumpPgSchema(c, old.schema));
    expect(upgraded).toEqual(await freshSchemaDump());
    const [agent] = await old.db.q('SELECT agent_id, goal, credits_spent::int FROM agents');
    expect(agent).toEqual({ agent_id: 'agt_1', goal: 'Summarise the old release notes', credits_spent: 300 });
  });

  it.skipIf(skip)(
    "reads an agent's ledger rows by a backward scan of ledger_agent, not the account's rows",
    async () => {
      const { db } = newSchema();
      await migrate(db);
      const plan = await db.tx(async (q) => {
        // The tables are empty, where a scan of the table is cheapest: ask how the planner would use an index instead.
        await q('SET LOCAL enable_seqscan = off');
        await q('SET LOCAL enable_bitmapscan = off');
        const rows = await q<{ 'QUERY PLAN': string }>(`EXPLAIN ${AGENT_LEDGER_NEWEST}`, ['agent-1', 10]);
        return rows.map((r) => r['QUERY PLAN']).join('\n');
      });
      expect(plan).toMatch(/Index Scan Backward using ledger_agent/);
      expect(plan).toMatch(/Index Cond: \(agent_id = /);
      expect(plan).not.toMatch(/Sort|Filter/);
    },
  );

  // Every step writes a new version of its agent's row, and nearly all of them change an indexed column: each such
  // version is an entry in every index of agents. The goal never changes, so its trigram index lives elsewhere.
  it.skipIf(skip)('indexes the goal search in agent_goals, not in agents, which every step rewrites', async () => {
    const { schema, db } = newSchema();
    await migrate(db);
    const indexes = await db.q<{ indexdef: string }>(
      "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = 'agents'",
      [schema],
    );
    expect(indexes.length).toBeGreaterThan(0);
    expect(indexes.filter((i) => /goal/.test(i.indexdef))).toEqual([]);
    const [trgm] = await db.q<{ n: number }>("SELECT count(*)::int AS n FROM pg_extension WHERE extname = 'pg_trgm'");
    const goalIndexes = await db.q<{ indexname: string }>(
      "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'agent_goals' ORDER BY indexname",
      [schema],
    );
    expect(goalIndexes.map((i) => i.indexname)).toEqual(
      trgm!.n > 0 ? ['agent_goals_pkey', 'agent_goals_trgm'] : ['agent_goals_pkey'],
    );
  });

  it.skipIf(skip)("upgrades a version-12 schema's agents into the goal search, ASCII-folded", async () => {
    const old = newSchema();
    expect(await migrate(old.db, MIGRATIONS.slice(0, 12))).toEqual(ALL_VERSIONS.slice(0, 12));
    await old.db.q(
      `INSERT INTO agents (agent_id, account_id, root_id, goal, model, status, progress, status_message, token_count,
         message_count, credits_spent, sub_agent_count, tree_spent, tree_reserved, step_count, started, active_ms,
         created_at, updated_at)
       VALUES ('a1', 'acct', 'a1', 'Summarise the Release Notes', 'claude-sonnet', 'PAUSED', 0.5, '', 0, 0, 0, 0, 0, 0,
         0, true, 0, '2026-11-26T00:00:00.000Z', '2026-11-26T00:00:01.000Z')`,
    );
    expect(await migrate(old.db)).toEqual(ALL_VERSIONS.slice(12));
    expect(await old.db.q('SELECT agent_id, search_text FROM agent_goals')).toEqual([
      { agent_id: 'a1', search_text: 'summarise the release notes' },
    ]);
  });

  it.skipIf(skip)('refuses a schema written by a newer agentry, and changes nothing in it', async () => {
    const { schema, db } = newSchema();
    await migrate(db);
    await db.q(`INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, 'from the future', $2)`, [
      SCHEMA_VERSION + 1,
      new Date(0).toISOString(),
    ]);
    const before = await withClient((c) => dumpPgSchema(c, schema));

    const refusal = await migrate(db).catch((error: unknown) => error);
    expect(refusal).toBeInstanceOf(AgentryError);
    expect(refusal).toMatchObject({ code: 'invalid_request' });
    expect((refusal as Error).message).toContain(
      `has schema version ${SCHEMA_VERSION + 1}, newer than this agentry supports (${SCHEMA_VERSION})`,
    );
    const storage = postgresStorage({ connectionString: url, schema, exclusive: true });
    try {
      await expect(storage.init()).rejects.toThrow(/newer than this agentry supports/);
    } finally {
      await storage.close();
    }
    expect(await withClient((c) => dumpPgSchema(c, schema))).toEqual(before);
  });
});

describe('PostgreSQL migrations as released', () => {
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
  1: 'initial schema: 52074c44e645a6ff',
  2: 'console: api key last use, sessions: c62877575d3aaadf',
  3: 'trace context and retention: 97e411a9b19dd840',
  4: 'step commit and reservation functions: 49a1aa898201c467',
  5: 'workers and leases: ecc27e280ca060ab',
  6: 'step commits: one agent row version each: 13d0a17b4219d7aa',
  7: 'notification secret: 5bc6a49e423b795a',
  8: 'goal search index, sessions by account: 372e133deebb7ec9',
  9: 'ledger: prompt-cache tokens: 54b9bc917d869ee5',
  10: 'one schema whatever build created the database: 477a09d52dba9346',
  11: 'ledger by agent: 9e6ed9cd33077673',
  12: 'model call latency, status marks: 17b2955f2f2ce3cb',
  13: 'goal search beside the agents: f2db404225939506',
  14: 'step commit answers built once: a9af6c5359972aa0',
};
