/**
 * The README's curl session, run as printed (with `npx agentry-runtime` running from source and the port of the test's
 * server) against `agentry serve` in a child process. The fake model answers nothing until the agent has been paused
 * and resumed (a watcher polls for the "Resuming" status), so the agent stays ACTIVE long enough to be paused, like a
 * real agent in the middle of its work; then it answers, and the session's wait loop sees the agent COMPLETED.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeAnthropic, type FakeAnthropic, type FakeReply } from 'agentry-runtime/testing';
import { CLI, cliEnv, ROOT, startServe, tempDir, type ServeProcess } from './helpers.js';

const run = promisify(execFile);

let fake: FakeAnthropic;
const ANSWER: FakeReply = { text: 'Node.js 25, 24 and 22.', usage: { input_tokens: 50, output_tokens: 10 } };
/** Whether the model may answer: set once the agent has been paused and resumed. */
let released = false;
/** Requests waiting for that. */
const held: Array<() => void> = [];

/** Polls (with a deadline) until the session's agent shows "Resuming", then lets the model answer. */
async function releaseAfterResume(base: string, apiKey: string, deadline = Date.now() + 60_000): Promise<void> {
  const headers = { 'x-api-key': apiKey };
  while (!released && Date.now() < deadline) {
    const list = (await (await fetch(`${base}/api/agents?limit=1`, { headers })).json()) as {
      data: Array<{ agent_id: string }>;
    };
    const id = list.data[0]?.agent_id;
    if (id) {
      const { agent } = (await (await fetch(`${base}/api/agents/${id}`, { headers })).json()) as {
        agent?: { status_message?: string };
      };
      if (agent?.status_message === 'Resuming') {
        released = true;
        for (const answer of held.splice(0)) answer();
        return;
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
let serve: ServeProcess;
let tmp: ReturnType<typeof tempDir>;
let db: string;

function httpSection(): string {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const start = readme.indexOf('## HTTP service');
  expect(start).toBeGreaterThanOrEqual(0);
  const end = readme.indexOf('\n## ', start + 3);
  return readme.slice(start, end < 0 ? undefined : end);
}

beforeAll(async () => {
  fake = await startFakeAnthropic({
    handler: (_body, info) =>
      released
        ? ANSWER
        : new Promise<FakeReply>((resolve) => {
            held.push(() => resolve(ANSWER));
            info.signal.addEventListener('abort', () => resolve({ text: 'aborted' }), { once: true });
          }),
  });
  tmp = tempDir('agentry-readme-');
  db = join(tmp.dir, 'agentry.db');
  serve = await startServe(['--db', db], cliEnv({ ANTHROPIC_BASE_URL: fake.url }));
});

afterAll(async () => {
  await serve?.stop();
  await fake?.close();
  tmp?.remove();
});

describe('README: HTTP service', () => {
  it('serve prints what the README shows', () => {
    const section = httpSection();
    expect(section).toContain('npx agentry-runtime serve');
    expect(serve.stderr()).toMatch(/^Created account "serve" with 100 credits and an active subscription\.$/m);
    expect(serve.stderr()).toMatch(/^API key: agk_\S+$/m);
    expect(serve.stderr()).toMatch(/^agentry listening on http:\/\/127\.0\.0\.1:\d+ \(database: .*\)$/m);
  });

  it('the curl session works as printed: create, poll, pause, resume, wait for COMPLETED, list, delete', async () => {
    const session = [...httpSection().matchAll(/```sh\n([\s\S]*?)```/g)]
      .map((m) => m[1]!)
      .find((b) => b.includes('curl'));
    expect(session).toBeDefined();
    const script = session!
      .replaceAll('npx agentry-runtime', `node --import tsx ${CLI}`)
      .replaceAll('http://127.0.0.1:8787', serve.url);
    const watcher = releaseAfterResume(serve.url, serve.apiKey!);
    const { stdout } = await run('bash', ['-euo', 'pipefail', '-c', script], {
      cwd: ROOT,
      env: cliEnv({ AGENTRY_DB: db }),
      timeout: 60_000,
    });
    await watcher;
    const lines = stdout.split('\n').filter((l) => l.trim() !== '');
    const id = lines[0]!;
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    const [polled, paused, resumed, done, listed, deleted] = lines.slice(1).map((l) => JSON.parse(l));
    expect(polled.agent).toMatchObject({ agent_id: id, status: 'ACTIVE' });
    expect(polled.messages[0]).toMatchObject({ role: 'USER', text: 'Summarise the three latest Node.js releases' });
    expect(paused.agent).toMatchObject({ agent_id: id, status: 'PAUSED' });
    expect(resumed.agent).toMatchObject({ agent_id: id, status: 'ACTIVE' });
    expect(done.agent).toMatchObject({ agent_id: id, status: 'COMPLETED' });
    expect(done.messages.at(-1)).toMatchObject({ role: 'ASSISTANT', text: 'Node.js 25, 24 and 22.' });
    expect(listed.data.map((a: { agent_id: string }) => a.agent_id)).toContain(id);
    expect(deleted).toEqual({ agent_id: id, deleted: true });
    const after = await fetch(`${serve.url}/api/agents/${id}`, { headers: { 'x-api-key': serve.apiKey! } });
    expect(after.status).toBe(404);
  });
});
