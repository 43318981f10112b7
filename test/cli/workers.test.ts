/**
 * Several processes on one database, from the CLI: `agentry worker` (help, ready line, SIGTERM, flags), the
 * first start of an empty database decided by one insert even when processes race for it, two `agentry serve` on one
 * PostgreSQL schema at once (both healthy, exactly one key), and a worker stepping an agent created through a serve's
 * HTTP API. The PostgreSQL parts need a server (AGENTRY_TEST_POSTGRES_URL; they fail instead of skipping under
 * AGENTRY_CI_STRICT=1).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Accounts, AgentRuntime, sqliteStorage, systemClock, type StorageAdapter } from 'agentry-runtime';
import { postgresStorage } from 'agentry-runtime/storage/postgres';
import { startFakeAnthropic, type FakeAnthropic } from 'agentry-runtime/testing';
import {
  CLI,
  cliEnv,
  eventually,
  ROOT,
  runCli,
  startGoalDrivenAnthropic,
  startServe,
  tempDir,
} from '../http/helpers.js';
import { dropSchemas, newSchemaName, postgresUnreachable, urlWithSchema } from '../support/postgres.js';
import { skippable } from '../support/skip.js';

const strict = process.env.AGENTRY_CI_STRICT === '1';
const unreachable = await postgresUnreachable();
const reachable = unreachable === null;

interface WorkerProcess {
  readyLine: string;
  stdout(): string;
  stderr(): string;
  child: ChildProcess;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Starts `agentry worker ...` and waits (with a deadline) for its ready line. */
function startWorker(args: string[], env: NodeJS.ProcessEnv, timeoutMs = 30_000): Promise<WorkerProcess> {
  return new Promise((resolveStart, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CLI, 'worker', ...args], {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let settled = false;
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    const fail = (error: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(error);
    };
    const timer = setTimeout(
      () => fail(new Error(`agentry worker was not ready in ${timeoutMs} ms\n${stdout}\n${stderr}`)),
      timeoutMs,
    );
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    // The ready line is on stderr: stdout carries the JSON log lines only.
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      const line = /^agentry worker ready .*$/m.exec(stderr)?.[0];
      if (line === undefined || settled) return;
      settled = true;
      clearTimeout(timer);
      resolveStart({
        readyLine: line,
        stdout: () => stdout,
        stderr: () => stderr,
        child,
        async stop(signal = 'SIGTERM') {
          if (child.exitCode === null && child.signalCode === null) child.kill(signal);
          return exited;
        },
      });
    });
    child.once('exit', (code) =>
      fail(new Error(`agentry worker exited with ${code} before it was ready\n${stdout}\n${stderr}`)),
    );
  });
}

/** The agent's status, read straight from storage. */
async function statusOf(storage: StorageAdapter, agentId: string): Promise<string | undefined> {
  return (await storage.getAgent(agentId))?.status;
}

