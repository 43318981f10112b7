/**
 * @module http/console/status-history
 * The status changes the console has seen happen, per agent, kept in memory so that an agent's timeline can show its
 * pauses, resumes and waits. Storage keeps an agent's status, not its history (a history would need a new table); so
 * these marks cover what happened while this process ran, and say so on the page.
 */
import type { AgentRuntime } from '../../core/agent-runtime.js';
import type { AgentStatus } from '../../base/status.js';

/** One change of an agent's status. */
export interface StatusMark {
  at: string;
  status: AgentStatus;
  previous: AgentStatus;
  message: string;
}

/** Changes kept per agent (the latest), and agents kept (the ones that changed last). */
const PER_AGENT = 100;
const AGENTS = 10_000;

export interface StatusHistory {
  /** The changes seen of this agent, oldest first. */
  of(agentId: string): StatusMark[];
  /** When the history began (changes before it are not known). */
  since: string;
}

const histories = new WeakMap<AgentRuntime, StatusHistory>();

/** The history of this runtime's status changes, started on first use (one listener per runtime). */
export function statusHistoryOf(runtime: AgentRuntime): StatusHistory {
  let history = histories.get(runtime);
  if (history) return history;
  const marks = new Map<string, StatusMark[]>();
  runtime.on('agent.status', ({ agent, previous }) => {
    if (agent.status === previous) return;
    let list = marks.get(agent.agent_id);
    if (list)
      marks.delete(agent.agent_id); // re-inserted last: the Map's order is least recently changed first
    else list = [];
    list.push({ at: agent.updated_at, status: agent.status, previous, message: agent.status_message });
    if (list.length > PER_AGENT) list.shift();
    marks.set(agent.agent_id, list);
    if (marks.size > AGENTS) marks.delete(marks.keys().next().value!);
  });
  history = { of: (agentId) => [...(marks.get(agentId) ?? [])], since: new Date().toISOString() };
  histories.set(runtime, history);
  return history;
}
