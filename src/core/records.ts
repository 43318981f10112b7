/**
 * @module core/records
 * Storage rows to the public record forms of DESIGN §2. Wire shape = in-process shape.
 */
import type { AgentRow, ArtifactRow, MessageRow, StorageAdapter } from '../storage/adapter.js';
import type { AgentStatus } from './status.js';
import {
  microsToCredits,
  type Agent,
  type AgentCreated,
  type AgentSummary,
  type AgentWithMessages,
  type Message,
  type SubAgentCounts,
  type ArtifactInfo,
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
  /** What its tools kept (agents that have any). */
  artifacts?: ArtifactInfo[] | undefined;
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
  if (extras?.artifacts?.length) agent.artifacts = extras.artifacts;
  return agent;
}

/** A spawn key is `<tool call id>#<index>`. */
function spawnIndexOf(spawnKey: string | null): number | null {
  if (spawnKey === null) return null;
  const index = Number(spawnKey.slice(spawnKey.lastIndexOf('#') + 1));
  return Number.isInteger(index) && index >= 0 ? index : null;
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

export function toMessage(row: MessageRow): Message {
  return { message_id: row.message_id, timestamp: row.timestamp, text: row.text, role: row.role };
}

/** What `get` answers: the agent in status form and its messages. */
export function toAgentWithMessages(row: AgentRow, messages: MessageRow[], extras?: StatusExtras): AgentWithMessages {
  return { agent: toStatusForm(row, extras), messages: messages.map(toMessage) };
}

/** The extras of a `get` answer, read from storage. */
export async function statusExtras(
  storage: Pick<StorageAdapter, 'countChildrenByStatus' | 'listArtifacts'>,
  row: AgentRow,
): Promise<StatusExtras> {
  const [children, artifacts] = await Promise.all([
    row.sub_agent_count === 0 ? undefined : storage.countChildrenByStatus(row.agent_id, ''),
    storage.listArtifacts(row.agent_id),
  ]);
  return {
    subAgents: children && toSubAgentCounts(children),
    artifacts: artifacts.map(toArtifactInfo),
  };
}

export function toArtifactInfo(row: ArtifactRow): ArtifactInfo {
  return {
    artifact_id: row.artifact_id,
    name: row.name,
    mime_type: row.mime_type,
    size: row.size,
    created_at: row.created_at,
  };
}
