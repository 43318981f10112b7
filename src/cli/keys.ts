/**
 * @module cli/keys
 * `agentry keys create [--name n] | list | delete <id>`: the API keys of the serve account (or `--account`). Keys are
 * stored as SHA-256 hashes plus their last 4 characters, so `create` is the only time a full key is printed.
 */
import {
  ACCOUNT_OPTIONS,
  openAccounts,
  parseCommandArgs,
  positionals,
  requireAccount,
  resolveDb,
  table,
  subcommandError,
} from './common.js';

export const usage = `Usage: agentry keys create [--name <name>] | list | delete <key-id>   [--db <path>] [--account <id>] [--json]

  create   make a new API key and print it once: "API key: agk_..."
  list     the account's keys, masked to their last 4 characters
  delete   revoke a key at once`;

export async function run(args: string[]): Promise<number> {
  const { values, positionals: rest } = parseCommandArgs(args, { ...ACCOUNT_OPTIONS, name: { type: 'string' } });
  const [sub, ...params] = rest;
  const db = resolveDb(values.db);
  const { accounts, close } = await openAccounts(db);
  try {
    const accountId = await requireAccount(accounts, values.account, db);
    switch (sub) {
      case 'create': {
        positionals(params, [], usage);
        const key = await accounts.createApiKey(accountId, values.name === undefined ? {} : { name: values.name });
        if (values.json) console.log(JSON.stringify(key));
        else {
          console.log(`Created key ${key.key_id} (${key.name}) for account ${accountId}.`);
          console.log(`API key: ${key.key}`);
          console.log('Store it now: it is not shown again.');
        }
        return 0;
      }
      case 'list': {
        positionals(params, [], usage);
        const keys = await accounts.listApiKeys(accountId);
        if (values.json) console.log(JSON.stringify(keys));
        else if (keys.length === 0) console.log(`No API keys for account ${accountId}.`);
        else
          console.log(
            table([['ID', 'NAME', 'KEY', 'CREATED'], ...keys.map((k) => [k.key_id, k.name, k.masked, k.created_at])]),
          );
        return 0;
      }
      case 'delete': {
        const [id] = positionals(params, ['key-id'], usage);
        await accounts.deleteApiKey(accountId, id!);
        console.log(`Deleted key ${id}: it is refused from now on.`);
        return 0;
      }
      default:
        throw subcommandError(sub, usage, ['create', 'list', 'delete']);
    }
  } finally {
    await close();
  }
}
