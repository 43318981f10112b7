/**
 * @module storage/postgres/extras
 * What a tool keeps beside an agent, on PostgreSQL: artifacts (bytes in a BYTEA column; TOAST keeps them out of the
 * row, so listing and summing sizes never reads them), page reads and their texts (one per hash, outliving their
 * readers), message_person's outbox and opt-outs (outliving their agent), durable timers, monitors and their queued
 * changes. The rest goes with its agent tree (`deleteAgentExtrasIn`, inside `agents.ts`'s delete).
 *
 * Writes that check an agent first lock its row (`FOR SHARE`, or `FOR UPDATE` where the check is a per-agent total),
 * so that a tree deleted meanwhile cannot be left with rows of its agents. Writes whose order callers can see (the
 * order of page reads and artifacts, which of two racing calls gets a limit's last slot) also run one after another
 * in this process, in the order they were called, as memoryStorage's do.
 */
import PQueue from 'p-queue';
import { notFound } from '../../errors.js';
import type {
  ArtifactLimits,
  ArtifactRow,
  MonitorChangeRow,
  MonitorRow,
  OptOutRow,
  OutboxChannel,
  OutboxOutcome,
  OutboxRateLimits,
  OutboxRefusal,
  OutboxRow,
  OutboxStatus,
  PageReadRow,
  StorageAdapter,
  TimerClaims,
  TimerRow,
} from '../adapter.js';
import { agentArtifactsTooLarge, artifactExists, checkArtifact, checkPageRead } from '../validate.js';
import type { Db, Query } from './db.js';

const ARTIFACT_COLUMNS = 'artifact_id, agent_id, account_id, name, mime_type, size, created_at';
const PAGE_READ_COLUMNS = 'agent_id, tool_use_id, url, final_url, title, content_sha256, retrieved_at';
/** In {@link OutboxRow} order; `to` is an SQL keyword, hence the quotes. */
const OUTBOX_COLUMNS =
  'message_id, agent_id, account_id, tool_use_id, channel, "to", subject, body_hash, status, provider_id, error, ' +
  'created_at, sent_at';
const TIMER_COLUMNS = 'timer_id, agent_id, due_at, kind, payload';
/** In {@link MonitorRow} order, which {@link monitorParams} follows. */
const MONITOR_FIELDS = [
  'monitor_id',
  'agent_id',
  'url',
  'selector',
  'ignore_selectors',
  'condition',
  'interval_s',
  'until',
  'status',
  'created_at',
  'last_checked_at',
  'next_check_at',
  'changes',
  'last_error',
  'failures',
  'etag',
  'last_modified',
  'content_sha256',
  'content',
  'render',
] as const satisfies ReadonlyArray<keyof MonitorRow>;
const MONITOR_COLUMNS = MONITOR_FIELDS.join(', ');
const CHANGE_COLUMNS = 'seq, agent_id, monitor_id, change, created_at';

/** A row type as `Query` wants it (pg's QueryResultRow); BIGINT comes back as a number, BOOLEAN as a boolean. */
type Rows<T> = T & Record<string, unknown>;

function monitorParams(m: MonitorRow): unknown[] {
  return MONITOR_FIELDS.map((field) => m[field]);
}

/**
 * Upserts a timer unless its agent does not exist (any more); the agent's row is share-locked meanwhile. A moved timer
 * is claimed by no worker: its new time is a new firing, which any worker may claim when it is due.
 */
async function putTimerIn(q: Query, t: TimerRow): Promise<void> {
  await q(
    `WITH agent AS (SELECT 1 FROM agents WHERE agent_id = $2 FOR SHARE)
     INSERT INTO timers (${TIMER_COLUMNS}) SELECT $1, $2, $3, $4, $5 FROM agent
     ON CONFLICT (timer_id) DO UPDATE SET agent_id = EXCLUDED.agent_id, due_at = EXCLUDED.due_at,
       kind = EXCLUDED.kind, payload = EXCLUDED.payload, claimed_by = NULL, claim_expires_at = NULL`,
    [t.timer_id, t.agent_id, t.due_at, t.kind, t.payload],
  );
}

