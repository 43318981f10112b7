/**
 * @module core/agent-create
 * `runtime.create()`: the checks a new root agent must pass (a served model, an active account with a balance), its
 * first row, message and turn written in one insert, and the kick that starts it. Sub-agents are created by their
 * parent's tool call instead (core/sub-agents.ts).
 */
import { randomUUID } from 'node:crypto';
import { AgentryError, notFound } from '../errors.js';
import type { AgentRow } from '../storage/adapter.js';
import { isoTime } from '../base/clock.js';
import { newAgentId } from './ids.js';
import { toStatusForm } from './records.js';
import type { RuntimeWiring } from './runtime-wiring.js';
import { creditsToMicros, type CreateAgentOptionsSchema } from './schemas.js';
import { modelInfoOf } from './telemetry.js';
import type { z } from 'zod';

/** The options of `create()`, checked. */
export type CreateAgentRequest = z.output<typeof CreateAgentOptionsSchema>;

/**
 * Creates a root agent and starts it; returns its first row. `models` are the public model ids the runtime accepts.
 * Throws `invalid_request` (unknown model), `not_found` (unknown account), `subscription_inactive`, or
 * `insufficient_credits`.
 */
export async function createRootAgent(
  w: RuntimeWiring,
  o: CreateAgentRequest,
  models: readonly string[],
): Promise<AgentRow> {
  const { storage, options, telemetry } = w;
  const model = o.model ?? options.defaultModel;
  if (!models.includes(model)) {
    throw new AgentryError(
      'invalid_request',
      `Unknown model ${JSON.stringify(model)}; use one of: ${models.join(', ')}`,
      {
        details: [{ path: 'model', message: `must be one of ${models.join(', ')}` }],
      },
    );
  }
  const accountId = o.accountId ?? options.defaultAccount.id;
  const account = await storage.getAccount(accountId);
  if (!account) throw notFound('Account', accountId);
  if (!account.subscription_active)
    throw new AgentryError('subscription_inactive', 'The subscription of this account is not active');
  // The settled balance decides, not what is free of holds this instant: holds are temporary, and a new agent
  // waits its turn for credits that other agents' calls hold.
  if (account.balance <= 0) {
    throw new AgentryError('insufficient_credits', 'The account has no credits left; add credits first');
  }
  const now = isoTime(w.clock.now());
  const id = newAgentId();
  const row: AgentRow = {
    agent_id: id,
    account_id: accountId,
    parent_id: null,
    root_id: id,
    spawn_key: null,
    goal: o.goal,
    model,
    status: 'ACTIVE',
    progress: 0,
    status_message: 'Starting',
    token_count: 0,
    message_count: 1,
    credits_spent: 0,
    sub_agent_count: 0,
    max_credits: o.maxCredits === undefined ? null : creditsToMicros(o.maxCredits),
    tree_spent: 0,
    tree_reserved: 0,
    step_count: 0,
    started: true,
    active_ms: 0,
    active_since: now,
    plan: null,
    spec: null,
    created_at: now,
    updated_at: now,
    trace_context: null,
  };
  if (!telemetry.empty) {
    row.trace_context = telemetry.agentCreated(row, {
      ...modelInfoOf(w.model, model),
      traceparent: o.traceparent ?? null,
    });
  }
  await storage.insertAgents(
    [row],
    [{ message_id: randomUUID(), agent_id: id, role: 'USER', text: o.goal, timestamp: now }],
    [
      {
        agent_id: id,
        idx: 0,
        role: 'user',
        content: JSON.stringify([{ type: 'text', text: o.goal }]),
        created_at: now,
      },
    ],
  );
  w.events.emit('agent.created', { agent: toStatusForm(row) });
  w.scheduler.kick(id);
  // A runtime that steps nothing (an admin command, a front end opened 'manual') leaves it to the workers.
  if (options.scheduler !== 'auto') storage.workers?.bus.publish('work', '');
  return row;
}
