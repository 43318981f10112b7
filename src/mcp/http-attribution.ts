/**
 * @module mcp/http-attribution
 * Which call a Streamable HTTP server's request comes with. A server sends the requests it makes while it handles a
 * call (sampling) on the response stream of that call's POST (the SDK's `relatedRequestId`); the SDK's client
 * transport does not say which stream a message came on, so the transport's `fetch` is wrapped: a `tools/call` POST
 * that carries agentry's call token in `_meta` has its Server-Sent Events read on the side (eventsource-parser, the
 * parser the SDK itself uses), and each server request seen there is noted as the call's. The bytes pass unchanged,
 * and are noted before the SDK reads them, so a request's call is known when its handler runs.
 */
import { randomUUID } from 'node:crypto';
import { createParser } from 'eventsource-parser';

/** The `_meta` key of a call's token (a label of agentry's own: MCP reserves only `modelcontextprotocol`/`mcp`). */
export const CALL_TOKEN_META = 'agentry/call';

/** Server requests whose call is known, at most this many at once (each is forgotten when answered or its call ends). */
const MAX_NOTED = 1_000;

type Fetch = typeof fetch;

/** Server requests seen on the streams of calls, by the server's request id. */
export class CallAttribution {
  private readonly noted = new Map<string | number, string>();

  /** A new call's token, sent in its `_meta` under {@link CALL_TOKEN_META}. */
  newToken(): string {
    return randomUUID();
  }

  /** The token of the call a server request came with, if it came on a call's stream; forgets it. */
  take(requestId: string | number): string | undefined {
    const token = this.noted.get(requestId);
    this.noted.delete(requestId);
    return token;
  }

  /** Forgets what was noted for a call that ended (requests it never saw answered). */
  ended(token: string): void {
    for (const [id, t] of this.noted) if (t === token) this.noted.delete(id);
  }

  /** `base`, with the event streams of calls that carry a token read on the side. */
  wrap(base: Fetch = fetch): Fetch {
    return async (input, init) => {
      const response = await base(input, init);
      const token = init?.method === 'POST' ? callToken(init.body) : undefined;
      const type = response.headers.get('content-type') ?? '';
      if (token === undefined || !response.body || !type.includes('text/event-stream')) return response;
      const decoder = new TextDecoder();
      const parser = createParser({
        onEvent: (event) => {
          const id = serverRequestId(event.data);
          if (id !== undefined && this.noted.size < MAX_NOTED) this.noted.set(id, token);
        },
      });
      const body = response.body.pipeThrough(
        new TransformStream<Uint8Array, Uint8Array>({
          transform(chunk, controller) {
            parser.feed(decoder.decode(chunk, { stream: true }));
            controller.enqueue(chunk);
          },
        }),
      );
      return new Response(body, {
        status: response.status,
        statusText: response.statusText,
        headers: response.headers,
      });
    };
  }
}

/** The call token of a `tools/call` request body, if it has one. */
function callToken(body: unknown): string | undefined {
  if (typeof body !== 'string' || !body.includes(CALL_TOKEN_META)) return undefined;
  try {
    const message = JSON.parse(body) as { method?: unknown; params?: { _meta?: Record<string, unknown> } };
    const token = message.method === 'tools/call' ? message.params?._meta?.[CALL_TOKEN_META] : undefined;
    return typeof token === 'string' ? token : undefined;
  } catch {
    return undefined;
  }
}

/** The id of a JSON-RPC request in an event's data (a server request: `method` and `id`), else undefined. */
function serverRequestId(data: string): string | number | undefined {
  if (!data.includes('"method"')) return undefined;
  try {
    const message = JSON.parse(data) as { method?: unknown; id?: unknown };
    const id = message.id;
    return typeof message.method === 'string' && (typeof id === 'string' || typeof id === 'number') ? id : undefined;
  } catch {
    return undefined;
  }
}
