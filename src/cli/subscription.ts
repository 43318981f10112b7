/**
 * @module cli/subscription
 * `agentry subscription activate | deactivate | show`: while inactive, every API key of the account gets 401
 * `subscription_inactive`; agents keep their state. Activating an account that has no API key creates its first one.
 */
import {
  ACCOUNT_OPTIONS,
  openAccounts,
  parseCommandArgs,
  positionals,
  requireAccount,
  resolveDb,
  subcommandError,
} from './common.js';

export const usage = `Usage: agentry subscription activate | deactivate | show   [--db <path>] [--account <id>] [--json]

  activate    API keys work again (an account without keys gets its first one, printed once)
  deactivate  API keys are refused with 401 subscription_inactive; agents keep their state
  show        whether the subscription is active`;

export async function run(args: string[]): Promise<number> {
  const { values, positionals: rest } = parseCommandArgs(args, ACCOUNT_OPTIONS);
  const [sub, ...params] = rest;
  positionals(params, [], usage);
  const db = resolveDb(values.db);
  const { accounts, close } = await openAccounts(db);
  try {
    const accountId = await requireAccount(accounts, values.account, db);
    switch (sub) {
      case 'activate': {
        const { account, apiKey } = await accounts.subscribe(accountId);
        if (values.json) console.log(JSON.stringify({ ...account, ...(apiKey ? { api_key: apiKey } : {}) }));
        else {
          console.log(`Subscription of account ${accountId}: active.`);
          if (apiKey) console.log(`API key: ${apiKey.key}`);
        }
        return 0;
      }
      case 'deactivate': {
        const account = await accounts.unsubscribe(accountId);
        if (values.json) console.log(JSON.stringify(account));
        else console.log(`Subscription of account ${accountId}: inactive. Its API keys get 401 subscription_inactive.`);
        return 0;
      }
      case 'show': {
        const account = await accounts.get(accountId);
        if (values.json) console.log(JSON.stringify(account));
        else
          console.log(`Subscription of account ${accountId}: ${account.subscription_active ? 'active' : 'inactive'}.`);
        return 0;
      }
      default:
        throw subcommandError(sub, usage, ['activate', 'deactivate', 'show']);
    }
  } finally {
    await close();
  }
}
