/** Starts the load generator process and stops it on demand. */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export interface LoadResult {
  requests: number;
  seconds: number;
  rps: number;
  p50_ms: number;
  p99_ms: number;
  max_ms: number;
  non2xx: number;
  errors: number;
}

export async function startLoad(
  url: string,
  apiKey?: string,
  connections = 10,
): Promise<{ stop(): Promise<LoadResult> }> {
  const script = fileURLToPath(new URL('./load.js', import.meta.url));
  const child = fork(script, [url, apiKey ?? '', String(connections)], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const result = new Promise<LoadResult>((resolve, reject) => {
    child.on('message', (m) => {
      if (m !== 'ready') resolve(m as LoadResult);
    });
    child.on('exit', (code) => code !== 0 && reject(new Error(`load generator exited with ${code}`)));
  });
  await new Promise<void>((resolve) => child.once('message', () => resolve()));
  return {
    stop() {
      child.send('stop');
      return result;
    },
  };
}
