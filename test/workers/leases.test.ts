/**
 * Leases on PostgreSQL, at the storage level: a claimed agent cannot be claimed by another live worker (it
 * gets a wake request instead, which its holder honours when it lets the agent go); once the lease runs out another
 * worker takes it over, and from then on the first worker's step commits, its "started" marks of calls that must
 * never run twice and its model-call gate are all refused, and its heartbeat reports the lease lost.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import pg from 'pg';
import { AgentRuntime, LeaseLostError, type StorageAdapter, type WorkerHooks } from 'agentry-runtime';
import { scriptedModel } from 'agentry-runtime/testing';
import { postgresStorage } from 'agentry-runtime/storage/postgres';
import { dropSchemas, newSchemaName, POSTGRES_TEST_URL, postgresUnreachable } from '../support/postgres.js';
import { skippable } from '../support/skip.js';

const url = POSTGRES_TEST_URL;
const strict = process.env.AGENTRY_CI_STRICT === '1';
const unreachable = await postgresUnreachable();
const reachable = unreachable === null;
const schemas: string[] = [];
const closers: Array<() => Promise<unknown>> = [];

afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close().catch(() => undefined);
  await dropSchemas(schemas.splice(0));
});

async function until(check: () => boolean | Promise<boolean>, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setImmediate(r));
  }
}

function worker(
  schema: string,
  timing: { leaseMs: number; heartbeatMs: number; goneAfterMs?: number } = { leaseMs: 1_000, heartbeatMs: 100 },
): { storage: StorageAdapter; lost: string[]; hooks: WorkerHooks } {
  const storage = postgresStorage({ connectionString: url, schema, ...timing });
  closers.push(() => storage.close());
  const lost: string[] = [];
  const hooks: WorkerHooks = {
    onLost: (ids) => lost.push(...ids),
    onStopped: () => undefined,
    onClaimed: () => undefined,
    onError: () => undefined,
  };
  return { storage, lost, hooks };
}

/** A schema with a runtime that creates agents and steps none (a process beside the workers). */
async function creatorOf(): Promise<{ schema: string; creator: AgentRuntime }> {
  const schema = newSchemaName('agentry_lease');
  schemas.push(schema);
  const creator = await AgentRuntime.open({
    storage: postgresStorage({ connectionString: url, schema }),
    model: scriptedModel({ turns: [{ text: 'done' }] }),
    builtinTools: false,
    scheduler: 'manual',
  });
  closers.push(() => creator.close());
  return { schema, creator };
}

