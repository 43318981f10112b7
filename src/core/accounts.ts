/**
 * @module core/accounts
 * Accounts, subscriptions, API keys and balances. Keys are high-entropy random strings with a fixed
 * prefix; only their SHA-256 and last 4 characters are stored, and the full key is returned once, at creation.
 */
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { z } from 'zod';
import { AgentryError, notFound } from '../errors.js';
import type { AccountRow, ApiKeyRow, LedgerRow, LedgerSpendRow, StorageAdapter } from '../storage/adapter.js';
import { isoTime, type Clock } from '../base/clock.js';
import { CreditsAmountSchema, creditsToMicros, microsToCredits } from './schemas.js';
import { parseArgs } from '../base/validate.js';
import { ConsoleSessionRecords } from './console-sessions.js';

/** Every key starts with this, so leaked keys are easy to recognise and scan for. */
export const API_KEY_PREFIX = 'agk_';

export interface AccountInfo {
  account_id: string;
  name: string;
  subscription_active: boolean;
  /** Settled balance, credits. */
  balance: number;
  /** Credits held by in-flight reservations. */
  reserved: number;
  /** Credits that new work can reserve: balance - reserved. */
  available: number;
  created_at: string;
}

export interface ApiKeyInfo {
  key_id: string;
  name: string;
  /** The key with all but its last 4 characters hidden, e.g. `agk_…x9Qa`. */
  masked: string;
  last4: string;
  created_at: string;
}

export interface CreatedApiKey extends ApiKeyInfo {
  /** The full key. Shown this once; agentry keeps only its hash. */
  key: string;
}

export interface LedgerEntry {
  account_id: string;
  agent_id: string | null;
  kind: LedgerRow['kind'];
  item: string | null;
  tokens_in: number;
  tokens_out: number;
  /** Signed credits: negative for spend. */
  credits: number;
  created_at: string;
  /** A model call's latency, ms, where it was measured (`LedgerRow.latency_ms`). */
  latency_ms?: number;
}

/** A ledger entry with its position: pass the last one's `seq` of a page as `before` for the next older page. */
export interface LedgerPageEntry extends LedgerEntry {
  seq: number;
}

/** One page of an account's ledger, newest first ({@link Accounts.ledgerPage}). */
export interface LedgerEntryPage {
  entries: LedgerPageEntry[];
  /** The `before` of the next older page, or null when this page reaches the oldest entry. */
  next_before: number | null;
}

/** What an account spent on one model or tool, over its whole ledger. */
export interface SpendSummary {
  item: string;
  /** Credits spent (refunds of the item taken off). */
  credits: number;
  tokens_in: number;
  tokens_out: number;
  /** Ledger rows: model calls, or tool charges. */
  count: number;
}

/** The most ledger entries one {@link Accounts.ledgerPage} call returns. */
export const MAX_LEDGER_PAGE_ROWS = 1_000;

const Id = z.string().min(1).max(200);
const LedgerPageQuerySchema = z
  .object({
    /** Entries on the page, newest first. @default 100 */
    limit: z.number().int().min(1).max(MAX_LEDGER_PAGE_ROWS).default(100),
    /** Only entries older than this `seq` (a previous page's `next_before`). */
    before: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER).optional(),
  })
  .strict();
const CreateAccountSchema = z
  .object({
    id: Id.optional(),
    name: z.string().min(1).max(200).optional(),
    /** Initial credits. */
    credits: z.number().finite().min(0).max(1e12).optional(),
    /** Subscribe at once (and create the first API key). @default true */
    subscribe: z.boolean().optional(),
  })
  .strict();

/**
 * A key's last use is written at most this often per process: every request authenticates, and a write each time
 * would cost more than the request. The time shown is therefore accurate to about a minute.
 */
const KEY_USE_WRITE_EVERY_MS = 60_000;

