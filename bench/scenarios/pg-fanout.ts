/**
 * pg-fanout: the fanout scenario (one parent spawns `--n` children through spawn_sub_agents; each child calls one
 * tool, then answers; zero-latency scripted model) on PostgreSQL, and the same run on SQLite in the same process right
 * after, so that the per-child ratio is measured under the same machine load. PostgreSQL runs in a schema of its own
 * (dropped afterwards) at AGENTRY_BENCH_POSTGRES_URL (default the local server, database `test`).
 *
 * Reports wall and µs per child of both, their ratio, and the PostgreSQL server's CPU time spent by the run's own
 * backends (utime + stime from /proc of the connections named by `application_name`, read before the pool closes; the
 * server's background writers are not in it). `--sync off` runs with `synchronousCommit: false` (SQLite's own
 * durability level, `synchronous=NORMAL`); the default is PostgreSQL's (every commit flushed).
 */
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { serverCpuMs } from '../lib/postgres-cpu.js';
import { postgresStorage } from 'agentry-runtime/storage/postgres';
import { runFanout } from './agentry-fanout.js';
import { peakRssMb, report } from '../lib/measure.js';

const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '1000' },
    lane: { type: 'string', default: '64' },
    sync: { type: 'string', default: 'on' },
    connections: { type: 'string', default: '10' },
    exclusive: { type: 'boolean', default: false },
  },
  strict: false,
});
const n = Number(values.n);
const lane = Number(values.lane);
const sync = values.sync !== 'off';
const baseUrl = process.env.AGENTRY_BENCH_POSTGRES_URL ?? 'postgres://root@127.0.0.1:5432/test';
const schema = `bench_${randomBytes(5).toString('hex')}`;
const appName = `agentry_${schema}`;
const url = `${baseUrl}${baseUrl.includes('?') ? '&' : '?'}application_name=${appName}`;

const admin = new pg.Client({ connectionString: baseUrl });
await admin.connect();
let serverMs = 0;
let nodeMs = 0;
try {
  const cpu0 = process.cpuUsage();
  const pgResult = await runFanout({
    n,
    parents: 1,
    latency: 0,
    lane,
    storage: () =>
      postgresStorage({
        connectionString: url,
        schema,
        maxConnections: Number(values.connections),
        synchronousCommit: sync,
        exclusive: values.exclusive === true,
      }),
    onFinished: async () => {
      const cpu = process.cpuUsage(cpu0);
      nodeMs = Math.round((cpu.user + cpu.system) / 1000);
      serverMs = await serverCpuMs(admin, appName);
    },
  });
  const sqliteResult = await runFanout({ n, parents: 1, latency: 0, lane });
  const pgUs = Number(pgResult.us_per_child);
  const sqliteUs = Number(sqliteResult.us_per_child);
  report({
    name: 'pg-fanout',
    n,
    wall_ms: Number(pgResult.wall_ms),
    us_per_child: pgUs,
    child_steps_per_s: pgResult.child_steps_per_s,
    synchronous_commit: sync ? 'on' : 'off',
    mode: values.exclusive === true ? 'exclusive' : 'worker',
    server_cpu_ms: serverMs,
    node_cpu_ms: nodeMs,
    sqlite_wall_ms: sqliteResult.wall_ms,
    sqlite_us_per_child: sqliteUs,
    per_child_over_sqlite: Math.round((pgUs / sqliteUs) * 100) / 100,
    peak_rss_mb: peakRssMb(),
  });
} finally {
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
  await admin.end();
}
