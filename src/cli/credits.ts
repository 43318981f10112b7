/**
 * @module cli/credits
 * `agentry credits add <n> | show`: the balance of the serve account (or `--account`). 1 credit = $0.01.
 */
import {
  ACCOUNT_OPTIONS,
  formatCredits,
  openAccounts,
  parseCommandArgs,
  positionals,
  requireAccount,
  resolveDb,
  UsageError,
  subcommandError,
} from './common.js';
import type { AccountInfo } from '../index.js';

export const usage = `Usage: agentry credits add <n> | show   [--db <path>] [--account <id>] [--json]

  add <n>  add n credits to the balance (a top-up in the ledger; 1 credit = $0.01)
  show     balance, credits held by running agents, and what is available`;

export async function run(args: string[]): Promise<number> {
  const { values, positionals: rest } = parseCommandArgs(args, ACCOUNT_OPTIONS);
  const [sub, ...params] = rest;
  const db = resolveDb(values.db);
  const { accounts, close } = await openAccounts(db);
  try {
    const accountId = await requireAccount(accounts, values.account, db);
    let account: AccountInfo;
    switch (sub) {
      case 'add': {
        const [amount] = positionals(params, ['n'], usage);
        const credits = Number(amount);
        if (!/^\d+(?:\.\d+)?$/.test(amount!) || !(credits > 0))
          throw new UsageError(`<n> must be a positive number of credits, got ${amount}`);
        account = await accounts.addCredits(accountId, credits);
        if (!values.json) console.log(`Added ${formatCredits(credits)} credits to account ${accountId}.`);
        break;
      }
      case 'show':
        positionals(params, [], usage);
        account = await accounts.get(accountId);
        break;
      default:
        throw subcommandError(sub, usage, ['add', 'show']);
    }
    if (values.json) console.log(JSON.stringify(account));
    else {
      console.log(
        `Balance: ${formatCredits(account.balance)} credits (reserved ${formatCredits(account.reserved)}, available ${formatCredits(account.available)})`,
      );
    }
    return 0;
  } finally {
    await close();
  }
}
