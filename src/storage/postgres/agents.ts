/**
 * @module storage/postgres/agents
 * Agents and their step log on PostgreSQL: agents, messages, turns, tool calls and tool state. A step commit writes
 * its log, its settlements (through `accounts.ts`) and its agent's counters in one transaction; deleting a tree also
 * drops the tree's holds (`accounts.ts`) and its artifacts, page reads, timers and monitors (`extras.ts`).
 *
 * `seq` columns are ordering keys only (creation order of agents, append order of messages, first-write order of tool
 * calls) and never leave the adapter, except as `listAgents`' opaque page position.
 */
import { RUNNABLE_STATUSES, type AgentStatus } from '../../base/status.js';
import type {
  TreeTotalsRow,
  AgentPage,
  AgentToolCalls,
  AgentQuery,
  AgentSearch,
  AgentSearchPage,
  AgentRow,
  FinishedRootsQuery,
  MessageRow,
  StatusChange,
  StatusMarkRow,
  StepCommit,
  StepCommitResult,
  StorageAdapter,
  ToolCallRow,
  TurnRow,
  SpawnPage,
} from '../adapter.js';
import { MAX_STATUS_MARKS } from '../adapter.js';
import { MAX_SEARCH_MATCHES, SEARCH_BUDGET_MS, SEARCH_PREFIX_CHARS, searchNeedle } from '../search.js';
import { foldTreeTotals, type TreeTotalsGroup } from '../tree-totals.js';
import { LeaseLostError } from '../workers.js';
import { checkStatusChange } from '../validate.js';
import { releaseAgentReservationsIn } from './accounts.js';
import { groupCommit } from './batcher.js';
import { LEASE_GONE, type Db, type Query } from './db.js';
import { deleteAgentExtrasIn } from './extras.js';

const AGENT_FIELDS = [
  'agent_id',
  'account_id',
  'parent_id',
  'root_id',
  'spawn_key',
  'goal',
  'model',
  'status',
  'progress',
  'status_message',
  'token_count',
  'message_count',
  'credits_spent',
  'sub_agent_count',
  'max_credits',
  'tree_spent',
  'tree_reserved',
  'step_count',
  'started',
  'active_ms',
  'active_since',
  'plan',
  'spec',
  'created_at',
  'updated_at',
  'trace_context',
] as const satisfies ReadonlyArray<keyof AgentRow>;
const AGENT_COLUMNS = AGENT_FIELDS.join(', ');
const ASCII_UPPER = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ';
const ASCII_LOWER = 'abcdefghijklmnopqrstuvwxyz';
/**
 * What a goal search matches against: the goal's searched prefix, ASCII-lowered. Written once per agent into
 * `agent_goals.search_text` (migration 13 indexes it there, apart from the agents' rows that every step rewrites).
 */
export const GOAL_SEARCH_EXPRESSION = `translate(left(goal, ${SEARCH_PREFIX_CHARS}), '${ASCII_UPPER}', '${ASCII_LOWER}')`;
/** PostgreSQL's code for a statement ended by statement_timeout. */
const QUERY_CANCELED = '57014';
const MESSAGE_COLUMNS = 'message_id, agent_id, role, text, timestamp';
const TURN_COLUMNS = 'agent_id, idx, role, content, created_at';
const TOOL_CALL_FIELDS = [
  'agent_id',
  'tool_use_id',
  'turn_idx',
  'name',
  'input',
  'status',
  'idempotent',
  'result',
  'is_error',
  'updated_at',
] as const satisfies ReadonlyArray<keyof ToolCallRow>;
const TOOL_CALL_COLUMNS = TOOL_CALL_FIELDS.join(', ');

/** The fields of a row (AgentRow and friends) as a plain object pg can take. */
type Rows<T> = T & Record<string, unknown>;

type AgentsStore = Pick<
  StorageAdapter,
  | 'insertAgents'
  | 'getAgent'
  | 'findAgentsBySpawnKey'
  | 'listAgents'
  | 'searchAgents'
  | 'listAgentIdsByStatus'
  | 'changeStatus'
  | 'listStatusMarks'
  | 'deleteAgentTree'
  | 'countChildrenByStatus'
  | 'listDescendantIds'
  | 'treeTotals'
  | 'countAgentsByStatus'
  | 'listFinishedRoots'
  | 'purgeAgentData'
  | 'listMessages'
  | 'listTurns'
  | 'listToolCalls'
  | 'listAgentToolCalls'
  | 'putToolCalls'
  | 'commitStep'
  | 'putToolState'
  | 'getToolState'
