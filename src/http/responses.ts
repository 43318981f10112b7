/**
 * @module http/responses
 * The two shapes every route answers with: a JSON body, or the error body (README.md#http-service)
 * (`{"error": {"code", "message", "request_id", "details"?}}`). Statuses come only from the error table in
 * `errors.ts`.
 */
import { randomUUID } from 'node:crypto';
import { AgentryError, httpStatusOf, type ErrorCode } from '../errors.js';

/** A fresh request id, for requests that did not bring a usable `x-request-id`. */
export function newRequestId(): string {
  return `req_${randomUUID().replaceAll('-', '')}`;
}

const JSON_HEADERS = {
  'content-type': 'application/json; charset=utf-8',
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
} as const;

/**
 * A JSON response as plain data, before it becomes a WHATWG `Response`: the Node adapter writes it straight to the
 * socket on its fast path (see fetch-handler.ts `plainGet`), where building a `Response` would cost more than the
 * route itself.
 */
export interface PlainResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** {@link jsonTextResponse} as plain data. */
export function plainJson(status: number, text: string, headers: Record<string, string> = {}): PlainResponse {
  return { status, headers: { ...JSON_HEADERS, ...headers }, body: text };
}

export function toResponse(plain: PlainResponse): Response {
  return new Response(plain.body, { status: plain.status, headers: plain.headers });
}

/** A JSON response with the headers every agentry response carries. */
export function jsonResponse(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return jsonTextResponse(status, JSON.stringify(body), headers);
}

/** Like {@link jsonResponse} for a body that is already JSON text (an idempotent replay). */
export function jsonTextResponse(status: number, text: string, headers: Record<string, string> = {}): Response {
  return toResponse(plainJson(status, text, headers));
}

/** {@link errorResponse} as plain data. */
export function plainError(
  code: ErrorCode,
  message: string,
  requestId: string,
  options: { details?: unknown; headers?: Record<string, string> } = {},
): PlainResponse {
  const error: Record<string, unknown> = { code, message, request_id: requestId };
  if (options.details !== undefined) error.details = options.details;
  return plainJson(httpStatusOf(code), JSON.stringify({ error }), options.headers);
}

/** An error response in the API's error shape (above). */
export function errorResponse(
  code: ErrorCode,
  message: string,
  requestId: string,
  options: { details?: unknown; headers?: Record<string, string> } = {},
): Response {
  return toResponse(plainError(code, message, requestId, options));
}

/**
 * The response for anything a route throws. An {@link AgentryError} keeps its code, message and details; anything
 * else is a bug or an outage: it is reported through `onError` and the client sees only `internal_error`.
 */
export function responseForError(
  error: unknown,
  requestId: string,
  onError: (error: unknown, context: { request_id: string }) => void,
): Response {
  return toResponse(plainForError(error, requestId, onError));
}

/** {@link responseForError} as plain data. */
export function plainForError(
  error: unknown,
  requestId: string,
  onError: (error: unknown, context: { request_id: string }) => void,
): PlainResponse {
  if (AgentryError.isInstance(error)) {
    if (httpStatusOf(error.code) >= 500) {
      onError(error, { request_id: requestId });
      return plainError(error.code, 'The server could not complete the request', requestId);
    }
    return plainError(
      error.code,
      error.message,
      requestId,
      error.details === undefined ? {} : { details: error.details },
    );
  }
  onError(error, { request_id: requestId });
  return plainError('internal_error', 'Internal server error', requestId);
}
