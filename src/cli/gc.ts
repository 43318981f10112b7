/**
 * @module cli/gc
 * `agentry gc --older-than <duration>`: one retention sweep now (core/retention.ts). Finished trees (their root
 * COMPLETED or FAILED, last updated longer ago than the duration) lose their turns, messages, tool calls and artifacts,
 * or with `--delete-trees` the agents too; ledger rows stay. On SQLite the freed pages go back to the file system; a
 * database made before agentry set `auto_vacuum = INCREMENTAL` is converted once, with a VACUUM.
 */
import { parseDuration } from '../core/retention.js';
import { COMMON_OPTIONS, openAdminRuntime, parseCommandArgs, positionals, resolveDb, UsageError } from './common.js';

export const usage = `Usage: agentry gc --older-than <duration> [--delete-trees] [--out-of-credits-after <duration>]
                 [--db ./agentry.db] [--json]

Forgets the work of finished agents (COMPLETED or FAILED roots, with their sub-agents) last updated longer ago than
<duration> (e.g. 0s, 90m, 36h, 30d, 2w): their turns, messages, tool calls and artifacts. The agents stay, with their
status, counts and credits; the ledger always stays.

Options:
  --older-than <d>  age of the trees to forget (required)
  --delete-trees    delete the agents too (afterwards they are not found)
  --out-of-credits-after <d>
                    also DELETE trees whose root stopped OUT_OF_CREDITS and was untouched that long (their coding
                    workspaces go with them where the runtime that made them removes them)
  --db <path>       SQLite file or postgres:// URL (default $AGENTRY_DB, else ./agentry.db)
  --json            print the result as JSON`;

/** What a SQLite storage offers beyond the adapter (`gc` converts an old database once). */
interface VacuumingStorage {
  enableIncrementalVacuum?(): Promise<boolean>;
}

export async function run(args: string[]): Promise<number> {
  const { values, positionals: rest } = parseCommandArgs(args, {
    ...COMMON_OPTIONS,
    'older-than': { type: 'string' },
    'delete-trees': { type: 'boolean', default: false },
    'out-of-credits-after': { type: 'string' },
    json: { type: 'boolean', default: false },
  });
  positionals(rest, [], usage);
  if (values['older-than'] === undefined) throw new UsageError(`--older-than is required\n\n${usage}`);
  let age: number;
  try {
    age = parseDuration(values['older-than']);
  } catch (error) {
    throw new UsageError(`--older-than: ${(error as Error).message}`);
  }
  let outOfCreditsAfter: number | undefined;
  try {
    const given = values['out-of-credits-after'];
    outOfCreditsAfter = given === undefined ? undefined : parseDuration(given);
  } catch (error) {
    throw new UsageError(`--out-of-credits-after: ${(error as Error).message}`);
  }
  const db = resolveDb(values.db);
  const runtime = await openAdminRuntime(db);
  try {
    const converted = (await (runtime.storage as VacuumingStorage).enableIncrementalVacuum?.()) ?? false;
    const result = await runtime.sweep({
      completedAfter: age,
      failedAfter: age,
      deleteTrees: values['delete-trees'],
      ...(outOfCreditsAfter !== undefined ? { outOfCreditsAfter } : {}),
      batchSize: 200,
    });
    if (values.json) console.log(JSON.stringify({ ...result, converted_to_incremental_vacuum: converted }));
    else {
      if (converted) console.log('Converted the database to auto_vacuum = INCREMENTAL (one VACUUM).');
      const what = values['delete-trees'] ? 'Deleted' : 'Forgot the work of';
      console.log(
        `${what} ${result.trees} finished tree(s), ${result.agents} agent(s)` +
          (values['delete-trees'] ? '.' : `: ${result.rows} row(s) removed.`),
      );
    }
    return 0;
  } finally {
    await runtime.close();
  }
}
