/**
 * The load generator, in a process of its own: autocannon against one URL until the parent says stop (IPC), then it
 * sends back requests/s and latency percentiles.
 */
import autocannon from 'autocannon';

const [url, apiKey, connections] = process.argv.slice(2);
const instance = autocannon({
  url: url!,
  connections: Number(connections ?? 10),
  duration: 600,
  headers: apiKey ? { 'x-api-key': apiKey } : {},
});
let started = 0;
instance.on('start', () => (started = performance.now()));
process.on('message', (m) => {
  if (m === 'stop') instance.stop();
});
instance.on('done', (result) => {
  const seconds = (performance.now() - started) / 1000;
  process.send!({
    requests: result.requests.total,
    seconds,
    rps: Math.round(result.requests.total / seconds),
    p50_ms: result.latency.p50,
    p99_ms: result.latency.p99,
    max_ms: result.latency.max,
    non2xx: result.non2xx,
    errors: result.errors,
  });
  process.exit(0);
});
process.send!('ready');
