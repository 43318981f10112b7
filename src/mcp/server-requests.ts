/**
 * @module mcp/server-requests
 * What a server may ask agentry while it is connected, and the answers: `roots/list` (the configured roots),
 * `sampling/createMessage` (the calling agent's model, one billed turn, only for servers that opt in, at most
 * `sampling_max_requests` per call), `elicitation/create` (the embedding application's handler). What is not
 * declared is refused with the reason, not "Method not found".
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type {
  ListRootsRequestSchema,
  CreateMessageRequestSchema,
  ElicitRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import type { CreateMessageRequest, CreateMessageResult } from '@modelcontextprotocol/sdk/types.js';
import type { McpElicitationHandler } from '../tools/tool-source.js';
import type { McpServerConfig } from './config.js';
import type { CallAttribution } from './http-attribution.js';

const INVALID_REQUEST = -32600;
const METHOD_NOT_FOUND = -32601;
const INTERNAL_ERROR = -32603;

/** The SDK's request schemas the handlers are registered with (its types module, loaded on first use). */
interface RequestSchemas {
  ListRootsRequestSchema: typeof ListRootsRequestSchema;
  CreateMessageRequestSchema: typeof CreateMessageRequestSchema;
  ElicitRequestSchema: typeof ElicitRequestSchema;
}

/** What the runtime lends the connection for the server's own requests (set once the runtime has opened). */
export interface McpClientHost {
  /** One model turn of the agent, billed to it: the answer to a sampling request. */
  sample?(agentId: string, request: CreateMessageRequest['params'], signal: AbortSignal): Promise<CreateMessageResult>;
  /** The embedding application's elicitation handler. */
  onElicitation?: McpElicitationHandler | undefined;
}

/** A call in flight, for the server's requests that come with it (sampling). */
export interface CallInFlight {
  agentId: string | undefined;
  signal: AbortSignal | undefined;
  /** Sampling requests answered for it so far (a server may not loop on the agent's model). */
  samples: number;
  /** Its token in `_meta` (Streamable HTTP servers that may sample): its stream's requests are its own. */
  token?: string | undefined;
}

/** What of a connection the handlers read: its config, the runtime's services, its calls in flight. */
interface ConnectionView {
  config: McpServerConfig;
  host: McpClientHost;
  inFlight: ReadonlySet<CallInFlight>;
  /** Which call's response stream a request came on (Streamable HTTP). */
  attribution: Pick<CallAttribution, 'take'>;
}

/**
 * What this client tells the server it can do: `roots` when some are configured, `sampling` when the server may
 * use the calling agent's model, `elicitation` when the embedding application answers for a person.
 */
export function clientCapabilities(config: McpServerConfig, host: McpClientHost): Record<string, unknown> {
  return {
    ...(config.roots.length > 0 ? { roots: { listChanged: false } } : {}),
    ...(config.sampling ? { sampling: {} } : {}),
    ...(host.onElicitation ? { elicitation: { form: {} } } : {}),
  };
}

/** Handlers of the server's requests: roots, sampling and elicitation, each only when declared. */
export function answerServerRequests(client: Client, types: RequestSchemas, connection: ConnectionView): void {
  const { config, host, inFlight, attribution } = connection;
  if (config.roots.length > 0) {
    client.setRequestHandler(types.ListRootsRequestSchema, () => ({ roots: config.roots }));
  }
  if (config.sampling) {
    client.setRequestHandler(types.CreateMessageRequestSchema, async (request, extra) => {
      // The call whose response stream carried the request, when one did (Streamable HTTP); else the one agent whose
      // calls are in flight, counted on its oldest call: the one the request most likely came with.
      const token = attribution.take(extra.requestId);
      const own = token === undefined ? undefined : [...inFlight].find((c) => c.token === token && c.agentId);
      const agentId = own?.agentId ?? callerOf(inFlight, 'sampling');
      const call = own ?? [...inFlight].find((c) => c.agentId === agentId)!;
      if (++call.samples > config.samplingMaxRequests) {
        throw refusal(
          INVALID_REQUEST,
          `agentry declined the sampling request: a tool call may make at most ${config.samplingMaxRequests} ` +
            '("sampling_max_requests" in the server\'s mcpServers entry)',
        );
      }
      if (!host.sample) throw refusal(INTERNAL_ERROR, 'agentry: the runtime is not open yet');
      // Ends with the request, or with the call(s) it may belong to (a pause or delete of that agent).
      const calls = own ? [own] : [...inFlight];
      const signals = [extra.signal, ...calls.flatMap((c) => (c.signal ? [c.signal] : []))];
      return host.sample(agentId, request.params, AbortSignal.any(signals));
    });
  }
  const onElicitation = host.onElicitation;
  if (onElicitation) {
    client.setRequestHandler(types.ElicitRequestSchema, async (request) => {
      const params = request.params;
      if (params.mode === 'url') throw refusal(INVALID_REQUEST, 'agentry answers form elicitation only');
      const agents = new Set([...inFlight].map((c) => c.agentId));
      const answer = await onElicitation({
        server: config.name,
        agentId: agents.size === 1 ? [...agents][0] : undefined,
        message: params.message,
        requestedSchema: params.requestedSchema as Record<string, unknown>,
      });
      return answer.action === 'accept'
        ? { action: 'accept' as const, content: answer.content ?? {} }
        : { action: answer.action };
    });
  }
  // A request this client did not declare it answers (a server that asks anyway) gets a reason, not "not found".
  client.fallbackRequestHandler = async (request) => {
    if (request.method === 'elicitation/create') {
      throw refusal(
        INVALID_REQUEST,
        'agentry declined the elicitation: it runs agents unattended, with no person to answer, and the ' +
          'application embedding it gave no elicitation handler (onMcpElicitation). Go on without the answer.',
      );
    }
    if (request.method === 'sampling/createMessage') {
      throw refusal(
        INVALID_REQUEST,
        `agentry declined the sampling request: the server ${JSON.stringify(config.name)} is not allowed ` +
          'to use the agent\'s model ("sampling": true in its mcpServers entry allows it).',
      );
    }
    if (request.method === 'roots/list') {
      throw refusal(INVALID_REQUEST, 'agentry declares no roots for this server ("roots" in its entry)');
    }
    throw refusal(METHOD_NOT_FOUND, `agentry does not answer ${request.method}`);
  };
}

/**
 * The agent a request of the server (sampling) is for, when its stream did not say: the agent whose calls are in
 * flight. A connection serves every agent and MCP does not say which call a server request comes with. A stdio server
 * that may sample runs one agent's calls at a time (agent-turns.ts), so there is one; should calls of several agents
 * still be in flight (a Streamable HTTP server that sent the request outside the call's stream, calls made on the
 * connection directly), the request is refused rather than billed to a guess.
 */
function callerOf(inFlight: ReadonlySet<CallInFlight>, what: string): string {
  const agents = new Set([...inFlight].map((c) => c.agentId));
  agents.delete(undefined);
  if (agents.size === 1) return [...agents][0]!;
  throw refusal(
    INVALID_REQUEST,
    agents.size === 0
      ? `agentry declined the ${what} request: no agent's tool call is in flight on this server`
      : `agentry declined the ${what} request: calls of ${agents.size} agents are in flight on this server, and ` +
          'it cannot tell which agent should answer (and pay for) it',
  );
}

/**
 * An error the SDK answers a server's request with: its code and message as they are (an `McpError` would put
 * "MCP error <code>:" before the message, and the server's SDK puts it there again).
 */
function refusal(code: number, message: string): Error {
  return Object.assign(new Error(message), { code });
}
