/**
 * @module core/schemas
 * zod schemas of every public record and request body: the single source for runtime validation, the HTTP layer,
 * the OpenAPI document and the TypeScript types. Wire fields are snake_case (the Agent Service interface); options
 * objects passed to functions are camelCase.
 */
import { z } from 'zod';
import { MAX_NEEDLE_CHARS, MAX_SEARCH_MATCHES } from '../storage/search.js';
import { AGENT_STATUSES } from '../base/status.js';

export const MAX_GOAL_LENGTH = 100_000;

export const AgentStatusSchema = z.enum(AGENT_STATUSES).meta({ id: 'AgentStatus' });
export type { AgentStatus } from '../base/status.js';

const Timestamp = z.iso.datetime({ offset: false, precision: 3 }).describe('ISO 8601 UTC timestamp with milliseconds');
const AgentId = z.uuid().describe('UUID (version 7: ordered by creation time)');

/** Agent, creation form: what `POST /api/agents` returns. */
export const AgentCreatedSchema = z
  .object({
    agent_id: AgentId,
    goal: z.string(),
    model: z.string(),
    status: AgentStatusSchema,
    progress: z.number().min(0).max(1),
    created_at: Timestamp,
  })
  .meta({ id: 'AgentCreated' });
export type AgentCreated = z.infer<typeof AgentCreatedSchema>;

/** Direct children of an agent, counted by status. */
export const SubAgentCountsSchema = z
  .object({
    total: z.number().int().min(0),
    by_status: z.partialRecord(AgentStatusSchema, z.number().int().min(0)),
  })
  .meta({ id: 'SubAgentCounts' });
export type SubAgentCounts = z.infer<typeof SubAgentCountsSchema>;

/** An agent and all its descendants summed (the `tree` of a status form). */
export const TreeTotalsSchema = z
  .object({
    agents: z.number().int().min(1).describe('agents in the tree, the agent itself included'),
    credits_spent: z.number().min(0).describe('credits settled by every agent of the tree'),
    tokens: z.number().int().min(0).describe('tokens of every agent of the tree'),
    by_status: z
      .partialRecord(AgentStatusSchema, z.number().int().min(0))
      .describe("the tree's agents counted by status, the agent itself included"),
    first_created_at: Timestamp.describe('when its first agent was created'),
    last_updated_at: Timestamp.describe('when any of its agents last changed'),
  })
  .meta({ id: 'TreeTotals' });
export type TreeTotals = z.infer<typeof TreeTotalsSchema>;

/** An artifact a tool kept with an agent (its bytes: `GET /api/agents/{id}/artifacts/{artifact_id}`). */
export const ArtifactInfoSchema = z
  .object({
    artifact_id: z.uuid(),
    name: z.string(),
    mime_type: z.string(),
    size: z.number().int().min(0).describe('bytes'),
    created_at: Timestamp,
  })
  .meta({ id: 'ArtifactInfo' });
export type ArtifactInfo = z.infer<typeof ArtifactInfoSchema>;

/** A page an agent watches with the `monitor` tool, as its status form shows it. */
export const MonitorInfoSchema = z
  .object({
    monitor_id: z.string(),
    url: z.string(),
    interval_s: z.number().int().positive(),
    last_checked_at: Timestamp.nullable(),
    next_check_at: Timestamp.nullable().describe('null while no check is planned: agent paused, monitor ended'),
    changes: z.number().int().min(0).describe('changes that mattered so far'),
    last_error: z.string().nullable(),
    status: z.enum(['active', 'cancelled', 'ended']),
    selector: z.string().nullable(),
    condition: z.string().nullable(),
    until: Timestamp.nullable(),
    render: z.boolean().describe('checked as the browser renders the page (`render: true`)'),
  })
  .meta({ id: 'MonitorInfo' });
export type MonitorInfo = z.infer<typeof MonitorInfoSchema>;

