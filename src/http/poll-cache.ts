/**
 * @module http/poll-cache
 * Poll answers kept until the database changes. Clients poll the same agent many times a second, and between two
 * commits every one of those polls would read the same three rows and serialize the same JSON. A change counter
 * (SQLite's `PRAGMA data_version`, which moves whenever another connection commits) says when that may no longer
 * hold; everything kept is then dropped at once. A poll that finds its answer kept costs one counter read (a few
 * microseconds: SQLite starts a read transaction for it), two lookups, and the caller's rate-limit bucket, which is
 * always taken afresh.
 *
 * Only successes are kept: an unknown key or agent is read again each time, so a flood of bad keys or ids costs reads
 * but no memory.
 */
import type { KeyAuthentication, PollSource } from './poll.js';

export interface PollCacheLimits {
  /** Most keys and most agent answers kept, each. */
  entries: number;
  /** Most bytes of agent JSON kept (counted as UTF-16 code units). */
  chars: number;
}

const DEFAULT_LIMITS: PollCacheLimits = { entries: 1024, chars: 16 * 1024 * 1024 };

/**
 * A {@link PollSource} that answers from what `source` last read while `changeCounter` gives the same number. The
 * counter is read once per poll, in `begin()`; each poll's answers are as of that moment.
 *
 * @example
 * const storage = sqliteStorage({ path: './agentry.db', readonly: true });
 * const cached = keptUntilChange(source, () => storage.changeCounter());
 */
export function keptUntilChange(
  source: PollSource,
  changeCounter: () => number,
  limits: PollCacheLimits = DEFAULT_LIMITS,
): PollSource {
  let seen: number | undefined;
  const keys = new Map<string, KeyAuthentication>();
  const agents = new Map<string, string>();
  let chars = 0;

  return {
    begin() {
      const now = changeCounter();
      if (now !== seen) {
        seen = now;
        keys.clear();
        agents.clear();
        chars = 0;
      }
    },
    async authenticate(key) {
      const at = seen;
      const kept = key === null ? undefined : keys.get(key);
      if (kept) return kept;
      const fresh = await source.authenticate(key);
      // Not kept if another poll saw the counter move while this one read: it may hold the older state.
      if (key !== null && seen === at && keys.size < limits.entries) keys.set(key, fresh);
      return fresh;
    },
    async getJson(agentId, scope) {
      const at = seen;
      const id = `${scope.accountId}/${agentId}`;
      const kept = agents.get(id);
      if (kept !== undefined) return kept;
      const json = await source.getJson(agentId, scope);
      if (seen === at && agents.size < limits.entries && chars + json.length <= limits.chars) {
        agents.set(id, json);
        chars += json.length;
      }
      return json;
    },
  };
}
