/**
 * @module tools/builtin/code-agent/claude-sdk/model-bridge
 * The model bridge: the one way Claude Code, running in a sandbox without network, reaches a model. It is a Messages
 * API server on a unix socket that is mounted into the sandbox (Claude Code's `ANTHROPIC_UNIX_SOCKET`), and it
 * answers each request with one turn of the runtime's own model provider, billed to the calling agent through the
 * credit gate (`PlatformServices.generate`): so the coding agent thinks with the runtime's model and budget, and a
 * budget that cannot pay a turn ends it with a clear error instead of an overshoot.
 *
 * What Claude Code sends is mapped onto the runtime's content blocks (`models/provider.ts`): text, tool_use and
 * tool_result pass; thinking blocks are dropped (the runtime's turns carry none); images and documents become a line
 * saying so; mid-conversation `system` turns become user text. Answers are streamed back as the Messages API's
 * server-sent events when asked (`stream: true`, which Claude Code always asks), else as one JSON message.
 */
import { randomUUID } from 'node:crypto';
import { chmod, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { z } from 'zod';
import { AgentryError } from '../../../../errors.js';
import {
  ModelError,
  type ContentBlock,
  type ModelMessage,
  type ModelRequest,
  type ModelResponse,
  type ModelToolSpec,
} from '../../../../models/provider.js';

/** A turn as the runtime's model takes it. */
export type BridgeTurn = Pick<ModelRequest, 'system' | 'messages' | 'tools' | 'maxTokens'>;

export interface ModelBridgeOptions {
  /** Where to listen: a unix socket path (at most ~100 bytes long). */
  socketPath: string;
  /** The secret Claude Code must send as `x-api-key` or `authorization: Bearer` (its `ANTHROPIC_API_KEY`). */
  apiKey: string;
  /** One billed turn of the runtime's model. Rejections become Messages API errors (see `errorReply`). */
  generate(turn: BridgeTurn, signal: AbortSignal): Promise<ModelResponse>;
  /** Output tokens of one turn at most, whatever `max_tokens` asks: the reservation counts on it. @default 8192 */
  maxOutputTokens?: number;
}

export interface ModelBridge {
  socketPath: string;
  /** Turns answered, and the first error the bridge answered with (an out-of-credits refusal, say). */
  stats(): { turns: number; firstError: AgentryError | ModelError | Error | undefined };
  close(): Promise<void>;
}

/** What of a Messages API request the bridge reads; everything else (cache_control, betas, metadata) is ignored. */
const Block = z.looseObject({ type: z.string() });
const MessagesRequest = z.looseObject({
  model: z.string().optional(),
  max_tokens: z.number().int().positive(),
  system: z.union([z.string(), z.array(z.looseObject({ type: z.string(), text: z.string().optional() }))]).optional(),
  messages: z.array(z.looseObject({ role: z.string(), content: z.union([z.string(), z.array(Block)]) })),
  tools: z.array(z.looseObject({ name: z.string(), type: z.string().optional() })).optional(),
  stream: z.boolean().optional(),
});
type MessagesRequest = z.infer<typeof MessagesRequest>;

/** Claude Code's first system block identifies its build for Anthropic's billing; it means nothing to other models. */
const BILLING_HEADER = 'x-anthropic-billing-header';

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((b: { type?: string; text?: string }) =>
      b.type === 'text' ? (b.text ?? '') : `[${b.type ?? 'block'} omitted: the model bridge passes text only]`,
    )
    .join('\n');
}

function toBlocks(content: MessagesRequest['messages'][number]['content']): ContentBlock[] {
  if (typeof content === 'string') return content === '' ? [] : [{ type: 'text', text: content }];
  const blocks: ContentBlock[] = [];
  for (const raw of content) {
    const b = raw as Record<string, unknown>;
    switch (b.type) {
      case 'text':
        if (typeof b.text === 'string' && b.text !== '') blocks.push({ type: 'text', text: b.text });
        break;
      case 'tool_use':
        blocks.push({ type: 'tool_use', id: String(b.id), name: String(b.name), input: b.input ?? {} });
        break;
      case 'tool_result':
        blocks.push({
          type: 'tool_result',
          tool_use_id: String(b.tool_use_id),
          content: textOf(b.content),
          ...(b.is_error === true ? { is_error: true } : {}),
        });
        break;
      // The runtime's model wrote these (the bridge handed them to Claude Code): they go back to it unchanged, as the
      // Messages API requires within a tool-use loop. Anything malformed cannot be a block it signed.
      case 'thinking':
        if (typeof b.thinking === 'string' && typeof b.signature === 'string') {
          blocks.push({ type: 'thinking', thinking: b.thinking, signature: b.signature });
        }
        break;
      case 'redacted_thinking':
        if (typeof b.data === 'string') blocks.push({ type: 'redacted_thinking', data: b.data });
        break;
      default:
        blocks.push({ type: 'text', text: `[${String(b.type)} omitted: the model bridge passes text only]` });
    }
  }
  return blocks;
}

