/**
 * How the CLI answers a person's mistakes and surroundings: a mistyped flag, command or subcommand gets one line with
 * the closest known name and the command's usage (never Node's parser text); the admin commands never create a
 * database where there is none, and say where they looked; a PostgreSQL server that does not answer is one line
 * naming host, port and database; a URL of another database is refused, not taken for a file name; `gc` takes weeks;
 * `serve` honours PORT (the flag wins) and redirects `GET /` to the console; `run --demo` completes offline.
 */
import { createServer } from 'node:net';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqliteStorage } from 'agentry-runtime';
import { cliEnv, runCli, startServe, tempDir } from '../http/helpers.js';
import { newSchemaName, postgresUnreachable, POSTGRES_TEST_URL, urlWithSchema } from '../support/postgres.js';
import pg from 'pg';
import { skippable } from '../support/skip.js';
import { exitWithin, spawnCli } from './process.js';

let tmp: ReturnType<typeof tempDir>;
let env: NodeJS.ProcessEnv;

beforeAll(() => {
  tmp = tempDir('agentry-manners-');
  env = cliEnv();
});
afterAll(() => tmp?.remove());

/** A port nothing listens on: taken from the system, then let go. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** A SQLite database that exists (as `agentry serve` would have left it). */
async function existingDatabase(name: string): Promise<string> {
  const path = join(tmp.dir, name);
  const storage = sqliteStorage({ path });
  await storage.init();
  await storage.close();
  return path;
}

describe('mistyped flags, commands and subcommands', () => {
  it.each([
    [
      ['serve', '--prot', '9000'],
      'agentry serve: unknown option --prot (did you mean --port?)',
      'Usage: agentry serve',
    ],
    [['worker', '--dmeo'], 'agentry worker: unknown option --dmeo (did you mean --demo?)', 'Usage: agentry worker'],
    [['run', '--demmo', 'hi'], 'agentry run: unknown option --demmo (did you mean --demo?)', 'Usage: agentry run'],
    [
      ['gc', '--older-then', '1d'],
      'agentry gc: unknown option --older-then (did you mean --older-than?)',
      'Usage: agentry gc',
    ],
    [['srve'], 'agentry: unknown command "srve" (did you mean serve?)', 'Usage: agentry <command>'],
    [['agents', 'lst'], 'agentry agents: unknown subcommand "lst" (did you mean list?)', 'Usage: agentry agents'],
  ])('agentry %j: one line with the closest name, then the usage; exit 2', async (args, line, usage) => {
    const r = await runCli(args, env);
    expect(r.code).toBe(2);
    const lines = r.stderr.split('\n');
    expect(lines[0]).toBe(line);
    expect(lines[1]).toBe('');
    expect(lines[2]).toContain(usage);
    expect(r.stderr).not.toMatch(/To specify a positional argument/);
  });

  it('names no suggestion when nothing is close', async () => {
    const r = await runCli(['serve', '--zzzzzzzz'], env);
    expect(r.code).toBe(2);
    expect(r.stderr.split('\n')[0]).toBe('agentry serve: unknown option --zzzzzzzz');
  });
});

describe('admin commands where there is no database', () => {
  it.each([
    ['keys', 'list'],
    ['credits', 'show'],
    ['subscription', 'show'],
    ['agents', 'list'],
    ['gc', '--older-than', '1d'],
  ])('agentry %s %s creates none, and says where it looked (--db, AGENTRY_DB, the default)', async (...args) => {
    const dir = tempDir('agentry-empty-');
    try {
      const target = join(dir.dir, 'named.db');
      const byFlag = await runCli([...args, '--db', target], env);
      expect(byFlag.code, byFlag.stderr).toBe(1);
      expect(byFlag.stderr.trim()).toBe(
        `agentry ${args[0]}: no database at ${target} (--db, else $AGENTRY_DB, else ./agentry.db): ` +
          '`agentry serve` creates one on its first start, or pass --db <path>',
      );
      const byEnv = await runCli(args, cliEnv({ AGENTRY_DB: join(dir.dir, 'from-env.db') }));
      expect(byEnv.code).toBe(1);
      expect(byEnv.stderr).toContain(`no database at ${join(dir.dir, 'from-env.db')}`);
      // the default, ./agentry.db, in an empty working directory
      const byDefault = spawnCli(args, { env, cwd: dir.dir });
      expect(await exitWithin(byDefault)).toBe(1);
      expect(byDefault.stderr()).toContain(`no database at ${join(dir.dir, 'agentry.db')}`);
      expect(readdirSync(dir.dir)).toEqual([]);
    } finally {
      dir.remove();
    }
  });
});

