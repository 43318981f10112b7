/**
 * @module http/artifacts
 * The answer of `GET {basePath}/api/agents/{id}/artifacts/{artifact_id}`: an artifact's bytes as a download. The
 * bytes are whatever a tool stored, under a name and a media type the tool chose (possibly from a web page), so
 * nothing of them is trusted: the media type is served only when it is well-formed, the name only in a quoted,
 * percent-encoded header, and the answer is a sandboxed attachment that a browser never renders as a page of this
 * origin.
 *
 * Caching: an artifact never changes (each `put` makes a new id), so its id is a strong ETag and a revalidation
 * answers 304 without the bytes. It is not `immutable` or fresh for any time: it belongs to one account and is gone
 * when its agent is deleted, so every use goes back to the server, which checks the key and that it still exists.
 * `private` keeps it out of shared caches, which would otherwise store it: the key travels in `x-api-key`, not in
 * `Authorization`, which is the only header that keeps a response out of shared caches by itself.
 */
import type { ArtifactInfo } from '../core/schemas.js';
import { AgentryError } from '../errors.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** An artifact id of a path segment; a malformed one is refused like an unknown one (404, not 400). */
export function artifactIdOf(segment: string): string {
  let id: string;
  try {
    id = decodeURIComponent(segment);
  } catch {
    id = segment;
  }
  if (!UUID.test(id)) throw new AgentryError('not_found', `Artifact ${JSON.stringify(id.slice(0, 100))} was not found`);
  return id.toLowerCase();
}

const TOKEN = "[!#$%&'*+.^_`|~0-9A-Za-z-]+";
/** `type/subtype` with optional parameters (RFC 9110 §8.3.1), and nothing a header could not carry. */
const MEDIA_TYPE = new RegExp(
  `^${TOKEN}/${TOKEN}(?:[ \\t]*;[ \\t]*${TOKEN}=(?:${TOKEN}|"[^"\\\\\\x00-\\x1f\\x7f]*"))*$`,
);

/** The artifact's media type when it is a well-formed one, else `application/octet-stream`. */
export function servedMediaType(mimeType: string): string {
  return mimeType.length <= 255 && MEDIA_TYPE.test(mimeType) ? mimeType : 'application/octet-stream';
}

/** Longest name put in `Content-Disposition`, in code points: no file system keeps more than 255 bytes of a name. */
const MAX_NAME_CODE_POINTS = 255;
/**
 * Control characters (C0, DEL, C1), format characters (bidi embeddings, overrides and isolates such as U+202E, which
 * make `evil\u202Etxt.exe` show as `evilexe.txt`; zero-width characters; marks), and line and paragraph separators:
 * nothing of them belongs in a file name a person reads.
 */
const CONTROL = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * `attachment; filename="<ASCII fallback>"` plus, when the name is not plain ASCII, `filename*=UTF-8''<name>`
 * (RFC 6266 §4.3, RFC 8187 encoding), which clients that know it prefer. The fallback keeps printable ASCII but `"`,
 * `\` and `/`, with `_` for everything else; control, bidi and other invisible format characters are
 * dropped from both forms.
 */
export function contentDisposition(name: string): string {
  const clean = [...name.replace(LONE_SURROGATE, '\ufffd').replace(CONTROL, '')]
    .slice(0, MAX_NAME_CODE_POINTS)
    .join('');
  const fallback = clean.replace(/[^\x20-\x7e]|["\\/]/gu, '_').trim() || 'artifact';
  if (fallback === clean || clean.trim() === '') return `attachment; filename="${fallback}"`;
  const encoded = encodeURIComponent(clean).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  return `attachment; filename="${fallback}"; filename*=UTF-8''${encoded}`;
}

/** A strong validator: the bytes behind an artifact id never change. */
function etagOf(artifact: ArtifactInfo): string {
  return `"${artifact.artifact_id}"`;
}

/** True when `If-None-Match` names the artifact's ETag (or is `*`). */
function matches(ifNoneMatch: string | null, etag: string): boolean {
  if (ifNoneMatch === null) return false;
  return ifNoneMatch.split(',').some((tag) => {
    const t = tag.trim();
    return t === '*' || t === etag || t === `W/${etag}`;
  });
}

/**
 * The download of an artifact: 200 with the bytes (none for HEAD, which still says how many), or 304 when the
 * caller's `If-None-Match` already names it.
 */
export function artifactResponse(
  artifact: ArtifactInfo,
  data: Uint8Array,
  request: { method: string; ifNoneMatch: string | null },
): Response {
  const etag = etagOf(artifact);
  const headers: Record<string, string> = {
    'cache-control': 'private, no-cache',
    etag,
  };
  if (matches(request.ifNoneMatch, etag)) return new Response(null, { status: 304, headers });
  Object.assign(headers, {
    'content-type': servedMediaType(artifact.mime_type),
    'content-length': String(data.byteLength),
    'content-disposition': contentDisposition(artifact.name),
    'x-content-type-options': 'nosniff',
    // Opened in a browser tab despite `attachment`, an HTML or SVG artifact runs no script and loads nothing.
    'content-security-policy': "default-src 'none'; sandbox",
  });
  // Storage hands out plain Uint8Arrays (never over a SharedArrayBuffer), which is what the cast says.
  const body = request.method === 'HEAD' ? null : (data as Uint8Array<ArrayBuffer>);
  return new Response(body, { status: 200, headers });
}
