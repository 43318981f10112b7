/**
 * @module http/event-streams
 * The open event streams of one router, by API key, and the limits that keep them from outliving their access or piling
 * up (docs/decisions.md#safe-to-expose-http-event-streams-storage):
 * - access is checked again every {@link EventStreamLimits.recheckMs}: a stream whose key was deleted, or whose
 *   account's subscription lapsed, ends with a `closed` event (`reason: "access"`) at the next check;
 * - a stream lives at most {@link EventStreamLimits.maxLifetimeMs}, then ends with a `retry:` hint and a `closed` event
 *   (`reason: "lifetime"`): the client reconnects and resumes with `Last-Event-ID`. Streams of paused agents end so
 *   too, instead of living forever;
 * - a key has at most {@link EventStreamLimits.maxPerKey} streams open; one more is 429 `rate_limited`.
 * A reader too slow for its stream is dropped by whoever writes it (events.ts, poll-thread.ts), past
 * {@link EventStreamLimits.slowReaderBytes} unsent.
 *
 * One timer checks every key once per interval, however many streams it has open, and only while any stream is open.
 */
import type { Accounts } from '../core/accounts.js';

/** Limits on event streams (`eventStreams` option of createFetchHandler). */
export interface EventStreamLimits {
  /** Most streams one API key may have open at once. @default 16 */
  maxPerKey: number;
  /** A stream ends after this long; the client reconnects with `Last-Event-ID`. @default 1,800,000 (30 min) */
  maxLifetimeMs: number;
  /** How often each open stream's key and subscription are checked again. @default 1000 */
  recheckMs: number;
  /** Unsent bytes past which a reader counts as too slow and its stream is dropped. @default 65,536 */
  slowReaderBytes: number;
}

export const DEFAULT_EVENT_STREAM_LIMITS: Readonly<EventStreamLimits> = Object.freeze({
  maxPerKey: 16,
  maxLifetimeMs: 30 * 60_000,
  recheckMs: 1000,
  slowReaderBytes: 64 * 1024,
});

/** Why the registry ends a stream. */
export type StreamEnd = 'access' | 'lifetime';

/** Why an event stream ended. */
export type StreamEndReason =
  /** the agent reached COMPLETED or FAILED */
  | 'finished'
  | 'deleted'
  /** the key was deleted or the subscription lapsed */
  | 'access'
  /** the stream reached its lifetime (the client reconnects) */
  | 'lifetime'
  /** the reader fell too far behind */
  | 'slow_reader'
  /** the client went away (or the server closed) */
  | 'client_closed';

/** What `onStream` (createFetchHandler's option) hears of an event stream: once when it opens, once when it ends. */
export type StreamInfo =
  | { event: 'open'; request_id: string; agent_id: string }
  | { event: 'close'; request_id: string; agent_id: string; reason: StreamEndReason; duration_ms: number };

/** One open stream as the registry knows it. */
export interface StreamTicket {
  /** Set by the stream: ends it. */
  onEnd: (why: StreamEnd) => void;
  /** Tells the registry the stream is gone. Idempotent. */
  release(): void;
}

interface Entry {
  ticket: StreamTicket;
  openedAt: number;
}

interface KeyGroup {
  accountId: string;
  streams: Set<Entry>;
  /** Whether the group may still read, when it is not an API key's (the console behind the app's `authenticate`). */
  allowed?: () => Promise<boolean>;
}

export class EventStreamRegistry {
  private readonly byKey = new Map<string, KeyGroup>();
  private timer: ReturnType<typeof setInterval> | undefined;
  private checking = false;

  constructor(
    /** The runtime's accounts: a stream's key is checked again every `recheckMs` while it lasts. */
    private readonly accounts: Pick<Accounts, 'findByKeyHash'>,
    readonly limits: EventStreamLimits,
    private readonly now: () => number = Date.now,
  ) {}

  /** How many streams are open. */
  get size(): number {
    let n = 0;
    for (const group of this.byKey.values()) n += group.streams.size;
    return n;
  }

  /**
   * A ticket for a new stream of `keyHash`, or null when the key has its most streams open. The console's streams
   * count under the key their session signed in with; behind an app's `authenticate` there is no key, and the
   * caller names a group of its own (`account:<id>`) with the check that says whether it may still read.
   */
  open(keyHash: string, accountId: string, allowed?: () => Promise<boolean>): StreamTicket | null {
    let group = this.byKey.get(keyHash);
    if (group && group.streams.size >= this.limits.maxPerKey) return null;
    if (!group) {
      group = { accountId, streams: new Set(), ...(allowed ? { allowed } : {}) };
      this.byKey.set(keyHash, group);
    }
    const streams = group.streams;
    const entry: Entry = {
      openedAt: this.now(),
      ticket: {
        onEnd: () => {},
        release: () => {
          if (!streams.delete(entry)) return;
          if (streams.size === 0 && this.byKey.get(keyHash)?.streams === streams) this.byKey.delete(keyHash);
          if (this.byKey.size === 0) this.stopTimer();
        },
      },
    };
    streams.add(entry);
    this.timer ??= setInterval(() => void this.check(), this.limits.recheckMs);
    this.timer.unref?.();
    return entry.ticket;
  }

  /** One round of checks: every key's access once, every stream's age. */
  async check(): Promise<void> {
    if (this.checking) return; // a slow storage: the next round comes when this one is done
    this.checking = true;
    try {
      for (const [keyHash, group] of [...this.byKey]) {
        let allowed: boolean;
        try {
          if (group.allowed) allowed = await group.allowed();
          else {
            const account = await this.accounts.findByKeyHash(keyHash);
            allowed = account !== null && account.subscription_active && account.account_id === group.accountId;
          }
        } catch {
          allowed = true; // storage unreachable this round: judged at the next
        }
        const now = this.now();
        for (const entry of [...group.streams]) {
          if (!allowed) entry.ticket.onEnd('access');
          else if (now - entry.openedAt >= this.limits.maxLifetimeMs) entry.ticket.onEnd('lifetime');
        }
      }
    } finally {
      this.checking = false;
    }
  }

  private stopTimer(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }
}
