/**
 * @module storage/sqlite/migrations
 * The SQLite schema as numbered migrations. A database records the versions it has applied in `schema_migrations`;
 * {@link migrate} applies the missing ones in order, each in its own transaction with its version row, so a crash
 * mid-migration leaves the database at the previous version. Never edit a migration that has shipped: append the
 * next number instead (and keep a fixture database of the old version for the tests).
 */
import type Database from 'better-sqlite3';
import { AgentryError } from '../../errors.js';

export interface Migration {
  /** 1, 2, 3, ... in order, without gaps. */
  readonly version: number;
  readonly name: string;
  /** SQL run as one script inside the migration's transaction. */
  readonly up: string;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'initial schema',
    // Booleans are INTEGER 0/1; JSON stays TEXT; money is INTEGER micro-credits. `seq` columns are the ordering keys
    // (AUTOINCREMENT where a cursor or the ledger must never see a number reused after a delete).
    up: `
      CREATE TABLE accounts (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        subscription_active INTEGER NOT NULL,
        balance INTEGER NOT NULL,
        reserved INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL
      );

      CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        name TEXT NOT NULL,
        hash TEXT NOT NULL UNIQUE,
        last4 TEXT NOT NULL,
        created_at TEXT NOT NULL
      );
      CREATE INDEX api_keys_account ON api_keys (account_id);

      CREATE TABLE agents (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        agent_id TEXT NOT NULL UNIQUE,
        account_id TEXT NOT NULL,
        parent_id TEXT,
        root_id TEXT NOT NULL,
        spawn_key TEXT,
        goal TEXT NOT NULL,
        model TEXT NOT NULL,
        status TEXT NOT NULL,
        progress REAL NOT NULL,
        status_message TEXT NOT NULL,
        token_count INTEGER NOT NULL,
        message_count INTEGER NOT NULL,
        credits_spent INTEGER NOT NULL,
        sub_agent_count INTEGER NOT NULL,
        max_credits INTEGER,
        tree_spent INTEGER NOT NULL,
        tree_reserved INTEGER NOT NULL,
        step_count INTEGER NOT NULL,
        started INTEGER NOT NULL,
        active_ms INTEGER NOT NULL,
        active_since TEXT,
        plan TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
      );
      CREATE INDEX agents_account ON agents (account_id, seq);
      CREATE INDEX agents_parent ON agents (parent_id, seq);
      CREATE INDEX agents_status ON agents (status, seq);
      -- Covers countChildrenByStatus, so counting 10,000 children never reads their rows.
      CREATE INDEX agents_spawn_key ON agents (parent_id, spawn_key, status);

      CREATE TABLE messages (
        seq INTEGER PRIMARY KEY,
        agent_id TEXT NOT NULL,
        message_id TEXT NOT NULL,
        role TEXT NOT NULL,
        text TEXT NOT NULL,
        timestamp TEXT NOT NULL
      );
      CREATE INDEX messages_agent ON messages (agent_id, seq);

      CREATE TABLE turns (
        agent_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (agent_id, idx)
      );

      -- A rowid table (not WITHOUT ROWID) so that an upsert keeps a call's first position in listToolCalls.
      CREATE TABLE tool_calls (
        agent_id TEXT NOT NULL,
        tool_use_id TEXT NOT NULL,
        turn_idx INTEGER NOT NULL,
        name TEXT NOT NULL,
        input TEXT NOT NULL,
        status TEXT NOT NULL,
        idempotent INTEGER NOT NULL,
        result TEXT,
        is_error INTEGER NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (agent_id, tool_use_id)
      );
      CREATE INDEX tool_calls_turn ON tool_calls (agent_id, turn_idx);

      CREATE TABLE ledger (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        account_id TEXT NOT NULL,
        agent_id TEXT,
        kind TEXT NOT NULL,
        item TEXT,
        tokens_in INTEGER NOT NULL,
        tokens_out INTEGER NOT NULL,
        amount INTEGER NOT NULL,
        created_at TEXT NOT NULL
      );
      CREATE INDEX ledger_account ON ledger (account_id, seq);

      CREATE TABLE reservations (
        id TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        root_id TEXT NOT NULL,
        amount INTEGER NOT NULL
      );
      CREATE INDEX reservations_agent ON reservations (agent_id);

      CREATE TABLE idempotency_keys (
        account_id TEXT NOT NULL,
        key TEXT NOT NULL,
        request_hash TEXT NOT NULL,
        response TEXT NOT NULL,
        status INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (account_id, key)
      );
    `,
  },
  {
    version: 2,
    name: 'leaner hot path',
    // Every step writes turns and changes statuses. A turn stored in its primary key's b-tree (WITHOUT ROWID) is one
    // b-tree write instead of two; the (status, seq) index cost two index writes per status change and served only
    // recovery's scan of runnable agents at open, which reads the table once instead.
    up: `
      CREATE TABLE turns_v2 (
        agent_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (agent_id, idx)
      ) WITHOUT ROWID;
      INSERT INTO turns_v2 (agent_id, idx, role, content, created_at)
        SELECT agent_id, idx, role, content, created_at FROM turns;
      DROP TABLE turns;
      ALTER TABLE turns_v2 RENAME TO turns;
      DROP INDEX agents_status;
    `,
  },
  {
    version: 3,
    name: 'child specs, tool state, artifacts, pages read',
    // An artifact's bytes live in a table of their own, keyed by the artifact's seq: listing an agent's artifacts and
    // summing their sizes (every putArtifact does) then reads small rows, never a page of someone's screenshot.
    // A page text is kept once per hash and outlives its readers (citations point at it), so pages has no agent_id.
    up: `
      ALTER TABLE agents ADD COLUMN spec TEXT;

      CREATE TABLE tool_state (
        agent_id TEXT NOT NULL,
        tool_use_id TEXT NOT NULL,
        state TEXT NOT NULL,
        PRIMARY KEY (agent_id, tool_use_id)
      ) WITHOUT ROWID;

      CREATE TABLE artifacts (
        seq INTEGER PRIMARY KEY,
        agent_id TEXT NOT NULL,
        artifact_id TEXT NOT NULL,
        account_id TEXT NOT NULL,
        name TEXT NOT NULL,
        mime_type TEXT NOT NULL,
        size INTEGER NOT NULL,
        created_at TEXT NOT NULL
      );
      CREATE UNIQUE INDEX artifacts_agent ON artifacts (agent_id, artifact_id);

      CREATE TABLE artifact_data (
        seq INTEGER PRIMARY KEY,
        data BLOB NOT NULL
      );

      CREATE TABLE pages (
        content_sha256 TEXT PRIMARY KEY,
        text TEXT NOT NULL
      );

      CREATE TABLE page_reads (
        seq INTEGER PRIMARY KEY,
        agent_id TEXT NOT NULL,
        tool_use_id TEXT NOT NULL,
        url TEXT NOT NULL,
        final_url TEXT NOT NULL,
        title TEXT NOT NULL,
        content_sha256 TEXT NOT NULL,
        retrieved_at TEXT NOT NULL
      );
      CREATE INDEX page_reads_agent ON page_reads (agent_id, seq);
    `,
  },
  {
    version: 4,
    name: 'durable timers, monitors',
    // Timers are read only when due, through the (due_at) index: 10,000 idle monitors are rows, not memory. The agent
    // indexes serve deleting an agent's timers, monitors and queued changes with it.
    up: `
      CREATE TABLE timers (
        timer_id TEXT PRIMARY KEY,
        agent_id TEXT NOT NULL,
        due_at INTEGER NOT NULL,
        kind TEXT NOT NULL,
        payload TEXT NOT NULL
      ) WITHOUT ROWID;
      CREATE INDEX timers_due ON timers (due_at);
      CREATE INDEX timers_agent ON timers (agent_id);

      CREATE TABLE monitors (
        seq INTEGER PRIMARY KEY,
        monitor_id TEXT NOT NULL UNIQUE,
        agent_id TEXT NOT NULL,
        url TEXT NOT NULL,
        selector TEXT,
        ignore_selectors TEXT NOT NULL,
        condition TEXT,
        interval_s INTEGER NOT NULL,
        until TEXT,
        status TEXT NOT NULL,
        created_at TEXT NOT NULL,
        last_checked_at TEXT,
        next_check_at TEXT,
        changes INTEGER NOT NULL,
        last_error TEXT,
        failures INTEGER NOT NULL,
        etag TEXT,
        last_modified TEXT,
        content_sha256 TEXT,
        content TEXT,
        render INTEGER NOT NULL DEFAULT 0
      );
      CREATE INDEX monitors_agent ON monitors (agent_id, seq);

      CREATE TABLE monitor_changes (
        seq INTEGER PRIMARY KEY,
        agent_id TEXT NOT NULL,
        monitor_id TEXT NOT NULL,
        change TEXT NOT NULL,
        created_at TEXT NOT NULL
      );
      CREATE INDEX monitor_changes_agent ON monitor_changes (agent_id, seq);
    `,
  },
  // --- migration 5: message_person's outbox. Migration 4 is the monitor's.
  {
    version: 5,
    name: 'message outbox and opt-outs',
    // Outbox rows outlive their agent: the account's rate limit and its record of who was messaged count them. One
    // attempt per tool call (the unique index), and a partial index so recovery finds queued rows without a scan.
    up: `
      CREATE TABLE outbox (
        seq INTEGER PRIMARY KEY,
        message_id TEXT NOT NULL UNIQUE,
        agent_id TEXT NOT NULL,
        account_id TEXT NOT NULL,
        tool_use_id TEXT NOT NULL,
        channel TEXT NOT NULL,
        "to" TEXT NOT NULL,
        subject TEXT,
        body_hash TEXT NOT NULL,
        status TEXT NOT NULL,
        provider_id TEXT,
        error TEXT,
        created_at TEXT NOT NULL,
        sent_at TEXT
      );
      CREATE UNIQUE INDEX outbox_call ON outbox (agent_id, tool_use_id);
      CREATE INDEX outbox_agent_created ON outbox (agent_id, created_at);
      CREATE INDEX outbox_account_created ON outbox (account_id, created_at);
      CREATE INDEX outbox_queued ON outbox (status) WHERE status = 'queued';

      CREATE TABLE message_opt_outs (
        account_id TEXT NOT NULL,
        channel TEXT NOT NULL,
        recipient TEXT NOT NULL,
        reason TEXT NOT NULL,
        at TEXT NOT NULL,
        PRIMARY KEY (account_id, channel, recipient)
      ) WITHOUT ROWID;
    `,
  },
  // --- migration 6: the console: when each API key was last used, and sign-in sessions.
  {
    version: 6,
    name: 'console: api key last use, sessions',
    up: `
      ALTER TABLE api_keys ADD COLUMN last_used_at TEXT;
      CREATE TABLE console_sessions (
        id_hash TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        key_hash TEXT NOT NULL,
        key_id TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        ended TEXT
      ) WITHOUT ROWID;
      CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);
    `,
  },
  // --- migration 7: operations: the trace context stored with an agent, and finding finished roots.
  {
    version: 7,
    name: 'trace context and retention',
    // A span context is 55 characters; agents made before (or without tracing) have none. The partial index keeps the
    // retention sweep's search for old finished roots off the 10,000 children of a fan-out.
    up: `
      ALTER TABLE agents ADD COLUMN trace_context TEXT;
      CREATE INDEX agents_finished_roots ON agents (status, updated_at) WHERE parent_id IS NULL;
    `,
  },
  // --- migration 8: goal search: a trigram index over the first 4,096 characters of each goal, ASCII-lowered
  // as lower() does, so a search never reads whole goals (storage/search.ts). detail=none: LIKE finds its candidates by trigram alone and checks
  // them against the stored prefix, much cheaper than positions for repetitive text. Kept by triggers, so every
  // write path (insert, tree delete) keeps it without knowing of it.
  {
    version: 8,
    name: 'goal search index, sessions by account',
    up: `
      CREATE VIRTUAL TABLE agent_goal_search USING fts5(goal, tokenize = 'trigram', detail = none);
      INSERT INTO agent_goal_search (rowid, goal) SELECT seq, lower(substr(goal, 1, 4096)) FROM agents;
      CREATE TRIGGER agents_goal_search_insert AFTER INSERT ON agents BEGIN
        INSERT INTO agent_goal_search (rowid, goal) VALUES (new.seq, lower(substr(new.goal, 1, 4096)));
      END;
      CREATE TRIGGER agents_goal_search_delete AFTER DELETE ON agents BEGIN
        DELETE FROM agent_goal_search WHERE rowid = old.seq;
      END;
      CREATE INDEX console_sessions_account ON console_sessions (account_id, expires_at);
    `,
  },
  // --- migration 9: prompt caching: a model call's ledger row says how many of its input tokens were
  // written to and read from the cache (billed at their own prices).
  {
    version: 9,
    name: 'ledger: prompt-cache tokens',
    up: `
      ALTER TABLE ledger ADD COLUMN tokens_cache_write INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE ledger ADD COLUMN tokens_cache_read INTEGER NOT NULL DEFAULT 0;
    `,
  },
  // --- migration 10: an agent's own ledger rows by an index, newest first, for its page in the console: reading
  // them by account and filtering would make every view of one agent cost its account's whole ledger.
  {
    version: 10,
    name: 'ledger by agent',
    up: `
      CREATE INDEX ledger_agent ON ledger (agent_id, seq);
    `,
  },
  // --- migration 11: the console's timeline from storage: a model call's measured latency on its ledger row (null
  // where not measured), and the status changes an operator or the credits caused, the newest 100 per agent.
  {
    version: 11,
    name: 'model call latency, status marks',
    up: `
      ALTER TABLE ledger ADD COLUMN latency_ms INTEGER;
      CREATE TABLE status_marks (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        agent_id TEXT NOT NULL,
        at TEXT NOT NULL,
        status TEXT NOT NULL,
        previous TEXT NOT NULL,
        message TEXT NOT NULL
      );
      CREATE INDEX status_marks_agent ON status_marks (agent_id, seq);
    `,
  },
];