describe('database URLs', () => {
  it('refuses a scheme it does not speak (mysql://), by --db or AGENTRY_DB, without making a file of it', async () => {
    const dir = tempDir('agentry-scheme-');
    try {
      const byFlag = spawnCli(['agents', 'list', '--db', 'mysql://app:Hunter2pw@db.internal/app'], {
        env,
        cwd: dir.dir,
      });
      expect(await exitWithin(byFlag)).toBe(2);
      expect(byFlag.stderr().trim()).toBe(
        'agentry agents: --db mysql://app:***@db.internal/app: unsupported database mysql:// ' +
          '(a SQLite file path, or a postgres:// URL)',
      );
      const byEnv = spawnCli(['serve', '--port', '0'], {
        env: cliEnv({ AGENTRY_DB: 'mysql://app:Hunter2pw@db.internal/app' }),
        cwd: dir.dir,
      });
      expect(await exitWithin(byEnv)).toBe(2);
      expect(byEnv.stderr()).toMatch(/^agentry serve: AGENTRY_DB mysql:\/\/app:\*\*\*@db\.internal\/app: unsupported/);
      expect(byFlag.stderr() + byEnv.stderr() + byEnv.stdout()).not.toContain('Hunter2pw');
      expect(readdirSync(dir.dir)).toEqual([]);
    } finally {
      dir.remove();
    }
  });

  it('a PostgreSQL server that does not answer: one line naming host, port and database, never the password', async () => {
    const port = await closedPort();
    const url = `postgres://app:Hunter2pw@127.0.0.1:${port}/inventory`;
    for (const args of [
      ['credits', 'show', '--db', url],
      ['serve', '--port', '0', '--db', url],
      ['worker', '--db', url],
    ]) {
      const r = await runCli(args, env);
      expect(r.code, r.stderr).toBe(1);
      const lines = r.stderr.trim().split('\n');
      expect(lines.at(-1)).toBe(
        `agentry ${args[0]}: cannot connect to PostgreSQL at 127.0.0.1:${port}, database "inventory": ` +
          `connect ECONNREFUSED 127.0.0.1:${port}`,
      );
      expect(lines.filter((l) => /^\s+at /.test(l))).toEqual([]);
      expect(r.stdout + r.stderr).not.toContain('Hunter2pw');
    }
  });
});

const strict = process.env.AGENTRY_CI_STRICT === '1';
const unreachable = await postgresUnreachable();
describe.skipIf(unreachable !== null && !strict)(
  skippable('admin commands on a PostgreSQL server without the database', !strict && unreachable),
  () => {
    it("admin commands do not create agentry's schema where there is none", async () => {
      const schema = newSchemaName('agentry_absent');
      const r = await runCli(['credits', 'show', '--db', urlWithSchema(schema)], env);
      expect(r.code, r.stderr).toBe(1);
      expect(r.stderr).toMatch(new RegExp(`^agentry credits: no agentry schema "${schema}" in postgres://`));
      const client = new pg.Client({ connectionString: POSTGRES_TEST_URL });
      await client.connect();
      try {
        const { rows } = await client.query('SELECT 1 FROM information_schema.schemata WHERE schema_name = $1', [
          schema,
        ]);
        expect(rows).toEqual([]);
      } finally {
        await client.end();
      }
    });

    it('a database that does not exist is one line naming it', async () => {
      const url = new URL(POSTGRES_TEST_URL);
      url.pathname = '/agentry_no_such_database';
      const r = await runCli(['credits', 'show', '--db', url.toString()], env);
      expect(r.code, r.stderr).toBe(1);
      expect(r.stderr.trim()).toBe(
        `agentry credits: cannot connect to PostgreSQL at ${url.hostname}:${url.port || '5432'}, database ` +
          '"agentry_no_such_database": database "agentry_no_such_database" does not exist',
      );
    });
  },
);

describe('gc durations', () => {
  it('takes weeks: --older-than 1w', async () => {
    const db = await existingDatabase('gc.db');
    const r = await runCli(['gc', '--older-than', '1w', '--db', db], env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^Forgot the work of 0 finished tree\(s\)/m);
  });
});

describe('agentry serve', () => {
  it('listens on PORT when --port is not given; --port wins over it', async () => {
    const port = await closedPort();
    const db = join(tmp.dir, 'port.db');
    const byEnv = spawnCli(['serve', '--demo', '--db', db, '--log-level', 'silent'], {
      env: cliEnv({ PORT: String(port) }),
      cwd: tmp.dir,
    });
    try {
      const [, url] = await byEnv.waitForStderr(/^agentry listening on (http:\/\/\S+)/m);
      expect(url).toBe(`http://127.0.0.1:${port}`);
    } finally {
      expect(await byEnv.stop()).toBe(0);
    }
    const flagWins = await startServe(['--demo', '--db', db, '--log-level', 'silent'], cliEnv({ PORT: 'not-a-port' }));
    expect(flagWins.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(await flagWins.stop()).toBe(0);
    const bad = await runCli(['serve', '--db', db], cliEnv({ PORT: 'eighty' }));
    expect(bad.code).toBe(2);
    expect(bad.stderr.trim()).toBe('agentry serve: PORT must be 0..65535, got eighty');
  });

  it('redirects GET / to the console when the console is on; without it / stays a 404', async () => {
    const db = join(tmp.dir, 'root.db');
    const withConsole = await startServe(['--demo', '--db', db, '--log-level', 'silent'], env);
    try {
      const root = await fetch(`${withConsole.url}/`, { redirect: 'manual' });
      expect(root.status).toBe(302);
      expect(root.headers.get('location')).toBe('/console');
      expect((await fetch(`${withConsole.url}/`)).url).toMatch(new RegExp(`^${withConsole.url}/console(?:/|$)`));
    } finally {
      await withConsole.stop();
    }
    const without = await startServe(['--demo', '--no-console', '--db', db, '--log-level', 'silent'], env);
    try {
      expect((await fetch(`${without.url}/`, { redirect: 'manual' })).status).toBe(404);
    } finally {
      await without.stop();
    }
  });
});

describe('agentry run --demo', () => {
  it('runs an agent to COMPLETED with the scripted stand-in: no key, no network', async () => {
    const db = join(tmp.dir, 'run-demo.db');
    const r = await runCli(['run', '--demo', 'Which umbrella for Paris?', '--db', db], env, 60_000);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^Demo mode: a scripted stand-in plays the model/m);
    expect(r.stdout).toMatch(/^COMPLETED: /m);
    expect(existsSync(db)).toBe(true);
  });
});
