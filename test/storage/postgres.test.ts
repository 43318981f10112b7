/**
 * The storage contract on PostgreSQL (`postgresStorage`), each test in a schema of its own that is dropped after it.
 * Needs a PostgreSQL server: AGENTRY_TEST_POSTGRES_URL, default postgres://root@127.0.0.1:5432/test (trust auth on
 * the development machine). Without one the suite is skipped with the reason; with AGENTRY_CI_STRICT=1 it fails.
 */
import { describe, expect, it } from 'vitest';
import { postgresStorage } from '../../src/storage/postgres/index.js';
import { dropSchemas, newSchemaName, POSTGRES_TEST_URL, postgresUnreachable } from '../support/postgres.js';
import { storageContract } from './contract.js';

const url = POSTGRES_TEST_URL;
const strict = process.env.AGENTRY_CI_STRICT === '1';
const unreachable = await postgresUnreachable();

describe('postgres availability', () => {
  it.runIf(strict)('is reachable (AGENTRY_CI_STRICT=1: a missing server fails here)', () => {
    expect(unreachable).toBeNull();
  });
  it.skipIf(!unreachable || strict)(`postgres suites skipped: ${unreachable ?? ''}`, () => {});
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
});
