/**
 * The README's curl session, run as printed (with `npx agentry` running from source and the port of the test's
 * server) against `agentry serve` in a child process. The fake model never answers, so the agent stays ACTIVE long
 * enough to be paused, like a real agent in the middle of its work.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeAnthropic, type FakeAnthropic, type FakeReply } from 'agentry/testing';
import { CLI, cliEnv, ROOT, startServe, tempDir, type ServeProcess } from './helpers.js';

const run = promisify(execFile);

let fake: FakeAnthropic;
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
      new Promise<FakeReply>((resolve) =>
        info.signal.addEventListener('abort', () => resolve({ text: 'aborted' }), { once: true }),
      ),
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
    expect(section).toContain('npx agentry serve');
    expect(serve.stdout()).toMatch(/^Created account "serve" with 100 credits and an active subscription\.$/m);
    expect(serve.stdout()).toMatch(/^API key: agk_\S+$/m);
    expect(serve.stdout()).toMatch(/^agentry listening on http:\/\/127\.0\.0\.1:\d+ \(database: .*\)$/m);
  });

  it('the curl session works as printed: create, poll, pause, resume, list, delete', async () => {
    const session = [...httpSection().matchAll(/```sh\n([\s\S]*?)```/g)]
      .map((m) => m[1]!)
      .find((b) => b.includes('curl'));
    expect(session).toBeDefined();
    const script = session!
      .replaceAll('npx agentry', `node --import tsx ${CLI}`)
      .replaceAll('http://127.0.0.1:8787', serve.url);
    const { stdout } = await run('bash', ['-euo', 'pipefail', '-c', script], {
      cwd: ROOT,
      env: cliEnv({ AGENTRY_DB: db }),
      timeout: 60_000,
    });
    const lines = stdout.split('\n').filter((l) => l.trim() !== '');
    const id = lines[0]!;
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    const [polled, paused, resumed, listed, deleted] = lines.slice(1).map((l) => JSON.parse(l));
    expect(polled.agent).toMatchObject({ agent_id: id, status: 'ACTIVE' });
    expect(polled.messages[0]).toMatchObject({ role: 'USER', text: 'Summarise the three latest Node.js releases' });
    expect(paused.agent).toMatchObject({ agent_id: id, status: 'PAUSED' });
    expect(resumed.agent).toMatchObject({ agent_id: id, status: 'ACTIVE' });
    expect(listed.data.map((a: { agent_id: string }) => a.agent_id)).toContain(id);
    expect(deleted).toEqual({ agent_id: id, deleted: true });
    const after = await fetch(`${serve.url}/api/agents/${id}`, { headers: { 'x-api-key': serve.apiKey! } });
    expect(after.status).toBe(404);
  });
});