// --- message_person
/** One attempt of `message_person`, as `runtime.outbox()` and `agentry agents outbox` show it. */
export const OutboxEntrySchema = z
  .object({
    message_id: z.uuid(),
    agent_id: AgentId,
    channel: z.enum(['email', 'sms']),
    to: z.string().describe('the recipient as normalised: lower-case e-mail address or E.164 number'),
    subject: z.string().nullable(),
    body_hash: z.string().describe('SHA-256 (hex) of the body; the body itself is not kept'),
    status: z
      .enum(['queued', 'sent', 'failed', 'unknown'])
      .describe('unknown: it may have been sent (a crash or a lost connection mid-send); never sent again'),
    provider_id: z.string().nullable().describe('SMTP Message-ID or Twilio message SID'),
    error: z.string().nullable(),
    created_at: Timestamp,
    sent_at: Timestamp.nullable(),
  })
  .meta({ id: 'OutboxEntry' });
export type OutboxEntry = z.infer<typeof OutboxEntrySchema>;

/** An agent's message_person attempts counted by status (status form, answers of get). */
export const OutboxCountsSchema = z
  .object({
    queued: z.number().int().min(0).describe('being sent right now'),
    sent: z.number().int().min(0),
    failed: z.number().int().min(0),
    unknown: z.number().int().min(0),
  })
  .meta({ id: 'OutboxCounts' });
export type OutboxCounts = z.infer<typeof OutboxCountsSchema>;

/** Agent, status form: the creation form plus what changes while it runs. */
export const AgentSchema = AgentCreatedSchema.extend({
  status_message: z.string(),
  token_count: z.number().int().min(0),
  message_count: z.number().int().min(0),
  updated_at: Timestamp,
  parent_id: AgentId.nullable().describe('beyond the interface: the parent of a sub-agent'),
  credits_spent: z.number().min(0).describe('beyond the interface: credits settled by this agent alone'),
  sub_agent_count: z.number().int().min(0).describe('beyond the interface: direct children'),
  spawn_index: z
    .number()
    .int()
    .min(0)
    .nullable()
    .describe("beyond the interface: a sub-agent's 0-based position among the tasks it was spawned with"),
  sub_agents: SubAgentCountsSchema.optional().describe(
    'beyond the interface: direct children counted by status (in answers of get, for agents that have children)',
  ),
  tree: TreeTotalsSchema.optional().describe(
    'beyond the interface: the agent and all its descendants summed (in answers of get, for agents that have children)',
  ),
  artifacts: z
    .array(ArtifactInfoSchema)
    .optional()
    .describe('beyond the interface: what its tools kept (in answers of get, for agents that have any)'),
  monitors: z
    .array(MonitorInfoSchema)
    .optional()
    .describe('beyond the interface: the pages it watches with the monitor tool (in answers of get, when it has any)'),
  outbox: OutboxCountsSchema.optional().describe(
    'beyond the interface: the e-mails and SMS of its message_person calls, counted by status (in answers of get, ' +
      'for agents that tried any; the entries: runtime.outbox() and `agentry agents outbox`)',
  ),
}).meta({ id: 'Agent' });
export type Agent = z.infer<typeof AgentSchema>;

/** Agent, reduced form: used by lists and sub-agent views. */
export const AgentSummarySchema = z
  .object({
    agent_id: AgentId,
    status: AgentStatusSchema,
    progress: z.number().min(0).max(1),
    token_count: z.number().int().min(0),
    message_count: z.number().int().min(0),
  })
  .meta({ id: 'AgentSummary' });
export type AgentSummary = z.infer<typeof AgentSummarySchema>;

export const MessageSchema = z
  .object({
    message_id: z.uuid(),
    timestamp: Timestamp,
    text: z.string(),
    role: z.enum(['USER', 'ASSISTANT']),
  })
  .meta({ id: 'Message' });
export type Message = z.infer<typeof MessageSchema>;

export const AgentWithMessagesSchema = z
  .object({ agent: AgentSchema, messages: z.array(MessageSchema) })
  .meta({ id: 'AgentWithMessages' });
export type AgentWithMessages = z.infer<typeof AgentWithMessagesSchema>;

