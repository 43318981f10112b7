/**
 * @module storage/search
 * What every adapter's `searchAgents` agrees on, and the bounds that keep a goal search from stalling the server.
 *
 * Matching: goal text matches ASCII letters in either case and every other character exactly. SQLite's `lower()`
 * folds only ASCII, so the other adapters fold only ASCII too, and all three give the same answer.
 *
 * Bounds: a goal may be 100 KB and an account may hold thousands, so a search never reads whole goals.
 * - Only the first {@link SEARCH_PREFIX_CHARS} characters of a goal are searched (and indexed: SQLite FTS5 trigram,
 *   PostgreSQL `pg_trgm`).
 * - A needle is at most {@link MAX_NEEDLE_CHARS} characters.
 * - At most {@link MAX_SEARCH_MATCHES} matches are counted; past that `total` is a lower bound and `truncated` is set.
 * - A search does at most {@link SEARCH_BUDGET_MS} of work (SQLite and memory: checked between slices of at most
 *   {@link SEARCH_SLICE_ROWS} rows, yielding to other requests between slices; PostgreSQL: a statement timeout).
 *   A search cut short answers what it found, with `truncated`.
 */
import { AgentryError } from '../errors.js';

/** Characters of a goal that a search looks at (and that the indexes hold). */
export const SEARCH_PREFIX_CHARS = 4096;
/** The longest needle a search takes. */
export const MAX_NEEDLE_CHARS = 200;
/** Matches counted at most; a page is taken from these. */
export const MAX_SEARCH_MATCHES = 1000;
/** Work one search may do before it answers what it has. */
export const SEARCH_BUDGET_MS = 100;
/** Rows (SQLite: index positions) looked at between two checks of the budget, with a yield to other work between. */
export const SEARCH_SLICE_ROWS = 16;

/** The text with A-Z lowered and nothing else changed. */
export function asciiLower(text: string): string {
  return text.replace(/[A-Z]+/g, (letters) => letters.toLowerCase());
}

/** The needle as adapters compare it (ASCII-lowered), refused when longer than {@link MAX_NEEDLE_CHARS}. */
export function searchNeedle(goalContains: string): string {
  if (goalContains.length > MAX_NEEDLE_CHARS) {
    throw new AgentryError('invalid_request', `A goal search is at most ${MAX_NEEDLE_CHARS} characters`);
  }
  return asciiLower(goalContains);
}

/** Lets queued work (other tenants' requests) run between two slices of a search. */
export function yieldToOthers(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** A monotonic deadline for one search. */
export function searchDeadline(budgetMs: number = SEARCH_BUDGET_MS): () => boolean {
  const end = performance.now() + budgetMs;
  return () => performance.now() > end;
}

/** Searches of one account that may wait for its running one; one more is refused (429). */
export const MAX_WAITING_SEARCHES = 8;

/**
 * One goal search at a time per account: the others of that account wait their turn (at most
 * {@link MAX_WAITING_SEARCHES}). Four searches of one tenant then cost other tenants what one does, not four times it.
 */
export class SearchQueue {
  private readonly tails = new Map<string, { tail: Promise<void>; waiting: number }>();

  async run<T>(accountId: string, search: () => Promise<T>): Promise<T> {
    const entry = this.tails.get(accountId) ?? { tail: Promise.resolve(), waiting: 0 };
    if (entry.waiting > MAX_WAITING_SEARCHES) {
      throw new AgentryError('rate_limited', 'Too many goal searches at once for this account: try again shortly');
    }
    entry.waiting += 1;
    const previous = entry.tail;
    let done!: () => void;
    entry.tail = new Promise<void>((resolve) => (done = resolve));
    this.tails.set(accountId, entry);
    try {
      await previous;
      return await search();
    } finally {
      entry.waiting -= 1;
      done();
      if (entry.waiting === 0) this.tails.delete(accountId);
    }
  }
}
