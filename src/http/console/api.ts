/**
 * @module http/console/api
 * The console's JSON calls, under `{basePath}/console/api/`, for the account the session (or the embedding app's
 * `authenticate`) names. Each is a thin use of the runtime's public API — the same checks, the same 404 for another
 * account's agent — plus the few reads the page needs that the agent API has no route for: a page of agents by
 * position with goal search (`runtime.agentPage`), an agent's timeline (see timeline.ts), a running tree's counts,
 * and the account's credits summed by model and by tool with a page of its ledger (`runtime.accounts`). Like the rest
 * of `src/http`, it reads only through the runtime, never its storage.
 */
import { z } from 'zod';
import type { AgentRuntime } from '../../core/agent-runtime.js';
import { AgentStatusSchema, CreateAgentBodySchema } from '../../core/schemas.js';
import { parseArgs } from '../../base/validate.js';
import { AgentryError } from '../../errors.js';
import type { AgentPositionPage } from '../../core/agent-list.js';
import { artifactIdOf, artifactResponse } from '../artifacts.js';
import { DEFAULT_EVENT_STREAM_LIMITS, type StreamEndReason, type StreamTicket } from '../event-streams.js';
import { agentEventStream } from '../events.js';
import { agentIdOf } from '../poll.js';
import { MAX_NEEDLE_CHARS } from '../../storage/search.js';
import { jsonResponse } from '../responses.js';
import { buildTimeline } from './timeline.js';
import type { ConsoleIdentity } from './sessions.js';

/**
 * Ledger rows on one page of the credits page, newest first; older ones are a page away (`?before=`), never read with
 * them.
 */
export const CONSOLE_LEDGER_PAGE_ROWS = 100;
/**
 * The console mints a key only while the account has fewer than this many: minting over HTTP is bounded,
 * and audited. Rate limits are per account, so more keys buy no more requests; the cap bounds the rows and the keys
 * a stolen session can leave behind. Operators mint beyond it with `agentry keys create`.
 */
export const MAX_CONSOLE_KEYS = 10;

const PageQuerySchema = z
  .object({
    status: AgentStatusSchema.optional(),
    q: z.string().max(MAX_NEEDLE_CHARS).optional(),
    offset: z.coerce.number().int().min(0).max(10_000_000).default(0),
    limit: z.coerce.number().int().min(1).max(200).default(50),
  })
  .strip();

const CreditsQuerySchema = z
  .object({ before: z.coerce.number().int().min(1).max(Number.MAX_SAFE_INTEGER).optional() })
  .strip();

const CreateKeyBodySchema = z.object({ name: z.string().trim().max(200).optional() }).strict();
const KeyIdSchema = z.string().regex(/^key_[A-Za-z0-9_-]{1,100}$/, 'must be a key id like key_…');

/** What one call needs. */
export interface ConsoleCall {
  runtime: AgentRuntime;
  identity: ConsoleIdentity;
  request: Request;
  url: URL;
  /** The path after `console/api/`, split on `/`. */
  parts: string[];
  /** Reads the JSON body (`required: false`: an absent body is `undefined`). */
  body(required: boolean): Promise<unknown>;
  /** The key deleted by this call: sessions from it end. */
  onKeyDeleted(keyId: string): Promise<void>;
  /** For the access log: an event stream of this agent opened; returns what to call when it ends. */
  streamOpened?: ((agentId: string) => (reason: StreamEndReason) => void) | undefined;
  /** A ticket of the API's stream registry for a new event stream, or null when the cap is reached. */
  openStream(): StreamTicket | null;
  /** Writes an audit line for a key minted or deleted. */
  audit(event: 'console.key_created' | 'console.key_deleted', keyId: string): void;
}

/** The methods each console API path takes, or null when the path is none of them. */
export function apiMethods(parts: string[]): readonly string[] | null {
  const [a, b, c, d, ...rest] = parts;
  if (rest.length > 0) return null;
  if (a === 'session') return b === undefined ? ['GET', 'POST', 'DELETE'] : null;
  if (a === 'credits' || a === 'models') return b === undefined ? ['GET'] : null;
  if (a === 'keys') return b === undefined ? ['GET', 'POST'] : c === undefined ? ['DELETE'] : null;
  if (a !== 'agents') return null;
  if (b === undefined) return ['GET', 'POST'];
  if (c === undefined) return d === undefined ? ['GET', 'DELETE'] : null;
  if (c === 'pause' || c === 'resume') return d === undefined ? ['POST'] : null;
  if (c === 'children' || c === 'events' || c === 'summary') return d === undefined ? ['GET'] : null;
  if (c === 'artifacts') return d !== undefined && d !== '' ? ['GET', 'HEAD'] : null;
  return null;
}

