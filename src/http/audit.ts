/**
 * @module http/audit
 * Audit lines: what changed an account's access over HTTP (a key minted or deleted in the console), who did it (the
 * session's key id) and from where. One JSON object per event, to stderr by default, never carrying a key's text.
 */

/** One audited event. */
export interface AuditEntry {
  /** `console.key_created` or `console.key_deleted`. */
  event: 'console.key_created' | 'console.key_deleted';
  account_id: string;
  /** The key created or deleted. */
  key_id: string;
  /** The key the acting session signed in with (null behind the embedding app's `authenticate`). */
  by_key_id: string | null;
  /** The client address as the server saw it. */
  address: string;
  request_id: string;
  /** ISO time. */
  at: string;
}

/** Receives audit entries (`audit` option of createFetchHandler). */
export type AuditSink = (entry: AuditEntry) => void;

/** The default sink: one JSON line on stderr, tagged so it can be told from other lines. */
export const stderrAudit: AuditSink = (entry) => {
  process.stderr.write(`${JSON.stringify({ audit: true, ...entry })}\n`);
};
