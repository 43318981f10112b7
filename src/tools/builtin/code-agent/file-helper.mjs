// @ts-check
/**
 * The coding child's file tools, run INSIDE the sandbox as its unprivileged user (`workspace-files.ts` starts it):
 * `node file-helper.mjs` reads one operation as JSON on stdin and writes one JSON answer on stdout. It sees what a
 * `Bash` command sees and nothing more, so a symlink swapped into the workspace mid-call can lead it only to files the
 * sandbox could read or write anyway; the checks below (no `..`, no symlink out) shape the answers, they are not the
 * boundary. The program is fixed: the operation arrives as data, never as code or a shell line.
 *
 * Plain JavaScript with no dependencies because it runs on the host's node binary, bound into the sandbox read-only,
 * from the source tree as from the built package. `Grep` is ripgrep (linear-time regular expressions); `Glob`'s
 * matcher is a regular expression made from the pattern, run here under the sandbox's CPU and time limits, never on
 * the runtime's event loop.
 *
 * Answers: `{"ok": true, ...}` or `{"ok": false, "code": "not_found" | "invalid_request", "message": "..."}`.
 */
import { Buffer } from 'node:buffer';
import { spawn } from 'node:child_process';
import { lstat, mkdir, readdir, readFile, realpath, writeFile } from 'node:fs/promises';
import { posix } from 'node:path';
import process from 'node:process';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';

const ROOT = '/workspace';

class Refusal extends Error {
  /** @param {'not_found' | 'invalid_request'} code @param {string} message */
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

/** @param {string} rel @param {string} why */
const refuse = (rel, why) => new Refusal('invalid_request', `Path ${JSON.stringify(rel)} is refused: ${why}`);

/** @param {string} root @param {string} path */
function inside(root, path) {
  return path === root || path.startsWith(`${root}/`);
}

/**
 * The absolute path of `rel` (relative to the workspace), refusing `..`, absolute paths, and paths that lead out
 * through a symlink (the real path of the target, or of its nearest existing ancestor, must be in the workspace).
 * @param {string} rel
 */
async function resolveInWorkspace(rel) {
  if (rel.includes('\0')) throw refuse(rel, 'it contains a NUL byte');
  if (posix.isAbsolute(rel)) throw refuse(rel, 'paths are relative to the workspace');
  if (rel.split(/[\\/]+/).includes('..')) throw refuse(rel, '`..` is not allowed');
  const target = posix.join(ROOT, posix.normalize(rel));
  for (let probe = target; ; probe = posix.dirname(probe)) {
    let real;
    try {
      real = await realpath(probe);
    } catch (error) {
      if (/** @type {NodeJS.ErrnoException} */ (error).code !== 'ENOENT') throw error;
      const isLink = await lstat(probe).then(
        (s) => s.isSymbolicLink(),
        () => false,
      );
      if (isLink) throw refuse(rel, 'it is a symlink to nothing');
      if (probe === ROOT || probe === '/') throw refuse(rel, 'the workspace does not exist');
      continue;
    }
    if (!inside(ROOT, real)) throw refuse(rel, 'it leads out of the workspace through a symlink');
    return target;
  }
}

/** @param {string} abs */
const shown = (abs) => posix.relative(ROOT, abs) || '.';

/** @param {string} abs @param {string} label @param {number} maxBytes */
async function readRegularFile(abs, label, maxBytes) {
  const stat = await lstat(abs).catch(() => undefined);
  if (!stat) throw new Refusal('not_found', `File does not exist: ${label}`);
  if (!stat.isFile()) throw new Refusal('invalid_request', `Not a file: ${label}`);
  if (stat.size > maxBytes) {
    throw new Refusal('invalid_request', `${label} is ${stat.size} bytes; the limit is ${maxBytes}`);
  }
  return readFile(abs);
}

/** Creates the missing directories of `rel`'s parent, each checked to stay in the workspace. @param {string} rel */
async function makeParents(rel) {
  const parts = rel.split(/[\\/]+/).filter((p) => p && p !== '.');
  for (let i = 1; i < parts.length; i++) {
    const dir = await resolveInWorkspace(parts.slice(0, i).join('/'));
    await mkdir(dir).catch((/** @type {NodeJS.ErrnoException} */ error) => {
      if (error.code !== 'EEXIST') throw error;
    });
  }
}

/** Regular files under `dir` (breadth first, names sorted, `.git` skipped, symlinks never followed). */
async function walk(/** @type {string} */ dir, /** @type {number} */ maxWalk) {
  /** @type {string[]} */
  const files = [];
  const queue = [dir];
  let seen = 0;
  while (queue.length > 0 && seen < maxWalk) {
    const current = /** @type {string} */ (queue.shift());
    const entries = await readdir(current, { withFileTypes: true }).catch(() => []);
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const entry of entries) {
      if (++seen > maxWalk) break;
      const path = posix.join(current, entry.name);
      if (entry.isDirectory()) {
        if (entry.name !== '.git') queue.push(path);
      } else if (entry.isFile()) {
        files.push(path);
      }
    }
  }
  return files;
}

/**
 * The regular expression of a glob over `/`-separated relative paths: `*` (one segment), `**` (any number of
 * segments), `?`, `[abc]`, `[!abc]` and `{a,b}`.
 * @param {string} pattern
 */
