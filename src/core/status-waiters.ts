/**
 * @module core/status-waiters
 * The callers of `runtime.waitFor()`, by agent id: each is told of every status change of its agent, and of its
 * deletion (null). Changes come from this process's steps and, with several workers, from agents stepping elsewhere
 * (core/remote-agents.ts). A waiter subscribes before it reads the agent, so no change between the two is missed.
 */
import { AgentryError, notFound } from '../errors.js';
import type { AgentRow } from '../storage/adapter.js';
import type { AgentStatus } from '../base/status.js';

/** Told of the agent's row after every status change, or null when the agent is deleted. */
export type StatusWaiter = (row: AgentRow | null) => void;

export class StatusWaiters {
  private readonly byAgent = new Map<string, Set<StatusWaiter>>();

  /** Tells every waiter of the agent. */
  notify(agentId: string, row: AgentRow | null): void {
    const waiters = this.byAgent.get(agentId);
    if (waiters) for (const waiter of [...waiters]) waiter(row);
  }

  /**
   * Resolves with the agent's row once its status is one of `until`; rejects with `not_found` when it is deleted, or
   * with the signal's reason when `signal` aborts. `read` reads the row once subscribed (and after `ready`, which
   * resolves when changes from other processes are relayed); `release` is called when the wait ends, however it ends.
   */
  wait(
    agentId: string,
    until: readonly AgentStatus[],
    how: {
      read: () => Promise<AgentRow>;
      signal?: AbortSignal | undefined;
      ready?: Promise<void> | undefined;
      release?: (() => void) | undefined;
    },
  ): Promise<AgentRow> {
    const { signal } = how;
    return new Promise<AgentRow>((resolve, reject) => {
      const cleanup = () => {
        how.release?.();
        const set = this.byAgent.get(agentId);
        set?.delete(onChange);
        if (set?.size === 0) this.byAgent.delete(agentId);
        signal?.removeEventListener('abort', onAbort);
      };
      const onChange = (row: AgentRow | null) => {
        if (row === null) {
          cleanup();
          reject(notFound('Agent', agentId));
        } else if (until.includes(row.status)) {
          cleanup();
          resolve(row);
        }
      };
      const onAbort = () => {
        cleanup();
        reject(signal?.reason instanceof Error ? signal.reason : new AgentryError('invalid_state', 'waitFor aborted'));
      };
      if (signal?.aborted) return onAbort();
      let set = this.byAgent.get(agentId);
      if (!set) this.byAgent.set(agentId, (set = new Set()));
      set.add(onChange);
      signal?.addEventListener('abort', onAbort, { once: true });
      // Subscribed first, then read: a change between the two cannot be missed.
      Promise.resolve(how.ready)
        .then(how.read)
        .then(onChange, (err: unknown) => {
          cleanup();
          reject(err);
        });
    });
  }
}
