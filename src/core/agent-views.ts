/**
 * @module core/agent-views
 * Reads for dashboards, beside `runtime.get()`: an agent's tree summed and its children counted without its
 * transcript (cheap enough to ask every second while a tree runs), several trees summed in one query, and what one
 * agent did (turns, tool calls, ledger rows) for a timeline; an agent's artifacts and the pages its tools read; the
 * calls of a tree that wait for credits.
 */
import type { RuntimeWiring } from './runtime-wiring.js';
import { runSlotsOf } from './runtime-options.js';
import { z } from 'zod';
import { parseArgs } from '../base/validate.js';
import type { AgentRow, LedgerRow, StatusMarkRow, StorageAdapter, ToolCallRow, TurnRow } from '../storage/adapter.js';
import type { CreditGate } from './credit-gate.js';
import { AgentIdSchema } from './runtime-arguments.js';
import { notFound } from '../errors.js';
import { toArtifactInfo, toStatusForm, toSubAgentCounts, toTreeTotals } from './records.js';
import { microsToCredits, type Agent, type ArtifactInfo, type TreeTotals } from './schemas.js';

/** What an agent did, as storage keeps it, oldest first. */
export interface AgentActivity {
  agent: AgentRow;
  turns: TurnRow[];
  /** The agent's tool calls, by turn: at most the newest {@link MAX_ACTIVITY_TOOL_CALLS}. */
  toolCalls: ToolCallRow[];
  /** True when the agent has more tool calls than {@link MAX_ACTIVITY_TOOL_CALLS}: the oldest are left out. */
  toolCallsTruncated: boolean;
  /**
   * The agent's own ledger rows: each model call's tokens, cache tokens and credits; each tool charge. At most the
   * newest {@link MAX_ACTIVITY_LEDGER_ROWS}.
   */
  ledger: LedgerRow[];
  /** True when the agent has more ledger rows than {@link MAX_ACTIVITY_LEDGER_ROWS}: the oldest are left out. */
  ledgerTruncated: boolean;
  /** The status changes an operator or the credits caused (pause, resume, out of credits, credit waits): the newest 100. */
  statusMarks: StatusMarkRow[];
}

/**
 * The most ledger rows one activity read returns (the newest). A page asks for it up to once a second, so its cost must
 * not grow without bound with the agent's age: 5,000 rows is far more than the model turns a run may take (100 by
 * default) with their tool charges.
 */
export const MAX_ACTIVITY_LEDGER_ROWS = 5_000;
/**
 * The most tool calls one activity read returns (the newest), for the same reason: a run's 100 model turns asking for
 * a handful of calls each stay well inside it.
 */
export const MAX_ACTIVITY_TOOL_CALLS = 5_000;
/** What runs in one process now (`runtime.load()`): run slots held and waited for, and each lane's calls. */
export interface RuntimeLoad {
  runSlots: { running: number; waiting: number; size: number };
  lanes: Array<{ lane: string; active: number; waiting: number }>;
}

/** What is running in this process now: the run slots (held and waited for) and each lane's calls. */
export function loadOf(w: RuntimeWiring): RuntimeLoad {
  const { scheduler } = w;
  return {
    runSlots: { running: scheduler.runningCount, waiting: scheduler.queuedCount, size: runSlotsOf(w.options) },
    lanes: w.lanes.load(),
  };
}

/**
 * The calls of a tree that wait for credits in this process now: their reservations are queued in the credit gate
 * behind other calls' holds (core/credit-gate.ts). With several workers on one database each process only knows its
 * own waits, so this counts the calls that step here.
 */
export interface CreditWaits {
  /** Calls (model calls, priced tool calls) waiting for credits. */
  calls: number;
  /** When the longest-waiting of them asked for its credits (ISO 8601), or null when none waits. */
  oldest_since: string | null;
  /** The credits they ask for together. */
  needed_credits: number;
}

/** The waits of the whole tree the agent belongs to (its root's tree: the gate counts waits by tree root). */
export function creditWaitsOf(gate: CreditGate, row: AgentRow): CreditWaits {
  const w = gate.waitingOfTree(row.root_id);
  return {
    calls: w.calls,
    oldest_since: w.oldestSince === null ? null : new Date(w.oldestSince).toISOString(),
    needed_credits: microsToCredits(w.neededMicros),
  };
}

/** The agent in status form with its direct children counted by status and its whole tree summed. */
export async function treeStatusOf(storage: StorageAdapter, row: AgentRow): Promise<Agent> {
  if (row.sub_agent_count === 0) return toStatusForm(row);
  const [children, tree] = await Promise.all([
    storage.countChildrenByStatus(row.agent_id, ''),
    storage.treeTotals([row.agent_id]),
  ]);
  return toStatusForm(row, {
    subAgents: toSubAgentCounts(children),
    tree: tree[0] && toTreeTotals(tree[0]),
  });
}

/** Each tree summed by its root's id (at most 1,000 ids); with `accountId`, other accounts' agents are left out. */
export async function treeTotalsOf(
  storage: StorageAdapter,
  ids: readonly string[],
  accountId: string | undefined,
): Promise<Record<string, TreeTotals>> {
  const checked = parseArgs(z.array(AgentIdSchema).max(1000), [...ids], 'agent ids');
  const out: Record<string, TreeTotals> = {};
  for (const t of await storage.treeTotals(checked)) {
    if (accountId === undefined || t.account_id === accountId) out[t.agent_id] = toTreeTotals(t);
  }
  return out;
}

/**
 * The turns, tool calls, own ledger rows and status marks of one agent: four reads, however long the run. The ledger
 * is read by agent through its index, never the account's whole ledger: one tenant's million rows must not make every
 * view of one of its agents read them all; the tool calls in one read by agent, not one per turn.
 */
export async function activityOf(storage: StorageAdapter, row: AgentRow): Promise<AgentActivity> {
  const [turns, toolCalls, ledger, statusMarks] = await Promise.all([
    storage.listTurns(row.agent_id),
    storage.listAgentToolCalls(row.agent_id, MAX_ACTIVITY_TOOL_CALLS),
    storage.listAgentLedger(row.agent_id, MAX_ACTIVITY_LEDGER_ROWS),
    storage.listStatusMarks(row.agent_id),
  ]);
  return {
    agent: row,
    turns,
    toolCalls: toolCalls.rows,
    toolCallsTruncated: toolCalls.truncated,
    ledger: ledger.rows,
    ledgerTruncated: ledger.truncated,
    statusMarks,
  };
}

/** An artifact a tool kept with the agent, with its bytes; `not_found` for an unknown one. */
export async function artifactOf(
  storage: StorageAdapter,
  row: AgentRow,
  artifactId: string,
): Promise<{ artifact: ArtifactInfo; data: Uint8Array }> {
  const id = parseArgs(AgentIdSchema, artifactId, 'artifact id');
  const found = await storage.getArtifact(row.agent_id, id);
  if (!found) throw notFound('Artifact', id);
  return { artifact: toArtifactInfo(found.row), data: found.data };
}

/** The text of a page a tool read, by the SHA-256 a checked citation carries, or null. */
export async function pageSnapshotOf(storage: StorageAdapter, contentSha256: string): Promise<string | null> {
  const sha = parseArgs(z.string().regex(/^[0-9a-f]{64}$/, 'a SHA-256 in hex'), contentSha256, 'content_sha256');
  return storage.getPageText(sha);
}
