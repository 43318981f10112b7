/**
 * @module cli/agents
 * `agentry agents list | show <id> | pause <id> | resume <id> | delete <id>` on the serve account (or `--account`).
 *
 * These act on the database through a runtime that steps nothing itself. A running `agentry serve` on the same
 * SQLite file sees the new status at once, but only the process that runs an agent can abort its in-flight model
 * call: a pause from here takes effect when that call returns, and an agent resumed from here is picked up by serve
 * on its next start. For live agents, prefer the HTTP routes.
 */
import { AGENT_STATUSES, type AgentStatus } from '../index.js';
import {
  ACCOUNT_OPTIONS,
  formatCredits,
  openAdminRuntime,
  parseCommandArgs,
  positionals,
  requireAccount,
  resolveDb,
  table,
  UsageError,
  subcommandError,
} from './common.js';

export const usage = `Usage: agentry agents <subcommand>   [--db <path>] [--account <id>] [--json]

  list [--status S] [--limit N] [--cursor C]   agents, newest first
  show <id>                                    status and transcript
  pause <id>                                   pause (and its sub-agents)
  resume <id>                                  resume a paused or out-of-credits agent
  delete <id>                                  delete with sub-agents and transcript

With a running \`agentry serve\` on the same database, prefer the HTTP routes for live agents: only the serving
process can abort an in-flight model call, and it picks up a resume made here on its next start.`;

export async function run(args: string[]): Promise<number> {
  const { values, positionals: rest } = parseCommandArgs(args, {
    ...ACCOUNT_OPTIONS,
    status: { type: 'string' },
    limit: { type: 'string' },
    cursor: { type: 'string' },
  });
  const [sub, ...params] = rest;
  if (sub === undefined || !['list', 'show', 'pause', 'resume', 'delete'].includes(sub)) {
    throw subcommandError(sub, usage);
  }
  if (values.status !== undefined && !(AGENT_STATUSES as readonly string[]).includes(values.status)) {
    throw new UsageError(`--status must be one of ${AGENT_STATUSES.join(', ')}`);
  }
  if (values.limit !== undefined && !/^\d{1,4}$/.test(values.limit))
    throw new UsageError('--limit must be an integer from 1 to 1000');
  const db = resolveDb(values.db);
  const runtime = await openAdminRuntime(db);
  try {
    const accountId = await requireAccount(runtime.accounts, values.account, db);
    const scope = { accountId };
    if (sub === 'list') {
      positionals(params, [], usage);
      const page = await runtime.list({
        ...scope,
        ...(values.status === undefined ? {} : { status: values.status as AgentStatus }),
        ...(values.limit === undefined ? {} : { limit: Number(values.limit) }),
        ...(values.cursor === undefined ? {} : { cursor: values.cursor }),
      });
      if (values.json) console.log(JSON.stringify(page));
      else if (page.data.length === 0) console.log('No agents.');
      else {
        console.log(
          table([
            ['ID', 'STATUS', 'PROGRESS', 'TOKENS', 'MESSAGES'],
            ...page.data.map((a) => [
              a.agent_id,
              a.status,
              `${Math.round(a.progress * 100)}%`,
              String(a.token_count),
              String(a.message_count),
            ]),
          ]),
        );
        if (page.has_more) console.log(`More: agentry agents list --cursor ${page.next_cursor}`);
      }
      return 0;
    }
    const [id] = positionals(params, ['id'], usage);
    if (sub === 'show') {
      const { agent, messages } = await runtime.get(id!, scope);
      if (values.json) console.log(JSON.stringify({ agent, messages }));
      else {
        console.log(
          table([
            ['id', agent.agent_id],
            ['status', agent.status],
            ['progress', `${Math.round(agent.progress * 100)}%`],
            ['message', agent.status_message],
            ['model', agent.model],
            ['tokens', String(agent.token_count)],
            ['credits', formatCredits(agent.credits_spent)],
            ['created', agent.created_at],
            ['updated', agent.updated_at],
          ]),
        );
        console.log('');
        for (const m of messages) console.log(`[${m.timestamp}] ${m.role}: ${m.text}`);
      }
      return 0;
    }
    if (sub === 'delete') {
      const result = await runtime.delete(id!, scope);
      console.log(values.json ? JSON.stringify(result) : `Deleted agent ${result.agent_id}.`);
      return 0;
    }
    const agent = sub === 'pause' ? await runtime.pause(id!, scope) : await runtime.resume(id!, scope);
    console.log(values.json ? JSON.stringify({ agent }) : `Agent ${agent.agent_id}: ${agent.status}.`);
    return 0;
  } finally {
    await runtime.close();
  }
}
