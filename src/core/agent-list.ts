/**
 * @module core/agent-list
 * `runtime.list()`: pages of agents, newest first, in reduced form. Without a search it pages by the storage's
 * position (the cursor carries the last row's); with `q` it pages by position among the goal index's (capped)
 * matches. Cursors are opaque to callers: base64url of a versioned position, so their format can change.
 */
import type { z } from 'zod';
import { AgentryError } from '../errors.js';
import type { StorageAdapter } from '../storage/adapter.js';
import { toListItem } from './records.js';
import type { AgentList, ListAgentsOptionsSchema } from './schemas.js';

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
