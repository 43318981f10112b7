/**
 * The storage contract on PostgreSQL (`postgresStorage`), each test in a schema of its own that is dropped after it.
 * Needs a PostgreSQL server: AGENTRY_TEST_POSTGRES_URL, default postgres://root@127.0.0.1:5432/test (trust auth on
 * the development machine). Without one the suite is skipped with the reason; with AGENTRY_CI_STRICT=1 it fails.
 */
import { describe, expect, it } from 'vitest';
import { postgresStorage } from '../../src/storage/postgres/index.js';
import { dropSchemas, newSchemaName, POSTGRES_TEST_URL, postgresUnreachable } from '../support/postgres.js';
import { storageContract } from './contract.js';
import { skippable } from '../support/skip.js';

const url = POSTGRES_TEST_URL;
const strict = process.env.AGENTRY_CI_STRICT === '1';
const unreachable = await postgresUnreachable();

// Stands in for what the tests below need: passes where the server answers, is skipped with the reason on a user's
// machine without it, and fails under AGENTRY_CI_STRICT=1.
describe('what the PostgreSQL tests of this file need', () => {
  it.skipIf(unreachable !== null && !strict)(
    skippable(
      'PostgreSQL answers at AGENTRY_TEST_POSTGRES_URL (needed by the storage contract suite and the tests in this file)',
      !strict && unreachable,
    ),
    () => {
      expect(unreachable).toBeNull();
    },
  );
});

if (!unreachable || strict) {
  storageContract('postgres', async () => {
    const schema = newSchemaName('agentry_test');
    return {
      storage: postgresStorage({ connectionString: url, schema }),
      reopen: async () => postgresStorage({ connectionString: url, schema }),
      cleanup: () => dropSchemas([schema]),
    };
  });
}

describe('postgresStorage options', () => {
  it('refuses a URL that is not postgres:// and a schema that is not a plain identifier', () => {
    expect(() => postgresStorage({ connectionString: 'mysql://x' })).toThrow(/postgres:\/\//);
    expect(() => postgresStorage({ connectionString: url, schema: 'a; drop' })).toThrow(/identifier/);
  });

  it.skipIf(unreachable !== null && !strict)(
    "keeps the URL's session options and its own schema (the driver would let the URL's options replace the schema's)",
    async () => {
      const schema = newSchemaName('agentry_test');
      const appName = `agentry_opts_${schema.slice(-8)}`;
      const options = encodeURIComponent(`-c application_name=${appName} -c statement_timeout=4321`);
      const storage = postgresStorage({
        connectionString: `${url}${url.includes('?') ? '&' : '?'}options=${options}`,
        schema,
      });
      const { Client } = await import('pg');
      const admin = new Client({ connectionString: url });
      await admin.connect();
      try {
        await storage.init();
        await storage.createAccount({
          id: 'opts',
          name: 'opts',
          subscription_active: true,
          balance: 1,
          reserved: 0,
          created_at: new Date(0).toISOString(),
        });
        expect((await storage.getAccount('opts'))?.balance).toBe(1);
        // The tables are in the schema asked for, not in the search path's default.
        const tables = await admin.query(
          `SELECT 1 FROM information_schema.tables WHERE table_name = 'accounts' AND table_schema = $1`,
          [schema],
        );
        expect(tables.rows).toHaveLength(1);
        // And the user's own settings reached the sessions of the pool.
        const sessions = await admin.query(
          'SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1',
          [appName],
        );
        expect(sessions.rows[0].n).toBeGreaterThan(0);
      } finally {
        await storage.close();
        await admin.end();
        await dropSchemas([schema]);
      }
    },
  );
});
