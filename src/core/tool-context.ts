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
import { ToolSuspension, type PageRead, type ToolContext } from '../tools/define-tool.js';
import { isoTime } from '../base/clock.js';
import type { RunControl, StepDeps } from './step-types.js';
import { toStatusForm } from './records.js';

const NO_PLATFORM =
  'this runtime has no network access for tools: it was opened from the core module, not the package entry point ' +
  '(import { AgentRuntime } from "agentry-runtime")';

export function createToolContext(
  deps: StepDeps,
  row: AgentRow,
  use: ToolUseBlock,
  control: RunControl,
  report: ToolContext['reportProgress'],
  meter: ToolContext['meter'] = () => {},
  /** The call's span context (W3C traceparent), stored with the children it spawns; null without tracing. */
  traceparent: string | null = null,
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
    accountId: row.account_id,
    toolCallId: use.id,
    get signal() {
      return control.toolsSignal;
    },
    get pauseSignal() {
      return control.model.signal;
    },
    reportProgress: report,
    meter,
    spawn: async (tasks, options) =>
      deps.subAgents.spawn(row, spawnGroupId(use.id, options?.group), tasks, traceparent),
    ...(traceparent !== null ? { traceparent } : {}),
    suspend: (message, spawnId) => new ToolSuspension(message, spawnId),
    waitUntil: (message, options = {}) =>
      new ToolSuspension(message, undefined, options.until === undefined ? null : +options.until),
    async pagesRead(options = {}) {
      // The call's own reads and those of every child it spawned, in any group (their spawn keys start with its id).
      // The key goes on with '#' (the call's own group) or '/' (a named one): "call_12#0" is not a child of "call_1".
      const children = (await deps.storage.findAgentsBySpawnKey(row.agent_id, use.id)).filter((c) => {
        const next = c.spawn_key?.charAt(use.id.length);
        return next === '#' || next === '/';
      });
      const reads = await deps.storage.listPageReads([row.agent_id, ...children.map((c) => c.agent_id)]);
      // Only the pages cited, when the caller says which: 1,000 children may have read 1,000 pages. When two URLs
      // are one page is the citation check's rule, lent by the tool platform (without one, no page was read).
      const urlKey = (url: string) => (deps.platform?.pageUrlKey ? deps.platform.pageUrlKey(url) : url);
      const wanted = options.urls && new Set(options.urls.map(urlKey));
      const texts = new Map<string, string | null>();
      const pages: PageRead[] = [];
      for (const read of reads) {
        if (read.agent_id === row.agent_id && read.tool_use_id !== use.id) continue; // another call of the agent
        if (wanted && !wanted.has(urlKey(read.url)) && !wanted.has(urlKey(read.final_url))) {
          continue;
        }
        if (!texts.has(read.content_sha256))
          texts.set(read.content_sha256, await deps.storage.getPageText(read.content_sha256));
        const text = texts.get(read.content_sha256);
        if (text == null) continue;
        pages.push({
          url: read.url,
          final_url: read.final_url,
          title: read.title,
          content_sha256: read.content_sha256,
          retrieved_at: read.retrieved_at,
          text,
        });
      }
      return pages;
    },
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

/** The spawn id of a call's children: the call's id, or `<call id>/<group>` for a named wave of them. */
function spawnGroupId(toolCallId: string, group?: string): string {
  // Spawn keys are `<spawn id>#<index>`: a '#' in a group's name would make group "a" take in group "a#1"'s children.
  if (group?.includes('#')) {
    throw new AgentryError(
      'invalid_request',
      `ctx.spawn: a group's name may not contain '#' (got ${JSON.stringify(group)})`,
    );
  }
  return group === undefined ? toolCallId : `${toolCallId}/${group}`;
}
