/**
 * poll-under-load: GET /api/agents/{id} from a load generator on loopback while fanout-10k runs in this process, and
 * the same load against a bare node:http hello-world (in a process of its own) for the same time. The service is
 * `startServer` as `agentry serve` runs it: HTTP on a thread of its own that answers polls from a read-only
 * connection to the SQLite file.
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startServer } from 'agentry-runtime/http';
import { startLoad, type LoadResult } from '../lib/load-client.js';
import { peakRssMb, report, scenarioArgs } from '../lib/measure.js';
import { runFanout } from './agentry-fanout.js';

const args = scenarioArgs();
let load: { stop(): Promise<LoadResult> } | undefined;
let close: (() => Promise<void>) | undefined;
let loadStarted = 0;
let underLoad!: LoadResult;
const fanout = await runFanout({
  n: args.n,
  parents: 1,
  latency: 0,
  lane: Number(args.lane),
  async onOpen(runtime) {
    const key = await runtime.accounts.createApiKey('local', { name: 'bench' });
    // the poll target exists before the clock starts, so every request finds it
    const target = await runtime.create({ goal: 'poll target' });
    await runtime.pause(target.agent_id);
    // no rate limit: the load generator uses one key, and 429s are not what this measures
    const server = await startServer(runtime, { port: 0, rateLimit: false });
    close = () => server.close();
    const url = `${server.url}/api/agents/${target.agent_id}`;
    load = await startLoad(url, key.key);
    loadStarted = performance.now();
  },
  async onFinished() {
    underLoad = await load!.stop();
  },
});
if (underLoad.non2xx > 0 || underLoad.errors > 0) {
  throw new Error(`poll answers were not all 200: ${underLoad.non2xx} non-2xx, ${underLoad.errors} errors`);
}
const loadMs = performance.now() - loadStarted;
await close?.();

// The reference: a bare node:http hello-world in its own process, under the same load for the same time.
const hello = fork(fileURLToPath(new URL('./hello.js', import.meta.url)), [], {
  stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
});
const helloUrl = await new Promise<string>((resolve) => hello.once('message', (m) => resolve(String(m))));
const helloLoad = await startLoad(helloUrl);
await new Promise((r) => setTimeout(r, Math.max(1_000, loadMs)));
const reference = await helloLoad.stop();
hello.kill();

report({
  name: 'poll',
  n: args.n,
  wall_ms: Number(fanout.wall_ms),
  peak_rss_mb: peakRssMb(),
  fanout_wall_ms: fanout.wall_ms,
  poll_rps: underLoad.rps,
  poll_p50_ms: underLoad.p50_ms,
  poll_p99_ms: underLoad.p99_ms,
  poll_non2xx: underLoad.non2xx,
  poll_errors: underLoad.errors,
  hello_rps: reference.rps,
  hello_p99_ms: reference.p99_ms,
  rps_ratio: Math.round((underLoad.rps / reference.rps) * 1000) / 1000,
});