/** The schema version this code writes: the last migration's. */
export const SCHEMA_VERSION = MIGRATIONS.at(-1)?.version ?? 0;

/**
 * Brings `db` up to {@link SCHEMA_VERSION}. Safe to call on every open and from several processes at once: each
 * migration runs in an IMMEDIATE transaction that re-reads the version first. Returns the versions applied now.
 * Refuses a database written by a newer agentry, whose schema this code does not know.
 */
export function migrate(db: Database.Database, migrations: readonly Migration[] = MIGRATIONS): number[] {
  db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at TEXT NOT NULL
  )`);
  const currentVersion = db.prepare<[], number>('SELECT coalesce(max(version), 0) FROM schema_migrations').pluck();
  const record = db.prepare<[number, string, string], unknown>(
    'INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)',
  );
  const latest = migrations.at(-1)?.version ?? 0;
  const applied: number[] = [];
  const applyNext = db.transaction((): boolean => {
    const current = currentVersion.get() ?? 0;
    if (current > latest) {
      throw new AgentryError(
        'invalid_request',
        `The database ${db.name} has schema version ${current}, newer than this agentry supports (${latest}). Upgrade agentry.`,
      );
    }
    const next = migrations.find((m) => m.version === current + 1);
    if (!next) return false;
    db.exec(next.up);
    record.run(next.version, next.name, new Date().toISOString());
    applied.push(next.version);
    return true;
  });
  while (applyNext.immediate()) {
    // one migration per transaction
  }
  return applied;
}