/**
 * The outbox's checks, in memoryStorage's order, then the insert, tagged with the worker that queues it (whose death
 * alone makes it `unknown`); the caller holds the account's outbox lock.
 */
async function queueOutboxIn(
  q: Query,
  row: OutboxRow,
  limits: OutboxRateLimits,
  workerId: string,
): Promise<OutboxRefusal | null> {
  const [existing] = await q<Rows<OutboxRow>>(
    `SELECT ${OUTBOX_COLUMNS} FROM outbox WHERE agent_id = $1 AND tool_use_id = $2`,
    [row.agent_id, row.tool_use_id],
  );
  if (existing) return { reason: 'exists', existing };
  const [optOut] = await q<Rows<OptOutRow>>(
    'SELECT account_id, channel, recipient, reason, at FROM message_opt_outs WHERE account_id = $1 AND channel = $2 AND recipient = $3',
    [row.account_id, row.channel, row.to],
  );
  if (optOut) return { reason: 'opted_out', opt_out: optOut };
  const [counts] = await q<{ agent: number; account: number }>(
    `SELECT
       (SELECT count(*) FROM outbox WHERE agent_id = $1 AND created_at >= $2) AS agent,
       (SELECT count(*) FROM outbox WHERE account_id = $3 AND created_at >= $4) AS account`,
    [row.agent_id, limits.agent.since, row.account_id, limits.account.since],
  );
  const { agent = 0, account = 0 } = counts ?? {};
  if (agent >= limits.agent.max) return { reason: 'agent_rate', count: agent };
  if (account >= limits.account.max) return { reason: 'account_rate', count: account };
  await q(
    `INSERT INTO outbox (${OUTBOX_COLUMNS}, worker_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
    [
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
      workerId,
    ],
  );
  return null;
}

/** Marks `queued` attempts matching `where` (on the outbox row `o`) as `unknown`; returns them oldest first. */
function markQueuedUnknownWhere(q: Query, where: string, params: unknown[]): Promise<OutboxRow[]> {
  // RETURNING has no order of its own: the rows come back oldest first, as memory's do.
  return q<Rows<OutboxRow>>(
    `WITH marked AS (
       UPDATE outbox o SET status = 'unknown', error = $1 WHERE o.status = 'queued' AND (${where})
       RETURNING seq, ${OUTBOX_COLUMNS}
     )
     SELECT ${OUTBOX_COLUMNS} FROM marked ORDER BY seq`,
    params,
  );
}

/**
 * For the sweeper, inside its transaction: the attempts that these gone workers queued and never saw end
 * become `unknown` with `error` (they may have left), as after a crash of a single process; never sent again. Returns
 * those rows, oldest first. Nothing else needs doing with them: the agent's `message_person` call was recorded
 * `started`, so the worker that continues the agent reports its outcome as unknown to the model (crash rules), and
 * `Messenger.send` refuses to send the same message again.
 */
export function markOutboxOfWorkersUnknown(q: Query, workerIds: string[], error: string): Promise<OutboxRow[]> {
  if (workerIds.length === 0) return Promise.resolve([]);
  return markQueuedUnknownWhere(q, 'o.worker_id = ANY($2::text[])', [error, workerIds]);
}

/**
 * Part of deleting agents, inside the caller's transaction: their artifacts, page reads, timers, monitors and queued
 * monitor changes go. Page texts, outbox rows and opt-outs stay (citations and the account's record point at them).
 */
export async function deleteAgentExtrasIn(q: Query, agentIds: readonly string[]): Promise<void> {
  if (agentIds.length === 0) return;
  const ids = [...agentIds];
  // Locking the agents first waits out the writes that share-locked one of them to add a row: once they commit, the
  // deletes below see (and remove) their rows. Ordered by id, so that two deletes lock in the same order.
  await q('SELECT 1 FROM agents WHERE agent_id = ANY($1::text[]) ORDER BY agent_id FOR UPDATE', [ids]);
  for (const table of ['artifacts', 'page_reads', 'timers', 'monitors', 'monitor_changes']) {
    await q(`DELETE FROM ${table} WHERE agent_id = ANY($1::text[])`, [ids]);
  }
}

type ExtrasStore = Pick<
  StorageAdapter,
  | 'putArtifact'
  | 'listArtifacts'
  | 'getArtifact'
  | 'recordPageRead'
  | 'listPageReads'
  | 'getPageText'
  | 'queueOutbox'
  | 'finishOutbox'
  | 'listOutbox'
  | 'countOutbox'
  | 'markQueuedOutboxUnknown'
  | 'putOptOut'
  | 'getOptOut'
  | 'putTimer'
  | 'deleteTimer'
  | 'listDueTimers'
  | 'nextTimerDue'
  | 'insertMonitor'
  | 'getMonitor'
  | 'listMonitors'
  | 'updateMonitor'
  | 'nextMonitorChange'
  | 'deleteMonitorChange'
> & { timerClaims?: TimerClaims };

export function extrasStore(db: Db): ExtrasStore {
  // Writes whose order callers can see run one after another, in call order (as in memoryStorage); a failed one does
  // not stop the ones after it.
  const ordered = new PQueue({ concurrency: 1 });
  const serial = <T>(write: () => Promise<T>): Promise<T> => ordered.add(write);
  const one = async <T>(sql: string, params: unknown[]): Promise<T | null> =>
    ((await db.q<Rows<T>>(sql, params))[0] as T | undefined) ?? null;

  return {
    // --- artifacts

    // Async, so that a refusal of the checks is a rejected promise, as in memory.
    async putArtifact(row: ArtifactRow, data: Uint8Array, limits: ArtifactLimits): Promise<void> {
      checkArtifact(row, data, limits);
      const bytes = Buffer.from(data); // a copy: the caller may change its array once this returns
      return serial(() =>
        db.tx(async (q) => {
          // Locked for update, not share: two writes for one agent must not both count the total before either adds.
          const [agent] = await q('SELECT 1 FROM agents WHERE agent_id = $1 FOR UPDATE', [row.agent_id]);
          if (!agent) throw notFound('Agent', row.agent_id);
          const [stored] = await q<{ n: number; taken: boolean }>(
            `SELECT coalesce(sum(size), 0)::bigint AS n, bool_or(artifact_id = $2) AS taken
             FROM artifacts WHERE agent_id = $1`,
            [row.agent_id, row.artifact_id],
          );
          if (stored?.taken) throw artifactExists(row);
          const total = stored?.n ?? 0;
          if (total + row.size > limits.maxBytesPerAgent) {
            throw agentArtifactsTooLarge(row, total, limits.maxBytesPerAgent);
          }
          await q(`INSERT INTO artifacts (${ARTIFACT_COLUMNS}, data) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, [
            row.artifact_id,
            row.agent_id,
            row.account_id,
            row.name,
            row.mime_type,
            row.size,
            row.created_at,
            bytes,
          ]);
        }),
      );
    },

    listArtifacts: (agentId) =>
      db.q<Rows<ArtifactRow>>(`SELECT ${ARTIFACT_COLUMNS} FROM artifacts WHERE agent_id = $1 ORDER BY seq`, [agentId]),

    async getArtifact(agentId, artifactId) {
      const r = await one<ArtifactRow & { data: Buffer }>(
        `SELECT ${ARTIFACT_COLUMNS}, data FROM artifacts WHERE agent_id = $1 AND artifact_id = $2`,
        [agentId, artifactId],
      );
      if (!r) return null;
      const { data, ...row } = r;
      // A plain Uint8Array, as memoryStorage gives (pg answers a Buffer).
      return { row, data: new Uint8Array(data) };
    },

    // --- pages read

    async recordPageRead(read: PageReadRow, text: string): Promise<void> {
      checkPageRead(read, text);
      // One statement, so it is atomic; the agent's row is share-locked, so a read of an agent being deleted is
      // either deleted with it or dropped here (text and all).
      return serial(async () => {
        await db.q(
          `WITH agent AS (SELECT 1 FROM agents WHERE agent_id = $1 FOR SHARE),
           kept_text AS (
             INSERT INTO page_texts (content_sha256, text) SELECT $6, $8 FROM agent
             ON CONFLICT (content_sha256) DO NOTHING
           )
           INSERT INTO page_reads (${PAGE_READ_COLUMNS}) SELECT $1, $2, $3, $4, $5, $6, $7 FROM agent`,
          [
            read.agent_id,
            read.tool_use_id,
            read.url,
            read.final_url,
            read.title,
            read.content_sha256,
            read.retrieved_at,
            text,
          ],
        );
      });
    },

    async listPageReads(agentIds) {
      if (agentIds.length === 0) return [];
      return db.q<Rows<PageReadRow>>(
        `SELECT ${PAGE_READ_COLUMNS} FROM page_reads WHERE agent_id = ANY($1::text[]) ORDER BY seq`,
        [[...agentIds]],
      );
    },

    async getPageText(contentSha256) {
      const r = await one<{ text: string }>('SELECT text FROM page_texts WHERE content_sha256 = $1', [contentSha256]);
      return r?.text ?? null;
    },

    // --- outbox (message_person)

    queueOutbox: (row, limits) =>
      serial(() =>
        db.tx(async (q) => {
          // The account may have no row (and its agents are locked elsewhere): an advisory lock per account
          // serialises the counting and the insert across processes, so two calls cannot both take the last slot.
          await q(`SELECT pg_advisory_xact_lock(hashtext('agentry.outbox:' || $1))`, [row.account_id]);
          return queueOutboxIn(q, row, limits, db.workerId);
        }),
      ),

    async finishOutbox(messageId: string, o: OutboxOutcome) {
      // An attempt ends once: when the update finds it no longer queued, the row is read back as it is.
      const ended = await one<OutboxRow>(
        `UPDATE outbox SET status = $2, provider_id = $3, error = $4, sent_at = $5
         WHERE message_id = $1 AND status = 'queued' RETURNING ${OUTBOX_COLUMNS}`,
        [messageId, o.status, o.provider_id, o.error, o.sent_at],
      );
      return ended ?? one<OutboxRow>(`SELECT ${OUTBOX_COLUMNS} FROM outbox WHERE message_id = $1`, [messageId]);
    },

    listOutbox: (agentId) =>
      db.q<Rows<OutboxRow>>(`SELECT ${OUTBOX_COLUMNS} FROM outbox WHERE agent_id = $1 ORDER BY seq`, [agentId]),

    async countOutbox(agentId) {
      const rows = await db.q<{ status: OutboxStatus; n: number }>(
        'SELECT status, count(*) AS n FROM outbox WHERE agent_id = $1 GROUP BY status',
        [agentId],
      );
      return Object.fromEntries(rows.map((r) => [r.status, r.n]));
    },

    markQueuedOutboxUnknown: (error) =>
      db.mode === 'exclusive'
        ? markQueuedUnknownWhere(db.q, 'true', [error])
        : // Other workers may be sending right now: only the attempts of workers that are gone (stopped, silent for a
          // gone-worker grace, or swept away) are left to crash rules, and those queued before workers were tagged.
          markQueuedUnknownWhere(
            db.q,
            `o.worker_id IS NULL OR NOT EXISTS (
               SELECT 1 FROM workers w WHERE w.worker_id = o.worker_id AND NOT w.stopped
                 AND w.heartbeat_at >= now() - $2::int * interval '1 millisecond')`,
            [error, db.goneAfterMs],
          ),

    async putOptOut(r) {
      await db.q(
        `INSERT INTO message_opt_outs (account_id, channel, recipient, reason, at) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (account_id, channel, recipient) DO UPDATE SET reason = EXCLUDED.reason, at = EXCLUDED.at`,
        [r.account_id, r.channel, r.recipient, r.reason, r.at],
      );
    },

    getOptOut: (accountId: string, channel: OutboxChannel, recipient: string) =>
      one<OptOutRow>(
        'SELECT account_id, channel, recipient, reason, at FROM message_opt_outs WHERE account_id = $1 AND channel = $2 AND recipient = $3',
        [accountId, channel, recipient],
      ),

    // --- monitors and durable timers

    putTimer: (timer) => putTimerIn(db.q, timer),

    async deleteTimer(timerId, dueAt) {
      const deleted = await db.q(
        'DELETE FROM timers WHERE timer_id = $1 AND ($2::bigint IS NULL OR due_at = $2::bigint) RETURNING timer_id',
        [timerId, dueAt ?? null],
      );
      return deleted.length > 0;
    },

    listDueTimers: (dueBy, limit) =>
      db.mode === 'exclusive'
        ? db.q<Rows<TimerRow>>(
            `SELECT ${TIMER_COLUMNS} FROM timers WHERE due_at <= $1 ORDER BY due_at, timer_id LIMIT $2`,
            [dueBy, limit],
          )
        : // Reading claims: rows another worker is claiming right now are skipped, not waited for, and
          // this worker's own claims are read again (its timer loop skips the ones still running), as in one process.
          db.q<Rows<TimerRow>>(
            // MATERIALIZED: the locking SELECT runs once, so no plan can re-run it and claim more than it locked.
            `WITH due AS MATERIALIZED (
               SELECT timer_id FROM timers
               WHERE due_at <= $1 AND (${CLAIMABLE_BY_3})
               ORDER BY due_at, timer_id LIMIT $2 FOR UPDATE SKIP LOCKED
             ),
             claimed AS (
               UPDATE timers t SET claimed_by = $3, claim_expires_at = now() + $4::int * interval '1 millisecond'
               FROM due WHERE t.timer_id = due.timer_id
               RETURNING ${TIMER_COLUMNS.replace(/(^|, )/g, '$1t.')}
             )
             SELECT ${TIMER_COLUMNS} FROM claimed ORDER BY due_at, timer_id`,
            [dueBy, limit, db.workerId, db.leaseMs],
          ),

    async nextTimerDue() {
      // In workers mode, timers another worker holds are left out: a loop that saw them due would ask again at once.
      const r =
        db.mode === 'exclusive'
          ? await one<{ next: number | null }>('SELECT min(due_at) AS next FROM timers', [])
          : await one<{ next: number | null }>(
              `SELECT min(due_at) AS next FROM timers WHERE ${CLAIMABLE_BY_3.replaceAll('$3', '$1')}`,
              [db.workerId],
            );
      return r?.next ?? null;
    },

    insertMonitor: (monitor, timer) =>
      db.tx(async (q) => {
        const [agent] = await q('SELECT 1 FROM agents WHERE agent_id = $1 FOR SHARE', [monitor.agent_id]);
        // A monitor with this id wins even over a missing agent, as in memory: a re-run call finds the one it made.
        const [inserted] = agent
          ? await q<Rows<MonitorRow>>(
              `INSERT INTO monitors (${MONITOR_COLUMNS})
               VALUES (${MONITOR_FIELDS.map((_, i) => `$${i + 1}`).join(', ')})
               ON CONFLICT (monitor_id) DO NOTHING RETURNING ${MONITOR_COLUMNS}`,
              monitorParams(monitor),
            )
          : [];
        if (inserted) {
          if (timer) await putTimerIn(q, timer);
          return inserted;
        }
        const [existing] = await q<Rows<MonitorRow>>(`SELECT ${MONITOR_COLUMNS} FROM monitors WHERE monitor_id = $1`, [
          monitor.monitor_id,
        ]);
        if (existing) return existing;
        throw notFound('Agent', monitor.agent_id);
      }),

    getMonitor: (monitorId) =>
      one<MonitorRow>(`SELECT ${MONITOR_COLUMNS} FROM monitors WHERE monitor_id = $1`, [monitorId]),

    listMonitors: (agentId) =>
      db.q<Rows<MonitorRow>>(`SELECT ${MONITOR_COLUMNS} FROM monitors WHERE agent_id = $1 ORDER BY seq`, [agentId]),

    updateMonitor: (monitor, also = {}) =>
      db.tx(async (q) => {
        // Replaces the whole row, as memory does, but only while the stored one is active: a check that ran during a
        // cancel must not bring the monitor back. One UPDATE checks and writes (it waits for a cancel in flight, then re-checks).
        const sets = MONITOR_FIELDS.slice(1).map((field, i) => `${field} = $${i + 2}`);
        const updated = await q(
          `UPDATE monitors SET ${sets.join(', ')} WHERE monitor_id = $1 AND status = 'active' RETURNING monitor_id`,
          monitorParams(monitor),
        );
        if (updated.length === 0) return false;
        const { change, timer, dropTimer } = also;
        if (change) {
          await q('INSERT INTO monitor_changes (agent_id, monitor_id, change, created_at) VALUES ($1, $2, $3, $4)', [
            change.agent_id,
            change.monitor_id,
            change.change,
            change.created_at,
          ]);
        }
        if (dropTimer !== undefined) await q('DELETE FROM timers WHERE timer_id = $1', [dropTimer]);
        if (timer) await putTimerIn(q, timer);
        return true;
      }),

    nextMonitorChange: (agentId, monitorId) =>
      one<MonitorChangeRow>(
        `SELECT ${CHANGE_COLUMNS} FROM monitor_changes
         WHERE agent_id = $1 AND ($2::text IS NULL OR monitor_id = $2::text) ORDER BY seq LIMIT 1`,
        [agentId, monitorId ?? null],
      ),

    async deleteMonitorChange(seq) {
      await db.q('DELETE FROM monitor_changes WHERE seq = $1', [seq]);
    },

    ...(db.mode === 'workers' ? { timerClaims: timerClaims(db) } : {}),
  };
}

