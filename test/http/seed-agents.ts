/**
 * Agent rows written straight into a storage, for tests that need many agents without running them: finished
 * (COMPLETED) roots and children, so no scheduler picks them up.
 */
import { randomUUID } from 'node:crypto';
import type { AgentRow, StorageAdapter } from '../../src/storage/adapter.js';

const AT = '2026-01-01T00:00:00.000Z';

/** A finished agent row of `accountId`; a child when `parent` is given. */
export function finishedAgent(accountId: string, goal: string, parent?: AgentRow): AgentRow {
  const id = randomUUID();
  return {
    agent_id: id,
    account_id: accountId,
    parent_id: parent?.agent_id ?? null,
    root_id: parent?.root_id ?? id,
    spawn_key: null,
    goal,
    model: 'svc-1-lite',
    status: 'COMPLETED',
    progress: 1,
    status_message: 'Done',
    token_count: 0,
    message_count: 1,
    credits_spent: 0,
    sub_agent_count: 0,
    max_credits: null,
    tree_spent: 0,
    tree_reserved: 0,
    step_count: 1,
    started: true,
    active_ms: 0,
    active_since: null,
    plan: null,
    spec: null,
    created_at: AT,
    updated_at: AT,
    trace_context: null,
  };
}

/** Writes the rows, in batches of 50 (as a fan-out's spawns come). */
export async function insertRows(storage: StorageAdapter, rows: AgentRow[]): Promise<void> {
  for (let i = 0; i < rows.length; i += 50) await storage.insertAgents(rows.slice(i, i + 50), [], []);
}
