/**
 * Migration 3 (PostgreSQL): the trace context stored with an agent (so its children and its restarts stay in one
 * trace), and an index for the retention sweep's search for old finished roots that skips the children of a fan-out.
 */
import type { Migration } from './migration.js';

export const migration: Migration = {
  version: 3,
  name: 'trace context and retention',
  up: `
ALTER TABLE agents ADD COLUMN trace_context TEXT;
CREATE INDEX agents_finished_roots ON agents (status, updated_at) WHERE parent_id IS NULL;
`,
};
