/**
 * @module core/remote-agents
 * Events of agents that step in another process (several runtimes on one PostgreSQL database,
 * README.md#several-processes). A runtime emits `agent.status`, `agent.progress`, `agent.message` and `agent.deleted`
 * for what it changes itself; an event stream or a `waitFor` served by this process may follow an agent that another
 * worker steps. For each agent that someone here watches (reference-counted), {@link RemoteAgents} reads the agent's
 * row, and its messages after the last position seen, when the bus topic `changed` (or `control`) names it and on a
 * jittered polling backstop, and emits the local events for what changed that this process did not emit itself.
 * Notifications only make it prompt: the poll alone delivers everything, a little later.
 *
 * The other half: every status change, message and deletion this process makes is published on `changed` with the
 * agent's id (once per agent per turn of the event loop; progress is left to the watchers' poll, so a fan-out of
 * 10,000 children costs few notifications).
 *
 * Dedupe: a message is emitted once, by its position in the transcript and its id (this process may step the agent
 * too, before or after another worker); a status or progress change is emitted when the row differs from the last
 * state this process emitted. An agent this process is stepping right now is not read: its step emits its own changes,
 * and the next read after the step catches whatever else changed meanwhile (a pause from another process).
 */
import type { AgentRow, StorageAdapter } from '../storage/adapter.js';
import type { WorkerBus } from '../storage/workers.js';
import type { RuntimeEvents } from './events.js';
import { toMessage, toStatusForm } from './records.js';

/** How often watched agents are read without a notification, in ms (jittered ±20%). */
export const REMOTE_POLL_MS = 500;
/** Ids of messages emitted here that the relay has not matched to a position yet, kept at most per agent. */
const MAX_UNMATCHED_IDS = 256;

export interface RemoteAgentsOptions {
  storage: Pick<StorageAdapter, 'getAgent' | 'listMessages'>;
  bus: WorkerBus;
  events: RuntimeEvents;
  /** Whether this process is stepping the agent now (its step emits what it commits). */
  stepping(agentId: string): boolean;
  /** A status change relayed from another process (null: the agent was deleted there): `waitFor` hears it here. */
  onStatus(agentId: string, row: AgentRow | null): void;
  /** A read that failed (storage unreachable); reported once per run of failures. */
  onError(error: unknown, agentId: string): void;
  /** @default {@link REMOTE_POLL_MS} */
  pollMs?: number;
}

/** What a watcher holds: `ready` resolves once any later change of the agent is sure to be emitted here. */
export interface AgentWatch {
  readonly ready: Promise<void>;
  /** Stops watching (idempotent). */
  release(): void;
}

/** The last state of an agent this process emitted (or read as its starting point). */
interface Known {
  status: AgentRow['status'];
  progress: number;
  status_message: string;
  updated_at: string;
}

interface Watched {
  refs: number;
  ready: Promise<void>;
  /** Null until the first read: the starting point, from which changes are emitted. */
  known: Known | null;
  /** Messages accounted for: positions 1..checked of the transcript were emitted (or predate the watch). */
  checked: number;
  /** Ids of messages this process emitted itself beyond `checked`: the relay skips them. */
  emittedHere: Set<string>;
  gone: boolean;
  reading: Promise<void> | null;
  /** A notification came during a read: read once more after it. */
  again: boolean;
  /** The next read is a catch-up before this process steps the agent: it reads although the agent is stepping. */
  catchUp: boolean;
}

const knownOf = (row: AgentRow): Known => ({
  status: row.status,
  progress: row.progress,
  status_message: row.status_message,
  updated_at: row.updated_at,
});

export class RemoteAgents {
  private readonly watched = new Map<string, Watched>();
  private readonly toPublish = new Set<string>();
  private publishScheduled = false;
  /** Set while this module emits, so its own events are not published again as changes of this process. */
  private relaying = false;
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** Bumped by every start and stop: a poll round of an earlier run does not schedule another. */
  private run = 0;
  private unsubscribe: Array<() => void> = [];
  private failing = false;
  private closed = false;
  private readonly pollMs: number;

