/**
 * @module storage/sqlite/agent-inserts
 * Agent rows inserted many to a statement. The goal search index (migration 8) is an FTS5 table kept by a trigger on
 * `agents`, and FTS5 writes the terms it holds in memory to disk as a new index segment at every statement savepoint:
 * one `INSERT` per child made one tiny segment per child, and merging those segments back cost most of a fan-out's
 * insert (about 70 µs of 90 µs per child). Up to {@link ROWS_PER_STATEMENT} rows per statement make one segment per
 * statement instead; the rows and the index are the same.
 */
import type Database from 'better-sqlite3';
import type { AgentRow } from '../adapter.js';
import { AGENT_COLUMNS, flag, type Bind, type Stmt } from './statements.js';

/**
 * Rows per `INSERT`: 26 parameters each, far under SQLite's limit of 32,766. Past 64 rows a statement the index writes
 * no faster, and each distinct shorter length is one more prepared statement (at most this many in all).
 */
export const ROWS_PER_STATEMENT = 64;

const ROW_PLACEHOLDERS = `(${AGENT_COLUMNS.split(',')
  .map(() => '?')
  .join(', ')})`;

/** The parameters of one agent row, in the order of {@link AGENT_COLUMNS}. */
export function agentParams(a: AgentRow): Bind[] {
  return [
    a.agent_id,
    a.account_id,
    a.parent_id,
    a.root_id,
    a.spawn_key,
    a.goal,
    a.model,
    a.status,
    a.progress,
    a.status_message,
    a.token_count,
    a.message_count,
    a.credits_spent,
    a.sub_agent_count,
    a.max_credits,
    a.tree_spent,
    a.tree_reserved,
    a.step_count,
    flag(a.started),
    a.active_ms,
    a.active_since,
    a.plan,
    a.spec,
    a.created_at,
    a.updated_at,
    a.trace_context ?? null,
  ];
}

/** Inserts agent rows in statements of up to {@link ROWS_PER_STATEMENT} rows, prepared once per row count. */
export class AgentInserts {
  private readonly byCount = new Map<number, Stmt>();

  constructor(private readonly db: Database.Database) {}

  /**
   * Inserts `agents` in order. An agent whose id exists (in the table or earlier in `agents`) fails its statement with
   * `agent <id> exists`; the caller's transaction decides what the rows before it become.
   */
  insert(agents: readonly AgentRow[]): void {
    for (let from = 0; from < agents.length; from += ROWS_PER_STATEMENT) {
      const part = agents.slice(from, from + ROWS_PER_STATEMENT);
      const params: Bind[] = [];
      for (const a of part) params.push(...agentParams(a));
      try {
        this.statement(part.length).run(...params);
      } catch (err) {
        if ((err as { code?: string }).code !== 'SQLITE_CONSTRAINT_UNIQUE') throw err;
        const taken = this.firstTaken(part);
        throw taken === undefined ? err : new Error(`agent ${taken} exists`);
      }
    }
  }

  /** The first id of a failed statement's rows that the table has (rows of earlier statements included), or repeats. */
  private firstTaken(part: readonly AgentRow[]): string | undefined {
    const exists = this.db.prepare<[string], number>('SELECT 1 FROM agents WHERE agent_id = ?').pluck();
    const seen = new Set<string>();
    for (const a of part) {
      if (seen.has(a.agent_id) || exists.get(a.agent_id) !== undefined) return a.agent_id;
      seen.add(a.agent_id);
    }
    return undefined;
  }

  private statement(rows: number): Stmt {
    let st = this.byCount.get(rows);
    if (!st) {
      const values = Array.from({ length: rows }, () => ROW_PLACEHOLDERS).join(', ');
      st = this.db.prepare<Bind[]>(`INSERT INTO agents (${AGENT_COLUMNS}) VALUES ${values}`);
      this.byCount.set(rows, st);
    }
    return st;
  }
}
