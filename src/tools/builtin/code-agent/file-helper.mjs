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
 * matcher is an NFA made from the pattern and simulated in linear time ({@link compileGlob}), run here under the
 * sandbox's CPU and time limits, never on the runtime's event loop. `Read` streams the file and answers only the lines
 * asked for, each cut, up to a character budget: the answer is small whatever the file.
 *
 * Answers: `{"ok": true, ...}` or `{"ok": false, "code": "not_found" | "invalid_request", "message": "..."}`.
 */
import { Buffer } from 'node:buffer';
import { spawn } from 'node:child_process';
import { createReadStream } from 'node:fs';
import { lstat, mkdir, readdir, readFile, realpath, writeFile } from 'node:fs/promises';
import { posix } from 'node:path';
import process from 'node:process';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import { StringDecoder } from 'node:string_decoder';

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
 * @typedef {{kind: 'char', test: (c: string) => boolean, out: number}
 *   | {kind: 'split', outs: number[]}
 *   | {kind: 'match'}} GlobState
 */

/**
 * A glob over `/`-separated relative paths, compiled to a Thompson NFA: `*` (within one segment), `**` (any number of
 * segments), `?`, `[abc]`, `[!abc]`, `[a-z]` and `{a,b}`. It is matched by simulating every state at once, one
 * character at a time, so a match costs (path length × pattern length) steps at most, whatever the pattern: no
 * backtracking, so `**` repeated many times cannot make it exponential (a regular expression made from the glob, on
 * a backtracking engine, could).
 * @param {string} pattern
 * @returns {{test: (path: string) => boolean}}
 */
export function compileGlob(pattern) {
  /** @type {GlobState[]} */
  const states = [{ kind: 'match' }];
  /** @param {GlobState} state */
  const add = (state) => states.push(state) - 1;
  const notSlash = (/** @type {string} */ c) => c !== '/';
  const anyChar = () => true;
  /** A loop over `test` characters, then `next`. @param {(c: string) => boolean} test @param {number} next */
  const loop = (test, next) => {
    const split = add({ kind: 'split', outs: [] });
    const consume = add({ kind: 'char', test, out: split });
    /** @type {{outs: number[]}} */ (states[split]).outs.push(consume, next);
    return split;
  };
  let i = 0;
  /**
   * Parses up to the end (or, inside braces, up to `,` or `}`) and builds the states that lead to `next`.
   * @param {number} depth @param {number} next @returns {number}
   */
  const sequence = (depth, next) => {
    /** @type {Array<(next: number) => number>} */
    const parts = [];
    while (i < pattern.length) {
      const c = /** @type {string} */ (pattern[i]);
      if (depth > 0 && (c === ',' || c === '}')) break;
      if (c === '*') {
        if (pattern[i + 1] === '*') {
          const atStart = i === 0 || pattern[i - 1] === '/';
          if (atStart && pattern[i + 2] === '/') {
            // `**/`: nothing, or anything that ends with a slash (zero or more whole segments).
            i += 3;
            parts.push((n) => {
              const split = add({ kind: 'split', outs: [] });
              const slash = add({ kind: 'char', test: (ch) => ch === '/', out: n });
              const inner = add({ kind: 'split', outs: [] });
              const consume = add({ kind: 'char', test: anyChar, out: inner });
              /** @type {{outs: number[]}} */ (states[inner]).outs.push(consume, slash);
              /** @type {{outs: number[]}} */ (states[split]).outs.push(n, inner);
              return split;
            });
          } else {
            i += 2;
            parts.push((n) => loop(anyChar, n));
          }
        } else {
          i += 1;
          parts.push((n) => loop(notSlash, n));
        }
      } else if (c === '?') {
        i += 1;
        parts.push((n) => add({ kind: 'char', test: notSlash, out: n }));
      } else if (c === '[' && pattern.indexOf(']', i + 2) !== -1) {
        const close = pattern.indexOf(']', i + 2);
        const body = pattern.slice(i + 1, close);
        i = close + 1;
        const negated = body.startsWith('!');
        // One character against a character class: a single-character regular expression cannot backtrack.
        const cls = new RegExp(`^[${negated ? '^' : ''}${(negated ? body.slice(1) : body).replace(/\\/g, '\\\\')}]$`);
        parts.push((n) => add({ kind: 'char', test: (ch) => ch !== '/' && cls.test(ch), out: n }));
      } else if (c === '{') {
        i += 1;
        /** @type {Array<(next: number) => number>} */
        const alternatives = [];
        // Each alternative is parsed once; its states are built when the part is (once, towards its `next`).
        const startAt = [i];
        for (;;) {
          skipAlternative(depth + 1);
          if (i >= pattern.length) throw new Error(`unbalanced { in glob ${JSON.stringify(pattern)}`);
          if (pattern[i] === ',') {
            i += 1;
            startAt.push(i);
            continue;
          }
          i += 1; // the closing }
          break;
        }
        const after = i;
        for (const at of startAt) {
          alternatives.push((n) => {
            const saved = i;
            i = at;
            const first = sequence(depth + 1, n);
            i = saved;
            return first;
          });
        }
        i = after;
        parts.push((n) => add({ kind: 'split', outs: alternatives.map((build) => build(n)) }));
      } else {
        i += 1;
        parts.push((n) => add({ kind: 'char', test: (ch) => ch === c, out: n }));
      }
    }
    let at = next;
    for (let k = parts.length - 1; k >= 0; k--) at = /** @type {(n: number) => number} */ (parts[k])(at);
    return at;
  };
  /** Moves `i` past one alternative inside braces (nested braces included), to its `,` or `}`. @param {number} depth */
  const skipAlternative = (depth) => {
    let nested = 0;
    while (i < pattern.length) {
      const c = pattern[i];
      if (c === '{') nested++;
      else if (c === '}' && nested > 0) nested--;
      else if (nested === 0 && (c === ',' || c === '}')) return;
      i++;
    }
    if (depth > 0 && nested > 0) throw new Error(`unbalanced { in glob ${JSON.stringify(pattern)}`);
  };
  const start = sequence(0, 0);
  if (i < pattern.length) throw new Error(`unbalanced } in glob ${JSON.stringify(pattern)}`);

  /** Adds `state` and every state its splits lead to (once each: `seen` marks the current step). */
  const closure = (
    /** @type {number} */ state,
    /** @type {number[]} */ into,
    /** @type {Int32Array} */ seen,
    /** @type {number} */ step,
  ) => {
    const stack = [state];
    while (stack.length > 0) {
      const s = /** @type {number} */ (stack.pop());
      if (seen[s] === step) continue;
      seen[s] = step;
      const node = /** @type {GlobState} */ (states[s]);
      if (node.kind === 'split')
        for (let k = node.outs.length - 1; k >= 0; k--) stack.push(/** @type {number} */ (node.outs[k]));
      else into.push(s);
    }
  };
  return {
    test(path) {
      const seen = new Int32Array(states.length).fill(-1);
      let current = /** @type {number[]} */ ([]);
      let step = 0;
      closure(start, current, seen, step);
      for (const c of path) {
        step++;
        /** @type {number[]} */
        const next = [];
        for (const s of current) {
          const node = /** @type {GlobState} */ (states[s]);
          if (node.kind === 'char' && node.test(c)) closure(node.out, next, seen, step);
        }
        if (next.length === 0) return false;
        current = next;
      }
      return current.includes(0);
    },
  };
}