function queryOf(url: URL): Record<string, string> {
  return Object.fromEntries([...url.searchParams.keys()].map((k) => [k, url.searchParams.get(k) ?? '']));
}

/** A list's query as `runtime.agentPage` takes it (an empty search is no search). */
function pageQuery(q: z.output<typeof PageQuerySchema>) {
  return {
    offset: q.offset,
    limit: q.limit,
    ...(q.status === undefined ? {} : { status: q.status }),
    ...(q.q === undefined || q.q === '' ? {} : { q: q.q }),
  };
}

/**
 * A page of agents as the console's lists take it, each agent that has children with its tree summed (one query for
 * the page); `truncated` when a goal search stopped at its bounds.
 */
async function pageBody(
  runtime: AgentRuntime,
  accountId: string,
  page: AgentPositionPage,
  q: { offset: number; limit: number },
) {
  const parents = page.data.filter((a) => a.sub_agent_count > 0).map((a) => a.agent_id);
  const trees = parents.length === 0 ? {} : await runtime.treeTotals(parents, { accountId });
  return {
    data: page.data.map((agent) => {
      const tree = trees[agent.agent_id];
      return tree === undefined ? agent : { ...agent, tree };
    }),
    total: page.total,
    offset: q.offset,
    limit: q.limit,
    ...(page.truncated ? { truncated: true } : {}),
  };
}

