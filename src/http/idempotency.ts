/**
 * @module http/idempotency
 * `Idempotency-Key` on POST /api/agents: the first successful result is stored per (account, key) and replayed for
 * a retry with the same body; a different body under the same key is `idempotency_conflict`. Failures are not
 * stored (nothing was created, so a retry may simply run again).
 *
 * Within a process, requests with the same key wait for each other. Across processes the storage's insert-if-absent
 * decides: a request that created an agent but lost the race deletes its agent and answers with the winner's result.
 */
import { createHash } from 'node:crypto';
import { AgentryError } from '../errors.js';
import type { AgentRuntime } from '../core/agent-runtime.js';

/** Printable ASCII, no spaces, at most 255 characters. */
const KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;

export interface StoredResult {
  status: number;
  /** JSON text of the body. */
  body: string;
  replayed: boolean;
}

export function assertIdempotencyKey(key: string): void {
  if (!KEY_PATTERN.test(key)) {
    throw new AgentryError(
      'invalid_request',
      'Idempotency-Key must be 1 to 255 printable ASCII characters without spaces',
    );
  }
}

/** SHA-256 of the body's canonical JSON (keys sorted), so whitespace and key order do not matter. */
export function requestHash(body: unknown): string {
  return createHash('sha256').update(canonicalJson(body)).digest('hex');
}

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/** Where the results are kept: the runtime's storage, through the runtime. */
export type IdempotencyRecords = Pick<AgentRuntime, 'idempotentResult' | 'storeIdempotentResult'>;

export class IdempotentCreates {
  private readonly inFlight = new Map<string, Promise<unknown>>();

  constructor(
    private readonly records: IdempotencyRecords,
    private readonly now: () => string,
  ) {}

  /**
   * Runs `create` once per (account, key). `undo` removes what `create` made when another process stored its result
   * first.
   */
  async run(
    accountId: string,
    key: string,
    hash: string,
    create: () => Promise<{ status: number; body: string }>,
    undo: (body: string) => Promise<void>,
  ): Promise<StoredResult> {
    const slot = `${accountId}\u0000${key}`;
    for (let waiting = this.inFlight.get(slot); waiting; waiting = this.inFlight.get(slot)) {
      await waiting.catch(() => {});
    }
    const stored = await this.records.idempotentResult(accountId, key);
    if (stored) return replay(stored.request_hash, hash, stored.status, stored.response);

    const work = (async (): Promise<StoredResult> => {
      const result = await create();
      await this.records.storeIdempotentResult({
        account_id: accountId,
        key,
        request_hash: hash,
        response: result.body,
        status: result.status,
        created_at: this.now(),
      });
      const winner = await this.records.idempotentResult(accountId, key);
      if (winner && winner.response !== result.body) {
        await undo(result.body);
        return replay(winner.request_hash, hash, winner.status, winner.response);
      }
      return { ...result, replayed: false };
    })();
    this.inFlight.set(slot, work);
    try {
      return await work;
    } finally {
      this.inFlight.delete(slot);
    }
  }
}

function replay(storedHash: string, hash: string, status: number, body: string): StoredResult {
  if (storedHash !== hash) {
    throw new AgentryError(
      'idempotency_conflict',
      'This Idempotency-Key was already used with a different request body; use a new key for a new request',
    );
  }
  return { status, body, replayed: true };
}
