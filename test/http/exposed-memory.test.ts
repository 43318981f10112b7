/**
 * Safe to expose (docs/decisions.md#safe-to-expose-http-event-streams-storage): floods that used to exhaust `agentry
 * serve`'s memory, measured on the server's own process (a forked child: exposed-server.ts), not on the test's.
 * - 1,000 slow unauthenticated 1 MiB uploads raise the server's RSS by less than 100 MB (it used to buffer 1 MiB of
 *   each before looking at the key), and authenticated requests still answer meanwhile;
 * - a flood of 2,000 event streams whose clients never read (each stream starts with 1 MB of transcript to send) raises
 *   it by less than 200 MB: the key gets its 16 streams, the rest 429, and the service still answers. (The old code
 *   took every one: 2 GB.) That a reader too slow is dropped and resumes is tested in exposed-streams.test.ts.
 * The bounds leave room for noise, not for buffering per request (the old code took gigabytes).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ROOT, tempDir } from './helpers.js';

const MB = 1024 * 1024;

interface Served {
  child: ChildProcess;
  url: string;
  port: number;
  key: string;
  agentId: string;
  rss(): Promise<number>;
  /** What the server wrote to stderr so far (its last 4,000 characters). */
  stderr(): string;
}

let dir: { dir: string; remove(): void };
let served: Served | undefined;
const sockets: Socket[] = [];

beforeEach(() => {
  dir = tempDir('agentry-exposed-memory-');
});
afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy();
  if (served) {
    const exited = new Promise((resolve) => served!.child.once('exit', resolve));
    served.child.disconnect();
    await exited;
    served = undefined;
  }
  dir.remove();
});

async function serve(options: Record<string, unknown> = {}): Promise<Served> {
  const child = fork(
    join(ROOT, 'test/http/exposed-server.ts'),
    [join(dir.dir, 'agentry.db'), JSON.stringify(options)],
    {
      cwd: ROOT,
      execArgv: ['--import', 'tsx'],
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    },
  );
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => (stderr = (stderr + c.toString()).slice(-4000)));
  const ready = await new Promise<{ url: string; key: string; agentId: string }>((resolve, reject) => {
    child.once('message', (m: { ready: { url: string; key: string; agentId: string } }) => resolve(m.ready));
    child.once('exit', (code) => reject(new Error(`the server exited (${code}): ${stderr}`)));
  });
  const rss = () =>
    new Promise<number>((resolve) => {
      child.once('message', (m: { rss: number }) => resolve(m.rss));
      child.send({ kind: 'rss' });
    });
  served = { child, ...ready, port: Number(new URL(ready.url).port), rss, stderr: () => stderr };
  return served;
}

/** The server's highest RSS while `work` runs, sampled every 100 ms. */
async function peakRss(s: Served, work: () => Promise<void>): Promise<number> {
  let peak = await s.rss();
  let running = true;
  const sampling = (async () => {
    while (running) {
      peak = Math.max(peak, await s.rss());
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  })();
  try {
    await work();
  } finally {
    running = false;
    await sampling;
  }
  return Math.max(peak, await s.rss());
}

/** Opens a raw connection (kept in `sockets`, destroyed after the test). */
function open(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1' }, () => resolve(socket));
    socket.on('error', () => {}); // the server closes strangers' connections: expected
    socket.once('error', reject);
    sockets.push(socket);
  });
}

async function settle(s: Served): Promise<number> {
  // A few requests of every kind first (a refused one too), so that lazy allocations (the router, the MCP SDK, JIT) are in the baseline.
  for (let i = 0; i < 20; i++) {
    await fetch(`${s.url}/api/agents`, { headers: { 'x-api-key': s.key } }).then((r) => r.arrayBuffer());
    await fetch(`${s.url}/api/agents/${s.agentId}`, { headers: { 'x-api-key': s.key } }).then((r) => r.arrayBuffer());
  }
  for (let i = 0; i < 3; i++) {
    const refused = await fetch(`${s.url}/api/agents`, {
      method: 'POST',
      headers: { 'x-api-key': `agk_warmup${i}`, 'content-type': 'application/json' },
      body: '{"goal":"x"}',
    });
    await refused.arrayBuffer();
  }
  return s.rss();
}

