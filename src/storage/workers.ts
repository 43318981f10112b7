/**
 * @module storage/workers
 * The extension point for several runtime processes driving the agents of one database (README.md#several-processes). A
 * storage adapter that supports it (PostgreSQL, unless opened `exclusive`) exposes a {@link WorkerCoordination} as
 * `StorageAdapter.workers`; memory and SQLite storage have none, and one process drives their agents.
 *
 * A *worker* is one runtime that drives agents on such storage. It steps an agent only while it holds the agent's
 * *lease* (owner + epoch, in database time); every step it commits is fenced by that lease, so a worker that lost it
 * (frozen, partitioned, too slow) can no longer write the agent's log. Pause, resume and delete may come from any
 * process: they change the agent's row and notify the workers over {@link WorkerBus}, and a polling backstop makes
 * sure the owner sees them even when a notification is lost.
 */

/**
 * Notifications between the processes sharing a database: batched and best effort. A listener is also called with
 * `null` after every (re)connection of the bus: notifications may have been missed meanwhile, so it looks again.
 */
export interface WorkerBus {
  /** Sends `payload` (short text, e.g. an agent id) on `topic` to every process, this one included. */
  publish(topic: WorkerTopic, payload: string): void;
  /** Calls `listener` with the payloads of each batch received on `topic`; returns a function that unsubscribes. */
  subscribe(topic: WorkerTopic, listener: (payloads: string[] | null) => void): () => void;
}

/**
 * - `control`: an agent was paused or deleted by some process (payload: its id); its owner aborts its work.
 * - `work`: agents became claimable (payload ignored); idle workers claim.
 * - `changed`: an agent's status, progress or transcript changed (payload: its id); event streams and `waitFor` of
 *   other processes read it again.
 * - `timers`: a timer was scheduled (payload: its due time in ms); timer loops look sooner.
 * - `children`: a child of this agent stopped running (payload: the parent's id); the process where the parent waits
 *   for its children counts them again.
 * - `credits`: the credit gates of the workers (core/credit-gate.ts). Payload `wait:<account id>`: a reservation of
 *   this account waits for credits that other workers hold (they give back what they hold in advance, and say when
 *   their holds of it end); `free:<account id>`: credits of this account came back (released, settled, topped up),
 *   waiting reservations ask again.
 */
export type WorkerTopic = 'control' | 'work' | 'changed' | 'timers' | 'children' | 'credits';

/** What the runtime hears from its worker coordination. */
export interface WorkerHooks {
  /** Leases this worker lost (taken over after it missed renewals, or the agent was deleted): stop their work now. */
  onLost(agentIds: string[]): void;
  /** Agents this worker holds that are no longer runnable (paused, stopped, finished elsewhere): abort their model calls. */
  onStopped(agentIds: string[]): void;
  /** Agents this worker claimed on its own (new work, a gone worker's agents): drive them. */
  onClaimed(agentIds: string[]): void;
  /** A fault of the coordination itself (the database unreachable, a sweep that failed); the runtime reports it. */
  onError(error: unknown): void;
}

export interface WorkerCoordination {
  /** This worker's id (its row in the database while it runs). */
  readonly workerId: string;
  readonly bus: WorkerBus;
  /**
   * Registers the worker and starts its heartbeat (lease renewals, the backstop poll for pause and delete, claims of
   * claimable work while it has room) and the sweeper. Called once by a runtime that drives agents.
   */
  start(hooks: WorkerHooks, capacity: () => number): Promise<void>;
  /**
   * Claims these agents for this worker where it can: runnable, and not held by another live lease. Returns the ids
   * claimed. An agent held by another worker gets a wake request that its holder honours when it releases it; one that
   * is not claimed for want of room (`limit`) stays claimable by any worker.
   */
  claim(agentIds: readonly string[], limit: number): Promise<string[]>;
  /** Whether this worker holds the agent's lease (as far as it knows). */
  holds(agentId: string): boolean;
  /**
   * Gives up the leases of agents this worker stopped driving. Returns the ids for which a wake was requested while
   * they were held: those stay held, and the caller drives them again. `unfinished`: the driver stopped with work
   * left (its step failed), so the agents stay claimable by any worker; otherwise an agent that is still runnable
   * waits for a wake (its children, a timer). `lost`: the driver stopped on a {@link LeaseLostError} (a write was fenced
   * out), so the credits this worker still holds for the agents' step (a hold the failed commit would have settled)
   * are released too.
   */
  release(agentIds: readonly string[], options?: { unfinished?: boolean; lost?: boolean }): Promise<string[]>;
  /**
   * Checked right before a model call or a call that must never run twice starts: true when the agent is still runnable
   * and this worker still holds an unexpired lease of it. A pause answered before it was asked is seen.
   */
  mayProceed(agentId: string): Promise<boolean>;
  /** Tells the worker it has room for more agents: it claims claimable ones soon (and reports them via `onClaimed`). */
  wantWork(): void;
  /** Stops the heartbeat and the sweeper, gives up every lease and marks the worker gone. */
  stop(): Promise<void>;
}

/**
 * Thrown by a write of an agent whose lease this worker no longer holds (another worker took the agent over): the
 * write did not happen, and the worker must drop the agent and abort its work.
 */
export class LeaseLostError extends Error {
  override readonly name = 'LeaseLostError';
  constructor(readonly agentId: string) {
    super(`This worker no longer holds the lease of agent ${agentId}: another worker continues it`);
  }
}