>;

const placeholders = (n: number, from = 1): string => Array.from({ length: n }, (_, i) => `$${from + i}`).join(', ');

/**
 * Inserts rows with one statement, whatever their number: `INSERT … SELECT FROM unnest($1::type[], …) WITH ORDINALITY
 * ORDER BY ordinality`, one array parameter per column, so rows keep their order (and their `seq` that order).
 */
async function insertMany<T extends object>(
  q: Query,
  table: string,
  columns: ReadonlyArray<readonly [name: keyof T & string, type: string]>,
  rows: readonly T[],
): Promise<void> {
  if (rows.length === 0) return;
  const names = columns.map(([name]) => name);
  const unnest = columns.map(([, type], i) => `$${i + 1}::${type}[]`).join(', ');
  await q(
    `INSERT INTO ${table} (${names.join(', ')})
     SELECT ${names.join(', ')} FROM unnest(${unnest}) WITH ORDINALITY AS r(${names.join(', ')}, ord) ORDER BY ord`,
    columns.map(([name]) => rows.map((row) => (row as Record<string, unknown>)[name] ?? null)),
  );
}

const MESSAGE_TYPES = [
  ['message_id', 'text'],
  ['agent_id', 'text'],
  ['role', 'text'],
  ['text', 'text'],
  ['timestamp', 'text'],
] as const satisfies ReadonlyArray<readonly [keyof MessageRow, string]>;

const TURN_TYPES = [
  ['agent_id', 'text'],
  ['idx', 'bigint'],
  ['role', 'text'],
  ['content', 'text'],
  ['created_at', 'text'],
] as const satisfies ReadonlyArray<readonly [keyof TurnRow, string]>;

/** The agents table's columns and their SQL types, for inserting many rows at once. */
const AGENT_TYPES = [
  ['agent_id', 'text'],
  ['account_id', 'text'],
  ['parent_id', 'text'],
  ['root_id', 'text'],
  ['spawn_key', 'text'],
  ['goal', 'text'],
  ['model', 'text'],
  ['status', 'text'],
  ['progress', 'double precision'],
  ['status_message', 'text'],
  ['token_count', 'bigint'],
  ['message_count', 'bigint'],
  ['credits_spent', 'bigint'],
  ['sub_agent_count', 'bigint'],
  ['max_credits', 'bigint'],
  ['tree_spent', 'bigint'],
  ['tree_reserved', 'bigint'],
  ['step_count', 'bigint'],
  ['started', 'boolean'],
  ['active_ms', 'bigint'],
  ['active_since', 'text'],
  ['plan', 'text'],
  ['spec', 'text'],
  ['created_at', 'text'],
  ['updated_at', 'text'],
  ['trace_context', 'text'],
] as const satisfies ReadonlyArray<readonly [(typeof AGENT_FIELDS)[number], string]>;

/** Upserts by (agent_id, tool_use_id); the row keeps its seq, so its first position. */
async function upsertToolCalls(q: Query, calls: readonly ToolCallRow[]): Promise<void> {
  const updates = TOOL_CALL_FIELDS.filter((f) => f !== 'agent_id' && f !== 'tool_use_id')
    .map((f) => `${f} = EXCLUDED.${f}`)
    .join(', ');
  for (const c of calls) {
    await q(
      `INSERT INTO tool_calls (${TOOL_CALL_COLUMNS}) VALUES (${placeholders(TOOL_CALL_FIELDS.length)})
       ON CONFLICT (agent_id, tool_use_id) DO UPDATE SET ${updates}`,
      TOOL_CALL_FIELDS.map((f) => c[f]),
    );
  }
}

/** The patch keys a status change may carry: anything else would be SQL we did not write. */
const STATUS_PATCH_KEYS = new Set(['progress', 'status_message', 'started', 'active_ms', 'active_since']);

function statusPatch(change: StatusChange): object {
  return Object.fromEntries(Object.entries(change.patch ?? {}).filter(([k]) => STATUS_PATCH_KEYS.has(k)));
}

