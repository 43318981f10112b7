/**
 * @module core/records
 * Storage rows to the public record forms of DESIGN §2. Wire shape = in-process shape.
 */
import type { AgentRow, MessageRow } from '../storage/adapter.js';
import {
  microsToCredits,
  type Agent,
  type AgentCreated,
  type AgentSummary,
  type AgentWithMessages,
  type Message,
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

export function toStatusForm(row: AgentRow): Agent {
  // Spelled out rather than spread from toCreatedForm: this is built for every poll, and a literal is several times
  // cheaper than a spread.
  return {
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
  };
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
export function toAgentWithMessages(row: AgentRow, messages: MessageRow[]): AgentWithMessages {
  return { agent: toStatusForm(row), messages: messages.map(toMessage) };
}
