/**
 * @module storage/postgres/migrations/migration
 * What one PostgreSQL migration is: its number, its name, and the literal SQL it runs. The same shape as the SQLite
 * adapter's migrations (storage/sqlite/migrations.ts).
 */
export interface Migration {
  /** 1, 2, 3, ... in order, without gaps. */
  readonly version: number;
  readonly name: string;
  /**
   * SQL run as one script inside the migration's transaction: statements separated by `;`, written out in full. Never
   * built from the code's constants of the day, so that a migration means the same on every database forever.
   */
  readonly up: string;
}