/**
 * The descendants of an agent in memory's order: depth first, a parent's children pushed in creation order and taken
 * from the last pushed.
 */
async function descendantsIn(q: Query, agentId: string): Promise<string[]> {
  const rows = await q<{ agent_id: string; parent_id: string }>(
    `WITH RECURSIVE tree AS (
       SELECT agent_id, parent_id, seq FROM agents WHERE parent_id = $1
       UNION ALL
       SELECT a.agent_id, a.parent_id, a.seq FROM agents a JOIN tree t ON a.parent_id = t.agent_id
     ) SELECT agent_id, parent_id FROM tree ORDER BY seq`,
    [agentId],
  );
  const children = new Map<string, string[]>();
  for (const r of rows) {
    const list = children.get(r.parent_id) ?? [];
    list.push(r.agent_id);
    children.set(r.parent_id, list);
  }
  const out: string[] = [];
  const stack = [agentId];
  while (stack.length) {
    for (const c of children.get(stack.pop()!) ?? []) {
      out.push(c);
      stack.push(c);
    }
  }
  return out;
}

/** The SQLSTATE the step commit functions raise for a commit whose worker lost the agent's lease. */
const LEASE_LOST = 'AL001';

/**
 * A step commit of an agent this worker holds carries the lease (worker, epoch) that fences it and the time it extends
 * the lease by; other commits (one process, exclusive mode, an agent stepped by hand) carry none.
 */
function withLease(db: Db, commit: StepCommit): StepCommit & { lease?: { w: string; e: number; ms: number } } {
  const epoch = db.held.get(commit.agent_id);
  return epoch === undefined ? commit : { ...commit, lease: { w: db.workerId, e: epoch, ms: db.leaseMs } };
}

/** Commits a batch of steps with one call of `agentry_commit_steps` (a server function: migrations/), one outcome per step. */
async function commitSteps(db: Db, commits: StepCommit[]) {
  // One statement, so its own transaction: one round trip. `db.q` runs it again if it met a deadlock (raised for the
  // whole batch, which then had no effect).
  const fenced = commits.map((c) => withLease(db, c));
  const [row] = await db.q<{ out: Array<{ ok: boolean; value?: StepCommitResult; error?: string; code?: string }> }>(
    'SELECT agentry_commit_steps($1::jsonb) AS out',
    [JSON.stringify(fenced)],
  );
  return row!.out.map((o, i) => {
    if (!o.ok) {
      const error =
        o.code === LEASE_LOST ? new LeaseLostError(commits[i]!.agent_id) : new Error(o.error ?? 'step commit failed');
      return { ok: false as const, error };
    }
    // A commit that left its agent not runnable gave the lease back in the same statement (agentry_commit_steps): whatever
    // this worker still writes for that agent is fenced out, and the driver's release has nothing left to do.
    const lease = fenced[i]!.lease;
    const agent = o.value!.agent;
    if (lease && agent && !RUNNABLE_STATUSES.includes(agent.status) && db.held.get(agent.agent_id) === lease.e) {
      db.held.set(agent.agent_id, LEASE_GONE);
    }
    return { ok: true as const, value: o.value! };
  });
}

interface StatusChangeRequest {
  agentId: string;
  change: StatusChange;
  updatedAt: string;
}

/**
 * Applies compare-and-set status changes, one outcome each (the row after it, or null when it did not apply). Changes
 * of distinct agents are one statement; a batch naming an agent twice goes one change at a time, in order.
 */
async function changeStatuses(db: Db, changes: StatusChangeRequest[]) {
  const ok = (value: AgentRow | null) => ({ ok: true as const, value });
  if (new Set(changes.map((c) => c.agentId)).size !== changes.length) {
    const out = [];
    for (const c of changes) out.push(ok((await changeDistinctStatuses(db, [c]))[0] ?? null));
    return out;
  }
  return (await changeDistinctStatuses(db, changes)).map(ok);
}

/**
 * Status changes of distinct agents in one statement: the UPDATE, and for the marked changes that applied their
 * status marks with the agents' oldest marks past {@link MAX_STATUS_MARKS} deleted (the DELETE sees the marks as they
 * were before this statement, so it keeps one fewer old mark for the new one).
 */
