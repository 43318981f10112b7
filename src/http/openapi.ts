/**
 * @module http/openapi
 * The OpenAPI 3.1 document of the HTTP service, generated from the zod schemas in `core/schemas.ts` (the single
 * source of the wire shapes) with `z.toJSONSchema`. Served at GET /api/openapi.json without authentication: it
 * describes the API and holds no data.
 */
import { z } from 'zod';
import {
  AgentCreatedSchema,
  AgentListSchema,
  AgentSchema,
  AgentStatusSchema,
  AgentWithMessagesSchema,
  CreateAgentBodySchema,
  DeletedAgentSchema,
  ErrorBodySchema,
  MessageSchema,
} from '../core/schemas.js';
import { DEFAULT_PRICES } from '../core/credits.js';
import { AgentryError, ERROR_STATUS, type ErrorCode } from '../errors.js';
import { MAX_NEEDLE_CHARS, MAX_SEARCH_MATCHES, SEARCH_PREFIX_CHARS } from '../storage/search.js';

/** Options of {@link buildOpenApiDocument}. */
export interface OpenApiOptions {
  /** Prefix of every path, as given to `createFetchHandler`. @default '' */
  basePath?: string;
  /**
   * `servers[0].url`. Paths already hold `basePath`, so this is the origin only.
   * @default '/' (the origin serving the document)
   */
  serverUrl?: string;
  /** `info.version`. @default the package version at the time of writing */
  version?: string;
  /**
   * The model ids `POST /api/agents` accepts, documented as the enum of `model` (pass `runtime.models`).
   * @default the models of the default price table: `svc-1-lite`, `svc-1-ultra`
   */
  models?: readonly string[];
  /**
   * `info.license`.
   * @default agentry's license, `{ name: 'MIT', identifier: 'MIT' }`
   * @example buildOpenApiDocument({ license: { name: 'Proprietary', url: 'https://example.com/terms' } })
   */
  license?: { name: string; identifier?: string; url?: string };
}

type JsonObject = Record<string, unknown>;

const ref = (id: string) => ({ $ref: `#/components/schemas/${id}` });
const json = (schema: unknown) => ({ 'application/json': { schema } });

function errorResponses(...codes: ErrorCode[]): JsonObject {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of codes) byStatus.set(ERROR_STATUS[code], [...(byStatus.get(ERROR_STATUS[code]) ?? []), code]);
  const out: JsonObject = {};
  for (const [status, list] of byStatus) {
    out[String(status)] = {
      description: `Error: ${list.map((c) => `\`${c}\``).join(' or ')}`,
      content: json(ref('Error')),
    };
  }
  return out;
}

/**
 * Adds the enum of model ids to `model` of the create body. The zod schema keeps a plain string because the set is
 * the runtime's (its provider's models that have a price), known only once it is open; the runtime answers an
 * unknown model with 400 `invalid_request`. Throws if the field moves, so the document cannot silently lose the enum.
 */
function documentModels(schemas: JsonObject, models: readonly string[]): void {
  if (models.length === 0 || models.some((m) => typeof m !== 'string' || m === '')) {
    throw new AgentryError(
      'invalid_request',
      `Expected \`models\` to be a non-empty list of model ids, got \`${JSON.stringify(models)}\``,
    );
  }
  const body = schemas.CreateAgentBody as { properties?: Record<string, JsonObject> } | undefined;
  const model = body?.properties?.model;
  if (model?.type !== 'string') throw new Error('openapi: CreateAgentBody.model is no longer a string schema');
  model.enum = [...models];
  model.description =
    "The model to run, one of those this service offers. Without it, the runtime's `defaultModel` (`svc-1-lite` unless configured).";
}

/** Errors any authenticated route may answer with. */
const COMMON_ERRORS: ErrorCode[] = ['unauthorized', 'subscription_inactive', 'rate_limited', 'internal_error'];

/**
 * Builds the OpenAPI 3.1 document.
 *
 * @example
 * import { buildOpenApiDocument } from 'agentry-runtime/http';
 * const doc = buildOpenApiDocument({ basePath: '/v1' });
 * console.log(Object.keys(doc.paths)); // ['/v1/api/agents', ...]
 */
