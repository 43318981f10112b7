/**
 * @module storage/validate
 * The checks of an artifact, a page read or a status change that need no data, shared by every adapter so that they
 * refuse the same things with the same messages. What needs the data (the agent exists, its artifacts' total) each
 * adapter checks inside its own transaction.
 */
import { createHash } from 'node:crypto';
import { AgentryError } from '../errors.js';
import type { ArtifactLimits, ArtifactRow, PageReadRow, StatusChange } from './adapter.js';

/** SHA-256 of a page text (its UTF-8 bytes), lowercase hex: the key a page text is stored under. */
export function pageTextSha256(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

/**
 * Refuses a marked status change that does not name exactly one status to move from: the mark stores that one as the
 * agent's `previous`, and every adapter must store the same thing.
 */
export function checkStatusChange(change: StatusChange): void {
  if (change.mark === true && change.from.length !== 1) {
    throw new AgentryError(
      'invalid_request',
      `A marked status change names exactly one status to move from, got ${JSON.stringify(change.from)}`,
    );
  }
}

/** Refuses an artifact whose `size` is not its bytes' length, or that is larger than `limits.maxBytes` alone. */
export function checkArtifact(row: ArtifactRow, data: Uint8Array, limits: ArtifactLimits): void {
  if (row.size !== data.byteLength) {
    throw new AgentryError(
      'invalid_request',
      `Expected the size of artifact ${JSON.stringify(row.artifact_id)} to be its length (${data.byteLength}), got ${row.size}`,
    );
  }
  if (data.byteLength > limits.maxBytes) {
    throw new AgentryError(
      'payload_too_large',
      `Artifact ${JSON.stringify(row.name)} is ${data.byteLength} bytes, more than the ${limits.maxBytes} allowed`,
    );
  }
}

/** The refusal of an artifact that would take its agent's artifacts past `maxBytesPerAgent`. */
export function agentArtifactsTooLarge(row: ArtifactRow, stored: number, maxBytesPerAgent: number): AgentryError {
  return new AgentryError(
    'payload_too_large',
    `Artifact ${JSON.stringify(row.name)} (${row.size} bytes) would take the artifacts of agent ` +
      `${JSON.stringify(row.agent_id)} to ${stored + row.size} bytes, more than the ${maxBytesPerAgent} allowed`,
  );
}

/** The refusal of a second artifact with the same id on one agent. */
export function artifactExists(row: ArtifactRow): AgentryError {
  return new AgentryError(
    'invalid_state',
    `Agent ${JSON.stringify(row.agent_id)} already has an artifact ${JSON.stringify(row.artifact_id)}`,
  );
}

/** Refuses a page read whose `content_sha256` is not the hash of its text: texts are kept once per hash, for good. */
export function checkPageRead(read: PageReadRow, text: string): void {
  const sha = pageTextSha256(text);
  if (read.content_sha256 !== sha) {
    throw new AgentryError(
      'invalid_request',
      `Expected content_sha256 of the read of ${JSON.stringify(read.url)} to be the SHA-256 of its text (${sha}), ` +
        `got ${JSON.stringify(read.content_sha256)}`,
    );
  }
}
