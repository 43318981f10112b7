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
 * - Sealed: LISTEN and NOTIFY are open to every role of the database, whatever its privileges on the schema. So the
 *   channel's name and every payload come from a per-schema secret in the table `bus_secret` (migration 7), which only
 *   the schema's own role reads: a payload is AES-256-GCM sealed (agent and account ids are not heard by other roles)
 *   and carries its sending time; what does not open with the key, is stale, was heard before (a replay) or is too
 *   long is dropped after a bounded amount of work (one base64 decode and one GCM check of at most 8,000 bytes) and
 *   never reaches a listener, so a flood of forged notifications costs no query, claim or storage call.
 */
import { createCipheriv, createDecipheriv, createHmac, randomBytes } from 'node:crypto';
import type { Client, Pool } from 'pg';
import type { WorkerBus, WorkerTopic } from '../workers.js';

/** Plain text of one NOTIFY: sealed and in base64 (4/3, plus 28 bytes) it stays under PostgreSQL's 8,000 bytes. */
const MAX_PAYLOAD_BYTES = 5_000;
/** A longer notification is not ours: dropped before any decoding. */
const MAX_SEALED_CHARS = 8_000;
const TOPICS: readonly WorkerTopic[] = ['control', 'work', 'changed', 'timers', 'children', 'credits'];
const IV_BYTES = 12;
const TAG_BYTES = 16;
/**
 * How old (or how far in the future: the workers' clocks differ) a notification may be. Older ones are dropped: a
 * listener that misses one has its polling backstop.
 */
export const NOTIFY_FRESH_MS = 30_000;
/** Nonces of notifications heard within {@link NOTIFY_FRESH_MS}, kept to drop replays; the oldest go beyond this. */
const MAX_REMEMBERED = 65_536;

/** The statement that reads the schema's bus secret (created by migration 7). */
const READ_SECRET = 'SELECT secret FROM bus_secret WHERE id = 1';

export interface NotifyBusOptions {
  pool: Pool;
  /** Opens a new connection (with the adapter's settings) for listening. */
  connect: () => Client;
  schema: string;
  heartbeatMs: number;
  /**
   * What the listening connection runs every heartbeat instead of `SELECT 1`: the worker's own heartbeat,
   * so that a pool saturated by step commits never delays it past the gone-worker grace.
   */
  keepAlive?: { sql: string; params: unknown[] };
  onError(error: unknown): void;
}

/** The channel's name and the payloads' key, both from the schema's secret. */
interface BusKey {
  channel: string;
  key: Buffer;
}

/** Derives the channel's name (an identifier of 63 bytes at most) and the sealing key from the schema's secret. */
export function busKey(secret: Buffer, schema: string): BusKey {
  const derive = (what: string) => createHmac('sha256', secret).update(`agentry notify ${what}\0${schema}`).digest();
  return { channel: `agentry_${derive('channel').toString('hex').slice(0, 32)}`, key: derive('key') };
}

/** `payload` sealed with `key`: base64 of nonce, tag and ciphertext of `<sent at ms>\n<payload>`. */
export function sealNotification(key: Buffer, payload: string, now = Date.now()): string {
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  const sealed = Buffer.concat([cipher.update(`${now}\n${payload}`, 'utf8'), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), sealed]).toString('base64');
}

/**
 * The payload of a notification sealed with `key`, or undefined when it is not one (too long, not base64, forged,
 * damaged). Bounded work: the length is checked before anything is decoded.
 */
