/**
 * The CLI on PostgreSQL: `agentry serve --db postgres://…?schema=…` creates its account and key, serves an agent to
 * COMPLETED, and after a restart on the same database still has it; the admin commands (`credits`, `agents`) work on
 * the same URL beside it. Needs PostgreSQL (AGENTRY_TEST_POSTGRES_URL; fails instead of skipping under
 * AGENTRY_CI_STRICT=1).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FakeAnthropic } from 'agentry-runtime/testing';
import { cliEnv, eventually, runCli, startGoalDrivenAnthropic, startServe } from '../http/helpers.js';
import { dropSchemas, newSchemaName, postgresUnreachable, urlWithSchema } from '../support/postgres.js';
import { skippable } from '../support/skip.js';

const strict = process.env.AGENTRY_CI_STRICT === '1';
const unreachable = await postgresUnreachable();
const reachable = unreachable === null;

describe.skipIf(!reachable && !strict)(
  skippable('agentry on PostgreSQL (--db postgres://…)', !strict && unreachable),
  () => {
    const schema = newSchemaName('agentry_cli');
    const db = urlWithSchema(schema);
    let fake: FakeAnthropic;
    let env: NodeJS.ProcessEnv;

    beforeAll(async () => {
      fake = await startGoalDrivenAnthropic();
      env = cliEnv({ ANTHROPIC_BASE_URL: fake.url, ANTHROPIC_API_KEY: 'test-key' });
    });
    afterAll(async () => {
      await fake?.close();
      await dropSchemas([schema]);
    });

    it('serves an agent to COMPLETED, keeps it across a restart, and the admin commands see it', async () => {
      const first = await startServe(['--db', db], env);
      const key = first.apiKey!;
      expect(key).toMatch(/^agk_/);
      const headers = { 'x-api-key': key, 'content-type': 'application/json' };
      const created = (await (
        await fetch(`${first.url}/api/agents`, { method: 'POST', headers, body: JSON.stringify({ goal: 'Say done' }) })
      ).json()) as { agent_id: string };
      await eventually(async () => {
        const r = (await (await fetch(`${first.url}/api/agents/${created.agent_id}`, { headers })).json()) as {
          agent: { status: string };
        };
        return r.agent.status === 'COMPLETED' ? true : undefined;
      }, 'the agent to complete');
      const credits = await runCli(['credits', 'add', '5', '--db', db], env);
      expect(credits.code, credits.stderr).toBe(0);
      expect(await first.stop('SIGTERM')).toBe(0);

      const second = await startServe(['--db', db], env);
      expect(second.apiKey).toBeNull(); // the key of the first start is kept in the database
      const r = (await (await fetch(`${second.url}/api/agents/${created.agent_id}`, { headers })).json()) as {
        agent: { status: string };
      };
      expect(r.agent.status).toBe('COMPLETED');
      const listed = await runCli(['agents', 'list', '--db', db, '--json'], env);
      expect(listed.code, listed.stderr).toBe(0);
      expect(listed.stdout).toContain(created.agent_id);
      expect(await second.stop('SIGTERM')).toBe(0);
    });
  },
);
