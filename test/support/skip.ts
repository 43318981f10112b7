/**
 * Names for suites that skip when an external dependency is missing, so a skipped suite says why in the report:
 * `AgentRuntime on PostgreSQL (skipped: connect ECONNREFUSED 127.0.0.1:5432)`. Under AGENTRY_CI_STRICT=1 they do
 * not skip (they fail), and the name is the plain one.
 */

/** `name`, followed by `(skipped: <reason>)` when `reason` says the suite is skipped. */
export function skippable(name: string, reason: string | null | undefined | false): string {
  return reason ? `${name} (skipped: ${reason.replace(/\s+/g, ' ').trim()})` : name;
}