export function buildOpenApiDocument(options: OpenApiOptions = {}): JsonObject {
  const base = options.basePath ?? '';
  // One conversion of every schema: those with a meta id become shared $defs, which are OpenAPI's components.
  const all = z.toJSONSchema(
    z.object({
      AgentStatus: AgentStatusSchema,
      AgentCreated: AgentCreatedSchema,
      Agent: AgentSchema,
      Message: MessageSchema,
      AgentWithMessages: AgentWithMessagesSchema,
      AgentList: AgentListSchema,
      CreateAgentBody: CreateAgentBodySchema,
      DeletedAgent: DeletedAgentSchema,
      Error: ErrorBodySchema,
    }),
    { unrepresentable: 'any' },
  ) as { $defs?: Record<string, unknown> };
  const schemas = JSON.parse(
    JSON.stringify(all.$defs ?? {}).replaceAll('"#/$defs/', '"#/components/schemas/'),
  ) as JsonObject;
  // Without `models`, the document is that of a runtime on the default price table (whose provider serves both).
  documentModels(schemas, options.models ?? Object.keys(DEFAULT_PRICES.models));

  const idParam = {
    name: 'id',
    in: 'path',
    required: true,
    description: "The agent id (UUID). An unknown id, a malformed one and another account's agent are all 404.",
    schema: { type: 'string', format: 'uuid' },
  };
  const artifactIdParam = {
    name: 'artifact_id',
    in: 'path',
    required: true,
    description: 'The artifact id (UUID), from `agent.artifacts`. An unknown or malformed id is 404.',
    schema: { type: 'string', format: 'uuid' },
  };
  const agentEnvelope = {
    type: 'object',
    properties: { agent: ref('Agent') },
    required: ['agent'],
    additionalProperties: false,
  };
  const action = (operationId: string, summary: string, description: string) => ({
    operationId,
    summary,
    description,
    parameters: [idParam],
    responses: {
      '200': { description: 'The agent after the action', content: json(agentEnvelope) },
      ...errorResponses(
        'invalid_request',
        'insufficient_credits',
        'not_found',
        'invalid_state',
        'payload_too_large',
        'unsupported_media_type',
        ...COMMON_ERRORS,
      ),
    },
  });

  return {
    openapi: '3.1.0',
    info: {
      title: 'agentry Agent Service',
      version: options.version ?? '0.1.0',
      license: options.license ?? { name: 'MIT', identifier: 'MIT' },
      description:
        'Create autonomous agents, poll their status and transcript, download what their tools kept, pause, resume ' +
        'or delete them. Every route but ' +
        'this document needs an `x-api-key` header. Errors have the shape `{"error": {"code", "message", "request_id"}}`; ' +
        'every response carries `x-request-id`.',
    },
    // A relative '/' means the origin the document was fetched from (OpenAPI resolves it against that URL).
    servers: [{ url: options.serverUrl ?? '/' }],
    security: [{ apiKey: [] }],
    paths: {
      [`${base}/api/agents`]: {
        post: {
          operationId: 'createAgent',
          summary: 'Create an agent',
          parameters: [
            {
              name: 'Idempotency-Key',
              in: 'header',
              required: false,
              description: 'Same key and same body replays the first result; same key and another body is 409.',
              schema: { type: 'string', maxLength: 255 },
            },
          ],
          requestBody: { required: true, content: json(ref('CreateAgentBody')) },
          responses: {
            '201': { description: 'Created; the agent starts at once', content: json(ref('AgentCreated')) },
            ...errorResponses(
              'invalid_request',
              'insufficient_credits',
              'idempotency_conflict',
              'payload_too_large',
              'unsupported_media_type',
              ...COMMON_ERRORS,
            ),
          },
        },
        get: {
          operationId: 'listAgents',
          summary: 'List agents, newest first, in reduced form (with the start of the goal and the parent)',
          parameters: [
            { name: 'status', in: 'query', required: false, schema: ref('AgentStatus') },
            {
              name: 'limit',
              in: 'query',
              required: false,
              schema: { type: 'integer', minimum: 1, maximum: 1000, default: 50 },
            },
            {
              name: 'cursor',
              in: 'query',
              required: false,
              description: '`next_cursor` of the previous page',
              schema: { type: 'string' },
            },
            {
              name: 'parent_id',
              in: 'query',
              required: false,
              description: "Only this agent's children",
              schema: { type: 'string', format: 'uuid' },
            },
            {
              name: 'roots',
              in: 'query',
              required: false,
              description: 'With `true`, only root agents (no parent); excludes `parent_id`',
              schema: { type: 'string', enum: ['true', 'false'] },
            },
            {
              name: 'q',
              in: 'query',
              required: false,
              description:
                'Only agents whose goal contains this text (ASCII letters in either case, other characters exactly), ' +
                `through the goal index: a goal's first ${SEARCH_PREFIX_CHARS} characters are searched, at most ` +
                `${MAX_SEARCH_MATCHES} matches are paged through (\`truncated\` says when a bound stopped the search)`,
              schema: { type: 'string', minLength: 1, maxLength: MAX_NEEDLE_CHARS },
            },
          ],
          responses: {
            '200': { description: 'A page of agents', content: json(ref('AgentList')) },
            ...errorResponses('invalid_request', ...COMMON_ERRORS),
          },
        },
      },
      [`${base}/api/agents/{id}`]: {
        get: {
          operationId: 'getAgent',
          summary: 'An agent (status form) and its transcript',
          description:
            'Beyond the interface, the status form of this answer carries what costs a query: `sub_agents`, ' +
            '`artifacts`, and `outbox`: the e-mails and SMS of its message_person calls counted by status (`sent`, ' +
            '`failed`, `unknown` when one may have left before a crash, `queued` while one is being sent); the ' +
            'entries themselves are listed by `runtime.outbox()` and `agentry agents outbox <id>`.',
          parameters: [idParam],
          responses: {
            '200': { description: 'The agent', content: json(ref('AgentWithMessages')) },
            ...errorResponses('not_found', ...COMMON_ERRORS),
          },
        },
        delete: {
          operationId: 'deleteAgent',
          summary: 'Delete an agent with its sub-agents and transcript',
          parameters: [idParam],
          responses: {
            '200': { description: 'Deleted', content: json(ref('DeletedAgent')) },
            ...errorResponses('not_found', ...COMMON_ERRORS),
          },
        },
      },
      [`${base}/api/agents/{id}/pause`]: {
        post: action(
          'pauseAgent',
          'Pause an agent',
          'Pausing a PAUSED agent is a no-op; a COMPLETED or FAILED one is 409 `invalid_state`.',
        ),
      },
      [`${base}/api/agents/{id}/resume`]: {
        post: action(
          'resumeAgent',
          'Resume a paused or out-of-credits agent',
          'Resuming a running agent is a no-op; 402 `insufficient_credits` when the account has no credits; a COMPLETED or FAILED agent is 409 `invalid_state`.',
        ),
      },
      [`${base}/api/agents/{id}/events`]: {
        get: {
          operationId: 'streamAgentEvents',
          summary: 'Server-Sent Events of an agent: message, status, progress, deleted',
          description:
            'Starts with the transcript (`message` events, `id` = position) and a `status` event; send `Last-Event-ID` to resume after a message. Ends after COMPLETED or FAILED, with `deleted`, or with `closed`: `{"reason":"access"}` when the key was deleted or the subscription lapsed, `{"reason":"lifetime"}` (after a `retry:` line) when the stream reached its lifetime (reconnect with `Last-Event-ID`). A reader too slow is dropped and resumes the same way. A key may have a few streams open at once; one more is 429 `rate_limited`.',
          parameters: [idParam, { name: 'Last-Event-ID', in: 'header', required: false, schema: { type: 'string' } }],
          responses: {
            '200': { description: 'An event stream', content: { 'text/event-stream': { schema: { type: 'string' } } } },
            ...errorResponses('not_found', ...COMMON_ERRORS),
          },
        },
      },
      [`${base}/api/agents/{id}/artifacts/{artifact_id}`]: {
        get: {
          operationId: 'getArtifact',
          summary: "Download an artifact one of the agent's tools kept",
          description:
            "The bytes, as an attachment: `Content-Type` is the artifact's media type (`application/octet-stream` when " +
            'it is not a well-formed one), `Content-Disposition` carries its name (`filename*` for non-ASCII names). ' +
            "The agent's artifacts are listed in its status form (`agent.artifacts` of GET /api/agents/{id}). " +
            'An artifact never changes: send its `ETag` back in `If-None-Match` for a 304. HEAD answers the same ' +
            'headers without the bytes.',
          parameters: [idParam, artifactIdParam],
          responses: {
            '200': {
              description: "The artifact's bytes",
              headers: {
                'Content-Disposition': {
                  description: 'attachment; filename="…"; filename*=UTF-8\'\'…',
                  schema: { type: 'string' },
                },
                ETag: { description: 'The artifact id, quoted', schema: { type: 'string' } },
              },
              content: { 'application/octet-stream': { schema: { type: 'string', format: 'binary' } } },
            },
            '304': { description: 'Not modified: `If-None-Match` named this artifact' },
            ...errorResponses('not_found', ...COMMON_ERRORS),
          },
        },
      },
      [`${base}/api/openapi.json`]: {
        get: {
          operationId: 'getOpenApiDocument',
          summary: 'This document',
          security: [],
          responses: { '200': { description: 'OpenAPI 3.1', content: json({ type: 'object' }) } },
        },
      },
    },
    components: {
      schemas,
      securitySchemes: { apiKey: { type: 'apiKey', in: 'header', name: 'x-api-key' } },
    },
  };
}