async function changeDistinctStatuses(db: Db, changes: StatusChangeRequest[]): Promise<Array<AgentRow | null>> {
  const rows = await db.q<Rows<AgentRow>>(
    `WITH u AS (
       UPDATE agents a SET
         status = x.to_status,
         progress = CASE WHEN x.p ? 'progress' THEN (x.p->>'progress')::double precision ELSE a.progress END,
         status_message = CASE WHEN x.p ? 'status_message' THEN x.p->>'status_message' ELSE a.status_message END,
         started = CASE WHEN x.p ? 'started' THEN (x.p->>'started')::boolean ELSE a.started END,
         active_ms = CASE WHEN x.p ? 'active_ms' THEN (x.p->>'active_ms')::bigint ELSE a.active_ms END,
         active_since = CASE WHEN x.p ? 'active_since' THEN x.p->>'active_since' ELSE a.active_since END,
         updated_at = x.updated_at,
         -- Resumed (made runnable again): any worker may claim it, whichever process resumed it.
         wake_requested = a.wake_requested OR (x.to_status IN ('ACTIVE', 'STARTING_UP')
           AND a.status NOT IN ('ACTIVE', 'STARTING_UP'))
       FROM jsonb_to_recordset($1::jsonb)
         AS x(agent_id text, from_status jsonb, to_status text, p jsonb, updated_at text, mark boolean)
       WHERE a.agent_id = ANY($2::text[]) AND a.agent_id = x.agent_id
         AND a.status IN (SELECT jsonb_array_elements_text(x.from_status))
       RETURNING ${AGENT_FIELDS.map((f) => `a.${f}`).join(', ')}, x.mark AS marked, x.from_status->>0 AS previous
     ), marked AS (
       INSERT INTO status_marks (agent_id, at, status, previous, message)
         SELECT agent_id, updated_at, status, previous, status_message FROM u WHERE marked
     ), trimmed AS (
       DELETE FROM status_marks s USING (
         SELECT seq, row_number() OVER (PARTITION BY agent_id ORDER BY seq DESC) AS n FROM status_marks
         WHERE agent_id IN (SELECT agent_id FROM u WHERE marked)
       ) old WHERE s.seq = old.seq AND old.n >= $3
     )
     SELECT ${AGENT_COLUMNS} FROM u`,
    [
      JSON.stringify(
        changes.map((c) => ({
          agent_id: c.agentId,
          from_status: c.change.from,
          to_status: c.change.to,
          p: statusPatch(c.change),
          updated_at: c.updatedAt,
          mark: c.change.mark === true && c.change.from.length > 0,
        })),
      ),
      // The ids again, as an array: the planner looks them up instead of scanning the table to join the JSON.
      changes.map((c) => c.agentId),
      MAX_STATUS_MARKS,
    ],
  );
  const byId = new Map(rows.map((r) => [r.agent_id, r as AgentRow]));
  return changes.map((c) => byId.get(c.agentId) ?? null);
}

/** Reads of one kind per query at most, and such queries on their way at once (they need no order among them). */
const MAX_READS_PER_BATCH = 256;
const READS_IN_FLIGHT = 4;

/** Step commits per batch at most (one JSON document each way). */
const MAX_COMMITS_PER_BATCH = 256;

