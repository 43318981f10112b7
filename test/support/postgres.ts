/**
 * The PostgreSQL server the suites use: AGENTRY_TEST_POSTGRES_URL, default the development machine's local server
 * (trust auth, database `test`). Each suite works in schemas of its own and drops them afterwards.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';

export const POSTGRES_TEST_URL = process.env.AGENTRY_TEST_POSTGRES_URL ?? 'postgres://root@127.0.0.1:5432/test';

/** Null when the server answers, else why not. */
export async function postgresUnreachable(url = POSTGRES_TEST_URL): Promise<string | null> {
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

/** A new schema name with `prefix` (not created: the adapter creates it). */
export function newSchemaName(prefix: string): string {
  return `${prefix}_${randomBytes(6).toString('hex')}`;
}

/** The URL of a schema: the adapter reads `?schema=` (for AGENTRY_DB and the CLI's --db). */
export function urlWithSchema(schema: string, url = POSTGRES_TEST_URL): string {
  return `${url}${url.includes('?') ? '&' : '?'}schema=${schema}`;
}

/** Drops the schemas (and everything in them). */
export async function dropSchemas(schemas: readonly string[], url = POSTGRES_TEST_URL): Promise<void> {
  if (schemas.length === 0) return;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (const schema of schemas) await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}