export function openNotification(
  key: Buffer,
  sealed: string,
): { payload: string; sentAt: number; nonce: string } | undefined {
  if (sealed.length > MAX_SEALED_CHARS) return undefined;
  const bytes = Buffer.from(sealed, 'base64');
  if (bytes.length <= IV_BYTES + TAG_BYTES) return undefined;
  const iv = bytes.subarray(0, IV_BYTES);
  try {
    const decipher = createDecipheriv('aes-256-gcm', key, iv);
    decipher.setAuthTag(bytes.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
    const text = Buffer.concat([decipher.update(bytes.subarray(IV_BYTES + TAG_BYTES)), decipher.final()]).toString(
      'utf8',
    );
    const cut = text.indexOf('\n');
    const sentAt = Number(text.slice(0, cut));
    if (cut < 0 || !Number.isFinite(sentAt)) return undefined;
    return { payload: text.slice(cut + 1), sentAt, nonce: iv.toString('base64') };
  } catch {
    return undefined; // the tag does not match: not sealed with this schema's key
  }
}

export class NotifyBus implements WorkerBus {
  private readonly listeners = new Map<WorkerTopic, Set<(payloads: string[] | null) => void>>();
  private outgoing = new Map<WorkerTopic, Set<string>>();
  private flushScheduled = false;
  private client: Client | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private reconnect: NodeJS.Timeout | undefined;
  private failures = 0;
  private stopped = false;
  /** Read from `bus_secret` by start(); publishing waits for it. */
  private busKey: Promise<BusKey> | undefined;
  /** Nonces heard lately (nonce -> when heard), oldest first: a replayed notification is dropped. */
  private readonly heard = new Map<string, number>();
  /** Notifications dropped since start: not sealed with this schema's key, stale or replayed (tests read it). */
  dropped = 0;

  constructor(private readonly options: NotifyBusOptions) {}

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

  /**
   * Reads the schema's secret, then opens the listening connection; resolves once it listens (or after a first
   * failure, retrying in the background).
   */
  async start(): Promise<void> {
    this.busKey ??= this.readKey();
    await this.busKey.catch(() => undefined);
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

  private async readKey(): Promise<BusKey> {
    const { rows } = await this.options.pool.query<{ secret: Buffer }>(READ_SECRET);
    const secret = rows[0]?.secret;
    if (!secret) throw new Error(`agentry: schema ${this.options.schema} has no bus secret (migration 7)`);
    return busKey(secret, this.options.schema);
  }

  private async flush(): Promise<void> {
    this.flushScheduled = false;
    if (this.outgoing.size === 0) return;
    const batches = this.outgoing;
    this.outgoing = new Map();
    try {
      this.busKey ??= this.readKey();
      const { channel, key } = await this.busKey;
      const payloads: string[] = [];
      for (const [topic, set] of batches) {
        // `topic\npayload\npayload…`, cut where the next payload would pass the limit.
        let current = topic;
        for (const p of set) {
          if (current.length + p.length + 1 > MAX_PAYLOAD_BYTES && current !== topic) {
            payloads.push(sealNotification(key, current));
            current = topic;
          }
          current += `\n${p}`;
        }
        payloads.push(sealNotification(key, current));
      }
      await this.options.pool.query('SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p', [channel, payloads]);
    } catch (error) {
      // Best effort: every listener has a polling backstop. A key that could not be read is read again next time.
      if (
        this.busKey &&
        (await this.busKey.then(
          () => false,
          () => true,
        ))
      )
        this.busKey = undefined;
      if (!this.stopped) this.options.onError(error);
    }
  }

  private async listen(): Promise<void> {
    if (this.stopped) return;
    let busKey: BusKey;
    try {
      busKey = await (this.busKey ??= this.readKey());
    } catch (error) {
      this.busKey = undefined;
      this.options.onError(error);
      this.retryLater();
      return;
    }
    const client = this.options.connect();
    client.on('error', () => this.lost(client));
    client.on('end', () => this.lost(client));
    client.on('notification', (message) => {
      if (message.channel === busKey.channel && message.payload) this.deliver(busKey.key, message.payload);
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${busKey.channel}`);
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
    this.retryLater();
  }

  private retryLater(): void {
    if (this.stopped || this.reconnect) return;
    const delay = Math.min(5_000, 100 * 2 ** this.failures++);
    this.reconnect = setTimeout(() => {
      this.reconnect = undefined;
      void this.listen();
    }, delay);
    this.reconnect.unref();
  }

  private deliver(key: Buffer, sealed: string): void {
    const opened = openNotification(key, sealed);
    const now = Date.now();
    if (!opened || Math.abs(now - opened.sentAt) > NOTIFY_FRESH_MS || this.heard.has(opened.nonce)) {
      this.dropped++;
      return;
    }
    this.remember(opened.nonce, now);
    const [topic, ...items] = opened.payload.split('\n');
    if (!TOPICS.includes(topic as WorkerTopic)) return;
    for (const l of this.listeners.get(topic as WorkerTopic) ?? []) {
      try {
        l(items);
      } catch (error) {
        this.options.onError(error);
      }
    }
  }

  /** Keeps a nonce while a replay of it would still be fresh; at most {@link MAX_REMEMBERED} (the oldest go). */
  private remember(nonce: string, now: number): void {
    this.heard.set(nonce, now);
    for (const [old, at] of this.heard) {
      if (this.heard.size <= MAX_REMEMBERED && now - at <= NOTIFY_FRESH_MS) break;
      this.heard.delete(old);
    }
  }
}