describe('agentry worker', () => {
  it('documents itself and its settings in `agentry help` and `agentry worker --help`', async () => {
    const help = await runCli(['help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^ {2}worker +step agents without HTTP/m);
    expect(help.stdout).toContain('--lease-ms ($AGENTRY_LEASE_MS)');
    const usage = await runCli(['worker', '--help']);
    expect(usage.code).toBe(0);
    for (const flag of ['--exclusive', '--lease-ms <ms>', '--heartbeat-ms <ms>', '--max-connections <n>', '--demo']) {
      expect(usage.stdout).toContain(flag);
    }
  });

  it('refuses the PostgreSQL settings with a SQLite file, and a bad number', async () => {
    const dir = tempDir('agentry-worker-');
    try {
      const db = join(dir.dir, 'a.db');
      const sqlite = await runCli(['worker', '--db', db, '--exclusive', '--lease-ms', '5000']);
      expect(sqlite.code).toBe(2);
      expect(sqlite.stderr).toContain('--exclusive, --lease-ms: only for a postgres:// database');
      const bad = await runCli(['worker', '--db', 'postgres://127.0.0.1:1/x', '--lease-ms', 'soon']);
      expect(bad.code).toBe(2);
      expect(bad.stderr).toContain('--lease-ms must be a whole number, got soon');
    } finally {
      dir.remove();
    }
  });

  it('on SQLite: steps an agent an application created, prints one ready line, and exits 0 on SIGTERM', async () => {
    const dir = tempDir('agentry-worker-');
    const fake = await startGoalDrivenAnthropic();
    try {
      const db = join(dir.dir, 'a.db');
      // An application that only creates agents: a manual runtime never steps them.
      const app = await AgentRuntime.open({
        storage: sqliteStorage({ path: db }),
        scheduler: 'manual',
        defaultAccount: { id: 'local', credits: 10 },
      });
      const { agent_id } = await app.create({ goal: 'Say done' });
      await app.close();

      const worker = await startWorker(
        ['--db', db],
        cliEnv({ ANTHROPIC_BASE_URL: fake.url, ANTHROPIC_API_KEY: 'test-key' }),
      );
      expect(worker.readyLine).toBe(`agentry worker ready (database: ${db}, the only process driving this database)`);
      expect(worker.stdout() + worker.stderr()).not.toMatch(/API key:/);
      const reader = sqliteStorage({ path: db });
      await reader.init();
      try {
        await eventually(
          async () => ((await statusOf(reader, agent_id)) === 'COMPLETED' ? true : undefined),
          'the worker to complete the agent',
        );
      } finally {
        await reader.close();
      }
      expect(await worker.stop('SIGTERM')).toBe(0);
      expect(worker.stdout()).toMatch(/"msg":"agentry worker started"/); // JSON log lines, as serve writes them
      expect(worker.stderr()).toContain('agentry: SIGTERM, shutting down');
    } finally {
      await fake.close();
      dir.remove();
    }
  });
});

describe.skipIf(!reachable && !strict)(
  skippable('several agentry processes on one PostgreSQL schema', !strict && unreachable),
  () => {
    const schemas: string[] = [];
    const schema = (prefix: string) => {
      const name = newSchemaName(prefix);
      schemas.push(name);
      return name;
    };
    let fake: FakeAnthropic;
    let env: NodeJS.ProcessEnv;

    beforeAll(async () => {
      fake = await startGoalDrivenAnthropic();
      env = cliEnv({ ANTHROPIC_BASE_URL: fake.url, ANTHROPIC_API_KEY: 'test-key' });
    });
    afterAll(async () => {
      await fake?.close();
      await dropSchemas(schemas);
    });

    it('the first start of an empty database: of 8 processes racing, exactly one creates the account and its key', async () => {
      const db = urlWithSchema(schema('agentry_cli_race'));
      const storages = Array.from({ length: 8 }, () => postgresStorage({ connectionString: db, maxConnections: 2 }));
      try {
        for (const s of storages) await s.init();
        const results = await Promise.all(
          storages.map((s) =>
            new Accounts(s, systemClock).createIfAbsent({ id: 'serve', credits: 100, subscribe: true }),
          ),
        );
        expect(results.filter((r) => r.created)).toHaveLength(1);
        expect(results.filter((r) => r.apiKey !== null)).toHaveLength(1);
        expect(results.every((r) => r.account.account_id === 'serve')).toBe(true);
        expect(await storages[0]!.listApiKeys('serve')).toHaveLength(1);
        expect((await storages[0]!.getAccount('serve'))!.balance).toBe(100_000_000); // one top-up, not eight
        expect(await storages[0]!.listLedger('serve')).toHaveLength(1);
      } finally {
        for (const s of storages) await s.close();
      }
    });

    it('a worker steps an agent created through a serve’s HTTP API', async () => {
      const db = urlWithSchema(schema('agentry_cli_worker'));
      // The serve's model never answers, so the agent is still ACTIVE when the serve stops; the worker's answers.
      const holding = await startFakeAnthropic({
        handler: (_body, info) =>
          new Promise((resolveReply) =>
            info.signal.addEventListener('abort', () => resolveReply({ text: 'aborted' }), { once: true }),
          ),
      });
      const storage = postgresStorage({ connectionString: db, maxConnections: 2 });
      try {
        const serve = await startServe(
          ['--db', db],
          cliEnv({ ANTHROPIC_BASE_URL: holding.url, ANTHROPIC_API_KEY: 'test-key' }),
        );
        const headers = { 'x-api-key': serve.apiKey!, 'content-type': 'application/json' };
        const created = (await (
          await fetch(`${serve.url}/api/agents`, {
            method: 'POST',
            headers,
            body: JSON.stringify({ goal: 'Say done' }),
          })
        ).json()) as { agent_id: string };
        await eventually(async () => (holding.requests.length > 0 ? true : undefined), 'the serve to call its model');
        // (The stop takes closeTimeoutMs, 10 s: the runtime gives the held call that long before it aborts it.)
        expect(await serve.stop('SIGTERM')).toBe(0);
        await storage.init();
        expect(await statusOf(storage, created.agent_id)).toBe('ACTIVE');

        const worker = await startWorker(['--db', db], env);
        expect(worker.stdout() + worker.stderr()).not.toMatch(/API key:/);
        await eventually(
          async () => ((await statusOf(storage, created.agent_id)) === 'COMPLETED' ? true : undefined),
          'the worker to complete the agent',
        );
        expect(await worker.stop('SIGTERM')).toBe(0);
      } finally {
        await storage.close();
        await holding.close();
      }
    });

    it('two `agentry serve` started at once on one empty schema: both healthy, exactly one printed a key', async () => {
      const db = urlWithSchema(schema('agentry_cli_two'));
      const [a, b] = await Promise.all([startServe(['--db', db], env), startServe(['--db', db], env)]);
      try {
        for (const s of [a, b]) expect((await fetch(`${s.url}/healthz`)).status).toBe(200);
        const keys = [a, b].map((s) => s.apiKey).filter((k) => k !== null);
        expect(keys).toHaveLength(1);
        expect([a, b].filter((s) => /^Database ready: account "serve" exists/m.test(s.stderr()))).toHaveLength(1);
        // Either front end answers for an agent created through the other, with the one key.
        const headers = { 'x-api-key': keys[0]!, 'content-type': 'application/json' };
        const created = (await (
          await fetch(`${a.url}/api/agents`, { method: 'POST', headers, body: JSON.stringify({ goal: 'Say done' }) })
        ).json()) as { agent_id: string };
        await eventually(async () => {
          const r = (await (await fetch(`${b.url}/api/agents/${created.agent_id}`, { headers })).json()) as {
            agent: { status: string };
          };
          return r.agent.status === 'COMPLETED' ? true : undefined;
        }, 'the agent to complete, seen through the other serve');
      } finally {
        expect(await a.stop('SIGTERM')).toBe(0);
        expect(await b.stop('SIGTERM')).toBe(0);
      }
    });
  },
);
