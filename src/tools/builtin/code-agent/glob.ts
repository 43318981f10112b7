/**
 * @module tools/builtin/code-agent/glob
 * A small glob matcher for the code child's `Glob` and `Grep` tools: `*` (within one path segment), `**` (any number
 * of segments), `?`, `[abc]` and `{a,b}`. Node 20's `path.matchesGlob` is experimental there and warns on every
 * process that uses it, so the few rules the tools need are kept here.
 */

/** The regular expression of a glob pattern over `/`-separated relative paths. */
export function globToRegExp(pattern: string): RegExp {
  let source = '';
  let braces = 0;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === '*') {
      if (pattern[i + 1] === '*') {
        const atStart = i === 0 || pattern[i - 1] === '/';
        const slashAfter = pattern[i + 2] === '/';
        if (atStart && slashAfter) {
          source += '(?:[^/]*(?:/|$))*'; // `**/`: zero or more whole segments
          i += 2;
        } else {
          source += '.*';
          i += 1;
        }
      } else {
        source += '[^/]*';
      }
    } else if (c === '?') {
      source += '[^/]';
    } else if (c === '[') {
      const end = pattern.indexOf(']', i + 2);
      if (end === -1) {
        source += '\\[';
      } else {
        const body = pattern.slice(i + 1, end).replace(/\\/g, '\\\\');
        source += `[${body.startsWith('!') ? `^${body.slice(1)}` : body}]`;
        i = end;
      }
    } else if (c === '{') {
      braces++;
      source += '(?:';
    } else if (c === '}' && braces > 0) {
      braces--;
      source += ')';
    } else if (c === ',' && braces > 0) {
      source += '|';
    } else {
      source += c.replace(/[.+^$()|\\]/g, '\\$&');
    }
  }
  if (braces > 0) throw new Error(`unbalanced { in glob ${JSON.stringify(pattern)}`);
  return new RegExp(`^${source}$`);
}

/**
 * Whether `path` (relative, `/`-separated) matches `pattern`. A pattern without `/` also matches a file's base name
 * anywhere when `basenameAnywhere` is set (as ripgrep's `--glob` does: `*.py` finds `src/a.py`).
 */
export function matchesGlob(path: string, pattern: string, basenameAnywhere = false): boolean {
  const re = globToRegExp(pattern);
  if (re.test(path)) return true;
  return basenameAnywhere && !pattern.includes('/') && re.test(path.slice(path.lastIndexOf('/') + 1));
}