  constructor(private readonly o: RemoteAgentsOptions) {
    this.pollMs = o.pollMs ?? REMOTE_POLL_MS;
    const { events } = o;
    // Every status change of this process, watched or not: other processes' watchers are told.
    events.statusHooks.push((row) => {
      this.changedHere(row.agent_id);
      const w = this.watched.get(row.agent_id);
      // A newer state than the one known; a read that started before the change may still answer the older one.
      if (w && (!w.known || w.known.updated_at <= row.updated_at)) w.known = knownOf(row);
    });
    events.on('agent.message', ({ agent_id, message }) => {
      this.changedHere(agent_id);
      const w = this.watched.get(agent_id);
      if (!w || this.relaying) return;
      w.emittedHere.add(message.message_id);
      if (w.emittedHere.size > MAX_UNMATCHED_IDS) w.emittedHere.delete(w.emittedHere.values().next().value!);
    });
    events.on('agent.progress', ({ agent }) => {
      const w = this.watched.get(agent.agent_id);
      if (w?.known && w.known.updated_at <= agent.updated_at) {
        w.known = { ...w.known, progress: agent.progress, status_message: agent.status_message };
      }
    });
    events.on('agent.deleted', ({ agent_id }) => {
      this.changedHere(agent_id);
      const w = this.watched.get(agent_id);
      if (w) w.gone = true;
    });
  }

  /**
   * Watches an agent until `release()`: its changes made by other processes are emitted here. The first watcher of
   * an agent reads where it stands (`ready`); a watcher that subscribed to the events before, and reads the agent
   * after `ready`, misses nothing.
   */
  watch(agentId: string): AgentWatch {
    let w = this.watched.get(agentId);
    if (!w) {
      w = {
        refs: 0,
        ready: Promise.resolve(),
        known: null,
        checked: 0,
        emittedHere: new Set(),
        gone: false,
        reading: null,
        again: false,
        catchUp: false,
      };
      this.watched.set(agentId, w);
      w.ready = this.refresh(agentId, w);
      if (this.watched.size === 1) this.start();
    }
    w.refs += 1;
    let released = false;
    const entry = w;
    return {
      ready: w.ready,
      release: () => {
        if (released) return;
        released = true;
        entry.refs -= 1;
        if (entry.refs > 0 || this.watched.get(agentId) !== entry) return;
        this.watched.delete(agentId);
        if (this.watched.size === 0) this.stop();
      },
    };
  }

  /**
   * Called before this process steps an agent: a watched agent's changes made elsewhere (the steps of the worker that
   * held it before) are emitted first, so the messages of this step come after them, in transcript order. Undefined
   * (nothing to wait for) when nobody here watches the agent.
   */
  catchUp(agentId: string): Promise<void> | undefined {
    const w = this.watched.get(agentId);
    if (!w?.known || w.gone) return undefined;
    w.catchUp = true;
    return this.refresh(agentId, w);
  }

  /** How many agents are watched (for tests and metrics). */
  get size(): number {
    return this.watched.size;
  }

  /** Reads every watched agent now (what a poll round does). */
  async refreshAll(): Promise<void> {
    await Promise.all([...this.watched].map(([id, w]) => this.refresh(id, w)));
  }

  close(): void {
    this.closed = true;
    this.stop();
    this.watched.clear();
  }

  private start(): void {
    if (this.closed) return;
    // `null` after a (re)connection of the bus: notifications may have been lost, so every watched agent is read.
    const onBatch = (ids: string[] | null) => {
      if (ids === null) return void this.refreshAll();
      for (const id of new Set(ids)) {
        const w = this.watched.get(id);
        if (w) void this.refresh(id, w);
      }
    };
    this.unsubscribe = [this.o.bus.subscribe('changed', onBatch), this.o.bus.subscribe('control', onBatch)];
    this.run += 1;
    this.schedulePoll(this.run);
  }

