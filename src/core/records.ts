/**
 * @module core/records
 * Storage rows to the public record forms. Wire shape = in-process shape: `runtime.get(id)` returns
 * what `GET /api/agents/{id}` sends.
 */
import type {
  TreeTotalsRow,
  AgentRow,
  ArtifactRow,
  MessageRow,
  OutboxRow,
  StorageAdapter,
} from '../storage/adapter.js';
import { toMonitorInfo } from '../tools/monitors.js';
import type { AgentStatus } from '../base/status.js';
import {
  microsToCredits,
  type Agent,
  type AgentCreated,
  type AgentSummary,
  type AgentListItem,
  LIST_GOAL_CHARS,
  type AgentWithMessages,
  type Message,
  type SubAgentCounts,
  type TreeTotals,
  type ArtifactInfo,
  type MonitorInfo,
  type OutboxCounts,
  type OutboxEntry,
} from './schemas.js';

export function toCreatedForm(row: AgentRow): AgentCreated {
  return {
    agent_id: row.agent_id,
    goal: row.goal,
    model: row.model,
    status: row.status,
    progress: row.progress,
    created_at: row.created_at,
  };
}

/** What only `get` answers carry: each costs a query, which events and lists do without. */
export interface StatusExtras {
  /** The agent's children counted by status (agents that spawned). */
  subAgents?: SubAgentCounts | undefined;
  /** The agent and all its descendants summed (agents that spawned). */
  tree?: TreeTotals | undefined;
  /** What its tools kept (agents that have any). */
  artifacts?: ArtifactInfo[] | undefined;
  /** The pages it watches (agents that have monitors). */
  monitors?: MonitorInfo[] | undefined;
  /** Its message_person attempts by status (agents that tried any). */
  outbox?: OutboxCounts | undefined;
}

/** The status form, with the extras of a `get` answer when given. */
export function toStatusForm(row: AgentRow, extras?: StatusExtras): Agent {
  // Spelled out rather than spread from toCreatedForm: this is built for every poll, and a literal is several times
  // cheaper than a spread.
  const agent: Agent = {
    agent_id: row.agent_id,
    goal: row.goal,
    model: row.model,
    status: row.status,
    progress: row.progress,
    created_at: row.created_at,
    status_message: row.status_message,
    token_count: row.token_count,
    message_count: row.message_count,
    updated_at: row.updated_at,
    parent_id: row.parent_id,
    credits_spent: microsToCredits(row.credits_spent),
    sub_agent_count: row.sub_agent_count,
    spawn_index: spawnIndexOf(row.spawn_key),
  };
  if (extras?.subAgents) agent.sub_agents = extras.subAgents;
  if (extras?.tree) agent.tree = extras.tree;
  if (extras?.artifacts?.length) agent.artifacts = extras.artifacts;
  if (extras?.monitors?.length) agent.monitors = extras.monitors;
  if (extras?.outbox) agent.outbox = extras.outbox;
  return agent;
}

/** A spawn key is `<tool call id>#<index>`. */
function spawnIndexOf(spawnKey: string | null): number | null {
  if (spawnKey === null) return null;
  const index = Number(spawnKey.slice(spawnKey.lastIndexOf('#') + 1));
  return Number.isInteger(index) && index >= 0 ? index : null;
}

/** A tree's sums as the status form shows them: credits, not micro-credits. */
export function toTreeTotals(row: TreeTotalsRow): TreeTotals {
  return {
    agents: row.agents,
    credits_spent: microsToCredits(row.credits_spent),
    tokens: row.tokens,
    by_status: row.by_status,
    first_created_at: row.first_created_at,
    last_updated_at: row.last_updated_at,
  };
}

/** Children counts as the status form shows them. */
export function toSubAgentCounts(byStatus: Partial<Record<AgentStatus, number>>): SubAgentCounts {
  let total = 0;
  for (const n of Object.values(byStatus)) total += n ?? 0;
  return { total, by_status: byStatus };
}

export function toReducedForm(row: AgentRow): AgentSummary {
  return {
    agent_id: row.agent_id,
    status: row.status,
    progress: row.progress,
    token_count: row.token_count,
    message_count: row.message_count,
  };
}

/** A row as `list` shows it: the reduced form, the goal's start and the parent. */
export function toListItem(row: AgentRow): AgentListItem {
  const goal = row.goal.length > LIST_GOAL_CHARS ? `${row.goal.slice(0, LIST_GOAL_CHARS - 1)}…` : row.goal;
  return { ...toReducedForm(row), goal, parent_id: row.parent_id };
}

export function toMessage(row: MessageRow): Message {
  return { message_id: row.message_id, timestamp: row.timestamp, text: row.text, role: row.role };
}

/** What `get` answers: the agent in status form and its messages. */
export function toAgentWithMessages(row: AgentRow, messages: MessageRow[], extras?: StatusExtras): AgentWithMessages {
  return { agent: toStatusForm(row, extras), messages: messages.map(toMessage) };
}

/** The extras of a `get` answer, read from storage. */
export async function statusExtras(
  storage: Pick<
    StorageAdapter,
    'countChildrenByStatus' | 'treeTotals' | 'listArtifacts' | 'listMonitors' | 'countOutbox'
  >,
  row: AgentRow,
): Promise<StatusExtras> {
  const [children, tree, artifacts, monitors, outbox] = await Promise.all([
    row.sub_agent_count === 0 ? undefined : storage.countChildrenByStatus(row.agent_id, ''),
    row.sub_agent_count === 0 ? undefined : storage.treeTotals([row.agent_id]),
    storage.listArtifacts(row.agent_id),
    storage.listMonitors(row.agent_id),
    storage.countOutbox(row.agent_id),
  ]);
  return {
    subAgents: children && toSubAgentCounts(children),
    tree: tree?.[0] && toTreeTotals(tree[0]),
    artifacts: artifacts.map(toArtifactInfo),
    monitors: monitors.map(toMonitorInfo),
    outbox: toOutboxCounts(outbox),
  };
}

// The monitor tool answers with the same form; the function lives where both may import it.
export { toMonitorInfo };

export function toArtifactInfo(row: ArtifactRow): ArtifactInfo {
  return {
    artifact_id: row.artifact_id,
    name: row.name,
    mime_type: row.mime_type,
    size: row.size,
    created_at: row.created_at,
  };
}

// --- message_person

/** Attempts by status as the status form shows them; undefined for an agent that never tried. */
export function toOutboxCounts(byStatus: Partial<Record<OutboxEntry['status'], number>>): OutboxCounts | undefined {
  const counts: OutboxCounts = {
    queued: byStatus.queued ?? 0,
    sent: byStatus.sent ?? 0,
    failed: byStatus.failed ?? 0,
    unknown: byStatus.unknown ?? 0,
  };
  return counts.queued + counts.sent + counts.failed + counts.unknown === 0 ? undefined : counts;
}

/** An outbox row as `runtime.outbox()` shows it (without the account and the tool call). */
export function toOutboxEntry(row: OutboxRow): OutboxEntry {
  return {
    message_id: row.message_id,
    agent_id: row.agent_id,
    channel: row.channel,
    to: row.to,
    subject: row.subject,
    body_hash: row.body_hash,
    status: row.status,
    provider_id: row.provider_id,
    error: row.error,
    created_at: row.created_at,
    sent_at: row.sent_at,
  };
}
