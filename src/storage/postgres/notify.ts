/**
 * @module storage/postgres/notify
 * The {@link WorkerBus} on PostgreSQL: LISTEN on one dedicated connection per process (not a pooled one: a pooled
 * connection goes back to the pool and its LISTEN with it), NOTIFY through the pool.
 *
 * - Batched: what is published within one turn of the event loop leaves as few NOTIFYs as fit (PostgreSQL caps a
 *   payload at 8,000 bytes), in one statement, never one per row.
 * - Heart-beaten: the listening connection runs `SELECT 1` (or the worker's heartbeat) every heartbeat; a connection that fails or ends is opened
 *   again (with backoff), LISTENs again, and every listener is called with `null`, because notifications sent while
 *   it was away are lost: listeners look at the database again.
 * - One channel per schema, so tenants (schemas) on one database do not hear each other.
 */
import { createHash } from 'node:crypto';
import type { Client, Pool } from 'pg';
import type { WorkerBus, WorkerTopic } from '../workers.js';

/** Payloads of one NOTIFY stay under PostgreSQL's 8,000-byte limit. */
const MAX_PAYLOAD_BYTES = 7_000;
const TOPICS: readonly WorkerTopic[] = ['control', 'work', 'changed', 'timers', 'children', 'credits'];

export interface NotifyBusOptions {
  pool: Pool;
  /** Opens a new connection (with the adapter's settings) for listening. */
  connect: () => Client;
  schema: string;
  heartbeatMs: number;
  /**
   * What the listening connection runs every heartbeat instead of `SELECT 1`: the worker's own heartbeat (issue 37),
   * so that a pool saturated by step commits never delays it past the gone-worker grace.
   */
  keepAlive?: { sql: string; params: unknown[] };
  onError(error: unknown): void;
}

export class NotifyBus implements WorkerBus {
  private readonly channel: string;
  private readonly listeners = new Map<WorkerTopic, Set<(payloads: string[] | null) => void>>();
  private outgoing = new Map<WorkerTopic, Set<string>>();
  private flushScheduled = false;
  private client: Client | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private reconnect: NodeJS.Timeout | undefined;
  private failures = 0;
  private stopped = false;

  constructor(private readonly options: NotifyBusOptions) {
    // A channel name is an identifier (63 bytes at most): a digest of the schema keeps any schema name within it.
    this.channel = `agentry_${createHash('sha1').update(options.schema).digest('hex').slice(0, 24)}`;
  }

  publish(topic: WorkerTopic, payload: string): void {
    if (this.stopped) return;
    let set = this.outgoing.get(topic);
    if (!set) this.outgoing.set(topic, (set = new Set()));
    set.add(payload);
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => void this.flush());
  }

  subscribe(topic: WorkerTopic, listener: (payloads: string[] | null) => void): () => void {
    let set = this.listeners.get(topic);
    if (!set) this.listeners.set(topic, (set = new Set()));
    set.add(listener);
    return () => set.delete(listener);
  }

  /** Opens the listening connection; resolves once it listens (or after a first failure, retrying in the background). */
  async start(): Promise<void> {
    await this.listen();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.heartbeat);
    clearTimeout(this.reconnect);
    await this.flush();
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }

  private async flush(): Promise<void> {
    this.flushScheduled = false;
    if (this.outgoing.size === 0) return;
    const batches = this.outgoing;
    this.outgoing = new Map();
    const payloads: string[] = [];
    for (const [topic, set] of batches) {
      // `topic\npayload\npayload…`, cut where the next payload would pass the limit.
      let current = topic;
      for (const p of set) {
        if (current.length + p.length + 1 > MAX_PAYLOAD_BYTES && current !== topic) {
          payloads.push(current);
          current = topic;
        }
        current += `\n${p}`;
      }
      payloads.push(current);
    }
    try {
      await this.options.pool.query('SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p', [this.channel, payloads]);
    } catch (error) {
      // Best effort: every listener has a polling backstop.
      if (!this.stopped) this.options.onError(error);
    }
  }

  private async listen(): Promise<void> {
    if (this.stopped) return;
    const client = this.options.connect();
    client.on('error', () => this.lost(client));
    client.on('end', () => this.lost(client));
    client.on('notification', (message) => {
      if (message.channel === this.channel && message.payload) this.deliver(message.payload);
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${this.channel}`);
    } catch (error) {
      this.options.onError(error);
      this.lost(client);
      return;
    }
    if (this.stopped) {
      await client.end().catch(() => undefined);
      return;
    }
    this.client = client;
    this.failures = 0;
    clearInterval(this.heartbeat);
    const keepAlive = this.options.keepAlive;
    this.heartbeat = setInterval(() => {
      (keepAlive ? client.query(keepAlive.sql, keepAlive.params) : client.query('SELECT 1')).catch(() =>
        this.lost(client),
      );
    }, this.options.heartbeatMs);
    this.heartbeat.unref();
    // Whatever was sent while this process was not listening is lost: every listener looks again.
    for (const set of this.listeners.values()) for (const l of set) l(null);
  }

  private lost(client: Client): void {
    if (this.client !== undefined && this.client !== client) return; // an old connection's late event
    this.client = undefined;
    clearInterval(this.heartbeat);
    void client.end().catch(() => undefined);
    if (this.stopped || this.reconnect) return;
    const delay = Math.min(5_000, 100 * 2 ** this.failures++);
    this.reconnect = setTimeout(() => {
      this.reconnect = undefined;
      void this.listen();
    }, delay);
    this.reconnect.unref();
  }

  private deliver(payload: string): void {
    const [topic, ...items] = payload.split('\n');
    if (!TOPICS.includes(topic as WorkerTopic)) return;
    for (const l of this.listeners.get(topic as WorkerTopic) ?? []) {
      try {
        l(items);
      } catch (error) {
        this.options.onError(error);
      }
    }
  }
}