/**
 * A Messages API request as one turn of the runtime's model. Consecutive messages of one role are merged (a `system`
 * turn becomes user text next to a user message), and a user message's tool results come first, as the API wants.
 */
export function toModelTurn(body: MessagesRequest, maxOutputTokens: number): BridgeTurn {
  const system = (typeof body.system === 'string' ? [body.system] : (body.system ?? []).map((b) => b.text ?? ''))
    .filter((text) => text !== '' && !text.startsWith(BILLING_HEADER))
    .join('\n\n');
  const messages: ModelMessage[] = [];
  for (const message of body.messages) {
    const role = message.role === 'assistant' ? 'assistant' : 'user';
    let blocks = toBlocks(message.content);
    if (message.role === 'system') {
      blocks = blocks.map((b) => (b.type === 'text' ? { ...b, text: `<system>\n${b.text}\n</system>` } : b));
    }
    if (blocks.length === 0) continue;
    const last = messages.at(-1);
    if (last?.role === role) last.content.push(...blocks);
    else messages.push({ role, content: blocks });
  }
  for (const m of messages) {
    if (m.role === 'user') {
      m.content = [
        ...m.content.filter((b) => b.type === 'tool_result'),
        ...m.content.filter((b) => b.type !== 'tool_result'),
      ];
    }
  }
  const tools: ModelToolSpec[] = (body.tools ?? [])
    // Server tools (web search and the like, marked by `type`) have no schema and are not the runtime's to run.
    .filter(
      (t) =>
        (t.type === undefined || t.type === 'custom') && typeof t.input_schema === 'object' && t.input_schema !== null,
    )
    .map((t) => ({
      name: t.name,
      description: typeof t.description === 'string' ? t.description : '',
      input_schema: t.input_schema as Record<string, unknown>,
    }));
  return { system, messages, tools, maxTokens: Math.min(body.max_tokens, maxOutputTokens) };
}

/** The runtime's answer as a Messages API message. */
export function toApiMessage(response: ModelResponse, model: string) {
  return {
    id: `msg_${randomUUID().replaceAll('-', '')}`,
    type: 'message' as const,
    role: 'assistant' as const,
    model,
    // Thinking blocks go to Claude Code as they came, so that it sends them back within the tool-use loop.
    content: response.content.map((b) =>
      b.type === 'tool_use' ? { type: 'tool_use' as const, id: b.id, name: b.name, input: b.input } : { ...b },
    ),
    stop_reason: response.stopReason,
    stop_sequence: null,
    usage: {
      input_tokens: response.usage.inputTokens,
      output_tokens: response.usage.outputTokens,
      cache_creation_input_tokens: response.usage.cacheCreationInputTokens ?? 0,
      cache_read_input_tokens: response.usage.cacheReadInputTokens ?? 0,
    },
  };
}

/** The same message as the Messages API's stream of server-sent events. */
export function toSse(message: ReturnType<typeof toApiMessage>): string {
  const event = (type: string, data: Record<string, unknown>) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
  let out = event('message_start', {
    message: { ...message, content: [], stop_reason: null, usage: { ...message.usage, output_tokens: 0 } },
  });
  message.content.forEach((block, index) => {
    if (block.type === 'text') {
      out += event('content_block_start', { index, content_block: { type: 'text', text: '' } });
      out += event('content_block_delta', { index, delta: { type: 'text_delta', text: block.text } });
    } else if (block.type === 'thinking') {
      out += event('content_block_start', { index, content_block: { type: 'thinking', thinking: '', signature: '' } });
      out += event('content_block_delta', { index, delta: { type: 'thinking_delta', thinking: block.thinking } });
      out += event('content_block_delta', { index, delta: { type: 'signature_delta', signature: block.signature } });
    } else if (block.type === 'redacted_thinking') {
      out += event('content_block_start', { index, content_block: { type: 'redacted_thinking', data: block.data } });
    } else {
      out += event('content_block_start', {
        index,
        content_block: { type: 'tool_use', id: block.id, name: block.name, input: {} },
      });
      out += event('content_block_delta', {
        index,
        delta: { type: 'input_json_delta', partial_json: JSON.stringify(block.input ?? {}) },
      });
    }
    out += event('content_block_stop', { index });
  });
  out += event('message_delta', {
    delta: { stop_reason: message.stop_reason, stop_sequence: null },
    usage: { output_tokens: message.usage.output_tokens },
  });
  return out + event('message_stop', {});
}

/**
 * The Messages API error for a failure. A refusal for credits, a bad request and a provider's final error are 400s,
 * which Claude Code does not retry (it ends its turn with the message); a provider's rate limit is a 429 with its
 * delay, which Claude Code retries after waiting.
 */
