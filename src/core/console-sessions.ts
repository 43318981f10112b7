/**
 * @module core/console-sessions
 * The stored sign-ins of the console (`http/console/sessions.ts` keeps their rules): the rows, checked at the door,
 * so the HTTP layer reaches them through the runtime (`runtime.accounts.consoleSessions`) instead of the storage.
 */
import { z } from 'zod';
import { parseArgs } from '../base/validate.js';
import type { ConsoleSessionRow, StorageAdapter } from '../storage/adapter.js';

const Sha256Hex = z.string().regex(/^[0-9a-f]{64}$/, 'a SHA-256 in hex');
const IsoTime = z.iso.datetime({ offset: true });
const AccountId = z.string().min(1).max(200);

const ConsoleSessionRowSchema = z
  .object({
    id_hash: Sha256Hex,
    account_id: AccountId,
    key_hash: Sha256Hex,
    key_id: z.string().min(1).max(200),
    expires_at: IsoTime,
    ended: z.string().max(2_000).nullable(),
  })
  .strict();

/** The console's session rows. Reach them as `runtime.accounts.consoleSessions`. */
export class ConsoleSessionRecords {
  constructor(private readonly storage: StorageAdapter) {}

  /**
   * Stores a session (an upsert by `id_hash`: ending one stores it again with `ended`).
   *
   * @example
   * await runtime.accounts.consoleSessions.put({ ...row, ended: JSON.stringify({ code: 'unauthorized', message: 'You signed out.' }) });
   */
  async put(row: ConsoleSessionRow): Promise<void> {
    await this.storage.putConsoleSession(parseArgs(ConsoleSessionRowSchema, row, 'console session'));
  }

  /** The session whose id hashes to `idHash` (SHA-256, hex), or null. */
  async get(idHash: string): Promise<ConsoleSessionRow | null> {
    return this.storage.getConsoleSession(parseArgs(Sha256Hex, idHash, 'session id hash'));
  }

  /** The account's sessions neither ended nor expired at `now` (ISO), soonest to expire first. */
  async listLive(accountId: string, now: string): Promise<ConsoleSessionRow[]> {
    return this.storage.listLiveConsoleSessions(
      parseArgs(AccountId, accountId, 'accountId'),
      parseArgs(IsoTime, now, 'now'),
    );
  }

  /** Deletes the sessions that expired before `now` (ISO); answers how many. */
  async deleteExpired(now: string): Promise<number> {
    return this.storage.deleteExpiredConsoleSessions(parseArgs(IsoTime, now, 'now'));
  }
}
