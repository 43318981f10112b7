/**
 * What the credit-gate and tool-context tests build storage from: an account `acc` with a balance, and agent rows
 * with only what those tests vary.
 */
import { memoryStorage, type AgentRow, type StorageAdapter } from 'agentry-runtime';

const T0 = new Date(0).toISOString();

/** Memory storage with one account, `acc`, holding `balance` micro-credits. */
export async function accountWith(balance: number): Promise<StorageAdapter> {
  const storage = memoryStorage();
  await storage.init();
  await storage.createAccount({
    id: 'acc',
    name: 'test',
    subscription_active: true,
    balance,
    reserved: 0,
    created_at: T0,
  });
  return storage;
}

/** An ACTIVE agent of account `acc`; a root unless `parent_id` is given. */
export function agentRow(id: string, fields: Partial<AgentRow> = {}): AgentRow {
  return {
    agent_id: id,
    account_id: 'acc',
    parent_id: null,
    root_id: fields.parent_id ?? id,
    spawn_key: null,
    goal: 'g',
    model: 'svc-1-lite',
    status: 'ACTIVE',
    progress: 0,
    status_message: '',
    token_count: 0,
    message_count: 0,
    credits_spent: 0,
    sub_agent_count: 0,
    max_credits: null,
    tree_spent: 0,
    tree_reserved: 0,
    step_count: 0,
    started: true,
    active_ms: 0,
    active_since: null,
    plan: null,
    spec: null,
    created_at: T0,
    updated_at: T0,
    ...fields,
  };
}

export const tick = () => new Promise<void>((r) => setImmediate(r));
