/**
 * @module mcp/stderr
 * What of a stdio server's stderr goes into messages: the one line that says why it failed.
 */

/**
 * The line of a server's stderr that says why it failed, on one line: the last line that reads as an error (Node's
 * `Error: Cannot find module …`, Python's `ModuleNotFoundError: …`, `fatal: …`), not the first (Node prints the
 * source location first: `node:internal/modules/cjs/loader:1210`); else the last line written. At most 500
 * characters.
 */
export function whyLine(stderr: string): string {
  const lines = stderr
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter(Boolean);
  const errorLike =
    /^(\w*(Error|Exception)\b|(fatal|error|panic|critical)\b|Traceback)|\b(Cannot find|cannot find|not found|No such file|ENOENT|EACCES|EADDRINUSE|denied|Permission|refused|Usage:)/i;
  // Stack frames and source excerpts are not the reason.
  const noise = /^(at |\^+$|throw |node:internal|file:\/\/|\{|\}|Node\.js v\d|code: |requireStack|File ")/;
  const candidates = lines.filter((l) => !noise.test(l));
  const why = [...candidates].reverse().find((l) => errorLike.test(l)) ?? candidates.at(-1) ?? lines.at(-1) ?? '';
  return why.length > 500 ? `${why.slice(0, 500)}…` : why;
}