export function errorReply(error: unknown): { status: number; type: string; message: string; retryAfterS?: number } {
  if (error instanceof ModelError && error.retryable) {
    return {
      status: 429,
      type: 'rate_limit_error',
      message: error.message,
      ...(error.retryAfterMs !== undefined ? { retryAfterS: Math.ceil(error.retryAfterMs / 1000) } : {}),
    };
  }
  const message = error instanceof Error ? error.message : String(error);
  return { status: 400, type: 'invalid_request_error', message };
}

async function readBody(req: IncomingMessage, limit: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw new AgentryError('invalid_request', `the request is larger than ${limit} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** Requests up to 32 MB: Claude Code sends the whole conversation each turn. */
const MAX_REQUEST_BYTES = 32 * 1024 * 1024;

/**
 * Starts a bridge on `socketPath` (made reachable by any uid: the sandbox's is not the runtime's; the `apiKey`
 * guards it).
 *
 * @example
 * const bridge = await startModelBridge({ socketPath, apiKey, generate: (turn, signal) => services.generate(id, turn, { signal }) });
 */
export async function startModelBridge(options: ModelBridgeOptions): Promise<ModelBridge> {
  const maxOutputTokens = options.maxOutputTokens ?? 8192;
  let turns = 0;
  let firstError: AgentryError | ModelError | Error | undefined;
  const inFlight = new Set<AbortController>();

  const fail = (res: ServerResponse, status: number, type: string, message: string, retryAfterS?: number) => {
    res.writeHead(status, {
      'content-type': 'application/json',
      ...(retryAfterS !== undefined ? { 'retry-after': String(retryAfterS) } : {}),
    });
    res.end(JSON.stringify({ type: 'error', error: { type, message } }));
  };

  const server = createServer((req, res) => {
    void (async () => {
      const path = (req.url ?? '').split('?')[0];
      // Claude Code sends the key as `x-api-key`; the current Anthropic SDK sends it as a bearer token.
      const bearer = req.headers.authorization?.replace(/^Bearer /i, '');
      if (req.headers['x-api-key'] !== options.apiKey && bearer !== options.apiKey) {
        return fail(res, 401, 'authentication_error', 'this is the agentry model bridge: the key is not this run’s');
      }
      if (req.method !== 'POST' || (path !== '/v1/messages' && path !== '/v1/messages/count_tokens')) {
        return fail(
          res,
          404,
          'not_found_error',
          `the model bridge serves POST /v1/messages only, not ${req.method} ${path}`,
        );
      }
      let body: MessagesRequest;
      try {
        const raw: unknown = JSON.parse(await readBody(req, MAX_REQUEST_BYTES));
        body = MessagesRequest.parse(
          path === '/v1/messages/count_tokens' ? { max_tokens: 1, ...(raw as object) } : raw,
        );
      } catch (error) {
        const message = error instanceof z.ZodError ? z.prettifyError(error) : (error as Error).message;
        return fail(res, 400, 'invalid_request_error', `not a Messages API request: ${message}`);
      }
      if (path === '/v1/messages/count_tokens') {
        // An estimate (4 bytes a token), free: Claude Code uses it to decide when to compact.
        res.writeHead(200, { 'content-type': 'application/json' });
        const counted = JSON.stringify([body.system ?? '', body.messages, body.tools ?? []]).length;
        return res.end(JSON.stringify({ input_tokens: Math.ceil(counted / 4) }));
      }
      const abort = new AbortController();
      inFlight.add(abort);
      // Claude Code gone (killed with its sandbox, or it gave up): the model call stops too.
      res.on('close', () => abort.abort());
      try {
        const response = await options.generate(toModelTurn(body, maxOutputTokens), abort.signal);
        turns += 1;
        const message = toApiMessage(response, body.model ?? 'agentry');
        if (body.stream) {
          res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
          res.end(toSse(message));
        } else {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify(message));
        }
      } catch (error) {
        firstError ??= error as Error;
        const reply = errorReply(error);
        if (!res.headersSent) fail(res, reply.status, reply.type, reply.message, reply.retryAfterS);
      } finally {
        inFlight.delete(abort);
      }
    })().catch((error: unknown) => {
      firstError ??= error as Error;
      if (!res.headersSent) fail(res, 500, 'api_error', (error as Error).message);
      else res.destroy();
    });
  });

  await rm(options.socketPath, { force: true });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.socketPath, () => {
      server.off('error', reject);
      resolve();
    });
  });
  await chmod(options.socketPath, 0o666);

  return {
    socketPath: options.socketPath,
    stats: () => ({ turns, firstError }),
    async close() {
      for (const abort of inFlight) abort.abort();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await rm(options.socketPath, { force: true });
    },
  };
}
