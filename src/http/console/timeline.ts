/**
 * @module http/console/timeline
 * One agent's run as one list in time order, for the console's timeline: its messages, each model call (model,
 * tokens by kind, credits, and how long it took), each tool call (name, outcome, credits, input and result, how long
 * it ran), the children it spawned, and the status changes this process saw.
 *
 * Storage keeps no start time or latency for model calls: a model call's ledger row is written when it is settled,
 * and the request went out when the conversation's previous entry (the goal, the tool results, or the previous call)
 * was written. The time between the two is shown as the call's latency; it includes any wait for a model slot or for
 * credits. A tool call runs from its assistant turn to its last update.
 */
import { microsToCredits } from '../../core/schemas.js';
import type { LedgerRow, MessageRow, ToolCallRow, TurnRow, AgentRow } from '../../storage/adapter.js';
import type { StatusMark } from './status-history.js';

/** Tool calls that start children: their timeline row links to the tree. */
const SPAWN_TOOLS = new Set(['spawn_sub_agents']);

export type TimelineEntry =
  | { kind: 'message'; at: string; role: 'USER' | 'ASSISTANT'; text: string }
  | {
      kind: 'model_call';
      at: string;
      model: string;
      latency_ms: number;
      tokens_in: number;
      tokens_cache_read: number;
      tokens_cache_write: number;
      tokens_out: number;
      credits: number;
    }
  | {
      kind: 'tool_call';
      at: string;
      ended_at: string | null;
      duration_ms: number | null;
      tool_use_id: string;
      name: string;
      status: string;
      is_error: boolean;
      credits: number | null;
      input: string;
      result: string | null;
      /** For a spawning call: how many children it asked for. */
      spawned?: number;
    }
  | { kind: 'status'; at: string; status: string; previous: string; message: string };

const ms = (iso: string) => new Date(iso).getTime();

/** The entries of one agent, oldest first (ties keep the order in which the run produced them). */
export function buildTimeline(input: {
  agent: AgentRow;
  messages: MessageRow[];
  turns: TurnRow[];
  toolCalls: ToolCallRow[];
  ledger: LedgerRow[];
  statuses: StatusMark[];
}): TimelineEntry[] {
  const entries: Array<{ entry: TimelineEntry; order: number }> = [];
  const add = (entry: TimelineEntry, order: number) => entries.push({ entry, order });

  for (const m of input.messages) add({ kind: 'message', at: m.timestamp, role: m.role, text: m.text }, 1);

  // The moments a model request could have gone out: the agent's creation and every turn that is not the model's.
  const starts = [
    ms(input.agent.created_at),
    ...input.turns.filter((t) => t.role === 'user').map((t) => ms(t.created_at)),
  ].sort((a, b) => a - b);
  let previousEnd = -Infinity;
  const toolCharges = new Map<string, number[]>();
  for (const row of input.ledger) {
    if (row.kind === 'tool' && row.item !== null) {
      const list = toolCharges.get(row.item) ?? [];
      list.push(microsToCredits(-row.amount));
      toolCharges.set(row.item, list);
      continue;
    }
    if (row.kind !== 'model') continue;
    const end = ms(row.created_at);
    let start = previousEnd;
    for (const s of starts) if (s <= end && s > start) start = s;
    if (!Number.isFinite(start)) start = end;
    previousEnd = end;
    add(
      {
        kind: 'model_call',
        at: row.created_at,
        model: row.item ?? '',
        latency_ms: Math.max(0, end - start),
        tokens_in: row.tokens_in,
        tokens_cache_read: row.tokens_cache_read ?? 0,
        tokens_cache_write: row.tokens_cache_write ?? 0,
        tokens_out: row.tokens_out,
        credits: microsToCredits(-row.amount),
      },
      0,
    );
  }

  const turnAt = new Map(input.turns.map((t) => [t.idx, t.created_at]));
  for (const call of input.toolCalls) {
    const at = turnAt.get(call.turn_idx) ?? call.updated_at;
    const finished = call.status === 'finished';
    let spawned: number | undefined;
    if (SPAWN_TOOLS.has(call.name)) {
      try {
        const tasks = (JSON.parse(call.input) as { tasks?: unknown[] }).tasks;
        spawned = Array.isArray(tasks) ? tasks.length : undefined;
      } catch {
        spawned = undefined;
      }
    }
    add(
      {
        kind: 'tool_call',
        at,
        ended_at: finished ? call.updated_at : null,
        duration_ms: finished ? Math.max(0, ms(call.updated_at) - ms(at)) : null,
        tool_use_id: call.tool_use_id,
        name: call.name,
        status: call.status,
        is_error: call.is_error,
        // A tool's charges are its ledger rows in the order its calls settled.
        credits: finished ? (toolCharges.get(call.name)?.shift() ?? 0) : null,
        input: call.input,
        result: call.result,
        ...(spawned === undefined ? {} : { spawned }),
      },
      2,
    );
  }

  for (const s of input.statuses) {
    add({ kind: 'status', at: s.at, status: s.status, previous: s.previous, message: s.message }, 3);
  }

  return entries
    .map((e, i) => ({ ...e, i }))
    .sort((a, b) => ms(a.entry.at) - ms(b.entry.at) || a.order - b.order || a.i - b.i)
    .map((e) => e.entry);
}
