/**
 * @module core/tool-context
 * The `ToolContext` a tool call runs with: the agent, abort signal and progress, sub-agents, and the services that
 * reach outside the process (the guarded fetch, page reading) or outlive it (durable state, artifacts, pages read).
 * Most calls use little of it, so everything is made on first use: 10,000 calls of a cheap tool build almost nothing.
 */
import { createHash, randomUUID } from 'node:crypto';
import { AgentryError } from '../errors.js';
import type { ToolUseBlock } from '../models/provider.js';
import type { AgentRow } from '../storage/adapter.js';
import { ToolSuspension, type ToolContext } from '../tools/define-tool.js';
import { isoTime } from './clock.js';
import type { RunControl, StepDeps } from './loop.js';
import { toStatusForm } from './records.js';

const NO_PLATFORM =
  'this runtime has no network tools: open it through the package entry point (import { AgentRuntime } from "agentry")';

export function createToolContext(
  deps: StepDeps,
  row: AgentRow,
  use: ToolUseBlock,
  control: RunControl,
  report: ToolContext['reportProgress'],
): ToolContext {
  let agent: ReturnType<typeof toStatusForm> | undefined;
  const platform = () => {
    if (!deps.platform) throw new AgentryError('not_configured', NO_PLATFORM);
    return deps.platform;
  };
  return {
    get agent() {
      agent ??= toStatusForm(row);
      return agent;
    },
    toolCallId: use.id,
    get signal() {
      return control.toolsSignal;
    },
    reportProgress: report,
    spawn: (tasks) => deps.subAgents.spawn(row, use.id, tasks),
    suspend: (message) => new ToolSuspension(message),
    subAgentResults: (spawnId, page) => deps.subAgents.results(row.agent_id, spawnId, page.offset, page.limit),
    fetch: (input, init) => platform().fetch(input, { signal: control.toolsSignal, ...init }),
    async readPage(url, options = {}) {
      const page = await platform().readPage(url, { ...options, signal: control.toolsSignal });
      // Recorded for the call, so a citation of this page can be checked against what the runtime itself read.
      await deps.storage.recordPageRead(
        {
          agent_id: row.agent_id,
          tool_use_id: use.id,
          url: page.url,
          final_url: page.final_url,
          title: page.title,
          content_sha256: createHash('sha256').update(page.text).digest('hex'),
          retrieved_at: isoTime(deps.clock.now()),
        },
        page.text,
      );
      return page;
    },
    state: {
      async get<T>() {
        const text = await deps.storage.getToolState(row.agent_id, use.id);
        return text === null ? undefined : (JSON.parse(text) as T);
      },
      async set(value) {
        const text = JSON.stringify(value);
        if (text === undefined) throw new AgentryError('invalid_request', 'ctx.state.set: the value must be JSON');
        await deps.storage.putToolState(row.agent_id, use.id, text);
      },
    },
    artifacts: {
      async put({ name, mime_type, data }) {
        const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : data;
        const artifactId = randomUUID();
        await deps.storage.putArtifact(
          {
            artifact_id: artifactId,
            agent_id: row.agent_id,
            account_id: row.account_id,
            name,
            mime_type,
            size: bytes.byteLength,
            created_at: isoTime(deps.clock.now()),
          },
          bytes,
          deps.artifactLimits,
        );
        return { artifact_id: artifactId, size: bytes.byteLength };
      },
    },
  };
}
