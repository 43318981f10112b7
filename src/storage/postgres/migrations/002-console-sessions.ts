/**
 * Migration 2 (PostgreSQL): when each API key was last used (the console's key list), and the console's sign-in
 * sessions, kept as rows so that a restarted server keeps them (the SHA-256 of the session id, never the id).
 */
import type { Migration } from './migration.js';

export const migration: Migration = {
  version: 2,
  name: 'console: api key last use, sessions',
  up: `
ALTER TABLE api_keys ADD COLUMN last_used_at TEXT;
CREATE TABLE console_sessions (
  id_hash TEXT PRIMARY KEY,
  account_id TEXT NOT NULL,
  key_hash TEXT NOT NULL,
  key_id TEXT NOT NULL,
  expires_at TEXT NOT NULL,
  ended TEXT
);
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);
`,
};