export function globToRegExp(pattern) {
  let source = '';
  let braces = 0;
  for (let i = 0; i < pattern.length; i++) {
    const c = /** @type {string} */ (pattern[i]);
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

/** @param {string} path @param {string} pattern */
export function matchesGlob(path, pattern) {
  return globToRegExp(pattern).test(path);
}

/** @param {string} line @param {number} max */
const cut = (line, max) => (line.length > max ? `${line.slice(0, max)}…` : line);

/**
 * ripgrep over `target` (relative to the workspace): the first `maxMatches` lines as `path:line:text`, and how many
 * more there were. ripgrep's engine is linear in the input (no backtracking), and it runs here, in the sandbox.
 * @param {{pattern: string, target: string, glob?: string, maxMatches: number, maxBytes: number, lineChars: number}} o
 */
function ripgrep(o) {
  const args = ['--no-config', '--hidden', '--no-ignore', '--glob', '!.git'];
  if (o.glob !== undefined) args.push('--glob', o.glob);
  args.push('--max-filesize', String(o.maxBytes), '--line-number', '--with-filename', '--no-heading', '--null');
  args.push('--color', 'never', '--sort', 'path', '-e', o.pattern, '--', o.target);
  return new Promise((resolve, reject) => {
    const rg = spawn('rg', args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    /** @type {string[]} */
    const lines = [];
    let more = 0;
    let stderr = '';
    rg.stderr.on('data', (chunk) => {
      if (stderr.length < 4_000) stderr += String(chunk);
    });
    const reader = createInterface({ input: rg.stdout, crlfDelay: Infinity });
    reader.on('line', (line) => {
      const nul = line.indexOf('\0');
      if (nul === -1) return;
      if (lines.length >= o.maxMatches) {
        more++;
        return;
      }
      const file = line.slice(0, nul).replace(/^\.\//, '');
      const rest = line.slice(nul + 1);
      const colon = rest.indexOf(':');
      lines.push(`${file}:${rest.slice(0, colon)}:${cut(rest.slice(colon + 1), o.lineChars)}`);
    });
    rg.on('error', (error) => reject(new Refusal('invalid_request', `ripgrep could not start: ${error.message}`)));
    rg.on('close', (code) => {
      // 0: matches, 1: none, 2: an error (a bad pattern; or an unreadable file, with the other matches still shown).
      if (code === 2 && lines.length === 0 && /regex|parse|syntax|size limit/i.test(stderr)) {
        reject(new Refusal('invalid_request', `Invalid regular expression: ${stderr.trim()}`));
      } else if (code !== 0 && code !== 1 && code !== 2) {
        reject(new Refusal('invalid_request', `ripgrep failed (exit ${code}): ${stderr.trim()}`));
      } else {
        resolve({ lines, more });
      }
    });
  });
}

/** @type {Record<string, (op: any) => Promise<Record<string, unknown>>>} */
const OPERATIONS = {
  async read(op) {
    const abs = await resolveInWorkspace(op.path);
    const bytes = await readRegularFile(abs, op.label, op.max_bytes);
    return op.encoding === 'base64' ? { content: bytes.toString('base64') } : { content: bytes.toString('utf8') };
  },

  async write(op) {
    await makeParents(op.path);
    const abs = await resolveInWorkspace(op.path);
    const stat = await lstat(abs).catch(() => undefined);
    if (stat && !stat.isFile()) throw new Refusal('invalid_request', `Not a file: ${op.label}`);
    const bytes = Buffer.from(op.content, op.encoding === 'base64' ? 'base64' : 'utf8');
    await writeFile(abs, bytes);
    return { bytes: bytes.length, path: shown(abs) };
  },

  async edit(op) {
    const abs = await resolveInWorkspace(op.path);
    const text = (await readRegularFile(abs, op.label, op.max_bytes)).toString('utf8');
    const count = text.split(op.old_string).length - 1;
    if (count === 0) throw new Refusal('invalid_request', `old_string was not found in ${op.label}`);
    if (count > 1 && !op.replace_all) {
      throw new Refusal(
        'invalid_request',
        `old_string occurs ${count} times in ${op.label}: add surrounding lines to make it unique, or set replace_all`,
      );
    }
    const next = op.replace_all
      ? text.split(op.old_string).join(op.new_string)
      : text.replace(op.old_string, () => op.new_string);
    await writeFile(abs, next);
    return { replacements: op.replace_all ? count : 1, path: shown(abs) };
  },

  async glob(op) {
    let re;
    try {
      re = globToRegExp(op.pattern);
    } catch (error) {
      throw new Refusal('invalid_request', `Invalid glob: ${/** @type {Error} */ (error).message}`);
    }
    const base = await resolveInWorkspace(op.path);
    const matches = (await walk(base, op.max_walk)).filter((file) => re.test(posix.relative(base, file)));
    return { matches: matches.slice(0, op.max_results).map(shown), total: matches.length };
  },

  async grep(op) {
    const base = await resolveInWorkspace(op.path);
    const stat = await lstat(base).catch(() => undefined);
    if (!stat || (!stat.isFile() && !stat.isDirectory())) return { lines: [], more: 0 };
    return ripgrep({
      pattern: op.pattern,
      target: shown(base),
      ...(op.glob !== undefined ? { glob: op.glob } : {}),
      maxMatches: op.max_matches,
      maxBytes: op.max_bytes,
      lineChars: op.line_chars,
    });
  },
};

async function main() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  let answer;
  try {
    const op = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    const run = OPERATIONS[op.op];
    if (!run) throw new Refusal('invalid_request', `unknown operation ${JSON.stringify(op.op)}`);
    answer = { ok: true, ...(await run(op)) };
  } catch (error) {
    answer =
      error instanceof Refusal
        ? { ok: false, code: error.code, message: error.message }
        : { ok: false, code: 'invalid_request', message: /** @type {Error} */ (error).message };
  }
  process.stdout.write(JSON.stringify(answer));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
