/**
 * Installs agentry's packed tarball into a fresh `npm init -y` project without the network: the project gets a
 * lockfile made from the repository's own (the versions `npm ci` installed here, whose tarballs are in the npm
 * cache), and `npm ci --offline` installs from that cache. better-sqlite3's install script is skipped: it would
 * download a prebuilt binary from GitHub or compile one with headers from nodejs.org; the binary the repository's
 * own `npm ci` put in place (same version, same Node) is copied instead.
 */
import { execFile } from 'node:child_process';
import { copyFileSync, cpSync, mkdirSync, readFileSync, realpathSync, symlinkSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, relative, sep } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

interface LockEntry {
  name?: unknown;
  version?: string;
  resolved?: string;
  integrity?: string;
  dev?: boolean;
  link?: boolean;
  [key: string]: unknown;
}

/** The environment a user's shell would give npm and node: no npm_* variables of the `npm test` running this. */
export function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    // npm's cache location is kept: the offline install reads from it
    if (/^npm_config_(cache|userconfig)$/i.test(key)) env[key] = value;
    else if (!/^npm_|^ANTHROPIC_|^AGENTRY_|^NODE_OPTIONS$|^VITEST/i.test(key)) env[key] = value;
  }
  return { ...env, ...extra };
}

/** Runs a command, resolving with its output; rejects with the output in the message when it fails. */
export async function sh(
  command: string,
  args: string[],
  options: { cwd: string; env?: NodeJS.ProcessEnv },
): Promise<{ stdout: string; stderr: string }> {
  const result = await exec(command, args, options);
  if (result.code !== 0) {
    throw new Error(`${command} ${args.join(' ')} exited ${result.code}\n${result.stdout}\n${result.stderr}`);
  }
  return result;
}

/** Runs a command to its end, whatever its exit code. */
export async function exec(
  command: string,
  args: string[],
  options: { cwd: string; env?: NodeJS.ProcessEnv },
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(command, args, {
      cwd: options.cwd,
      env: options.env ?? cleanEnv(),
      maxBuffer: 64 * 1024 * 1024,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code?: unknown; stdout?: string; stderr?: string; message: string };
    if (typeof e.code !== 'number') throw error;
    return { code: e.code, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

/** What a fresh clone does not have: installed and built files, databases, git's own. */
const NOT_IN_A_CLONE =
  /^(?:\.git|node_modules|dist|coverage|bench[/\\](?:node_modules|tmp|\.build))$|\.db(?:-wal|-shm)?$/;

/**
 * `npm pack` as in a fresh clone, without touching the checkout: the repository's files are copied into
 * `${dir}/clone` (no dist/, no node_modules), the checkout's node_modules is linked in for the build tools, and
 * `npm pack` runs there — its `prepack` builds that copy's dist/. The checkout's own dist/, which other test files
 * run `bin/agentry.js` from, is never rebuilt. Resolves with the tarball's file name (in `dir`) and the packed files.
 */
export async function packFromCopy(repo: string, dir: string): Promise<{ filename: string; files: string[] }> {
  const clone = join(dir, 'clone');
  cpSync(repo, clone, {
    recursive: true,
    filter: (source) => {
      const path = relative(repo, source);
      return path === '' || !NOT_IN_A_CLONE.test(path.split(sep).join('/'));
    },
  });
  symlinkSync(realpathSync(join(repo, 'node_modules')), join(clone, 'node_modules'), 'dir');
  const { stdout } = await sh('npm', ['pack', '--json', '--pack-destination', dir], { cwd: clone });
  const [packed] = JSON.parse(stdout.slice(stdout.indexOf('['))) as [{ filename: string; files: { path: string }[] }];
  return { filename: packed.filename, files: packed.files.map((f) => f.path) };
}

/** The registry URL of a package's tarball: what `npm ci` fetched, and what the cache has under that key. */
function tarballUrl(path: string, version: string): string {
  const name = path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length);
  return `https://registry.npmjs.org/${name}/-/${basename(name)}-${version}.tgz`;
}

/**
 * Writes `package.json` dependencies and a lockfile into `project` (made by `npm init -y`) for the tarball at
 * `tarball` plus `zod`, and dev dependencies `typescript` and `@types/node`, all at the repository's versions; then
 * `npm ci --offline`.
 */
export async function installOffline(repo: string, project: string, tarball: string): Promise<void> {
  const repoLock = JSON.parse(readFileSync(join(repo, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, LockEntry>;
  };
  const manifest = JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')) as Record<string, unknown>;
  const version = (path: string) => repoLock.packages[path]!.version!;
  const spec = `file:${tarball}`;
  const app = JSON.parse(readFileSync(join(project, 'package.json'), 'utf8')) as Record<string, unknown>;
  app.dependencies = { 'agentry-runtime': spec, zod: `^${version('node_modules/zod')}` };
  app.devDependencies = {
    '@types/node': `^${version('node_modules/@types/node')}`,
    typescript: `~${version('node_modules/typescript')}`,
  };
  writeFileSync(join(project, 'package.json'), `${JSON.stringify(app, null, 2)}\n`);

  const packages: Record<string, LockEntry> = {
    '': {
      name: app.name,
      version: app.version as string,
      license: app.license,
      dependencies: app.dependencies,
      devDependencies: app.devDependencies,
    },
    'node_modules/agentry-runtime': {
      version: manifest.version as string,
      resolved: spec,
      license: manifest.license,
      dependencies: manifest.dependencies,
      peerDependencies: manifest.peerDependencies,
      peerDependenciesMeta: manifest.peerDependenciesMeta,
      bin: manifest.bin,
      engines: manifest.engines,
    },
  };
  const devTools = ['node_modules/typescript', 'node_modules/@types/node', 'node_modules/undici-types'];
  for (const [path, entry] of Object.entries(repoLock.packages)) {
    if (!path.startsWith('node_modules/') || entry.link) continue;
    const needed = !entry.dev || devTools.includes(path);
    if (!needed) continue;
    packages[path] = { ...entry, resolved: entry.resolved ?? tarballUrl(path, entry.version!) };
    if (devTools.includes(path)) packages[path]!.dev = true;
  }
  writeFileSync(
    join(project, 'package-lock.json'),
    `${JSON.stringify({ name: app.name, version: app.version, lockfileVersion: 3, requires: true, packages }, null, 2)}\n`,
  );
  await sh('npm', ['ci', '--offline', '--ignore-scripts', '--no-audit', '--no-fund'], { cwd: project });
  const binary = 'node_modules/better-sqlite3/build/Release/better_sqlite3.node';
  mkdirSync(dirname(join(project, binary)), { recursive: true });
  copyFileSync(join(repo, binary), join(project, binary));
}
