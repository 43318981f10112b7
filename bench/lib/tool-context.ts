/**
 * A complete `ToolContext` for scenarios that call a tool's `run` directly, outside any agent (mcp: the MCP client's
 * cost over a bare SDK client). Typed against the library's own `ToolContext`, so a context the tools no longer get
 * fails the type check instead of crashing the scenario; what a scenario does not use throws when called.
 */
import type { Agent, ToolContext } from 'agentry-runtime';

const unused = (what: string) => () => {
  throw new Error(`${what} is not available to a tool called outside an agent in the bench`);
};

/** The context of one call by a made-up agent that is running; `signal` and `pauseSignal` never abort. */
export function benchToolContext(toolCallId = 'bench_call'): ToolContext {
  const now = new Date().toISOString();
  const agent: Agent = {
    agent_id: 'bench-agent',
    goal: 'bench',
    model: 'bench',
    status: 'ACTIVE',
    progress: null,
    created_at: now,
    status_message: null,
    token_count: 0,
    message_count: 0,
    updated_at: now,
    parent_id: null,
    credits_spent: 0,
    sub_agent_count: 0,
    spawn_index: null,
  };
  const never = new AbortController().signal;
  return {
    agent,
    accountId: 'bench',
    toolCallId,
    signal: never,
    pauseSignal: never,
    meter: () => undefined,
    reportProgress: () => undefined,
    spawn: unused('spawn'),
    suspend: unused('suspend'),
    waitUntil: unused('waitUntil'),
    subAgentResults: unused('subAgentResults'),
    fetch: unused('fetch'),
    readPage: unused('readPage'),
    pagesRead: unused('pagesRead'),
    state: { get: unused('state.get'), set: unused('state.set') },
    artifacts: { put: unused('artifacts.put') },
  };
}