/** @param {string} path @param {string} pattern */
export function matchesGlob(path, pattern) {
  return compileGlob(pattern).test(path);
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

  async lines(op) {
    const abs = await resolveInWorkspace(op.path);
    const stat = await lstat(abs).catch(() => undefined);
    if (!stat) throw new Refusal('not_found', `File does not exist: ${op.label}`);
    if (!stat.isFile()) throw new Refusal('invalid_request', `Not a file: ${op.label}`);
    return readLines(abs, op);
  },

  async glob(op) {
    let re;
    try {
      re = compileGlob(op.pattern);
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

/**
 * Lines `offset`..`offset + limit - 1` (1-based) of a file, read as a stream: each cut at `line_chars` characters,
 * and no more lines once `max_chars` characters are kept. Lines are counted to the end (what `total` says), but only
 * the kept ones, and at most `line_chars` characters of the line being read, are ever held.
 * @param {string} abs
 * @param {{offset: number, limit: number, line_chars: number, max_chars: number}} op
 */
async function readLines(abs, op) {
  const first = op.offset - 1;
  const end = first + op.limit;
  /** @type {string[]} */
  const kept = [];
  let index = 0;
  let current = '';
  let segment = 0;
  let chars = 0;
  let full = false;
  const take = (/** @type {string} */ piece) => {
    segment += piece.length;
    if (!full && index >= first && index < end && current.length <= op.line_chars) {
      current += piece.slice(0, op.line_chars + 1 - current.length);
    }
  };
  const endLine = () => {
    if (!full && index >= first && index < end) {
      const line = current.length > op.line_chars ? `${current.slice(0, op.line_chars)}…` : current;
      if (chars + line.length > op.max_chars && kept.length > 0) full = true;
      else {
        kept.push(line);
        chars += line.length;
      }
    }
    index++;
    current = '';
    segment = 0;
  };
  const decoder = new StringDecoder('utf8');
  for await (const chunk of createReadStream(abs, { highWaterMark: 64 * 1024 })) {
    const text = decoder.write(/** @type {Buffer} */ (chunk));
    let start = 0;
    for (let nl = text.indexOf('\n'); nl !== -1; nl = text.indexOf('\n', start)) {
      take(text.slice(start, nl));
      endLine();
      start = nl + 1;
    }
    take(text.slice(start));
  }
  take(decoder.end());
  if (segment > 0) endLine();
  return { lines: kept, total: index };
}

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
