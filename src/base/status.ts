/**
 * @module base/status
 * The agent status machine, as one table. Every change of status in agentry asks
 * {@link nextStatus} (or {@link assertTransition}); nothing else decides which moves are legal.
 */
import { AgentryError } from '../errors.js';

export const AGENT_STATUSES = ['STARTING_UP', 'ACTIVE', 'PAUSED', 'OUT_OF_CREDITS', 'COMPLETED', 'FAILED'] as const;
export type AgentStatus = (typeof AGENT_STATUSES)[number];

/** What asks for a change of status. */
export type StatusTrigger =
  /** a STARTING_UP agent gets a run slot */
  | 'start'
  /** the model ended without tool calls */
  | 'complete'
  /** unrecoverable error, step limit or wall-clock limit */
  | 'fail'
  /** a credit reservation could not be covered */
  | 'exhaust_credits'
  | 'pause'
  /** resume of an agent that had a run slot before */
  | 'resume'
  /** resume of a PAUSED agent that never had a run slot: it goes back to waiting for one */
  | 'resume_unstarted';

export const TERMINAL_STATUSES: readonly AgentStatus[] = ['COMPLETED', 'FAILED'];
/** Statuses in which the scheduler may step an agent. */
export const RUNNABLE_STATUSES: readonly AgentStatus[] = ['STARTING_UP', 'ACTIVE'];

type Row = { to: AgentStatus; refuse?: never } | { to?: never; refuse: 'invalid_state' | 'noop' };

/**
 * Which trigger moves which status where. `noop` rows are idempotent requests that leave the status as it is (pause of
 * a PAUSED agent, resume of a running one); any pair missing from the table is refused with `invalid_state`. The
 * balance conditions of `resume` (402 when the balance is 0) are checked by the runtime before it asks this table.
 */
export const TRANSITIONS: Readonly<Record<StatusTrigger, Partial<Record<AgentStatus, Row>>>> = {
  start: { STARTING_UP: { to: 'ACTIVE' } },
  complete: { ACTIVE: { to: 'COMPLETED' } },
  fail: { ACTIVE: { to: 'FAILED' }, STARTING_UP: { to: 'FAILED' } },
  exhaust_credits: { ACTIVE: { to: 'OUT_OF_CREDITS' }, STARTING_UP: { to: 'OUT_OF_CREDITS' } },
  pause: {
    ACTIVE: { to: 'PAUSED' },
    STARTING_UP: { to: 'PAUSED' },
    PAUSED: { refuse: 'noop' },
    OUT_OF_CREDITS: { refuse: 'noop' },
  },
  resume: {
    PAUSED: { to: 'ACTIVE' },
    OUT_OF_CREDITS: { to: 'ACTIVE' },
    ACTIVE: { refuse: 'noop' },
    STARTING_UP: { refuse: 'noop' },
  },
  resume_unstarted: {
    PAUSED: { to: 'STARTING_UP' },
    OUT_OF_CREDITS: { to: 'STARTING_UP' },
    ACTIVE: { refuse: 'noop' },
    STARTING_UP: { refuse: 'noop' },
  },
};

/**
 * The status `trigger` leads to from `from`: the new status, `from` itself for an idempotent no-op, or `null` when
 * the move is not allowed.
 */
export function nextStatus(from: AgentStatus, trigger: StatusTrigger): AgentStatus | null {
  const row = TRANSITIONS[trigger][from];
  if (!row) return null;
  return row.refuse === 'noop' ? from : row.to!;
}

/** Like {@link nextStatus} but throws `invalid_state` for a refused move. */
export function assertTransition(from: AgentStatus, trigger: StatusTrigger): AgentStatus {
  const to = nextStatus(from, trigger);
  if (to === null) {
    throw new AgentryError('invalid_state', `Cannot ${describeTrigger(trigger)} an agent that is ${from}`, {
      details: { status: from, action: trigger },
    });
  }
  return to;
}

/** The statuses from which `trigger` really moves an agent (no-ops excluded): used for compare-and-set updates. */
export function sourcesOf(trigger: StatusTrigger): AgentStatus[] {
  return AGENT_STATUSES.filter((s) => {
    const row = TRANSITIONS[trigger][s];
    return row !== undefined && row.to !== undefined;
  });
}

export function isTerminal(status: AgentStatus): boolean {
  return TERMINAL_STATUSES.includes(status);
}

function describeTrigger(trigger: StatusTrigger): string {
  switch (trigger) {
    case 'resume_unstarted':
      return 'resume';
    case 'exhaust_credits':
      return 'stop for credits';
    default:
      return trigger;
  }
}