export function agentsStore(db: Db): AgentsStore {
  const commitStep = groupCommit((commits: StepCommit[]) => commitSteps(db, commits), MAX_COMMITS_PER_BATCH);
  // Reads asked for in the same turn of the event loop (a thousand children starting) are one query each, too.
  const getAgent = groupCommit(
    async (ids: string[]) => {
      const rows = await db.q<Rows<AgentRow>>(`SELECT ${AGENT_COLUMNS} FROM agents WHERE agent_id = ANY($1::text[])`, [
        [...new Set(ids)],
      ]);
      const byId = new Map(rows.map((r) => [r.agent_id, r as AgentRow]));
      return ids.map((id) => ({ ok: true as const, value: byId.get(id) ?? null }));
    },
    MAX_READS_PER_BATCH,
    READS_IN_FLIGHT,
  );
  const listTurns = groupCommit(
    async (ids: string[]) => {
      const rows = await db.q<Rows<TurnRow>>(
        `SELECT ${TURN_COLUMNS} FROM turns WHERE agent_id = ANY($1::text[]) ORDER BY agent_id, idx`,
        [[...new Set(ids)]],
      );
      const byId = new Map<string, TurnRow[]>();
      for (const r of rows) byId.set(r.agent_id, [...(byId.get(r.agent_id) ?? []), r as TurnRow]);
      return ids.map((id) => ({ ok: true as const, value: (byId.get(id) ?? []).map((t) => ({ ...t })) }));
    },
    MAX_READS_PER_BATCH,
    READS_IN_FLIGHT,
  );
  const changeStatus = groupCommit(
    (changes: StatusChangeRequest[]) => changeStatuses(db, changes),
    MAX_COMMITS_PER_BATCH,
  );
  return {
    async insertAgents(agents: AgentRow[], messages: MessageRow[], turns: TurnRow[]): Promise<void> {
      await db.tx(async (q) => {
        const ids = agents.map((a) => a.agent_id);
        const [dup] = await q<{ agent_id: string }>('SELECT agent_id FROM agents WHERE agent_id = ANY($1::text[])', [
          ids,
        ]);
        if (dup) throw new Error(`agent ${dup.agent_id} exists`);
        if (new Set(ids).size !== ids.length) throw new Error('agent ids repeat in one insert');
        // One statement per table, whatever the number of agents (a fan-out of 1,000 children is one insert).
        await insertMany(
          q,
          'agents',
          AGENT_TYPES,
          agents.map((a) => ({ ...a, tree_reserved: 0 })),
        );
        // The goals' searched text, once: the agents' own rows are rewritten at every step, this one never.
        await q(
          `INSERT INTO agent_goals (agent_id, search_text)
           SELECT agent_id, ${GOAL_SEARCH_EXPRESSION} FROM unnest($1::text[], $2::text[]) AS g(agent_id, goal)`,
          [ids, agents.map((a) => a.goal)],
        );
        const parents = agents.flatMap((a) => (a.parent_id ? [a.parent_id] : []));
        if (parents.length > 0) {
          // After the insert: a parent may be in the same batch.
          await q(
            `UPDATE agents a SET sub_agent_count = a.sub_agent_count + p.n
             FROM (SELECT parent_id, count(*)::bigint AS n FROM unnest($1::text[]) AS u(parent_id) GROUP BY parent_id) p
             WHERE a.agent_id = p.parent_id`,
            [parents],
          );
        }
        const known = new Set(ids);
        await insertMany(
          q,
          'messages',
          MESSAGE_TYPES,
          messages.filter((m) => known.has(m.agent_id)),
        );
        await insertMany(
          q,
          'turns',
          TURN_TYPES,
          turns.filter((t) => known.has(t.agent_id)),
        );
      });
    },

    async getAgent(id: string): Promise<AgentRow | null> {
      return getAgent(id);
    },

    async findAgentsBySpawnKey(parentId: string, spawnKeyPrefix: string, page?: SpawnPage): Promise<AgentRow[]> {
      const paging = page ? 'LIMIT $3 OFFSET $4' : '';
      return db.q<Rows<AgentRow>>(
        `SELECT ${AGENT_COLUMNS} FROM agents
         WHERE parent_id = $1 AND spawn_key IS NOT NULL AND starts_with(spawn_key, $2)
         ORDER BY seq ${paging}`,
        page ? [parentId, spawnKeyPrefix, page.limit, page.offset] : [parentId, spawnKeyPrefix],
      );
    },

    async listAgents(query: AgentQuery): Promise<AgentPage> {
      const where: string[] = [];
      const params: unknown[] = [];
      const add = (sql: (n: string) => string, value: unknown): void => {
        params.push(value);
        where.push(sql(`$${params.length}`));
      };
      if (query.after !== undefined) add((n) => `seq < ${n}`, Number(query.after));
      if (query.account_id !== undefined) add((n) => `account_id = ${n}`, query.account_id);
      if (query.status !== undefined) add((n) => `status = ${n}`, query.status);
      if (query.parent_id === null) where.push('parent_id IS NULL');
      else if (query.parent_id !== undefined) add((n) => `parent_id = ${n}`, query.parent_id);
      params.push(query.limit);
      const rows = await db.q<Rows<AgentRow> & { seq: number }>(
        `SELECT seq, ${AGENT_COLUMNS} FROM agents ${where.length ? `WHERE ${where.join(' AND ')}` : ''}
         ORDER BY seq DESC LIMIT $${params.length}`,
        params,
      );
      const last = rows.at(-1);
      return {
        rows: rows.map(({ seq: _seq, ...row }) => row as AgentRow),
        last: last ? String(last.seq) : null,
      };
    },

    async searchAgents(query: AgentSearch): Promise<AgentSearchPage> {
      const params: unknown[] = [query.account_id];
      const where = ['account_id = $1'];
      const add = (sql: (n: string) => string, value: unknown): void => {
        params.push(value);
        where.push(sql(`$${params.length}`));
      };
      if (query.parent_id === null) where.push('parent_id IS NULL');
      else if (query.parent_id !== undefined) add((n) => `parent_id = ${n}`, query.parent_id);
      if (query.status !== undefined) add((n) => `status = ${n}`, query.status);
      const order = query.order === 'newest' ? 'DESC' : 'ASC';
      if (query.goal_contains !== undefined) {
        // The searched text (ASCII folded as SQLite's lower() does, storage/search.ts) is agent_goals', whose pg_trgm
        // index (migration 13) finds the matching agents; LIKE's own wildcards in the needle are escaped.
        const needle = searchNeedle(query.goal_contains).replace(/[\\%_]/g, '\\$&');
        add((n) => `agent_id IN (SELECT agent_id FROM agent_goals WHERE search_text LIKE ${n})`, `%${needle}%`);
        return db.tx(async (q) => {
          // The work budget: the server ends a search that runs longer (off this process's thread).
          const budget = Math.max(1, Math.round(query.budget_ms ?? SEARCH_BUDGET_MS));
          await q(`SET LOCAL statement_timeout = ${budget}`);
          let found: number[];
          let truncated = false;
          try {
            found = (
              await q<{ seq: number }>(
                `SELECT seq FROM agents WHERE ${where.join(' AND ')} ORDER BY seq ${order} LIMIT ${MAX_SEARCH_MATCHES + 1}`,
                params,
              )
            ).map((r) => r.seq);
          } catch (error) {
            if ((error as { code?: string }).code !== QUERY_CANCELED) throw error;
            return { rows: [], total: 0, truncated: true as const };
          }
          if (found.length > MAX_SEARCH_MATCHES) {
            found = found.slice(0, MAX_SEARCH_MATCHES);
            truncated = true;
          }
          const page = found.slice(query.offset, query.offset + query.limit);
          const rows = await q<Rows<AgentRow> & { seq: number }>(
            `SELECT seq, ${AGENT_COLUMNS} FROM agents WHERE seq = ANY($1::bigint[]) ORDER BY seq ${order}`,
            [page],
          );
          return {
            rows: rows.map(({ seq: _seq, ...row }) => row as AgentRow),
            total: found.length,
            ...(truncated ? { truncated: true as const } : {}),
          };
        });
      }
      const filter = `WHERE ${where.join(' AND ')}`;
      const [counted] = await db.q<{ n: number }>(`SELECT count(*)::bigint AS n FROM agents ${filter}`, params);
      const rows = await db.q<Rows<AgentRow>>(
        `SELECT ${AGENT_COLUMNS} FROM agents ${filter}
         ORDER BY seq ${order} LIMIT $${params.length + 1} OFFSET $${params.length + 2}`,
        [...params, query.limit, query.offset],
      );
      return { rows, total: Number(counted?.n ?? 0) };
    },

    async listAgentIdsByStatus(statuses: readonly AgentStatus[]): Promise<string[]> {
      const rows = await db.q<{ agent_id: string }>(
        'SELECT agent_id FROM agents WHERE status = ANY($1::text[]) ORDER BY seq',
        [[...statuses]],
      );
      return rows.map((r) => r.agent_id);
    },

    async changeStatus(agentId: string, change: StatusChange, updatedAt: string): Promise<AgentRow | null> {
      checkStatusChange(change);
      // Group commit: the status changes asked for while a batch is on its way go in one conditional UPDATE.
      return changeStatus({ agentId, change, updatedAt });
    },

    async listStatusMarks(agentId: string): Promise<StatusMarkRow[]> {
      return db.q<Rows<StatusMarkRow>>(
        'SELECT agent_id, at, status, previous, message FROM status_marks WHERE agent_id = $1 ORDER BY seq',
        [agentId],
      );
    },

    async deleteAgentTree(agentId: string): Promise<string[]> {
      return db.tx(async (q) => {
        const [root] = await q<{ parent_id: string | null }>(
          'SELECT parent_id FROM agents WHERE agent_id = $1 FOR UPDATE',
          [agentId],
        );
        if (!root) return [];
        const ids = [agentId, ...(await descendantsIn(q, agentId))];
        await releaseAgentReservationsIn(q, ids);
        await deleteAgentExtrasIn(q, ids);
        if (root.parent_id) {
          await q('UPDATE agents SET sub_agent_count = sub_agent_count - 1 WHERE agent_id = $1', [root.parent_id]);
        }
        for (const table of [
          'messages',
          'turns',
          'tool_calls',
          'tool_state',
          'status_marks',
          'agent_goals',
          'agents',
        ]) {
          await q(`DELETE FROM ${table} WHERE agent_id = ANY($1::text[])`, [ids]);
        }
        return ids;
      });
    },

    async countChildrenByStatus(
      parentId: string,
      spawnKeyPrefix: string,
    ): Promise<Partial<Record<AgentStatus, number>>> {
      const rows = await db.q<{ status: AgentStatus; n: number }>(
        `SELECT status, count(*)::bigint AS n FROM agents
         WHERE parent_id = $1 AND spawn_key IS NOT NULL AND starts_with(spawn_key, $2) GROUP BY status`,
        [parentId, spawnKeyPrefix],
      );
      return Object.fromEntries(rows.map((r) => [r.status, r.n]));
    },

    async listDescendantIds(agentId: string): Promise<string[]> {
      return descendantsIn(db.q, agentId);
    },

    async treeTotals(agentIds: readonly string[]): Promise<TreeTotalsRow[]> {
      if (agentIds.length === 0) return [];
      // One recursive walk down agents_parent from every seed at once, carrying the summed columns.
      const groups = await db.q<TreeTotalsGroup>(
        `WITH RECURSIVE tree AS (
           SELECT agent_id AS top, agent_id AS id, status, token_count, credits_spent, created_at, updated_at
             FROM agents WHERE agent_id = ANY($1::text[])
           UNION ALL
           SELECT t.top, a.agent_id, a.status, a.token_count, a.credits_spent, a.created_at, a.updated_at
             FROM agents a JOIN tree t ON a.parent_id = t.id
         ) SELECT t.top, min(a.account_id) AS account_id, t.status, count(*)::bigint AS n,
                  sum(t.token_count)::bigint AS tokens, sum(t.credits_spent)::bigint AS spent,
                  min(t.created_at) AS first, max(t.updated_at) AS last
           FROM tree t JOIN agents a ON a.agent_id = t.top GROUP BY t.top, t.status`,
        [[...new Set(agentIds)]],
      );
      return foldTreeTotals(groups);
    },

    async countAgentsByStatus(): Promise<Partial<Record<AgentStatus, number>>> {
      const rows = await db.q<{ status: AgentStatus; n: number }>(
        'SELECT status, count(*)::bigint AS n FROM agents GROUP BY status',
      );
      return Object.fromEntries(rows.map((r) => [r.status, r.n]));
    },

    async listFinishedRoots(query: FinishedRootsQuery): Promise<string[]> {
      const transcript = query.withTranscript ? 'AND EXISTS (SELECT 1 FROM turns t WHERE t.agent_id = a.agent_id)' : '';
      const rows = await db.q<{ agent_id: string }>(
        `SELECT agent_id FROM agents a WHERE parent_id IS NULL AND status = ANY($1::text[]) AND updated_at < $2
         ${transcript} ORDER BY updated_at, seq LIMIT $3`,
        [[...query.statuses], query.updatedBefore, query.limit],
      );
      return rows.map((r) => r.agent_id);
    },

    async purgeAgentData(agentIds: readonly string[]): Promise<number> {
      if (agentIds.length === 0) return 0;
      const ids = [...agentIds];
      return db.tx(async (q) => {
        let removed = 0;
        for (const table of ['messages', 'turns', 'tool_calls', 'tool_state', 'artifacts', 'page_reads']) {
          const rows = await q<{ n: number }>(
            `WITH gone AS (DELETE FROM ${table} WHERE agent_id = ANY($1::text[]) RETURNING 1)
             SELECT count(*)::bigint AS n FROM gone`,
            [ids],
          );
          removed += rows[0]?.n ?? 0;
        }
        return removed;
      });
    },

    async listMessages(agentId: string): Promise<MessageRow[]> {
      return db.q<Rows<MessageRow>>(`SELECT ${MESSAGE_COLUMNS} FROM messages WHERE agent_id = $1 ORDER BY seq`, [
        agentId,
      ]);
    },

    async listTurns(agentId: string): Promise<TurnRow[]> {
      return listTurns(agentId);
    },

    async listToolCalls(agentId: string, turnIdx: number): Promise<ToolCallRow[]> {
      return db.q<Rows<ToolCallRow>>(
        `SELECT ${TOOL_CALL_COLUMNS} FROM tool_calls WHERE agent_id = $1 AND turn_idx = $2 ORDER BY seq`,
        [agentId, turnIdx],
      );
    },

    // Newest first through tool_calls_turn, one row past the limit (which says whether older calls were left out).
    async listAgentToolCalls(agentId: string, limit: number): Promise<AgentToolCalls> {
      const newest = await db.q<Rows<ToolCallRow>>(
        `SELECT ${TOOL_CALL_COLUMNS} FROM tool_calls WHERE agent_id = $1 ORDER BY turn_idx DESC, seq DESC LIMIT $2`,
        [agentId, limit + 1],
      );
      return { rows: newest.slice(0, limit).reverse(), truncated: newest.length > limit };
    },

    async putToolCalls(calls: ToolCallRow[], onlyWhile?: AgentStatus): Promise<boolean> {
      return db.tx(async (q) => {
        const agentIds = [...new Set(calls.map((c) => c.agent_id))];
        // Locked so that no status change slips between the check and the write.
        const agents = await q<{
          agent_id: string;
          status: AgentStatus;
          lease_owner: string | null;
          lease_epoch: number;
        }>(
          `SELECT agent_id, status, lease_owner, lease_epoch FROM agents WHERE agent_id = ANY($1::text[])
           ORDER BY agent_id FOR UPDATE`,
          [agentIds],
        );
        const status = new Map(agents.map((a) => [a.agent_id, a.status]));
        if (onlyWhile !== undefined && calls.some((c) => status.get(c.agent_id) !== onlyWhile)) return false;
        // A call that must never run twice is marked started only under this worker's lease: one that lost
        // the agent to another worker must not start it.
        const fencedOut = agents.some((a) => {
          const epoch = db.held.get(a.agent_id);
          // Not held (any more): a worker that lost its leases (taken for dead while frozen) has forgotten them, and
          // must not mark a call started for an agent another worker holds now.
          if (epoch === undefined)
            return db.mode === 'workers' && a.lease_owner !== null && a.lease_owner !== db.workerId;
          return a.lease_owner !== db.workerId || a.lease_epoch !== epoch;
        });
        if (onlyWhile !== undefined && fencedOut) return false;
        await upsertToolCalls(
          q,
          calls.filter((c) => status.has(c.agent_id)),
        );
        return true;
      });
    },

    async commitStep(commit: StepCommit): Promise<StepCommitResult> {
      // Group commit: the steps committed while a batch is on its way go together in the next one (batcher.ts).
      return commitStep(commit);
    },

    async putToolState(agentId: string, toolUseId: string, state: string): Promise<void> {
      await db.q(
        `INSERT INTO tool_state (agent_id, tool_use_id, state)
         SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM agents WHERE agent_id = $1)
         ON CONFLICT (agent_id, tool_use_id) DO UPDATE SET state = EXCLUDED.state`,
        [agentId, toolUseId, state],
      );
    },

    async getToolState(agentId: string, toolUseId: string): Promise<string | null> {
      const [row] = await db.q<{ state: string }>(
        'SELECT state FROM tool_state WHERE agent_id = $1 AND tool_use_id = $2',
        [agentId, toolUseId],
      );
      return row?.state ?? null;
    },
  };
}