/** Whether worker `$3` may claim a timer: nobody holds it, this worker does, or its holder's claim expired. */
const CLAIMABLE_BY_3 = 'claimed_by IS NULL OR claimed_by = $3 OR claim_expires_at < now()';

/** The claims of a worker's due timers (workers mode; {@link TimerClaims}). */
function timerClaims(db: Db): TimerClaims {
  return {
    leaseMs: db.leaseMs,
    async renew(timers) {
      if (timers.length === 0) return [];
      // The UPDATE in WITH runs to completion whatever the SELECT reads; the SELECT sees the rows as they were before
      // it, which is what it needs: only rows another worker holds, which the UPDATE does not touch.
      const rows = await db.q<{ timer_id: string }>(
        `WITH held AS (SELECT * FROM unnest($1::text[], $2::bigint[]) AS h(timer_id, due_at)),
         renewed AS (
           UPDATE timers t SET claim_expires_at = now() + $4::int * interval '1 millisecond'
           FROM held WHERE t.timer_id = held.timer_id AND t.claimed_by = $3
         )
         SELECT t.timer_id FROM timers t JOIN held ON t.timer_id = held.timer_id AND t.due_at = held.due_at
         WHERE t.claimed_by <> $3`,
        [timers.map((t) => t.timer_id), timers.map((t) => t.due_at), db.workerId, db.leaseMs],
      );
      return rows.map((r) => r.timer_id);
    },
    async releaseAll() {
      await db.q('UPDATE timers SET claimed_by = NULL, claim_expires_at = NULL WHERE claimed_by = $1', [db.workerId]);
    },
  };
}