describe.skipIf(!reachable && !strict)(skippable('Leases on PostgreSQL', !strict && unreachable), () => {
  it('fences every write of a worker that lost an agent to another', async () => {
    // An agent created by a process that steps nothing.
    const { schema, creator } = await creatorOf();
    const { agent_id: id } = await creator.create({ goal: 'lease me' });

    // a renews rarely: it stands for a worker frozen between two heartbeats.
    const a = worker(schema, { leaseMs: 60_000, heartbeatMs: 20_000 });
    const b = worker(schema);
    await a.storage.init();
    await b.storage.init();
    // No room: the workers claim only what they are asked to.
    await a.storage.workers!.start(a.hooks, () => 0);
    await b.storage.workers!.start(b.hooks, () => 0);

    expect(await a.storage.workers!.claim([id], 1)).toEqual([id]);
    expect(await b.storage.workers!.claim([id], 1)).toEqual([]); // held by a: a wake request instead
    const at = () => new Date().toISOString();
    await a.storage.commitStep({ agent_id: id, patch: { updated_at: at(), progress: 0.1 } });
    expect(await a.storage.workers!.mayProceed(id)).toBe(true);
    // a lets it go: the wake b asked for keeps it with a, to be driven again
    expect(await a.storage.workers!.release([id])).toEqual([id]);
    expect(a.storage.workers!.holds(id)).toBe(true);

    // a does not renew in time: its lease runs out and b takes the agent over.
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    closers.push(() => admin.end());
    await admin.query(
      `UPDATE "${schema}".agents SET lease_expires_at = now() - interval '1 second' WHERE agent_id = $1`,
      [id],
    );
    expect(await b.storage.workers!.claim([id], 1)).toEqual([id]);
    // Told (as a pause or delete would tell it), a renews at once, finds out, and drops the agent.
    b.storage.workers!.bus.publish('control', id);
    await until(() => a.lost.includes(id), 'a to find the lease lost');
    expect(a.storage.workers!.holds(id)).toBe(false);

    // Everything a's lingering work still tries for the agent is refused.
    await expect(
      a.storage.commitStep({ agent_id: id, patch: { updated_at: at(), progress: 0.5 } }),
    ).rejects.toBeInstanceOf(LeaseLostError);
    const call = {
      agent_id: id,
      tool_use_id: 'toolu_1',
      turn_idx: 1,
      name: 'send',
      input: '{}',
      status: 'started' as const,
      idempotent: false,
      result: null,
      is_error: false,
      updated_at: at(),
    };
    expect(await a.storage.putToolCalls([call], 'ACTIVE')).toBe(false);
    expect(await a.storage.workers!.mayProceed(id)).toBe(false);
    expect(await b.storage.putToolCalls([call], 'ACTIVE')).toBe(true);
    await b.storage.commitStep({ agent_id: id, patch: { updated_at: at(), progress: 0.7 } });
    expect((await b.storage.getAgent(id))!.progress).toBe(0.7); // a's 0.5 never landed
    expect(b.lost).toEqual([]);
  });

  it('a step commit that ends the agent gives its lease back at once; the worker writes nothing more for it', async () => {
    const { schema, creator } = await creatorOf();
    const { agent_id: id } = await creator.create({ goal: 'finish me' });
    const { agent_id: other } = await creator.create({ goal: 'pause me' });

    const a = worker(schema);
    await a.storage.init();
    await a.storage.workers!.start(a.hooks, () => 0);
    expect(await a.storage.workers!.claim([id, other], 2)).toEqual([id, other]);
    const at = () => new Date().toISOString();
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    closers.push(() => admin.end());
    const lease = async (agentId: string) =>
      (
        await admin.query(
          `SELECT lease_owner, lease_expires_at, wake_requested FROM "${schema}".agents WHERE agent_id = $1`,
          [agentId],
        )
      ).rows[0];

    // A step that is not the last keeps (and extends) the lease.
    await a.storage.commitStep({ agent_id: id, patch: { updated_at: at(), progress: 0.5 } });
    expect((await lease(id)).lease_owner).toBe(a.storage.workers!.workerId);
    // The step that completes it: the same statement ends the lease, as a release would.
    const done = await a.storage.commitStep({
      agent_id: id,
      patch: { updated_at: at() },
      status: { from: ['STARTING_UP', 'ACTIVE'], to: 'COMPLETED', patch: { progress: 1 } },
    });
    expect(done.statusChanged).toBe(true);
    expect(await lease(id)).toEqual({ lease_owner: null, lease_expires_at: null, wake_requested: false });
    expect(a.storage.workers!.holds(id)).toBe(false);
    // Whatever the driver still tried for it is fenced out, and its release has nothing left to give back.
    await expect(a.storage.commitStep({ agent_id: id, patch: { updated_at: at() } })).rejects.toBeInstanceOf(
      LeaseLostError,
    );
    expect(await a.storage.workers!.release([id])).toEqual([]);
    expect(a.lost).toEqual([]);

    // An agent paused by another process while held: the next step commit of its holder gives the lease back too.
    await admin.query(`UPDATE "${schema}".agents SET status = 'PAUSED' WHERE agent_id = $1`, [other]);
    await a.storage.commitStep({ agent_id: other, patch: { updated_at: at() } });
    expect((await lease(other)).lease_owner).toBeNull();
    expect(a.storage.workers!.holds(other)).toBe(false);
  });

  it('does not trust a gate answer read after the worker was frozen past its gone-worker grace', async () => {
    // The database said yes before the freeze; by the time the worker reads the answer, others may have taken it for
    // gone and its agents over. Frozen here by moving the monotonic clock on: the database still says yes.
    const { schema, creator } = await creatorOf();
    const { agent_id: id } = await creator.create({ goal: 'freeze me' });
    const a = worker(schema, { leaseMs: 60_000, heartbeatMs: 20_000, goneAfterMs: 1_000 });
    await a.storage.init();
    await a.storage.workers!.start(a.hooks, () => 0);
    expect(await a.storage.workers!.claim([id], 1)).toEqual([id]);
    expect(await a.storage.workers!.mayProceed(id)).toBe(true);

    const now = performance.now.bind(performance);
    const frozen = vi.spyOn(performance, 'now').mockImplementation(() => now() + 5_000);
    try {
      expect(await a.storage.workers!.mayProceed(id)).toBe(false);
    } finally {
      frozen.mockRestore();
    }
  });

  it('claims nothing while its last renewal is overdue: its view of what it holds is stale until it renews', async () => {
    const { schema, creator } = await creatorOf();
    const { agent_id: id } = await creator.create({ goal: 'claim me later' });
    const a = worker(schema, { leaseMs: 60_000, heartbeatMs: 20_000, goneAfterMs: 1_000 });
    await a.storage.init();
    await a.storage.workers!.start(a.hooks, () => 0);

    const now = performance.now.bind(performance);
    const frozen = vi.spyOn(performance, 'now').mockImplementation(() => now() + 5_000);
    try {
      expect(await a.storage.workers!.claim([id], 1)).toEqual([]);
    } finally {
      frozen.mockRestore();
    }
    expect(await a.storage.workers!.claim([id], 1)).toEqual([id]);
  });
});
