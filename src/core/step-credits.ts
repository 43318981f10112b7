/**
 * @module core/step-credits
 * The credits a step holds before it calls the model or a priced tool: a reservation through the credit gate that may
 * wait for other calls' holds (core/credit-gate.ts), with the agent saying so while it waits. Split from loop.ts,
 * which decides what a step does with the answer.
 */
import { isoTime } from './clock.js';
import type { Reservation } from './credit-gate.js';
import type { RunControl, StepDeps } from './step-types.js';
import { toStatusForm } from './records.js';
import type { AgentRow } from '../storage/adapter.js';

/**
 * Holds `amount` for the agent's next call. Resolves with the gate's answer (granted, or refused with what is payable),
 * or `aborted` when the agent was paused or deleted while it waited; `beforeWait` runs once when it has to wait.
 */
export async function reserveCredits(
  deps: StepDeps,
  agent: AgentRow,
  reservationId: string,
  amount: number,
  control: RunControl,
  /** Runs when the reservation has to wait, before the agent says it waits. */
  beforeWait?: () => Promise<void>,
): Promise<Reservation | 'aborted'> {
  let waiting: Promise<unknown> | undefined;
  let reservation: Reservation | 'aborted';
  try {
    reservation = await deps.credits.reserve(
      { id: reservationId, account_id: agent.account_id, agent_id: agent.agent_id, root_id: agent.root_id, amount },
      {
        signal: control.model.signal,
        onWait: (heldBy) => {
          control.trace?.event('agentry.credit_wait', { 'agentry.credits.held_by_calls': heldBy });
          waiting = (async () => {
            await beforeWait?.();
            await announceCreditWait(deps, agent, heldBy);
          })();
        },
      },
    );
  } catch (err) {
    await waiting?.catch(() => undefined);
    if (control.model.signal.aborted) return 'aborted';
    throw err;
  }
  try {
    await waiting;
  } catch (err) {
    // What the wait saved failed (a storage error): a hold granted meanwhile must not stay behind, or others would
    // wait for it until a restart.
    if (reservation.granted) await deps.credits.release(reservationId);
    throw err;
  }
  return reservation;
}

async function announceCreditWait(deps: StepDeps, agent: AgentRow, heldBy: number): Promise<void> {
  // 0: the holds in the way are other workers' (processes sharing the database), which this one does not count.
  const calls =
    heldBy === 0
      ? 'running calls of other workers'
      : heldBy === 1
        ? '1 running call'
        : `${heldBy.toLocaleString('en-US')} running calls`;
  // Only while the agent still has the status it waits in: a pause that landed meanwhile keeps saying "Paused". A
  // change to the same status is a compare-and-set of the message alone.
  const updated = await deps.storage.changeStatus(
    agent.agent_id,
    { from: [agent.status], to: agent.status, patch: { status_message: `Waiting for credits held by ${calls}` } },
    isoTime(deps.clock.now()),
  );
  if (updated && deps.events.listenerCount('agent.progress') > 0) {
    deps.events.emit('agent.progress', { agent: toStatusForm(updated) });
  }
}

export function limitName(refusal: 'account' | 'tree_cap'): string {
  return refusal === 'tree_cap' ? 'the credit cap of this agent' : 'the account balance';
}
