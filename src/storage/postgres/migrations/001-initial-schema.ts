/**
 * Migration 1 (PostgreSQL): the initial schema. Accounts, the ledger, credit holds (reservations), API keys and
 * idempotency keys; agents with their messages, turns, tool calls and tool state; artifacts (their bytes in the row),
 * page texts and reads, the outbox and opt-outs, timers and monitors.
 *
 * Money is BIGINT micro-credits; JSON stays TEXT; `seq` columns are ordering keys only (creation order, ledger order)
 * and never leave the adapter, except a monitor change's. Frozen: never edit a migration once released; add the next.
 */
import type { Migration } from './migration.js';

export const migration: Migration = {
  version: 1,
  name: 'initial schema',
  up: `
CREATE TABLE accounts (
  seq BIGINT GENERATED ALWAYS AS IDENTITY,
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  subscription_active BOOLEAN NOT NULL,
  balance BIGINT NOT NULL,
  reserved BIGINT NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL
);
CREATE INDEX accounts_seq ON accounts (seq);
CREATE TABLE ledger (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  account_id TEXT NOT NULL,
  agent_id TEXT,
  kind TEXT NOT NULL,
  item TEXT,
  tokens_in BIGINT NOT NULL,
  tokens_out BIGINT NOT NULL,
  amount BIGINT NOT NULL,
  created_at TEXT NOT NULL
);
CREATE INDEX ledger_account ON ledger (account_id, seq);
CREATE TABLE reservations (
  id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  root_id TEXT NOT NULL,
  amount BIGINT NOT NULL
);
CREATE INDEX reservations_agent ON reservations (agent_id);
CREATE TABLE api_keys (
  seq BIGINT GENERATED ALWAYS AS IDENTITY,
  id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL,
  name TEXT NOT NULL,
  hash TEXT NOT NULL UNIQUE,
  last4 TEXT NOT NULL,
  created_at TEXT NOT NULL
);
CREATE INDEX api_keys_account ON api_keys (account_id, seq);
CREATE TABLE idempotency_keys (
  account_id TEXT NOT NULL,
  key TEXT NOT NULL,
  request_hash TEXT NOT NULL,
  response TEXT NOT NULL,
  status INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  PRIMARY KEY (account_id, key)
);

CREATE TABLE agents (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  agent_id TEXT NOT NULL UNIQUE,
  account_id TEXT NOT NULL,
  parent_id TEXT,
  root_id TEXT NOT NULL,
  spawn_key TEXT,
  goal TEXT NOT NULL,
  model TEXT NOT NULL,
  status TEXT NOT NULL,
  progress DOUBLE PRECISION NOT NULL,
  status_message TEXT NOT NULL,
  token_count BIGINT NOT NULL,
  message_count BIGINT NOT NULL,
  credits_spent BIGINT NOT NULL,
  sub_agent_count BIGINT NOT NULL,
  max_credits BIGINT,
  tree_spent BIGINT NOT NULL,
  tree_reserved BIGINT NOT NULL DEFAULT 0,
  step_count BIGINT NOT NULL,
  started BOOLEAN NOT NULL,
  active_ms BIGINT NOT NULL,
  active_since TEXT,
  plan TEXT,
  spec TEXT,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE INDEX agents_account ON agents (account_id, seq);
CREATE INDEX agents_parent ON agents (parent_id, seq);
CREATE INDEX agents_status ON agents (status, seq);
-- Covers countChildrenByStatus, so counting many children reads the index only.
CREATE INDEX agents_spawn_key ON agents (parent_id, spawn_key, status);
CREATE TABLE messages (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  agent_id TEXT NOT NULL,
  message_id TEXT NOT NULL,
  role TEXT NOT NULL,
  text TEXT NOT NULL,
  timestamp TEXT NOT NULL
);
CREATE INDEX messages_agent ON messages (agent_id, seq);
CREATE TABLE turns (
  agent_id TEXT NOT NULL,
  idx BIGINT NOT NULL,
  role TEXT NOT NULL,
  content TEXT NOT NULL,
  created_at TEXT NOT NULL,
  PRIMARY KEY (agent_id, idx)
);
-- seq keeps a call's first position in listToolCalls when an upsert rewrites it.
CREATE TABLE tool_calls (
  seq BIGINT GENERATED ALWAYS AS IDENTITY,
  agent_id TEXT NOT NULL,
  tool_use_id TEXT NOT NULL,
  turn_idx BIGINT NOT NULL,
  name TEXT NOT NULL,
  input TEXT NOT NULL,
  status TEXT NOT NULL,
  idempotent BOOLEAN NOT NULL,
  result TEXT,
  is_error BOOLEAN NOT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (agent_id, tool_use_id)
);
CREATE INDEX tool_calls_turn ON tool_calls (agent_id, turn_idx, seq);
CREATE TABLE tool_state (
  agent_id TEXT NOT NULL,
  tool_use_id TEXT NOT NULL,
  state TEXT NOT NULL,
  PRIMARY KEY (agent_id, tool_use_id)
);

CREATE TABLE artifacts (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  agent_id TEXT NOT NULL,
  artifact_id TEXT NOT NULL,
  account_id TEXT NOT NULL,
  name TEXT NOT NULL,
  mime_type TEXT NOT NULL,
  size BIGINT NOT NULL,
  created_at TEXT NOT NULL,
  data BYTEA NOT NULL,
  UNIQUE (agent_id, artifact_id)
);
-- No agent_id: a text is kept once per hash and outlives its readers (citations point at it).
CREATE TABLE page_texts (
  content_sha256 TEXT PRIMARY KEY,
  text TEXT NOT NULL
);
CREATE TABLE page_reads (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  agent_id TEXT NOT NULL,
  tool_use_id TEXT NOT NULL,
  url TEXT NOT NULL,
  final_url TEXT NOT NULL,
  title TEXT NOT NULL,
  content_sha256 TEXT NOT NULL,
  retrieved_at TEXT NOT NULL
);
CREATE INDEX page_reads_agent ON page_reads (agent_id, seq);
-- Rows outlive their agent: the account's rate limit and its record of who was messaged count them.
CREATE TABLE outbox (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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
  sent_at TEXT,
  UNIQUE (agent_id, tool_use_id)
);
CREATE INDEX outbox_agent_created ON outbox (agent_id, created_at);
CREATE INDEX outbox_account_created ON outbox (account_id, created_at);
-- Recovery finds queued rows without a scan.
CREATE INDEX outbox_queued ON outbox (status) WHERE status = 'queued';
CREATE TABLE message_opt_outs (
  account_id TEXT NOT NULL,
  channel TEXT NOT NULL,
  recipient TEXT NOT NULL,
  reason TEXT NOT NULL,
  at TEXT NOT NULL,
  PRIMARY KEY (account_id, channel, recipient)
);
-- Timers are read only when due, through the (due_at) index: idle monitors are rows, not memory.
CREATE TABLE timers (
  timer_id TEXT PRIMARY KEY,
  agent_id TEXT NOT NULL,
  due_at BIGINT NOT NULL,
  kind TEXT NOT NULL,
  payload TEXT NOT NULL
);
CREATE INDEX timers_due ON timers (due_at, timer_id);
CREATE INDEX timers_agent ON timers (agent_id);
CREATE TABLE monitors (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  monitor_id TEXT NOT NULL UNIQUE,
  agent_id TEXT NOT NULL,
  url TEXT NOT NULL,
  selector TEXT,
  ignore_selectors TEXT NOT NULL,
  condition TEXT,
  interval_s BIGINT NOT NULL,
  until TEXT,
  status TEXT NOT NULL,
  created_at TEXT NOT NULL,
  last_checked_at TEXT,
  next_check_at TEXT,
  changes BIGINT NOT NULL,
  last_error TEXT,
  failures BIGINT NOT NULL,
  etag TEXT,
  last_modified TEXT,
  content_sha256 TEXT,
  content TEXT,
  render BOOLEAN NOT NULL
);
CREATE INDEX monitors_agent ON monitors (agent_id, seq);
CREATE TABLE monitor_changes (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  agent_id TEXT NOT NULL,
  monitor_id TEXT NOT NULL,
  change TEXT NOT NULL,
  created_at TEXT NOT NULL
);
CREATE INDEX monitor_changes_agent ON monitor_changes (agent_id, seq);
`,
};
