/**
 * @module storage/postgres/workers-schema
 * Migration 5: what lets several runtime processes (workers) share one database (issue 27, DESIGN §9).
 *
 * - `workers`: one row per live worker, its heartbeat in database time. A row whose heartbeat is older than the lease
 *   (or that says `stopped`) belongs to a worker that is gone: the sweeper cleans up after it and deletes the row.
 * - `agents.lease_owner / lease_epoch / lease_expires_at`: the worker stepping an agent, the number of times the agent
 *   was claimed (every claim adds one, so a commit fenced by an old epoch updates nothing), and when the lease ends
 *   unless renewed. `wake_requested`: the agent has work and no worker took it yet (a new or resumed agent, a wake
 *   that arrived while another worker held the lease): a claim takes it. New rows start with it set, so an agent
 *   created by any process (a worker, an HTTP front end, an exclusive runtime before) is claimable.
 * - `timers.claimed_by / claim_expires_at`: a due timer is claimed like an agent, so it fires once across workers.
 * - `outbox.worker_id`, `reservations.worker_id`: whose process queued a message or took a hold, so that only a gone
 *   worker's queued messages become `unknown` and only its holds are dropped.
 */
export const WORKERS_SCHEMA: string[] = [
  `CREATE TABLE workers (
    worker_id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    stopped BOOLEAN NOT NULL DEFAULT false
  )`,
  `ALTER TABLE agents
    ADD COLUMN lease_owner TEXT,
    ADD COLUMN lease_epoch BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN lease_expires_at TIMESTAMPTZ,
    ADD COLUMN wake_requested BOOLEAN NOT NULL DEFAULT true`,
  // What a claim scans: runnable agents nobody holds that have work, or whose holder's lease may have ended.
  `CREATE INDEX agents_claimable ON agents (seq)
    WHERE status IN ('ACTIVE', 'STARTING_UP') AND (wake_requested OR lease_owner IS NOT NULL)`,
  `CREATE INDEX agents_lease_owner ON agents (lease_owner) WHERE lease_owner IS NOT NULL`,
  `ALTER TABLE timers ADD COLUMN claimed_by TEXT, ADD COLUMN claim_expires_at TIMESTAMPTZ`,
  `ALTER TABLE outbox ADD COLUMN worker_id TEXT`,
  `ALTER TABLE reservations ADD COLUMN worker_id TEXT`,
];
