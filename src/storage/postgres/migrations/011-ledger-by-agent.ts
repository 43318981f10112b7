/**
 * Migration 11 (PostgreSQL): an index of the ledger by agent, so that an agent's own rows (its page in the console,
 * asked up to once a second) are a range scan of that agent's rows read newest first, not a read of its account's
 * whole ledger. `IF NOT EXISTS`: an operator may have built it ahead with `CREATE INDEX CONCURRENTLY` to keep a large
 * ledger writable meanwhile (a migration runs in a transaction, where CONCURRENTLY is not allowed).
 */
import type { Migration } from './migration.js';

export const migration: Migration = {
  version: 11,
  name: 'ledger by agent',
  up: `
CREATE INDEX IF NOT EXISTS ledger_agent ON ledger (agent_id, seq);
`,
};
