/**
 * A database's schema as plain data, for tests that compare two databases' schemas: one upgraded from an old version
 * and one created fresh must come out equal. Names that differ between the two by construction (the PostgreSQL
 * schema each lives in) are replaced by a placeholder.
 */
import type Database from 'better-sqlite3';
import type pg from 'pg';

/** The parts of a PostgreSQL schema that migrations make, sorted, with the schema's own name written as `<schema>`. */
export interface PgSchemaDump {
  /** `table.column type default nullable`, in each table's column order. */
  columns: string[];
  /** `table: CREATE … INDEX …`. */
  indexes: string[];
  /** `table.name: definition` of primary keys, unique, check and foreign-key constraints. */
  constraints: string[];
  /** Each function's whole definition (`CREATE OR REPLACE FUNCTION …`). */
  functions: string[];
  /** `CREATE TRIGGER …`. */
  triggers: string[];
  /** `name kind acl` of tables, sequences and views: a REVOKE or GRANT of a migration shows here. */
  relations: string[];
}

/**
 * Reads the schema `schema` of the database `client` is connected to. Defaults that name a sequence are written
 * relative to the schema, whatever the session's search_path.
 */
export async function dumpPgSchema(client: pg.Client | pg.PoolClient, schema: string): Promise<PgSchemaDump> {
  const rows = async (sql: string): Promise<string[]> =>
    (await client.query<{ line: string }>(sql, [schema])).rows.map((r) =>
      r.line.replaceAll(`"${schema}".`, '<schema>.').replaceAll(`${schema}.`, '<schema>.'),
    );
  return {
    columns: await rows(
      `SELECT table_name || '.' || column_name || ' ' || data_type || ' default=' || coalesce(column_default, '-')
              || ' nullable=' || is_nullable || coalesce(' identity=' || identity_generation, '') AS line
         FROM information_schema.columns WHERE table_schema = $1 ORDER BY table_name, ordinal_position`,
    ),
    indexes: await rows(
      `SELECT tablename || ': ' || indexdef AS line FROM pg_indexes WHERE schemaname = $1 ORDER BY tablename, indexname`,
    ),
    constraints: await rows(
      `SELECT c.conrelid::regclass::text || '.' || c.conname || ': ' || pg_get_constraintdef(c.oid) AS line
         FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
        WHERE n.nspname = $1 ORDER BY 1`,
    ),
    functions: await rows(
      `SELECT pg_get_functiondef(p.oid) AS line FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = $1 ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)`,
    ),
    triggers: await rows(
      `SELECT pg_get_triggerdef(t.oid) AS line FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
         JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND NOT t.tgisinternal ORDER BY 1`,
    ),
    relations: await rows(
      `SELECT c.relname || ' ' || c.relkind::text || ' ' || coalesce(c.relacl::text, '-') AS line
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = $1 AND c.relkind IN ('r', 'S', 'v', 'm', 'p') ORDER BY c.relname`,
    ),
  };
}

/**
 * A SQLite database's `sqlite_schema`: every table, index, trigger and view as `type name: sql`, its SQL with runs of
 * white space made one space, sorted. SQLite keeps the text a table was created with (a later ADD COLUMN is appended
 * to it), so two databases agree here exactly when their migrations left the same definitions.
 */
export function dumpSqliteSchema(db: Database.Database): string[] {
  return db
    .prepare<[], { type: string; name: string; sql: string | null }>('SELECT type, name, sql FROM sqlite_schema')
    .all()
    .map((r) => `${r.type} ${r.name}: ${(r.sql ?? '').replace(/\s+/g, ' ').trim()}`)
    .sort();
}
