/**
 * @module mcp/agentry-server
 * agentry itself as an MCP server (README.md#mcp-servers): the tools `create_agent`, `get_agent`, `list_agents`,
 * `pause_agent`, `resume_agent` and `delete_agent`, so Claude Desktop, Claude Code or Cursor can start and follow
 * agentry runs. One definition serves both ways in: `agentry mcp` (stdio) and the HTTP service's `/mcp` mount
 * (Streamable HTTP, behind the API key, one account's agents only).
 *
 * Annotations are honest: get/list are read-only; pause and resume are idempotent (pausing a paused agent changes
 * nothing); delete is destructive; create starts work that reaches the open world (an agent may use the web).
 */
import { z } from 'zod';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { CallToolResult, JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import type { AgentRuntime } from '../core/agent-runtime.js';
import { AgentStatusSchema } from '../core/schemas.js';
import { AgentryError } from '../errors.js';

/** Which account the server acts for: every tool sees and creates that account's agents only. */
export interface AgentryMcpScope {
  accountId: string;
  /**
   * The W3C trace context of the transport's request (the `/mcp` mount's `traceparent` header): agents created
   * without a `_meta.traceparent` of their own join that trace.
   */
  traceparent?: string;
}

/**
 * The caller's trace context of one tool call: `params._meta.traceparent`, as MCP clients that propagate traces send
 * it (agentry's own client among them), else the transport's.
 */
function traceparentOf(meta: Record<string, unknown> | undefined, scope: AgentryMcpScope): string | undefined {
  const sent = meta?.traceparent;
  if (typeof sent === 'string' && sent.length > 0 && sent.length <= 256) return sent;
  return scope.traceparent;
}

/** Messages `get_agent` returns by default (the last ones), and the characters of each. */
const DEFAULT_MESSAGES = 20;
const MESSAGE_CHARS = 4_000;

const AgentId = z.string().min(1).max(200).describe('The agent_id create_agent or list_agents returned');

const json = (value: unknown): CallToolResult => ({
  content: [{ type: 'text', text: JSON.stringify(value, null, 2) }],
  structuredContent: value as Record<string, unknown>,
});

/**
 * Registers agentry's tools on `server`, acting for `scope.accountId`.
 *
 * @example
 * const server = new McpServer({ name: 'agentry', version: '0.1.0' });
 * registerAgentryTools(server, runtime, { accountId: runtime.defaultAccountId });
 * await server.connect(new StdioServerTransport());
 */
export function registerAgentryTools(server: McpServer, runtime: AgentRuntime, scope: AgentryMcpScope): void {
  // Every tool needs the account's subscription, as every HTTP route does: over stdio there is no key whose check
  // would refuse a lapsed account, so each call checks it (a deactivated account keeps its agents, but may not use
  // them until it is active again).
  const subscribed = async (): Promise<void> => {
    const account = await runtime.accounts.get(scope.accountId);
    if (!account.subscription_active) {
      throw new AgentryError('subscription_inactive', 'The subscription of this account is not active');
    }
  };
  server.registerTool(
    'create_agent',
    {
      title: 'Create an agent',
      description:
        'Starts an autonomous agentry agent on a goal. It works on its own with tools and sub-agents on a credit ' +
        'budget; follow it with get_agent until its status is COMPLETED (its last message is the answer), FAILED ' +
        'or OUT_OF_CREDITS.',
      inputSchema: {
        goal: z.string().min(1).max(100_000).describe('What the agent should achieve, in plain words'),
        model: z
          .string()
          .optional()
          .describe(`Model id: ${runtime.models.join(' or ')} (default: the runtime's)`),
        max_credits: z.number().positive().optional().describe('Most credits this agent and its sub-agents may spend'),
      },
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
    },
    async ({ goal, model, max_credits }, extra) =>
      subscribed().then(async () => {
        const traceparent = traceparentOf(extra._meta as Record<string, unknown> | undefined, scope);
        return json(
          await runtime.create({
            goal,
            accountId: scope.accountId,
            ...(traceparent !== undefined ? { traceparent } : {}),
            ...(model !== undefined ? { model } : {}),
            ...(max_credits !== undefined ? { maxCredits: max_credits } : {}),
          }),
        );
      }),
  );

  server.registerTool(
    'get_agent',
    {
      title: 'Get an agent',
      description:
        'The status of an agent (status, progress 0-1, status_message, tokens, credits spent) and its transcript: ' +
        'the goal and the agent’s messages, the last ones first cut to a few thousand characters each.',
      inputSchema: {
        agent_id: AgentId,
        last_messages: z
          .number()
          .int()
          .min(0)
          .max(1000)
          .optional()
          .describe(`How many of the latest messages to return (default ${DEFAULT_MESSAGES})`),
      },
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    async ({ agent_id, last_messages }) => {
      await subscribed();
      const { agent, messages } = await runtime.get(agent_id, scope);
      const keep = last_messages ?? DEFAULT_MESSAGES;
      const shown = keep === 0 ? [] : messages.slice(-keep);
      return json({
        agent,
        messages_total: messages.length,
        messages: shown.map((m) => ({
          ...m,
          text: m.text.length > MESSAGE_CHARS ? `${m.text.slice(0, MESSAGE_CHARS)} […]` : m.text,
        })),
      });
    },
  );

  server.registerTool(
    'list_agents',
    {
      title: 'List agents',
      description: 'Agents of this account, newest first, in short form; pass next_cursor back as cursor for more.',
      inputSchema: {
        status: AgentStatusSchema.optional().describe('Only agents in this status'),
        limit: z.number().int().min(1).max(100).optional().describe('At most this many (default 20)'),
        cursor: z.string().optional(),
      },
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    async ({ status, limit, cursor }) =>
      subscribed().then(async () =>
        json(
          await runtime.list({
            accountId: scope.accountId,
            limit: limit ?? 20,
            ...(status !== undefined ? { status } : {}),
            ...(cursor !== undefined ? { cursor } : {}),
          }),
        ),
      ),
  );

  server.registerTool(
    'pause_agent',
    {
      title: 'Pause an agent',
      description: 'Pauses an agent and its sub-agents at once; resume_agent continues from the last saved step.',
      inputSchema: { agent_id: AgentId },
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    },
    async ({ agent_id }) => subscribed().then(async () => json({ agent: await runtime.pause(agent_id, scope) })),
  );

  server.registerTool(
    'resume_agent',
    {
      title: 'Resume an agent',
      description: 'Resumes a PAUSED or OUT_OF_CREDITS agent (after credits were added) from its last saved step.',
      inputSchema: { agent_id: AgentId },
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    },
    async ({ agent_id }) => subscribed().then(async () => json({ agent: await runtime.resume(agent_id, scope) })),
  );

  server.registerTool(
    'delete_agent',
    {
      title: 'Delete an agent',
      description: 'Deletes an agent with its sub-agents, messages and artifacts, stopping its work. Cannot be undone.',
      inputSchema: { agent_id: AgentId },
      annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    },
    async ({ agent_id }) => subscribed().then(async () => json(await runtime.delete(agent_id, scope))),
  );
}

/** An MCP server with agentry's tools, for one account. The SDK's server side is loaded on first use. */
export async function createAgentryMcpServer(runtime: AgentRuntime, scope: AgentryMcpScope): Promise<McpServer> {
  const { McpServer } = await import('@modelcontextprotocol/sdk/server/mcp.js');
  const server = new McpServer(
    { name: 'agentry', version: '0.1.0' },
    {
      instructions:
        'agentry runs autonomous agents. Start one with create_agent, then poll get_agent until its status is ' +
        'COMPLETED, FAILED or OUT_OF_CREDITS; its last message is its answer.',
    },
  );
  registerAgentryTools(server, runtime, scope);
  return server;
}

/**
 * Answers one Streamable HTTP request to the `/mcp` mount, statelessly (a server and a transport per request, JSON
 * responses, no session): the caller is already authenticated, and `scope` is its account.
 */
export async function handleAgentryMcpRequest(
  runtime: AgentRuntime,
  scope: AgentryMcpScope,
  request: Request,
  parsedBody: unknown,
): Promise<Response> {
  const { WebStandardStreamableHTTPServerTransport } =
    await import('@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js');
  const server = await createAgentryMcpServer(runtime, scope);
  const transport = new WebStandardStreamableHTTPServerTransport({
    sessionIdGenerator: undefined,
    enableJsonResponse: true,
  });
  await server.connect(transport);
  refuseMalformedToolCalls(transport);
  try {
    return await transport.handleRequest(request, { parsedBody });
  } finally {
    // A JSON response is complete when handleRequest resolves: nothing of this request's server is left.
    void server.close();
  }
}

/** JSON-RPC's code for invalid method parameters. */
const INVALID_PARAMS = -32602;

/** What a `tools/call` request's params must be, whatever the tool (its arguments are checked by the tool). */
const ToolCallParams = z.looseObject({
  name: z.string({ error: 'must be the name of a tool (a string)' }).min(1, 'must name a tool'),
  arguments: z.record(z.string(), z.unknown(), { error: 'must be an object' }).optional(),
  _meta: z.record(z.string(), z.unknown(), { error: 'must be an object' }).optional(),
});

/**
 * Answers a `tools/call` whose params are malformed (no tool name, arguments that are not an object) with JSON-RPC
 * -32602 and a one-line reason, before the SDK would answer -32603 with its whole validation dump. Call it right
 * after `server.connect(transport)`.
 */
export function refuseMalformedToolCalls(transport: Transport): void {
  const deliver = transport.onmessage;
  if (!deliver) return;
  transport.onmessage = (message, extra) => {
    const request = message as { method?: unknown; id?: unknown; params?: unknown };
    if (request.method === 'tools/call' && (typeof request.id === 'string' || typeof request.id === 'number')) {
      const parsed = ToolCallParams.safeParse(request.params ?? {});
      if (!parsed.success) {
        const issue = parsed.error.issues[0]!;
        const field = issue.path.length > 0 ? `params.${issue.path.join('.')}` : 'params';
        const reply: JSONRPCMessage = {
          jsonrpc: '2.0',
          id: request.id,
          error: { code: INVALID_PARAMS, message: `Invalid params for tools/call: ${field} ${issue.message}` },
        };
        void transport.send(reply).catch(() => undefined);
        return;
      }
    }
    deliver.call(transport, message, extra);
  };
}
