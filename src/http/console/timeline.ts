/**
 * @module http/console/timeline
 * One agent's run as one list in time order, for the console's timeline: its messages, each model call (model,
 * tokens by kind, credits, and the provider's latency as its ledger row keeps it), each tool call (name, outcome,
 * credits, input and result, how long it ran), the children it spawned, and the status changes an operator or the
 * credits caused, as storage keeps them (status marks).
 *
 * A model call's latency is measured around the provider's call and stored on its ledger row; a row written before
 * latencies were stored has none (null). A tool call runs from its assistant turn to its last update.
 */
import { microsToCredits } from '../../core/schemas.js';
import type { LedgerRow, MessageRow, StatusMarkRow, ToolCallRow, TurnRow } from '../../storage/adapter.js';

/** Tool calls that start children: their timeline row links to the tree. */
const SPAWN_TOOLS = new Set(['spawn_sub_agents']);

export type TimelineEntry =
  | { kind: 'message'; at: string; role: 'USER' | 'ASSISTANT'; text: string }
  | {
      kind: 'model_call';
      at: string;
      model: string;
      /** The provider's latency, ms; null for a call stored before latencies were. */
      latency_ms: number | null;
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
  messages: MessageRow[];
  turns: TurnRow[];
  toolCalls: ToolCallRow[];
  ledger: LedgerRow[];
  statuses: StatusMarkRow[];
}): TimelineEntry[] {
  const entries: Array<{ entry: TimelineEntry; order: number }> = [];
  const add = (entry: TimelineEntry, order: number) => entries.push({ entry, order });

  for (const m of input.messages) add({ kind: 'message', at: m.timestamp, role: m.role, text: m.text }, 1);

  const toolCharges = new Map<string, number[]>();
  for (const row of input.ledger) {
    if (row.kind === 'tool' && row.item !== null) {
      const list = toolCharges.get(row.item) ?? [];
      list.push(microsToCredits(-row.amount));
      toolCharges.set(row.item, list);
      continue;
    }
    if (row.kind !== 'model') continue;
    add(
      {
        kind: 'model_call',
        at: row.created_at,
        model: row.item ?? '',
        latency_ms: row.latency_ms ?? null,
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
