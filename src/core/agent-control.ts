/**
 * @module core/agent-control
 * Pause, resume and delete, each acting on an agent with its sub-agents. Every status change asks the status table
 * (core/status.ts) through `changeStatus`; one that loses a race (the agent moved meanwhile) reads the agent again and
 * decides again. With several workers the owner of an agent stepping elsewhere is told on the bus, and aborts.
 */
import type { AgentRow } from '../storage/adapter.js';
import { AgentryError, notFound } from '../errors.js';
import { monitorTimerId, toMonitorInfo } from '../tools/monitors.js';
import type { MonitorInfo } from './schemas.js';
import { changeStatus } from './status-change.js';
import type { StepDeps } from './step-types.js';
import type { RuntimeWiring } from './runtime-wiring.js';
import { assertTransition, isTerminal, RUNNABLE_STATUSES } from '../base/status.js';

const PAUSED = { status_message: 'Paused' };
/** An operator's pause or resume is kept as a status mark of each agent it moves (its timeline shows it). */
const MARK = { mark: true };

/**
 * Pauses the agent `read` returns, and its runnable sub-agents; returns the agent as paused. An in-flight model
 * request is aborted (and redone on resume); a running tool call finishes and its result is saved.
 */
export async function pauseTree(w: RuntimeWiring, read: () => Promise<AgentRow>): Promise<AgentRow> {
  for (;;) {
    const row = await read();
    const target = assertTransition(row.status, 'pause');
    let updated = row;
    if (target !== row.status) {
      updated = (await changeStatus(deps(w), row, 'pause', PAUSED, MARK)) ?? (await read());
      if (updated.status !== 'PAUSED') continue; // moved meanwhile: decide again
      w.scheduler.controlOf(row.agent_id)?.model.abort(pauseReason());
      announceControl(w, [row.agent_id]);
    }
    await forEachDescendant(w, row.agent_id, async (child) => {
      if (!RUNNABLE_STATUSES.includes(child.status)) return;
      if (await changeStatus(deps(w), child, 'pause', PAUSED, MARK)) {
        w.scheduler.controlOf(child.agent_id)?.model.abort(pauseReason());
        announceControl(w, [child.agent_id]);
      }
    });
    return updated;
  }
}

/**
 * Resumes the PAUSED or OUT_OF_CREDITS agent `read` returns, and its paused or stopped sub-agents, from their last
 * saved steps. Throws `subscription_inactive`, or `insufficient_credits` when the account has nothing available.
 */
export async function resumeTree(w: RuntimeWiring, read: () => Promise<AgentRow>): Promise<AgentRow> {
  for (;;) {
    const row = await read();
    assertTransition(row.status, 'resume');
    if (RUNNABLE_STATUSES.includes(row.status)) return row;
    const account = await w.storage.getAccount(row.account_id);
    if (account && !account.subscription_active) {
      throw new AgentryError('subscription_inactive', 'The subscription of this account is not active');
    }
    if (!account || account.balance <= 0) {
      throw new AgentryError('insufficient_credits', 'The account has no credits available; add credits, then resume');
    }
    // Children first: a parent that wakes up must find its children running again, not stopped.
    await forEachDescendant(w, row.agent_id, async (child) => {
      if (child.status === 'PAUSED' || child.status === 'OUT_OF_CREDITS') await resumeOne(w, child);
    });
    const updated = await resumeOne(w, row);
    if (updated) return updated; // else it moved meanwhile: decide again
  }
}

/** Deletes an agent with its sub-agents, messages and turns, aborting their in-flight work. */
export async function deleteTree(w: RuntimeWiring, row: AgentRow): Promise<void> {
  const ids = [row.agent_id, ...(await w.storage.listDescendantIds(row.agent_id))];
  for (const id of ids) w.scheduler.abort(id, 'agent deleted');
  const deleted = await w.storage.deleteAgentTree(row.agent_id);
  announceControl(w, deleted);
  w.credits.agentsGone(deleted);
  // What tools keep on disk for them (coding workspaces) goes too; a failure there is reported, not thrown: the
  // agents are gone either way.
  await w.platform?.agentsDeleted?.(deleted).catch((error: unknown) => w.reportError(error, row.agent_id));
  for (const id of deleted) {
    w.events.emit('agent.deleted', { agent_id: id });
    w.waiters.notify(id, null);
  }
}

function deps(w: RuntimeWiring): Pick<StepDeps, 'storage' | 'clock' | 'events'> {
  return { storage: w.storage, clock: w.clock, events: w.events };
}

async function resumeOne(w: RuntimeWiring, row: AgentRow): Promise<AgentRow | null> {
  const updated = await changeStatus(
    deps(w),
    row,
    row.started ? 'resume' : 'resume_unstarted',
    { status_message: 'Resuming' },
    MARK,
  );
  if (updated) w.scheduler.kick(updated.agent_id);
  // A runtime that steps nothing (an admin command, a front end opened 'manual') leaves it to the workers.
  if (updated && w.options.scheduler !== 'auto') w.storage.workers?.bus.publish('work', '');
  return updated;
}

async function forEachDescendant(
  w: RuntimeWiring,
  agentId: string,
  fn: (row: AgentRow) => Promise<void>,
): Promise<void> {
  const ids = await w.storage.listDescendantIds(agentId);
  for (const id of ids) {
    const child = await w.storage.getAgent(id);
    if (child && !isTerminal(child.status)) await fn(child);
  }
}

/** Several workers: tells the others that these agents were paused or deleted (their owner aborts their work). */
function announceControl(w: RuntimeWiring, agentIds: readonly string[]): void {
  for (const id of agentIds) w.storage.workers?.bus.publish('control', id);
}

function pauseReason(): Error {
  const err = new Error('agent paused');
  err.name = 'AbortError';
  return err;
}

/**
 * Cancels a monitor: no more checks, and its queued changes are no longer delivered. Cancelling a cancelled or ended
 * monitor changes nothing. `not_found` for an unknown id, or a monitor of an agent `read` does not find (another
 * account's).
 */
export async function cancelMonitor(
  w: RuntimeWiring,
  monitorId: string,
  read: (agentId: string) => Promise<AgentRow>,
): Promise<MonitorInfo> {
  const monitor = await w.storage.getMonitor(monitorId);
  if (!monitor) throw notFound('Monitor', monitorId);
  try {
    await read(monitor.agent_id);
  } catch {
    throw notFound('Monitor', monitorId);
  }
  if (monitor.status !== 'active') return toMonitorInfo(monitor);
  const cancelled = { ...monitor, status: 'cancelled' as const, next_check_at: null };
  await w.storage.updateMonitor(cancelled, { dropTimer: monitorTimerId(monitorId) });
  // A wait of its agent that had only this monitor left ends now (its call sees no active monitor).
  w.scheduler.kick(monitor.agent_id);
  return toMonitorInfo(cancelled);
}
