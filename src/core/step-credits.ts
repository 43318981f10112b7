/**
 * @module core/step-credits
 * The budget phase of a step: the credits it holds before it calls the model or a priced tool. A reservation goes
 * through the credit gate and may wait for other calls' holds (core/credit-gate.ts), with the agent saying so while
 * it waits; a granted one is a {@link CreditHold} the step ends, and one the balance refuses stops the agent as
 * OUT_OF_CREDITS with a message that says what was needed.
 */
import { isoTime } from '../base/clock.js';
import type { HoldResult } from './credit-gate.js';
import type { CreditHold } from './credit-hold.js';
import { toStatusForm } from './records.js';
import { microsToCredits } from './schemas.js';
import { changeStatus } from './status-change.js';
import type { RunControl, StepDeps } from './step-types.js';
import type { AgentRow } from '../storage/adapter.js';

/**
 * Holds `amount` for the agent's next call. Resolves with the gate's answer (the hold, or refused with what is
 * payable), or `aborted` when the agent was paused or deleted while it waited; `beforeWait` runs once when it has to
 * wait. The hold is also kept on `control.holds`, so that the step ends it whatever path it leaves by.
 */
export async function reserveCredits(
  deps: StepDeps,
  agent: AgentRow,
  amount: number,
  /** What the credits are held for, kept on the hold. */
  purpose: string,
  control: RunControl,
  /** Runs when the reservation has to wait, before the agent says it waits. */
  beforeWait?: () => Promise<void>,
): Promise<HoldResult | 'aborted'> {
  let waiting: Promise<unknown> | undefined;
  let reservation: HoldResult;
  try {
    reservation = await deps.credits.hold(
      { account_id: agent.account_id, agent_id: agent.agent_id, root_id: agent.root_id, amount, purpose },
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
  if (reservation.granted) control.holds.add(reservation.hold);
  try {
    await waiting;
  } catch (err) {
    // What the wait saved failed (a storage error): a hold granted meanwhile must not stay behind, or others would
    // wait for it until a restart.
    if (reservation.granted) await reservation.hold.release('saving before the wait failed');
    throw err;
  }
  return reservation;
}

/** Ends whatever the step still holds: a step that threw (a storage error, a lease lost) settles nothing more. */
export async function releaseLeftHolds(control: RunControl, reason: string): Promise<void> {
  const left: CreditHold[] = [...control.holds].filter((h) => h.isOpen);
  control.holds.clear();
  for (const hold of left) {
    try {
      await hold.release(reason);
    } catch {
      // The gate forgot it anyway; storage drops what is left of it on recovery or when the lease goes.
    }
  }
}

/**
 * OUT_OF_CREDITS, with a message that names what the next step needed and what was left, in credits, e.g. "Out of
 * credits: the next step needs 13.577 credits (exactly 25,874 input tokens and 256 output tokens); the account balance
 * has 12.8 credits left".
 */
export async function stopForCredits(
  deps: StepDeps,
  agent: AgentRow,
  stop: { needed: number; left: number; limit: string; what: string; exact: boolean },
): Promise<void> {
  const needs = `${stop.exact ? '' : 'up to '}${microsToCredits(stop.needed)} credits`;
  await changeStatus(
    deps,
    agent,
    'exhaust_credits',
    {
      status_message: `Out of credits: the next step needs ${needs} (${stop.what}); ${stop.limit} has ${microsToCredits(Math.max(0, stop.left))} credits left`,
    },
    { mark: true },
  );
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
  // change to the same status is a compare-and-set of the message alone. Kept as a status mark in the same write (no
  // extra round trip): the wait shows on the agent's timeline. Its end is not written on its own, which would cost a
  // write per waiting call (a fan-out short of credits has thousands): it shows as the call that follows.
  const updated = await deps.storage.changeStatus(
    agent.agent_id,
    {
      from: [agent.status],
      to: agent.status,
      patch: { status_message: `Waiting for credits held by ${calls}` },
      mark: true,
    },
    isoTime(deps.clock.now()),
  );
  if (updated && deps.events.listenerCount('agent.progress') > 0) {
    deps.events.emit('agent.progress', { agent: toStatusForm(updated) });
  }
}

export function limitName(refusal: 'account' | 'tree_cap'): string {
  return refusal === 'tree_cap' ? 'the credit cap of this agent' : 'the account balance';
}