export function hashApiKey(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

/** Account management. Reach it as `runtime.accounts`. */
export class Accounts {
  constructor(
    private readonly storage: StorageAdapter,
    private readonly clock: Clock,
    /** Told of every top-up, so reservations waiting on the account can be granted. */
    private readonly onTopUp: (accountId: string) => void = () => {},
    /** Told of every (de)activation, so the runtime's subscription check reads the account again. */
    private readonly onSubscriptionChange: (accountId: string) => void = () => {},
  ) {
    this.consoleSessions = new ConsoleSessionRecords(storage);
  }

  /** The console's stored sign-ins (http/console/sessions.ts keeps their rules). */
  readonly consoleSessions: ConsoleSessionRecords;

  /** When this process last wrote each key's use, by key hash. */
  private readonly keyUseWritten = new Map<string, number>();

  /**
   * Creates an account. With `subscribe` (the default) it is active at once and its first API key is created and
   * returned — the only time the full key is available.
   *
   * @example
   * const { account, apiKey } = await runtime.accounts.create({ name: 'acme', credits: 500 });
   */
  async create(
    options: z.input<typeof CreateAccountSchema> = {},
  ): Promise<{ account: AccountInfo; apiKey: CreatedApiKey | null }> {
    const o = parseArgs(CreateAccountSchema, options, 'accounts.create');
    const { account, apiKey, created } = await this.createIfAbsent({ ...o, id: o.id ?? randomUUID() });
    if (!created)
      throw new AgentryError('invalid_request', `Account ${JSON.stringify(account.account_id)} already exists`);
    return { account, apiKey };
  }

  /**
   * Creates the account `id` unless it exists, and says which happened. Race-free across processes: the account's
   * insert decides (the storage refuses a second row with the same id), so when several processes call this at the
   * same moment on one database exactly one gets `created: true` — and with it the first API key, when `subscribe`.
   * The others get the account as it is, and no key.
   *
   * @example
   * const { created, apiKey } = await runtime.accounts.createIfAbsent({ id: 'serve', credits: 100 });
   * if (created) console.log(`API key: ${apiKey?.key}`);
   */
  async createIfAbsent(
    options: z.input<typeof CreateAccountSchema> & { id: string },
  ): Promise<{ account: AccountInfo; apiKey: CreatedApiKey | null; created: boolean }> {
    const o = parseArgs(CreateAccountSchema.required({ id: true }), options, 'accounts.createIfAbsent');
    const existing = await this.storage.getAccount(o.id);
    if (existing) return { account: toInfo(existing), apiKey: null, created: false };
    const row: AccountRow = {
      id: o.id,
      name: o.name ?? o.id,
      subscription_active: false,
      balance: creditsToMicros(o.credits ?? 0),
      reserved: 0,
      created_at: isoTime(this.clock.now()),
    };
    try {
      await this.storage.createAccount(row);
    } catch (error) {
      // Another process inserted it between our read and our insert: theirs is the account (and the key).
      const won = await this.storage.getAccount(o.id).catch(() => null);
      if (won) return { account: toInfo(won), apiKey: null, created: false };
      throw error;
    }
    if (o.subscribe === false) return { account: toInfo(row), apiKey: null, created: true };
    const { account, apiKey } = await this.subscribe(o.id);
    return { account, apiKey, created: true };
  }

  async get(accountId: string): Promise<AccountInfo> {
    return toInfo(await this.row(accountId));
  }

  async list(): Promise<AccountInfo[]> {
    return (await this.storage.listAccounts()).map(toInfo);
  }

  /** Adds credits (a `topup` ledger row). */
  async addCredits(accountId: string, credits: number): Promise<AccountInfo> {
    parseArgs(Id, accountId, 'accountId');
    const amount = parseArgs(CreditsAmountSchema, credits, 'credits');
    const row = await this.storage.addCredits({
      account_id: accountId,
      agent_id: null,
      kind: 'topup',
      item: null,
      tokens_in: 0,
      tokens_out: 0,
      amount: creditsToMicros(amount),
      created_at: isoTime(this.clock.now()),
    });
    if (!row) throw notFound('Account', accountId);
    this.onTopUp(accountId);
    return toInfo(row);
  }

  /** Activates the subscription; creates the account's first API key if it has none (returned once). */
  async subscribe(accountId: string): Promise<{ account: AccountInfo; apiKey: CreatedApiKey | null }> {
    const row = await this.storage.setSubscription(parseArgs(Id, accountId, 'accountId'), true);
    if (!row) throw notFound('Account', accountId);
    this.onSubscriptionChange(accountId);
    const keys = await this.storage.listApiKeys(accountId);
    const apiKey = keys.length === 0 ? await this.createApiKey(accountId, { name: 'default' }) : null;
    return { account: toInfo(row), apiKey };
  }

  /**
   * Deactivates the subscription: its keys get 401 `subscription_inactive`, its running agents pause at their next
   * step ("Paused: subscription inactive") and can be resumed once it is active again.
   */
  async unsubscribe(accountId: string): Promise<AccountInfo> {
    const row = await this.storage.setSubscription(parseArgs(Id, accountId, 'accountId'), false);
    if (!row) throw notFound('Account', accountId);
    this.onSubscriptionChange(accountId);
    return toInfo(row);
  }

  async createApiKey(accountId: string, options: { name?: string } = {}): Promise<CreatedApiKey> {
    await this.row(accountId);
    const name = parseArgs(z.string().min(1).max(200).optional(), options.name, 'name') ?? 'key';
    const key = API_KEY_PREFIX + randomBytes(32).toString('base64url');
    const row: ApiKeyRow = {
      id: `key_${randomBytes(9).toString('base64url')}`,
      account_id: accountId,
      name,
      hash: hashApiKey(key),
      last4: key.slice(-4),
      created_at: isoTime(this.clock.now()),
    };
    await this.storage.insertApiKey(row);
    return { ...toKeyInfo(row), key };
  }

  async listApiKeys(accountId: string): Promise<ApiKeyInfo[]> {
    await this.row(accountId);
    return (await this.storage.listApiKeys(accountId)).map(toKeyInfo);
  }

  async deleteApiKey(accountId: string, keyId: string): Promise<void> {
    const deleted = await this.storage.deleteApiKey(
      parseArgs(Id, accountId, 'accountId'),
      parseArgs(Id, keyId, 'keyId'),
    );
    if (!deleted) throw notFound('API key', keyId);
  }

  /**
   * The account an API key belongs to. Throws `unauthorized` for a missing or unknown key and
   * `subscription_inactive` when the account is not subscribed.
   */
  async authenticate(key: string | null | undefined): Promise<AccountInfo> {
    return (await this.authenticateKey(key)).account;
  }

  /**
   * {@link authenticate}, also answering the key's hash: the HTTP rate limiter keys its buckets by it, and hashing
   * once per request instead of twice shows on the poll route.
   */
  async authenticateKey(key: string | null | undefined): Promise<{ account: AccountInfo; keyHash: string }> {
    if (!key) throw new AgentryError('unauthorized', 'Missing API key: send it in the x-api-key header');
    if (key.length > 512) throw new AgentryError('unauthorized', 'Unknown API key');
    const keyHash = hashApiKey(key);
    const account = await this.storage.findAccountByKeyHash(keyHash);
    if (!account) throw new AgentryError('unauthorized', 'Unknown API key');
    if (!account.subscription_active) {
      throw new AgentryError('subscription_inactive', 'The subscription of this account is not active');
    }
    this.noteKeyUse(keyHash);
    return { account: toInfo(account), keyHash };
  }

  /**
   * The account an API key belongs to, by the key's hash ({@link hashApiKey}), active or not; null for an unknown or
   * deleted key. Unlike {@link authenticate} it records no use: the HTTP layer's event streams check their key with
   * it while they last.
   *
   * @example
   * const account = await runtime.accounts.findByKeyHash(hashApiKey(key));
   * const mayRead = account !== null && account.subscription_active;
   */
  async findByKeyHash(keyHash: string): Promise<AccountInfo | null> {
    const row = await this.storage.findAccountByKeyHash(parseArgs(Id, keyHash, 'keyHash'));
    return row ? toInfo(row) : null;
  }

  /**
   * The account's key with this hash ({@link hashApiKey}), or null when the account has none such: the console
   * learns which key a session signed in with from it.
   *
   * @example
   * const key = await runtime.accounts.apiKeyByHash(accountId, hashApiKey(apiKey));
   */
  async apiKeyByHash(accountId: string, keyHash: string): Promise<ApiKeyInfo | null> {
    const row = await this.storage.findApiKeyByHash(parseArgs(Id, keyHash, 'keyHash'));
    return row !== null && row.account_id === parseArgs(Id, accountId, 'accountId') ? toKeyInfo(row) : null;
  }

  /**
   * When each of the account's keys was last used to authenticate (accurate to about a minute; polls answered by
   * `startServer`'s own thread are not counted), by key id. Keys never used are absent.
   */
  async keysLastUsed(accountId: string): Promise<Record<string, string>> {
    await this.row(accountId);
    return this.storage.apiKeysLastUsed(accountId);
  }

  /** Records a key's use, in the background and at most once a minute per key. */
  private noteKeyUse(keyHash: string): void {
    const now = this.clock.now();
    const last = this.keyUseWritten.get(keyHash);
    if (last !== undefined && now - last < KEY_USE_WRITE_EVERY_MS) return;
    if (this.keyUseWritten.size >= 10_000) this.keyUseWritten.clear(); // bounded: a flood of keys only costs writes
    this.keyUseWritten.set(keyHash, now);
    // A lost write only makes "last used" a little older; it must never fail the request that used the key.
    this.storage.touchApiKey(keyHash, isoTime(now)).catch(() => {});
  }

  /** Every debit and credit of the account, oldest first. */
  async ledger(accountId: string): Promise<LedgerEntry[]> {
    await this.row(accountId);
    return (await this.storage.listLedger(accountId)).map(({ amount, ...rest }) => ({
      ...rest,
      credits: microsToCredits(amount),
    }));
  }

  /**
   * One page of the account's ledger, newest first, at most `limit` entries (1 to {@link MAX_LEDGER_PAGE_ROWS},
   * default 100), older than `before` when given. Keyset paging by the ledger's order: a page costs its rows, however
   * long the ledger is.
   *
   * @example
   * const first = await runtime.accounts.ledgerPage(accountId, { limit: 50 });
   * const older = first.next_before === null ? null : await runtime.accounts.ledgerPage(accountId, { before: first.next_before });
   */
  async ledgerPage(accountId: string, query: z.input<typeof LedgerPageQuerySchema> = {}): Promise<LedgerEntryPage> {
    const q = parseArgs(LedgerPageQuerySchema, query, 'ledgerPage query');
    await this.row(accountId);
    const page = await this.storage.listLedgerPage(accountId, {
      limit: q.limit,
      ...(q.before === undefined ? {} : { before: q.before }),
    });
    return {
      entries: page.rows.map(({ amount, ...rest }) => ({ ...rest, credits: microsToCredits(amount) })),
      next_before: page.next_before,
    };
  }

  /**
   * What the account spent, by model and by tool, most credits first: summed by the storage in one query over the
   * account's ledger, never read out row by row.
   *
   * @example
   * const { by_model } = await runtime.accounts.spend(accountId);
   * console.log(by_model[0]?.item, by_model[0]?.credits);
   */
  async spend(accountId: string): Promise<{ by_model: SpendSummary[]; by_tool: SpendSummary[] }> {
    await this.row(accountId);
    const rows = await this.storage.sumLedgerSpend(accountId);
    const of = (kind: LedgerSpendRow['kind']) =>
      rows
        .filter((r) => r.kind === kind)
        .map((r) => ({
          item: r.item,
          credits: microsToCredits(0 - r.amount), // not -r.amount: nothing spent must read 0, not -0
          tokens_in: r.tokens_in,
          tokens_out: r.tokens_out,
          count: r.count,
        }))
        .sort((x, y) => y.credits - x.credits || (x.item < y.item ? -1 : 1));
    return { by_model: of('model'), by_tool: of('tool') };
  }

  private async row(accountId: string): Promise<AccountRow> {
    const row = await this.storage.getAccount(parseArgs(Id, accountId, 'accountId'));
    if (!row) throw notFound('Account', accountId);
    return row;
  }
}

function toInfo(row: AccountRow): AccountInfo {
  return {
    account_id: row.id,
    name: row.name,
    subscription_active: row.subscription_active,
    balance: microsToCredits(row.balance),
    reserved: microsToCredits(row.reserved),
    available: microsToCredits(row.balance - row.reserved),
    created_at: row.created_at,
  };
}

function toKeyInfo(row: ApiKeyRow): ApiKeyInfo {
  return {
    key_id: row.id,
    name: row.name,
    masked: `${API_KEY_PREFIX}…${row.last4}`,
    last4: row.last4,
    created_at: row.created_at,
  };
}