  private stop(): void {
    this.run += 1;
    clearTimeout(this.timer);
    this.timer = undefined;
    for (const off of this.unsubscribe.splice(0)) off();
  }

  private schedulePoll(run: number): void {
    // Jittered, so that the watchers of many processes do not read in step.
    const delay = this.pollMs * (0.8 + Math.random() * 0.4);
    this.timer = setTimeout(() => {
      void this.refreshAll().finally(() => {
        if (!this.closed && run === this.run) this.schedulePoll(run);
      });
    }, delay);
    this.timer.unref?.();
  }

  /** Reads the agent once, or once more after the read in progress: reads of one agent never overlap. */
  private refresh(agentId: string, w: Watched): Promise<void> {
    if (w.reading) {
      w.again = true;
      return w.reading;
    }
    w.reading = (async () => {
      do {
        w.again = false;
        try {
          await this.readOnce(agentId, w);
          this.failing = false;
        } catch (error) {
          if (this.closed) return;
          // Reported once per run of failures: the poll tries again every half second.
          if (!this.failing) this.o.onError(error, agentId);
          this.failing = true;
          return;
        }
      } while (w.again && this.isCurrent(agentId, w));
    })().finally(() => {
      w.reading = null;
    });
    return w.reading;
  }

  private isCurrent(agentId: string, w: Watched): boolean {
    return !this.closed && this.watched.get(agentId) === w;
  }

  private async readOnce(agentId: string, w: Watched): Promise<void> {
    const catchUp = w.catchUp;
    w.catchUp = false;
    if (w.gone || (w.known && !catchUp && this.o.stepping(agentId))) return;
    const { storage, events } = this.o;
    const row = await storage.getAgent(agentId);
    if (!this.isCurrent(agentId, w) || w.gone) return;
    if (!row) {
      w.gone = true;
      if (!w.known) return; // never seen: the watcher's own read says not_found
      this.relaying = true;
      try {
        events.emit('agent.deleted', { agent_id: agentId });
      } finally {
        this.relaying = false;
      }
      this.o.onStatus(agentId, null);
      return;
    }
    if (!w.known) {
      // The starting point: what happens from here on is emitted.
      w.known = knownOf(row);
      w.checked = row.message_count;
      return;
    }
    let fresh: Awaited<ReturnType<typeof storage.listMessages>> = [];
    let checked = w.checked;
    if (row.message_count !== w.checked) {
      const all = await storage.listMessages(agentId);
      if (!this.isCurrent(agentId, w) || w.gone) return;
      fresh = all.slice(w.checked);
      checked = all.length;
    }
    // A step started here meanwhile: it emits what it commits, and this read is done again after it.
    if (!catchUp && this.o.stepping(agentId)) return;
    const known = w.known;
    const statusChanged = row.status !== known.status;
    this.relaying = true;
    try {
      for (const m of fresh) {
        if (w.emittedHere.delete(m.message_id)) continue;
        events.emit('agent.message', { agent_id: agentId, message: toMessage(m) });
      }
      w.checked = checked;
      if (row.progress !== known.progress || row.status_message !== known.status_message) {
        if (events.listenerCount('agent.progress') > 0) events.emit('agent.progress', { agent: toStatusForm(row) });
      }
      w.known = knownOf(row);
      if (statusChanged && events.listenerCount('agent.status') > 0) {
        events.emit('agent.status', { agent: toStatusForm(row), previous: known.status });
      }
    } finally {
      this.relaying = false;
    }
    if (statusChanged) this.o.onStatus(agentId, row);
  }

  /** Tells the other processes, once per turn of the event loop per agent, that this one changed it. */
  private changedHere(agentId: string): void {
    if (this.relaying || this.closed) return;
    this.toPublish.add(agentId);
    if (this.publishScheduled) return;
    this.publishScheduled = true;
    setImmediate(() => {
      this.publishScheduled = false;
      const ids = [...this.toPublish];
      this.toPublish.clear();
      if (this.closed) return;
      for (const id of ids) this.o.bus.publish('changed', id);
    });
  }
}
