/**
 * @module storage/tree-totals
 * Folds the rows of a tree-totals query (one per tree and status, as SQL's `GROUP BY top, status` answers them) into
 * one {@link TreeTotalsRow} per tree: the SQLite and PostgreSQL adapters share the query's shape and this fold.
 */
import type { AgentStatus } from '../base/status.js';
import type { TreeTotalsRow } from './adapter.js';

/** One (tree, status) group of a tree-totals query. */
export interface TreeTotalsGroup {
  /** The agent the tree hangs from. */
  top: string;
  account_id: string;
  status: AgentStatus;
  n: number;
  tokens: number;
  spent: number;
  first: string;
  last: string;
}

/** One row per tree, its groups summed. */
export function foldTreeTotals(groups: readonly TreeTotalsGroup[]): TreeTotalsRow[] {
  const trees = new Map<string, TreeTotalsRow>();
  for (const g of groups) {
    let t = trees.get(g.top);
    if (!t) {
      t = {
        agent_id: g.top,
        account_id: g.account_id,
        agents: 0,
        credits_spent: 0,
        tokens: 0,
        by_status: {},
        first_created_at: g.first,
        last_updated_at: g.last,
      };
      trees.set(g.top, t);
    }
    t.agents += Number(g.n);
    t.tokens += Number(g.tokens);
    t.credits_spent += Number(g.spent);
    t.by_status[g.status] = (t.by_status[g.status] ?? 0) + Number(g.n);
    if (g.first < t.first_created_at) t.first_created_at = g.first;
    if (g.last > t.last_updated_at) t.last_updated_at = g.last;
  }
  return [...trees.values()];
}
