/**
 * The storage contract on PostgreSQL (`postgresStorage`), each test in a schema of its own that is dropped after it.
 * Needs a PostgreSQL server: AGENTRY_TEST_POSTGRES_URL, default postgres://root@127.0.0.1:5432/test (trust auth on
 * the development machine). Without one the suite is skipped with the reason; with AGENTRY_CI_STRICT=1 it fails.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { postgresStorage } from '../../src/storage/postgres/index.js';
import { storageContract } from './contract.js';

const url = process.env.AGENTRY_TEST_POSTGRES_URL ?? 'postgres://root@127.0.0.1:5432/test';
const strict = process.env.AGENTRY_CI_STRICT === '1';

async function reachable(): Promise<string | null> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3_000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return null;
  } catch (error) {
    return (error as Error).message;
  } finally {
    await client.end().catch(() => undefined);
  }
}

const unreachable = await reachable();

async function dropSchema(schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}

describe('postgres availability', () => {
  it.runIf(strict)('is reachable (AGENTRY_CI_STRICT=1: a missing server fails here)', () => {
    expect(unreachable).toBeNull();
  });
  it.skipIf(!unreachable || strict)(`postgres suites skipped: ${unreachable ?? ''}`, () => {});
});

if (!unreachable || strict) {
  storageContract('postgres', async () => {
    const schema = `agentry_test_${randomBytes(6).toString('hex')}`;
    return {
      storage: postgresStorage({ connectionString: url, schema }),
      reopen: async () => postgresStorage({ connectionString: url, schema }),
      cleanup: () => dropSchema(schema),
    };
  });
}

describe('postgresStorage options', () => {
  it('refuses a URL that is not postgres:// and a schema that is not a plain identifier', () => {
    expect(() => postgresStorage({ connectionString: 'mysql://x' })).toThrow(/postgres:\/\//);
    expect(() => postgresStorage({ connectionString: url, schema: 'a; drop' })).toThrow(/identifier/);
  });
});