async function until(what: string, done: () => boolean, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('the server under floods (memory measured in its own process)', () => {
  it('1,000 slow unauthenticated 1 MiB uploads raise RSS by < 100 MB; authenticated requests still answer', async () => {
    const s = await serve();
    const before = await settle(s);
    const CHUNK = Buffer.alloc(64 * 1024, 0x20);
    const answers = new Map<string, number>();
    let answered = 0;
    const peak = await peakRss(s, async () => {
      const uploads = await Promise.all(
        Array.from({ length: 1000 }, async (_, i) => {
          const socket = await open(s.port);
          socket.once('data', (chunk: Buffer) => {
            const status = chunk.toString('latin1').slice(9, 12);
            answers.set(status, (answers.get(status) ?? 0) + 1);
            answered++;
          });
          // Half send no key, half a wrong one; every one declares 1 MiB and sends the first 64 KiB at once.
          const key = i % 2 === 0 ? '' : `x-api-key: agk_wrong${i}\r\n`;
          socket.write(
            `POST /api/agents HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n${key}` +
              `content-length: ${MB}\r\n\r\n`,
          );
          socket.write(CHUNK);
          return socket;
        }),
      );
      // Then slowly, more of every body, while a tenant works.
      for (let round = 0; round < 3; round++) {
        for (const socket of uploads) if (!socket.destroyed) socket.write(CHUNK);
        const list = await fetch(`${s.url}/api/agents`, { headers: { 'x-api-key': s.key } });
        expect(list.status).toBe(200);
        const created = await fetch(`${s.url}/api/agents`, {
          method: 'POST',
          headers: { 'x-api-key': s.key, 'content-type': 'application/json' },
          body: JSON.stringify({ goal: `Work while strangers upload (${round})` }),
        });
        expect(created.status, await created.clone().text()).toBe(201);
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      await until(`an answer to every upload (${answered})`, () => answered >= 1000, 30_000);
    });
    // Each stranger got 401, or 429 once its address had failed too often; none got in.
    expect([...answers.keys()].sort()).toEqual(['401', '429']);
    console.info(`uploads: server RSS ${Math.round(before / MB)} MB -> peak ${Math.round(peak / MB)} MB`);
    expect(peak - before, `RSS ${before / MB} MB -> peak ${peak / MB} MB`).toBeLessThan(100 * MB);
    const poll = await fetch(`${s.url}/api/agents/${s.agentId}`, { headers: { 'x-api-key': s.key } });
    expect(poll.status).toBe(200);
  });

  it('a flood of 2,000 event streams whose clients never read raises RSS by < 200 MB; the service answers', async () => {
    // Without the per-request rate limit, so that what refuses the flood is the per-key cap on streams.
    const s = await serve({ rateLimit: false });
    const before = await settle(s);
    let started = 0;
    const answers = new Map<string, number>();
    const peak = await peakRss(s, async () => {
      for (let batch = 0; batch < 20; batch++) {
        await Promise.all(
          Array.from({ length: 100 }, async () => {
            const socket = await open(s.port);
            // The first bytes show the stream was accepted; after them the client reads nothing more.
            socket.once('data', (chunk: Buffer) => {
              const status = chunk.toString('latin1').slice(9, 12);
              answers.set(status, (answers.get(status) ?? 0) + 1);
              started++;
              socket.pause();
            });
            socket.write(
              `GET /api/agents/${s.agentId}/events HTTP/1.1\r\nhost: 127.0.0.1\r\nx-api-key: ${s.key}\r\n\r\n`,
            );
          }),
        );
      }
      await until(`an answer to every stream (${started})`, () => started >= 2000, 60_000);
      // Every stream has 1 MB to send: give the server time to try.
      await new Promise((resolve) => setTimeout(resolve, 2000));
      const poll = await fetch(`${s.url}/api/agents/${s.agentId}`, { headers: { 'x-api-key': s.key } });
      expect(poll.status).toBe(200);
      const list = await fetch(`${s.url}/api/agents`, { headers: { 'x-api-key': s.key } });
      expect(list.status).toBe(200);
    });
    expect(Object.fromEntries(answers)).toEqual({ 200: 16, 429: 1984 });
    console.info(`streams: server RSS ${Math.round(before / MB)} MB -> peak ${Math.round(peak / MB)} MB`);
    expect(peak - before, `RSS ${before / MB} MB -> peak ${peak / MB} MB`).toBeLessThan(200 * MB);
  });

  it('logs an upload its client abandons as one line, without a stack', async () => {
    const s = await serve();
    const socket = await open(s.port);
    socket.write(
      `POST /api/agents HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\nx-api-key: ${s.key}\r\n` +
        `content-length: ${MB}\r\n\r\n{"goal":`,
    );
    // The key works, so the server reads the body: wait until it has started, then leave.
    const created = await fetch(`${s.url}/api/agents`, { headers: { 'x-api-key': s.key } });
    expect(created.status).toBe(200);
    socket.destroy();
    await until('the line', () => s.stderr().includes('ended early'), 10_000);
    const lines = s
      .stderr()
      .split('\n')
      .filter((line) => line.trim() !== '');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^agentry http: an upload to \/api\/agents ended early \(\w+\) after \d+ bytes$/);
  });
});
