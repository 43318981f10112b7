/**
 * @module core/agent-list
 * `runtime.list()`: pages of agents, newest first, in reduced form. Without a search it pages by the storage's
 * position (the cursor carries the last row's); with `q` it pages by position among the goal index's (capped)
 * matches. Cursors are opaque to callers: base64url of a versioned position, so their format can change.
 * `runtime.agentPage()`: a page of one account's agents by position with the total, for a table with page numbers
 * (the console's lists).
 */
import { z } from 'zod';
import { AgentryError } from '../errors.js';
import type { AgentRow, StorageAdapter } from '../storage/adapter.js';
import { MAX_NEEDLE_CHARS } from '../storage/search.js';
import { toListItem, toStatusForm } from './records.js';
import { AgentStatusSchema, type Agent, type AgentList, type ListAgentsOptionsSchema } from './schemas.js';

/** The options of `list()`, checked. */
export type ListAgentsQuery = z.output<typeof ListAgentsOptionsSchema>;

/**
 * A page of agents. Filters: `status`, `parentId` (an id for its children, `null` for roots only), `accountId`, and
 * `q` (goal text; the search index is per account, so without `accountId` the default account's agents are searched).
 */
export async function listAgents(
  storage: StorageAdapter,
  o: ListAgentsQuery,
  defaultAccountId: string,
): Promise<AgentList> {
  if (o.q !== undefined) return searchAgents(storage, o, defaultAccountId);
  const filter = {
    ...(o.accountId !== undefined ? { account_id: o.accountId } : {}),
    ...(o.status !== undefined ? { status: o.status } : {}),
    ...(o.parentId !== undefined ? { parent_id: o.parentId } : {}),
  };
  const page = await storage.listAgents({
    ...filter,
    limit: o.limit,
    ...(o.cursor !== undefined ? { after: decodeCursor(o.cursor) } : {}),
  });
  const rows = page.rows;
  // A full page may or may not be the last: look one row further.
  const hasMore =
    rows.length === o.limit &&
    page.last !== null &&
    (await storage.listAgents({ ...filter, limit: 1, after: page.last })).rows.length > 0;
  const next = hasMore && page.last !== null ? encodeCursor(page.last) : null;
  return { data: rows.map(toListItem), has_more: hasMore, next_cursor: next };
}

/** `list` with a goal search: pages by position among the (capped) matches; the cursor carries the position. */
async function searchAgents(storage: StorageAdapter, o: ListAgentsQuery, defaultAccountId: string): Promise<AgentList> {
  let offset = 0;
  if (o.cursor !== undefined) {
    const position = decodeCursor(o.cursor);
    if (!/^q\d{1,7}$/.test(position)) {
      throw new AgentryError('invalid_request', 'Invalid cursor: pass back the next_cursor of the same search');
    }
    offset = Number(position.slice(1));
  }
  const page = await storage.searchAgents({
    // The search index is per account: without one, the default account's agents are searched.
    account_id: o.accountId ?? defaultAccountId,
    ...(o.parentId !== undefined ? { parent_id: o.parentId } : {}),
    ...(o.status !== undefined ? { status: o.status } : {}),
    goal_contains: o.q!,
    order: 'newest',
    offset,
    limit: o.limit,
  });
  const end = offset + page.rows.length;
  const hasMore = page.rows.length > 0 && end < page.total;
  return {
    data: page.rows.map(toListItem),
    has_more: hasMore,
    next_cursor: hasMore ? encodeCursor(`q${end}`) : null,
    ...(page.truncated ? { truncated: true as const } : {}),
  };
}

function encodeCursor(position: string): string {
  return Buffer.from(`v1:${position}`).toString('base64url');
}

function decodeCursor(cursor: string): string {
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  if (!text.startsWith('v1:') || text.length < 4) {
    throw new AgentryError('invalid_request', 'Invalid cursor: pass back the next_cursor of a previous page');
  }
  return text.slice(3);
}

/** The query of `runtime.agentPage()`. */
export const AgentPageQuerySchema = z
  .object({
    accountId: z.string().min(1).max(200),
    /** A parent's id for its children (in spawn order with `oldest`), `null` for root agents only. */
    parentId: z.string().min(1).max(200).nullable(),
    status: AgentStatusSchema.optional(),
    /** Goal text, through the storage's goal index (bounded: see `storage/search.ts`). */
    q: z.string().min(1).max(MAX_NEEDLE_CHARS).optional(),
    order: z.enum(['newest', 'oldest']),
    offset: z.number().int().min(0).max(10_000_000).default(0),
    limit: z.number().int().min(1).max(200).default(50),
  })
  .strict();

/** A page of agents by position: each in status form with its goal cut as lists cut it. */
export interface AgentPositionPage {
  data: Agent[];
  /** How many agents match (with `truncated`, how many a bounded goal search found). */
  total: number;
  /** Set when a goal search stopped at its bounds: `total` is a lower bound. */
  truncated?: true;
}

/**
 * A row as lists show it: the status form, no extras, the goal cut to its first `LIST_GOAL_CHARS` (200) characters (a
 * page of 100 KB goals would be megabytes of JSON for one table; the agent's own page shows the whole goal).
 */
const listed = (row: AgentRow): Agent => ({ ...toStatusForm(row), goal: toListItem(row).goal });

/** A page of one account's agents by position, filtered by parent, status and goal text, with the total. */
export async function agentPage(
  storage: StorageAdapter,
  q: z.output<typeof AgentPageQuerySchema>,
): Promise<AgentPositionPage> {
  const page = await storage.searchAgents({
    account_id: q.accountId,
    parent_id: q.parentId,
    order: q.order,
    offset: q.offset,
    limit: q.limit,
    ...(q.status === undefined ? {} : { status: q.status }),
    ...(q.q === undefined ? {} : { goal_contains: q.q }),
  });
  return { data: page.rows.map(listed), total: page.total, ...(page.truncated ? { truncated: true as const } : {}) };
}
