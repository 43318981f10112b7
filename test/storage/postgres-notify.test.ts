/**
 * PostgreSQL notifications are open to every role of the database: LISTEN and NOTIFY need no
 * privilege on the schema. The bus of a schema seals its payloads with the schema's secret, so a connection that
 * listens on its channel hears no agent or account id, and a flood of forged notifications (10,000 junk, old-format
 * and replayed payloads from another connection) reaches no listener and makes no query: it costs the parsing only.
 * The attacker is given the channel's name (as a role allowed to read `pg_stat_activity` would see it in the bus's
 * `LISTEN` statement). Needs PostgreSQL like postgres.test.ts (fails instead of skipping under AGENTRY_CI_STRICT=1).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import type { WorkerTopic } from '../../src/storage/workers.js';
import { NotifyBus } from '../../src/storage/postgres/notify.js';
import { postgresStorage } from '../../src/storage/postgres/index.js';
import { dropSchemas, newSchemaName, POSTGRES_TEST_URL, postgresUnreachable } from '../support/postgres.js';
import { eventually } from '../support/runtime.js';
import { skippable } from '../support/skip.js';

const url = POSTGRES_TEST_URL;
const strict = process.env.AGENTRY_CI_STRICT === '1';
const unreachable = await postgresUnreachable();
const reachable = unreachable === null;

const TOPICS: WorkerTopic[] = ['control', 'work', 'changed', 'timers', 'children', 'credits'];
const schemas: string[] = [];
const cleanups: Array<() => Promise<unknown>> = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
  await dropSchemas(schemas.splice(0));
});

/**
 * A migrated schema and a bus on it: every query of its pool counted, every delivery to a listener recorded, and the
 * channel it listens on, read from `pg_stat_activity` as another role with the right to read it would.
 */
async function busOnNewSchema() {
  const schema = newSchemaName('notify');
  schemas.push(schema);
  const storage = postgresStorage({ connectionString: url, schema });
  await storage.init();
  await storage.close();

  const application = `agentry-notify-test-${randomUUID().slice(0, 8)}`;
  const options = `-c search_path=${schema}`;
  const pool = new pg.Pool({ connectionString: url, options, max: 2 });
  cleanups.push(() => pool.end());
  const counted = { queries: 0 };
  const query = pool.query.bind(pool) as (...args: unknown[]) => unknown;
  (pool as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
    counted.queries++;
    return query(...args);
  };
  const bus = new NotifyBus({
    pool,
    connect: () => new pg.Client({ connectionString: url, options, application_name: application }),
    schema,
    // The LISTEN statement stays the connection's last query for the whole test.
    heartbeatMs: 60_000,
    onError: () => undefined,
  });
  cleanups.push(() => bus.stop());
  const delivered: Array<{ topic: WorkerTopic; items: string[] }> = [];
  for (const topic of TOPICS) {
    bus.subscribe(topic, (items) => {
      if (items) delivered.push({ topic, items });
    });
  }
  await bus.start();

  const outsider = new pg.Client({ connectionString: url });
  await outsider.connect();
  cleanups.push(() => outsider.end());
  const { rows } = await outsider.query<{ query: string }>(
    'SELECT query FROM pg_stat_activity WHERE application_name = $1',
    [application],
  );
  const channel = /^LISTEN (\w+)$/.exec(rows[0]?.query ?? '')?.[1];
  expect(channel).toBeTruthy();
  return { bus, delivered, counted, outsider, channel: channel!, schema };
}

describe.skipIf(!reachable && !strict)(skippable('PostgreSQL notifications', !strict && unreachable), () => {
  it('another connection that listens on the channel hears no agent or account id', async () => {
    const { bus, delivered, outsider, channel } = await busOnNewSchema();
    const heard: string[] = [];
    outsider.on('notification', (n) => heard.push(n.payload ?? ''));
    await outsider.query(`LISTEN ${channel}`);
    const agentId = randomUUID();
    bus.publish('control', agentId);
    bus.publish('credits', 'free:acct_secret_name');
    await eventually(() => delivered.length === 2, 10_000, 'both delivered');
    await eventually(() => heard.length > 0, 10_000, 'heard by the outsider');
    expect(delivered).toEqual(
      expect.arrayContaining([
        { topic: 'control', items: [agentId] },
        { topic: 'credits', items: ['free:acct_secret_name'] },
      ]),
    );
    for (const payload of heard) {
      expect(payload).not.toContain(agentId);
      expect(payload).not.toContain('acct_secret_name');
      expect(payload).not.toContain('control');
    }
  });

  it('10,000 forged notifications from another connection reach no listener and make no query', async () => {
    const { bus, delivered, counted, outsider, channel } = await busOnNewSchema();
    // A real notification, heard by the outsider: replayed below.
    const heard: string[] = [];
    outsider.on('notification', (n) => heard.push(n.payload ?? ''));
    await outsider.query(`LISTEN ${channel}`);
    bus.publish('work', '');
    await eventually(() => heard.length === 1, 10_000, 'heard by the outsider');
    await eventually(() => delivered.length === 1, 10_000, 'delivered');
    delivered.length = 0;
    const queriesBefore = counted.queries;

    // Old-format payloads (what the bus sent before it sealed them), random base64 of a sealed payload's length,
    // over-long junk, and the real notification replayed: 10,000 in all, in one statement.
    const forged: string[] = [];
    for (let i = 0; i < 2_500; i++) forged.push(`work\nx${i}`, `control\n${randomUUID()}`);
    for (let i = 0; i < 2_500; i++) forged.push(randomBytes(48 + (i % 64)).toString('base64'));
    for (let i = 0; i < 2_000; i++) forged.push(`${i}`.padEnd(7_999, 'A'));
    for (let i = 0; i < 500; i++) forged.push(heard[0]!);
    expect(forged).toHaveLength(10_000);
    // NOTIFY folds identical payloads of one transaction into one: the replays go in transactions of their own.
    await outsider.query('SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p', [channel, forged.slice(0, 9_500)]);
    for (const replay of forged.slice(9_500)) await outsider.query('SELECT pg_notify($1, $2)', [channel, replay]);

    // A real notification after the flood: notifications arrive in commit order, so once it is delivered the flood
    // has been heard.
    bus.publish('timers', '42');
    await eventually(() => delivered.some((d) => d.topic === 'timers'), 60_000, 'the marker delivered');
    expect(delivered).toEqual([{ topic: 'timers', items: ['42'] }]);
    expect(bus.dropped).toBe(10_000);
    // The marker's NOTIFY is the only query the bus made.
    expect(counted.queries - queriesBefore).toBe(1);
  });
});
