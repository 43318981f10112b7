/**
 * `agentry serve --demo`: the README's curl session, run as printed (as in test/http/readme.test.ts), against a
 * server with no key and no model server anywhere: the scripted stand-in carries the agent to COMPLETED.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, cliEnv, ROOT, startServe, tempDir, type ServeProcess } from '../http/helpers.js';

const run = promisify(execFile);

let serve: ServeProcess;
let tmp: ReturnType<typeof tempDir>;
let db: string;

/** The README's curl session, with `npx agentry-runtime` running from source and the test server's port. */
function curlSession(): string {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const start = readme.indexOf('## HTTP service');
  const section = readme.slice(start, readme.indexOf('\n## ', start + 3));
  const session = [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!).find((b) => b.includes('curl'));
  expect(session).toBeDefined();
  expect(section).toContain('npx agentry-runtime serve --demo');
  return session!
    .replaceAll('npx agentry-runtime', `node --import tsx ${CLI}`)
    .replaceAll('http://127.0.0.1:8787', serve.url);
}

beforeAll(async () => {
  tmp = tempDir('agentry-demo-serve-');
  db = join(tmp.dir, 'agentry.db');
  // cliEnv() removes ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL: there is no model to reach
  serve = await startServe(['--db', db, '--demo'], cliEnv());
});

afterAll(async () => {
  await serve?.stop();
  tmp?.remove();
});

describe('agentry serve --demo', () => {
  it('says at start that a scripted stand-in plays the model, and does not ask for a key', () => {
    expect(serve.stderr()).toMatch(/^Demo mode: a scripted stand-in plays the model \(no key, no network\)/m);
    expect(serve.stderr()).not.toContain('ANTHROPIC_API_KEY is not set');
    expect(serve.apiKey).toMatch(/^agk_/);
  });

  it("runs the README's curl session offline to COMPLETED", async () => {
    const { stdout } = await run('bash', ['-euo', 'pipefail', '-c', curlSession()], {
      cwd: ROOT,
      env: cliEnv({ AGENTRY_DB: db }),
      timeout: 120_000,
    });
    const lines = stdout.split('\n').filter((l) => l.trim() !== '');
    const id = lines[0]!;
    const [polled, paused, resumed, done, listed, deleted] = lines.slice(1).map((l) => JSON.parse(l));
    expect(polled.agent).toMatchObject({ agent_id: id, status: 'ACTIVE' });
    expect(paused.agent).toMatchObject({ agent_id: id, status: 'PAUSED' });
    expect(resumed.agent).toMatchObject({ agent_id: id, status: 'ACTIVE' });
    expect(done.agent).toMatchObject({ agent_id: id, status: 'COMPLETED', progress: 1 });
    expect(done.agent.credits_spent).toBeGreaterThan(0);
    expect(done.messages.at(-1)).toMatchObject({ role: 'ASSISTANT' });
    expect(done.messages.at(-1).text).toMatch(
      /^\[demo\] .*scripted stand-in.*"Summarise the three latest Node\.js releases"/,
    );
    expect(listed.data.map((a: { agent_id: string }) => a.agent_id)).toContain(id);
    expect(deleted).toEqual({ agent_id: id, deleted: true });
  });
});