/** How much of a goal a list item carries. */
export const LIST_GOAL_CHARS = 200;

/** An item of `GET /api/agents`: the reduced form, plus (beyond the interface) the goal's start and the parent. */
export const AgentListItemSchema = AgentSummarySchema.extend({
  goal: z.string().describe(`beyond the interface: the goal's first ${LIST_GOAL_CHARS} characters (… when cut)`),
  parent_id: AgentId.nullable().describe('beyond the interface: the parent of a sub-agent, null for a root'),
}).meta({ id: 'AgentListItem' });
export type AgentListItem = z.infer<typeof AgentListItemSchema>;

export const AgentListSchema = z
  .object({
    data: z.array(AgentListItemSchema),
    has_more: z.boolean(),
    next_cursor: z.string().nullable(),
    truncated: z
      .literal(true)
      .optional()
      .describe(
        `beyond the interface: set when a goal search (q) stopped at its bounds (${MAX_SEARCH_MATCHES} matches, or its ` +
          'work budget): the pages hold what it found',
      ),
  })
  .meta({ id: 'AgentList' });
export type AgentList = z.infer<typeof AgentListSchema>;

/** Body of POST /api/agents. */
export const CreateAgentBodySchema = z
  .object({
    goal: z
      .string()
      .trim()
      .min(1, 'goal must not be empty')
      .max(MAX_GOAL_LENGTH, `goal is longer than ${MAX_GOAL_LENGTH} characters`),
    model: z.string().min(1).max(200).optional(),
    max_credits: z.number().positive().finite().optional(),
  })
  .strict()
  .meta({ id: 'CreateAgentBody' });

/** Options of `runtime.create()`. */
export const CreateAgentOptionsSchema = z
  .object({
    goal: CreateAgentBodySchema.shape.goal,
    model: z.string().min(1).max(200).optional(),
    accountId: z.string().min(1).max(200).optional(),
    /** Cap, in credits, on what this agent and all its sub-agents may spend. */
    maxCredits: z.number().positive().finite().optional(),
    /**
     * The caller's W3C trace context (a `traceparent` header's value): the agent's spans join that trace, under that
     * span. One that does not parse is ignored, as the W3C Trace Context spec asks of a receiver.
     */
    traceparent: z.string().max(256).optional(),
  })
  .strict();
export type CreateAgentOptions = z.input<typeof CreateAgentOptionsSchema>;

export const ListAgentsOptionsSchema = z
  .object({
    status: AgentStatusSchema.optional(),
    /** A parent's id for its children, `null` for root agents only; absent for every agent. */
    parentId: z.uuid().nullable().optional(),
    /**
     * Keeps agents whose goal contains this text (ASCII letters in either case), through the storage's goal index; only
     * a goal's first 4,096 characters are searched, and at most 1,000 matches are paged through.
     */
    q: z.string().min(1).max(MAX_NEEDLE_CHARS).optional(),
    accountId: z.string().min(1).max(200).optional(),
    limit: z.number().int().min(1).max(1000).default(50),
    cursor: z.string().max(200).optional(),
  })
  .strict();
export type ListAgentsOptions = z.input<typeof ListAgentsOptionsSchema>;

export const DeletedAgentSchema = z
  .object({ agent_id: AgentId, deleted: z.literal(true) })
  .meta({ id: 'DeletedAgent' });

export const ErrorBodySchema = z
  .object({
    error: z.object({
      code: z.string(),
      message: z.string(),
      request_id: z.string(),
      details: z.unknown().optional(),
    }),
  })
  .meta({ id: 'Error' });

/** Credits given by callers (numbers, may be fractional) and the integer micro-credits agentry counts in. */
export const MICROS_PER_CREDIT = 1_000_000;
export const CreditsAmountSchema = z.number().finite().positive().max(1e12);

export function creditsToMicros(credits: number): number {
  return Math.round(credits * MICROS_PER_CREDIT);
}
export function microsToCredits(micros: number): number {
  return micros / MICROS_PER_CREDIT;
}
