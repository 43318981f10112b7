/**
 * What `serve` and `worker` show and how they fail to start. A database URL's password is printed nowhere — not in
 * the start lines, the JSON log lines or the shutdown — whether it came by `--db` or `AGENTRY_DB` (needs PostgreSQL:
 * AGENTRY_TEST_POSTGRES_URL; fails instead of skipping under AGENTRY_CI_STRICT=1). A listener that cannot start (the
 * API's port or the metrics port taken) ends the process with exit code 1 and one line on stderr naming the port,
 * where a half-started server used to stay up with /readyz 503.
 */
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliEnv, tempDir } from '../http/helpers.js';
import {
  dropSchemas,
  newSchemaName,
  postgresUnreachable,
  POSTGRES_TEST_URL,
  urlWithSchema,
} from '../support/postgres.js';
import { skippable } from '../support/skip.js';
import { exitWithin, spawnCli } from './process.js';

let tmp: ReturnType<typeof tempDir>;
let busy: Server;
let busyPort: number;

beforeAll(async () => {
  tmp = tempDir('agentry-exposure-');
  busy = createServer();
  await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
  busyPort = (busy.address() as { port: number }).port;
});
afterAll(async () => {
  await new Promise<void>((resolve) => busy?.close(() => resolve()));
  tmp?.remove();
});

describe('a listener that cannot start', () => {
  it.each([
    ['the API', (port: number) => ['--port', String(port)]],
    ['metrics', (port: number) => ['--port', '0', '--metrics-port', String(port)]],
  ])('%s on a port in use: exit 1 with one line naming the port', async (what, flags) => {
    const serve = spawnCli(
      ['serve', '--demo', '--log-level', 'silent', '--db', join(tmp.dir, 'busy.db'), ...flags(busyPort)],
      {
        env: cliEnv(),
        cwd: tmp.dir,
      },
    );
    expect(await exitWithin(serve)).toBe(1);
    // stderr also carries the human lines of the start (the demo notice, the account's first key): the failure is
    // one line, the last, and no stack follows it.
    const lines = serve
      .stderr()
      .split('\n')
      .filter((line) => line !== '');
    expect(lines.at(-1)).toBe(
      `agentry serve: cannot listen on 127.0.0.1:${busyPort} (${what}): the port is already in use`,
    );
    expect(lines.filter((line) => /cannot listen|^\s+at /.test(line))).toHaveLength(1);
    expect(serve.stdout() + serve.stderr()).not.toMatch(/^agentry listening/m);
  });
});

const strict = process.env.AGENTRY_CI_STRICT === '1';
const unreachable = await postgresUnreachable();

describe.skipIf(unreachable !== null && !strict)(
  skippable('serve and worker with a password in the PostgreSQL URL', !strict && unreachable),
  () => {
    const schema = newSchemaName('agentry_pw');
    // The test server's own password when it has one; else one it ignores (trust authentication).
    const base = new URL(POSTGRES_TEST_URL);
    if (base.password === '') base.password = 'Pw-4d9c1e7b-never-printed';
    const password = decodeURIComponent(base.password);
    const url = urlWithSchema(schema, base.toString());
    /** The password as printed in a URL (`user:password@`), and alone when it is not also the user's name. */
    const leaks = (text: string) =>
      text.includes(`:${base.password}@`) ||
      (password !== decodeURIComponent(base.username) && text.includes(password));

    afterAll(async () => {
      await dropSchemas([schema]);
    });

    it.each([
      ['serve', '--db', /^agentry listening on http:\/\/\S+ \(database: (.+)\)$/m],
      ['serve', 'AGENTRY_DB', /^agentry listening on http:\/\/\S+ \(database: (.+)\)$/m],
      ['worker', '--db', /^agentry worker ready \(database: (.+), worker \S+\)$/m],
      ['worker', 'AGENTRY_DB', /^agentry worker ready \(database: (.+), worker \S+\)$/m],
    ])('%s with the URL in %s prints it masked, and the password nowhere', async (command, by, ready) => {
      const args = [command, '--demo', ...(command === 'serve' ? ['--port', '0'] : [])];
      const child = spawnCli(by === '--db' ? [...args, '--db', url] : args, {
        env: cliEnv(by === 'AGENTRY_DB' ? { AGENTRY_DB: url } : {}),
        cwd: tmp.dir,
      });
      try {
        const [, shown] = await child.waitForStderr(ready, 60_000);
        expect(shown).toBe(`postgres://${base.username}:***@${base.host}${base.pathname}${new URL(url).search}`);
      } finally {
        const code = await child.stop();
        expect(code, `${child.stdout()}\n${child.stderr()}`).toBe(0);
      }
      expect(child.stderr()).not.toBe('');
      expect(leaks(child.stdout()), child.stdout()).toBe(false);
      expect(leaks(child.stderr()), child.stderr()).toBe(false);
    });
  },
);
