/**
 * @module http/body
 * Reading request bodies: the size limit (declared `Content-Length` first, then the bytes actually streamed, so a
 * chunked upload cannot get around it), the JSON media type, strict UTF-8, and a nesting limit checked before
 * `JSON.parse` ever sees the text.
 *
 * A body refused before it is read is left alone (server adapters discard unread bodies). One that turns out too large
 * while streaming is read to its end in the background and thrown away, up to {@link DISCARD_LIMIT_BYTES}: the
 * connection stays usable for the client's next request, whatever the adapter does with a cancelled body (some
 * destroy the socket).
 */
import { AgentryError } from '../errors.js';

/** How deep JSON bodies may nest. The create body needs 1 level; 32 leaves room and stops pathological input. */
export const MAX_JSON_DEPTH = 32;

/** `application/json` or `application/<anything>+json`, with no charset other than UTF-8. */
export function isJsonContentType(header: string | null): boolean {
  if (header === null) return false;
  const [type = '', ...params] = header.split(';').map((part) => part.trim().toLowerCase());
  if (!/^application\/(?:[a-z0-9.+-]+\+)?json$/.test(type)) return false;
  return params.every((p) => !p.startsWith('charset=') || /^charset="?utf-?8"?$/.test(p));
}

/** True when the request declares or streams a body (an empty `Content-Length: 0` body does not count). */
export function declaresBody(request: Request): boolean {
  const length = request.headers.get('content-length');
  if (length !== null) return length.trim() !== '0';
  return request.headers.has('transfer-encoding');
}

/** Reads the whole body, refusing with `payload_too_large` as soon as it is longer than `limit` bytes. */
export async function readBody(request: Request, limit: number): Promise<Uint8Array> {
  const declared = request.headers.get('content-length');
  if (declared !== null && /^\s*\d+\s*$/.test(declared) && Number(declared) > limit) throw tooLarge(limit);
  if (request.body === null) return new Uint8Array(0);
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.byteLength;
      if (total > limit) {
        discardRest(reader);
        throw tooLarge(limit);
      }
      chunks.push(value);
    }
  } catch (error) {
    if (AgentryError.isInstance(error)) throw error;
    throw new AgentryError('invalid_request', 'The request body could not be read', { cause: error });
  }
  const body = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    body.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return body;
}

/** Decodes strict UTF-8 and parses JSON, with the nesting checked first. Errors are `invalid_request`. */
export function parseJsonBody(bytes: Uint8Array, maxDepth = MAX_JSON_DEPTH): unknown {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch (error) {
    throw new AgentryError('invalid_request', 'The request body is not valid UTF-8', { cause: error });
  }
  if (text.trim() === '') throw new AgentryError('invalid_request', 'The request body is empty; send a JSON object');
  if (nestingDepth(text, maxDepth) > maxDepth) {
    throw new AgentryError('invalid_request', `The JSON body nests deeper than ${maxDepth} levels`);
  }
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    throw new AgentryError('invalid_request', `The request body is not valid JSON: ${(error as Error).message}`, {
      cause: error,
    });
  }
}

/** Deepest bracket nesting of JSON text, ignoring brackets inside strings; stops counting past `stopAt`. */
function nestingDepth(text: string, stopAt: number): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c /* \ */) i++;
      else if (c === 0x22 /* " */) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b /* [ */ || c === 0x7b /* { */) {
      depth++;
      if (depth > deepest) deepest = depth;
      if (deepest > stopAt) return deepest;
    } else if (c === 0x5d /* ] */ || c === 0x7d /* } */) depth--;
  }
  return deepest;
}

/** How much of an oversized body is read and thrown away before giving up on the connection. */
export const DISCARD_LIMIT_BYTES = 64 * 1024 * 1024;

function discardRest(reader: ReadableStreamDefaultReader<Uint8Array>): void {
  void (async () => {
    let discarded = 0;
    try {
      while (discarded < DISCARD_LIMIT_BYTES) {
        const { done, value } = await reader.read();
        if (done) return;
        discarded += value.byteLength;
      }
      await reader.cancel();
    } catch {
      // the client went away
    }
  })();
}

function tooLarge(limit: number): AgentryError {
  return new AgentryError('payload_too_large', `The request body is larger than ${limit} bytes`);
}
