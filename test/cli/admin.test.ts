/**
 * `agentry serve` lifecycle and the admin commands (keys, credits, subscription, agents), each run from source as a
 * child process against a temporary SQLite database.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FakeAnthropic } from 'agentry-runtime/testing';
import { cliEnv, eventually, HOLD, runCli, startGoalDrivenAnthropic, startServe, tempDir } from '../http/helpers.js';

let fake: FakeAnthropic;
let tmp: ReturnType<typeof tempDir>;
let db: string;
let env: NodeJS.ProcessEnv;
let firstKey: string;
const agentIds = { done: '', held: '' };

const cli = (...args: string[]) => runCli([...args, '--db', db], env);

async function ok(...args: string[]): Promise<string> {
  const r = await cli(...args);
  expect(r.code, `agentry ${args.join(' ')}\n${r.stdout}\n${r.stderr}`).toBe(0);
  return r.stdout;
}

beforeAll(async () => {
  fake = await startGoalDrivenAnthropic();
  tmp = tempDir('agentry-cli-');
  db = join(tmp.dir, 'agentry.db');
  env = cliEnv({ ANTHROPIC_BASE_URL: fake.url, ANTHROPIC_API_KEY: 'test-key' });
});

afterAll(async () => {
  await fake?.close();
  tmp?.remove();
});

describe('agentry serve', () => {
  it('prints the key once on first start, not on later starts; SIGINT and SIGTERM exit 0', async () => {
    const first = await startServe(['--db', db], env);
    // On stderr: stdout carries the JSON log lines only, and the key is never among them.
    expect(first.stderr().match(/^API key: agk_\S+$/gm)).toHaveLength(1);
    firstKey = first.apiKey!;
    expect(first.stdout()).not.toContain(firstKey);
    const headers = { 'x-api-key': firstKey, 'content-type': 'application/json' };
    const create = async (goal: string) =>
      (
        (await (
          await fetch(`${first.url}/api/agents`, { method: 'POST', headers, body: JSON.stringify({ goal }) })
        ).json()) as { agent_id: string }
      ).agent_id;
    agentIds.done = await create('Say done');
    agentIds.held = await create(`Wait ${HOLD}`);
    await eventually(async () => {
      const r = (await (await fetch(`${first.url}/api/agents/${agentIds.done}`, { headers })).json()) as {
        agent: { status: string };
      };
      return r.agent.status === 'COMPLETED' ? true : undefined;
    }, 'the first agent to complete');
    expect((await fetch(`${first.url}/api/agents/${agentIds.held}/pause`, { method: 'POST', headers })).status).toBe(
      200,
    );
    expect(await first.stop('SIGINT')).toBe(0);
    expect(first.stderr()).toMatch(/SIGINT, shutting down/);

    const second = await startServe(['--db', db], env);
    expect(second.apiKey).toBeNull();
    expect(second.stdout() + second.stderr()).not.toMatch(/API key/);
    const list = await fetch(`${second.url}/api/agents`, { headers: { 'x-api-key': firstKey } });
    expect(list.status).toBe(200);
    const ids = ((await list.json()) as { data: Array<{ agent_id: string }> }).data.map((a) => a.agent_id);
    expect(ids.sort()).toEqual([agentIds.done, agentIds.held].sort());
    expect(await second.stop('SIGTERM')).toBe(0);
  });

  it('refuses a bad port or rate limit with exit code 2', async () => {
    for (const args of [['--port', 'abc'], ['--port', '70000'], ['--rate-limit', 'fast'], ['extra']]) {
      const r = await runCli(['serve', ...args, '--db', db], env);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toMatch(/^agentry serve: /);
    }
  });
});

describe('agentry keys', () => {
  it('create prints the key once on its own line; list is masked; delete revokes', async () => {
    const out = await ok('keys', 'create', '--name', 'ci');
    const keys = out.match(/^API key: (agk_\S+)$/gm);
    expect(keys).toHaveLength(1);
    const key = keys![0]!.slice('API key: '.length);

    const list = await ok('keys', 'list');
    expect(list).toMatch(/^ID\s+NAME\s+KEY\s+CREATED$/m);
    expect(list).toContain(`agk_…${key.slice(-4)}`);
    expect(list).toContain(`agk_…${firstKey.slice(-4)}`);
    expect(list).not.toContain(key.slice(4, -4));
    expect(list).not.toContain(firstKey.slice(4, -4));

    const json = JSON.parse(await ok('keys', 'list', '--json')) as Array<{
      key_id: string;
      name: string;
      last4: string;
    }>;
    const ci = json.find((k) => k.name === 'ci')!;
    expect(ci.last4).toBe(key.slice(-4));
    expect(JSON.stringify(json)).not.toContain(key.slice(4, -4));

    expect(await ok('keys', 'delete', ci.key_id)).toMatch(/Deleted key/);
    expect(await ok('keys', 'list')).not.toContain(ci.key_id);
    const again = await cli('keys', 'delete', ci.key_id);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/not found/);
  });
});

describe('agentry credits', () => {
  it('add and show', async () => {
    const before = JSON.parse(await ok('credits', 'show', '--json')) as { balance: number; available: number };
    expect(before.balance).toBeGreaterThan(0);
    expect(await ok('credits', 'add', '2.5')).toMatch(/^Added 2\.5 credits to account serve\.$/m);
    const after = JSON.parse(await ok('credits', 'show', '--json')) as { balance: number };
    expect(after.balance).toBeCloseTo(before.balance + 2.5, 6);
    expect(await ok('credits', 'show')).toMatch(/^Balance: [\d.]+ credits \(reserved [\d.]+, available [\d.]+\)$/m);
    for (const bad of [
      ['credits', 'add', '0'],
      ['credits', 'add', 'abc'],
      ['credits', 'add'],
      ['credits', 'spend', '1'],
    ]) {
      const r = await cli(...bad);
      expect(r.code, bad.join(' ')).toBe(2);
    }
  });
});

describe('agentry subscription', () => {
  it('deactivate, show, activate', async () => {
    expect(await ok('subscription', 'deactivate')).toMatch(/inactive/);
    expect(await ok('subscription', 'show')).toMatch(/^Subscription of account serve: inactive\.$/m);
    expect(JSON.parse(await ok('subscription', 'show', '--json')).subscription_active).toBe(false);
    const activated = await ok('subscription', 'activate');
    expect(activated).toMatch(/active\./);
    expect(activated).not.toMatch(/API key:/); // the account has keys: none is created
    expect(await ok('subscription', 'show')).toMatch(/: active\.$/m);
  });
});

describe('agentry agents', () => {
  it('list, show, pause, resume, delete', async () => {
    const list = await ok('agents', 'list');
    expect(list).toMatch(/^ID\s+STATUS\s+PROGRESS\s+TOKENS\s+MESSAGES\s+PARENT\s+GOAL$/m);
    expect(list).toContain(agentIds.done);
    expect(list).toContain(agentIds.held);
    expect(list).toMatch(/Say done$/m);
    // The list filters: roots only, goal search.
    const roots = JSON.parse(await ok('agents', 'list', '--roots', '--json')) as { data: Array<{ parent_id: null }> };
    expect(roots.data.length).toBeGreaterThanOrEqual(2);
    expect(roots.data.every((a) => a.parent_id === null)).toBe(true);
    const found = JSON.parse(await ok('agents', 'list', '--q', 'SAY DONE', '--json')) as {
      data: Array<{ agent_id: string; goal: string }>;
    };
    expect(found.data.map((a) => a.agent_id)).toEqual([agentIds.done]);
    expect(found.data[0]!.goal).toBe('Say done');
    expect((await cli('agents', 'list', '--roots', '--parent', agentIds.done)).code).toBe(2);
    const paused = JSON.parse(await ok('agents', 'list', '--status', 'PAUSED', '--json')) as {
      data: Array<{ agent_id: string }>;
    };
    expect(paused.data.map((a) => a.agent_id)).toEqual([agentIds.held]);

    const show = await ok('agents', 'show', agentIds.done);
    expect(show).toMatch(/^status\s+COMPLETED$/m);
    expect(show).toMatch(/USER: Say done$/m);
    expect(show).toMatch(/ASSISTANT: Done\.$/m);
    const shown = JSON.parse(await ok('agents', 'show', agentIds.done, '--json')) as {
      agent: { status: string };
      messages: unknown[];
    };
    expect(shown.agent.status).toBe('COMPLETED');
    expect(shown.messages).toHaveLength(2);

    expect(await ok('agents', 'resume', agentIds.held)).toMatch(
      new RegExp(`^Agent ${agentIds.held}: (ACTIVE|STARTING_UP)\\.$`, 'm'),
    );
    expect(await ok('agents', 'pause', agentIds.held)).toMatch(/: PAUSED\.$/m);
    const finished = await cli('agents', 'pause', agentIds.done);
    expect(finished.code).toBe(1);
    expect(finished.stderr).toMatch(/COMPLETED/);

    expect(await ok('agents', 'delete', agentIds.held)).toMatch(/Deleted agent/);
    const gone = await cli('agents', 'show', agentIds.held);
    expect(gone.code).toBe(1);
    expect(gone.stderr).toMatch(/not found/);
    expect(await ok('agents', 'list')).not.toContain(agentIds.held);
    expect((await cli('agents', 'list', '--status', 'NOPE')).code).toBe(2);
    expect((await cli('agents', 'show')).code).toBe(2);
  });
});

describe('database and account selection', () => {
  it('AGENTRY_DB stands in for --db; --db wins; --account picks another account', async () => {
    const viaEnv = await runCli(['credits', 'show', '--json'], { ...env, AGENTRY_DB: db });
    expect(viaEnv.code, viaEnv.stderr).toBe(0);
    const other = join(tmp.dir, 'other.db');
    const wins = await runCli(['credits', 'show', '--db', other], { ...env, AGENTRY_DB: db });
    expect(wins.code).toBe(1);
    // --db won: the admin command looked there (and, finding no database, made none)
    expect(wins.stderr).toMatch(/no database at .*other\.db \(--db, else \$AGENTRY_DB/);
    const local = await runCli(['credits', 'show', '--json', '--account', 'local', '--db', db], env);
    expect(local.code, local.stderr).toBe(0);
    expect(JSON.parse(local.stdout).account_id).toBe('local');
    const missing = await runCli(['keys', 'list', '--account', 'nobody', '--db', db], env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/No account "nobody"/);
  });

  it('help and usage errors', async () => {
    const help = await runCli(['--help'], env);
    expect(help.code).toBe(0);
    for (const name of ['serve', 'keys', 'credits', 'subscription', 'agents']) expect(help.stdout).toContain(name);
    expect((await runCli(['keys', '--help'], env)).stdout).toMatch(/^Usage: agentry keys/);
    const unknown = await runCli(['frobnicate'], env);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/unknown command "frobnicate"/);
    const badOption = await cli('keys', 'list', '--bogus');
    expect(badOption.code).toBe(2);
    expect(badOption.stderr).toMatch(/bogus/);
  });
});