/** Answers one console API call (everything but the session routes, which need the cookie). */
export async function answerConsoleCall(call: ConsoleCall): Promise<Response> {
  const { runtime, identity, request, url, parts } = call;
  const scope = { accountId: identity.accountId };
  const [a, b, c, d] = parts;
  const method = request.method;

  if (a === 'models') return jsonResponse(200, { models: runtime.models });
  if (a === 'credits') {
    const { before } = parseArgs(CreditsQuerySchema, queryOf(url), 'query');
    return jsonResponse(200, await creditsOf(runtime, identity.accountId, before));
  }
  if (a === 'keys') {
    if (b === undefined && method === 'GET') {
      const [keys, lastUsed] = await Promise.all([
        runtime.accounts.listApiKeys(identity.accountId),
        runtime.accounts.keysLastUsed(identity.accountId),
      ]);
      return jsonResponse(200, {
        data: keys.map((k) => ({ ...k, last_used_at: lastUsed[k.key_id] ?? null })),
        signed_in_with: identity.session?.row.key_id ?? null,
      });
    }
    if (b === undefined) {
      const body = parseArgs(CreateKeyBodySchema, (await call.body(false)) ?? {}, 'request body');
      const name = body.name === undefined || body.name === '' ? undefined : body.name;
      const held = (await runtime.accounts.listApiKeys(identity.accountId)).length;
      if (held >= MAX_CONSOLE_KEYS) {
        throw new AgentryError(
          'invalid_state',
          `This account has ${held} API keys; the console mints keys only while it has fewer than ` +
            `${MAX_CONSOLE_KEYS}: delete one first`,
        );
      }
      const created = await runtime.accounts.createApiKey(identity.accountId, name === undefined ? {} : { name });
      call.audit('console.key_created', created.key_id);
      return jsonResponse(201, created);
    }
    const keyId = parseArgs(KeyIdSchema, decodeURIComponent(b), 'key id');
    await runtime.accounts.deleteApiKey(identity.accountId, keyId);
    call.audit('console.key_deleted', keyId);
    await call.onKeyDeleted(keyId);
    return jsonResponse(200, { key_id: keyId, deleted: true });
  }

  // agents
  if (b === undefined) {
    if (method === 'POST') {
      const body = parseArgs(CreateAgentBodySchema, await call.body(true), 'request body');
      const created = await runtime.create({
        goal: body.goal,
        accountId: identity.accountId,
        ...(body.model === undefined ? {} : { model: body.model }),
        ...(body.max_credits === undefined ? {} : { maxCredits: body.max_credits }),
      });
      return jsonResponse(201, created);
    }
    const q = parseArgs(PageQuerySchema, queryOf(url), 'query');
    const page = await runtime.agentPage({
      ...pageQuery(q),
      accountId: identity.accountId,
      parentId: null,
      order: 'newest',
    });
    return jsonResponse(200, await pageBody(runtime, identity.accountId, page, q));
  }

  const agentId = agentIdOf(b);
  if (c === undefined && method === 'DELETE') return jsonResponse(200, await runtime.delete(agentId, scope));
  if (c === undefined) {
    const [{ agent, messages }, outbox, activity] = await Promise.all([
      runtime.get(agentId, scope),
      runtime.outbox(agentId, scope),
      runtime.activity(agentId, scope),
    ]);
    const timeline = buildTimeline({
      messages: messages.map((m) => ({ ...m, agent_id: activity.agent.agent_id })),
      turns: activity.turns,
      toolCalls: activity.toolCalls,
      ledger: activity.ledger,
      statuses: activity.statusMarks,
    });
    // `timeline_truncated`: the agent has more ledger rows or tool calls than one read returns, so its oldest model
    // calls or tool calls are missing.
    const truncated = activity.ledgerTruncated || activity.toolCallsTruncated ? { timeline_truncated: true } : {};
    return jsonResponse(200, { agent, messages, outbox, timeline, ...truncated });
  }
  if (c === 'pause' || c === 'resume') {
    const agent = c === 'pause' ? await runtime.pause(agentId, scope) : await runtime.resume(agentId, scope);
    return jsonResponse(200, { agent });
  }
  // What a running tree's page asks every second: the agent, its children by status and its tree summed.
  // The account's credits ride along with the calls of the tree that wait for them in this process (with several
  // workers, each knows only its own waits): a tree that seems slow may be waiting for holds to be released.
  if (c === 'summary') {
    const [agent, account, waiting] = await Promise.all([
      runtime.treeStatus(agentId, scope),
      runtime.accounts.get(identity.accountId),
      runtime.creditWaits(agentId, scope),
    ]);
    return jsonResponse(200, {
      agent,
      credits: { balance: account.balance, reserved: account.reserved, available: account.available, waiting },
    });
  }
  if (c === 'children') {
    const parent = await runtime.get(agentId, scope); // 404 for another account's agent
    const q = parseArgs(PageQuerySchema, queryOf(url), 'query');
    const page = await runtime.agentPage({
      ...pageQuery(q),
      accountId: identity.accountId,
      parentId: parent.agent.agent_id,
      order: 'oldest',
    });
    return jsonResponse(200, await pageBody(runtime, identity.accountId, page, q));
  }
  if (c === 'artifacts') {
    const { artifact, data } = await runtime.getArtifact(agentId, artifactIdOf(d!), scope);
    return artifactResponse(artifact, data, { method, ifNoneMatch: request.headers.get('if-none-match') });
  }
  // events: the API's stream, counted in the API's registry (its per-key cap, its re-check every second of the key
  // and the subscription, its lifetime), and ended also when the session ends in this process.
  const ticket = call.openStream();
  if (ticket === null) {
    throw new AgentryError('rate_limited', 'Too many event streams open for this key; close one first', {
      details: { retry_after: 5 },
    });
  }
  try {
    return await agentEventStream(
      runtime,
      agentId,
      identity.accountId,
      request.headers.get('last-event-id'),
      AbortSignal.any([request.signal, identity.signal]),
      ticket,
      DEFAULT_EVENT_STREAM_LIMITS.slowReaderBytes,
      call.streamOpened?.(agentId),
    );
  } catch (error) {
    ticket.release();
    throw error;
  }
}

/**
 * The account's balance, its spend summed by model and by tool (by the storage, in one query), and one page of its
 * ledger, newest first: the newest {@link CONSOLE_LEDGER_PAGE_ROWS} rows, or those older than `before`. `older` is the
 * `before` of the next page, or null at the oldest.
 */
async function creditsOf(runtime: AgentRuntime, accountId: string, before: number | undefined) {
  const [account, spend, page] = await Promise.all([
    runtime.accounts.get(accountId),
    runtime.accounts.spend(accountId),
    runtime.accounts.ledgerPage(accountId, {
      limit: CONSOLE_LEDGER_PAGE_ROWS,
      ...(before === undefined ? {} : { before }),
    }),
  ]);
  return {
    subscription_active: account.subscription_active,
    balance: account.balance,
    reserved: account.reserved,
    available: account.available,
    by_model: spend.by_model,
    by_tool: spend.by_tool,
    recent: page.entries,
    older: page.next_before,
  };
}

/** Thrown for an unknown console path (404, like the API's unknown routes). */
export function noSuchCall(path: string): AgentryError {
  return new AgentryError('not_found', `No console call ${JSON.stringify(path.slice(0, 200))}`);
}
