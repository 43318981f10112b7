/**
 * @module storage/sqlite/outbox
 * The SQLite side of message_person's outbox and opt-outs (tables of migration 5): the statements, and the writes the
 * writer (writer.ts) runs inside its batches. Kept apart from statements.ts because nothing else touches these tables.
 */
import type Database from 'better-sqlite3';
import type { OptOutRow, OutboxOutcome, OutboxRateLimits, OutboxRefusal, OutboxRow, OutboxStatus } from '../adapter.js';
import type { Bind, Stmt } from './statements.js';

/** Columns in {@link OutboxRow} order; `to` is an SQL keyword, hence the quotes. */
const OUTBOX_COLUMNS =
  'message_id, agent_id, account_id, tool_use_id, channel, "to", subject, body_hash, status, provider_id, error, ' +
  'created_at, sent_at';

export function prepareOutboxStatements(db: Database.Database) {
  const p = <R = unknown>(sql: string): Stmt<R> => db.prepare<Bind[], R>(sql);
  const pluck = <R>(sql: string): Stmt<R> => db.prepare<Bind[], R>(sql).pluck() as unknown as Stmt<R>;
  return {
    insert: p(`INSERT INTO outbox (${OUTBOX_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
    byCall: p<OutboxRow>(`SELECT ${OUTBOX_COLUMNS} FROM outbox WHERE agent_id = ? AND tool_use_id = ?`),
    byId: p<OutboxRow>(`SELECT ${OUTBOX_COLUMNS} FROM outbox WHERE message_id = ?`),
    // Both counts read an index of (owner, created_at) as a range.
    countAgentSince: pluck<number>('SELECT count(*) FROM outbox WHERE agent_id = ? AND created_at >= ?'),
    countAccountSince: pluck<number>('SELECT count(*) FROM outbox WHERE account_id = ? AND created_at >= ?'),
    finish: p<OutboxRow>(
      'UPDATE outbox SET status = ?, provider_id = ?, error = ?, sent_at = ? ' +
        "WHERE message_id = ? AND status = 'queued' " +
        `RETURNING ${OUTBOX_COLUMNS}`,
    ),
    listOfAgent: p<OutboxRow>(`SELECT ${OUTBOX_COLUMNS} FROM outbox WHERE agent_id = ? ORDER BY seq`),
    countOfAgent: p<{ status: OutboxStatus; n: number }>(
      'SELECT status, count(*) AS n FROM outbox WHERE agent_id = ? GROUP BY status',
    ),
    markQueuedUnknown: p<OutboxRow>(
      `UPDATE outbox SET status = 'unknown', error = ? WHERE status = 'queued' RETURNING ${OUTBOX_COLUMNS}`,
    ),
    putOptOut: p(
      'INSERT INTO message_opt_outs (account_id, channel, recipient, reason, at) VALUES (?, ?, ?, ?, ?) ' +
        'ON CONFLICT (account_id, channel, recipient) DO UPDATE SET reason = excluded.reason, at = excluded.at',
    ),
    getOptOut: p<OptOutRow>(
      'SELECT account_id, channel, recipient, reason, at FROM message_opt_outs ' +
        'WHERE account_id = ? AND channel = ? AND recipient = ?',
    ),
  };
}

export type OutboxStatements = ReturnType<typeof prepareOutboxStatements>;

/** The checks of `queueOutbox` and its insert, inside the writer's transaction (so a race cannot pass both). */
export function queueOutbox(s: OutboxStatements, row: OutboxRow, limits: OutboxRateLimits): OutboxRefusal | null {
  const existing = s.byCall.get(row.agent_id, row.tool_use_id);
  if (existing) return { reason: 'exists', existing };
  const optOut = s.getOptOut.get(row.account_id, row.channel, row.to);
  if (optOut) return { reason: 'opted_out', opt_out: optOut };
  const agentCount = s.countAgentSince.get(row.agent_id, limits.agent.since) ?? 0;
  if (agentCount >= limits.agent.max) return { reason: 'agent_rate', count: agentCount };
  const accountCount = s.countAccountSince.get(row.account_id, limits.account.since) ?? 0;
  if (accountCount >= limits.account.max) return { reason: 'account_rate', count: accountCount };
  s.insert.run(
    row.message_id,
    row.agent_id,
    row.account_id,
    row.tool_use_id,
    row.channel,
    row.to,
    row.subject,
    row.body_hash,
    row.status,
    row.provider_id,
    row.error,
    row.created_at,
    row.sent_at,
  );
  return null;
}

/** Ends a queued attempt; one already ended is read back unchanged. */
export function finishOutbox(s: OutboxStatements, messageId: string, o: OutboxOutcome): OutboxRow | null {
  return s.finish.get(o.status, o.provider_id, o.error, o.sent_at, messageId) ?? s.byId.get(messageId) ?? null;
}

export function putOptOut(s: OutboxStatements, r: OptOutRow): void {
  s.putOptOut.run(r.account_id, r.channel, r.recipient, r.reason, r.at);
}
