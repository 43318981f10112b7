/**
 * Migration 7 (PostgreSQL): LISTEN and NOTIFY are open to every role of the database, so the workers' bus derives its
 * channel name and payload key from this secret, which only the schema's own role reads (notify.ts). 32 bytes from two
 * strong-random UUIDs (244 random bits; gen_random_uuid() is core since PostgreSQL 13, where pgcrypto's
 * gen_random_bytes would need an extension).
 */
import type { Migration } from './migration.js';

export const migration: Migration = {
  version: 7,
  name: 'notification secret',
  up: `
CREATE TABLE bus_secret (id SMALLINT PRIMARY KEY CHECK (id = 1), secret BYTEA NOT NULL);
REVOKE ALL ON bus_secret FROM PUBLIC;
INSERT INTO bus_secret (id, secret) VALUES (1, decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'));
`,
};
