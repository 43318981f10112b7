/**
 * @module sandbox/bubblewrap-argv
 * The bubblewrap sandbox as data: a config in, the argv to spawn out. Pure (no file system, no environment), so every
 * flag is unit-tested without running anything; `bubblewrap.ts` only detects the host layout, spawns and kills.
 *
 * The argv, outside in:
 * 0. With a memory cgroup (`memory-cgroup.ts`): `/bin/sh -c 'echo $$ > "$1" ... exec "$@"'`, as root, so that bwrap
 *    and everything under it start inside the run's cgroups (the memory one, and on v1 the `cpuacct` one). The line
 *    is fixed; the cgroup files are the runtime's own paths, passed as arguments up to a `--`.
 * 1. `setpriv --reuid --regid --clear-groups --inh-caps=-all` when the runtime runs as root: bubblewrap and
 *    everything under it run as an unprivileged uid (65534), so no root capability exists even before bwrap drops
 *    its own, and RLIMIT_NPROC is enforced (the kernel does not enforce it for root).
 * 2. `bwrap --unshare-all` (user, pid, net, ipc, uts, cgroup: no network at all, not even the host's loopback),
 *    `--unshare-user --disable-userns` (a user namespace is required, see 3., and none can be nested inside it, which
 *    keeps the kernel's namespace code out of reach), `--die-with-parent --new-session` (no TIOCSTI into a terminal)
 *    `--cap-drop ALL`, the system directories read-only, a private `/proc`, `/dev`,
 *    the workspace read-write at `/workspace`, a cleared environment. The only other writable places are `/tmp` and
 *    `/dev/shm`, two tmpfs of `tmpBytes` each (`--size`); the root and `/dev` (tmpfs bwrap makes) are remounted
 *    read-only once everything is bound, so no unsized tmpfs is left to fill.
 * 3. `prlimit --cpu --as --nproc --fsize --nofile --` INSIDE the sandbox, as the first process bwrap starts, then the
 *    command. Inside, not outside, because of RLIMIT_NPROC: since Linux 5.14 it is counted per (user namespace, uid).
 *    Set outside, the limit would be checked against every process of uid 65534 on the host, other sandboxes included
 *    (bwrap fails with "Creating new namespace failed" as soon as the host has that many); set inside, it counts only
 *    the processes of this sandbox's own user namespace, so each run has its own budget and a fork bomb stops there.
 *    The limits are set hard as well as soft, and no process inside holds CAP_SYS_RESOURCE, so none can raise them.
 *    prlimit must therefore be visible inside (it is under /usr).
 */
import { posix } from 'node:path';
import { AgentryError } from '../errors.js';
import type { SandboxLimits, SandboxMount } from './sandbox.js';

/** One top-level path of the sandbox's root besides /usr: a symlink (merged-/usr hosts) or a read-only bind. */
export type RootEntry = { path: string; symlinkTo: string } | { path: string; bind: true };

/** Everything the argv depends on. `bubblewrap.ts` fills it from the host and the command. */
export interface BubblewrapConfig {
  /** Absolute paths of the three programs. `prlimit` must be visible inside the sandbox. */
  bwrap: string;
  setpriv: string;
  prlimit: string;
  /** The uid/gid to drop to with setpriv; null when the runtime is not root (bwrap then runs as the runtime's uid). */
  dropTo: { uid: number; gid: number } | null;
  /** Directories bound read-only at the same path (e.g. `/usr`, `/opt/toolchain`). */
  readOnly: string[];
  /** `/bin`, `/lib`, … as found on the host: symlinks into /usr, or directories to bind read-only. */
  rootEntries: RootEntry[];
  /** Paths under /etc bound read-only when they exist (`--ro-bind-try`). */
  etc: string[];
  hostname: string;
  /** Absolute host directory, bound read-write at /workspace. */
  workspace: string;
  /** Bind the workspace read-only instead (an operation that only reads it). */
  workspaceReadOnly?: boolean;
  /** Working directory relative to the workspace ('' or '.' for the workspace itself). */
  cwd: string;
  /** More host paths bound inside (after the workspace, so none can hide it). */
  mounts?: SandboxMount[];
  /** The complete environment of the command (the sandbox starts from an empty one). */
  env: Record<string, string>;
  limits: SandboxLimits;
  /** The command's argv, e.g. `['/bin/sh', '-c', 'make test']`. */
  command: string[];
  /** The `cgroup.procs` files of the run's cgroups, joined before anything else starts (needs root). */
  cgroupProcs?: string[];
}

/**
 * The launcher that joins the cgroups named up to `--` and then becomes the rest of its argv (fixed: no input is
 * ever part of it).
 */
export const CGROUP_LAUNCHER = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"';

/** Where the workspace appears inside the sandbox. */
export const SANDBOX_WORKSPACE = '/workspace';

/**
 * The /etc entries a toolchain needs and nothing else: the dynamic linker's cache, the `alternatives` symlink farm
 * (Debian's /usr/bin/which, java, … point into it), CA certificates, the time zone, and passwd/group so that
 * `whoami`, `os.userInfo()` or git find the uid (both are world-readable on the host and hold no secrets; the
 * hashes are in /etc/shadow, which is not bound, nor is /root or /home).
 */
export const DEFAULT_ETC = [
  '/etc/ld.so.cache',
  '/etc/ld.so.conf',
  '/etc/ld.so.conf.d',
  '/etc/alternatives',
  '/etc/ssl',
  '/etc/ca-certificates',
  '/etc/localtime',
  '/etc/passwd',
  '/etc/group',
  '/etc/nsswitch.conf',
];

/** The environment every command starts from; `env` of the command adds to or overrides it. */
export function sandboxEnv(extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    HOME: SANDBOX_WORKSPACE,
    LANG: 'C.UTF-8',
    ...extra,
  };
}

/** The command's argv: a shell line runs under `/bin/sh -c`; an argv runs as given. */
export function commandArgv(command: { argv?: string[] | undefined; shell?: string | undefined }): string[] {
  if (command.shell !== undefined && command.argv !== undefined) {
    throw new AgentryError('invalid_request', 'Expected a sandbox command with `argv` or `shell`, got both');
  }
  if (command.shell !== undefined) return ['/bin/sh', '-c', command.shell];
  if (!command.argv || command.argv.length === 0) {
    throw new AgentryError('invalid_request', 'Expected a sandbox command with a non-empty `argv` or a `shell`');
  }
  return command.argv;
}

/** The working directory inside the sandbox, refusing anything that leaves the workspace. */
export function sandboxCwd(cwd: string): string {
  if (posix.isAbsolute(cwd) || cwd.includes('\0')) {
    throw new AgentryError(
      'invalid_request',
      `Expected \`cwd\` to be relative to the workspace, got ${JSON.stringify(cwd)}`,
    );
  }
  const joined = posix.normalize(posix.join(SANDBOX_WORKSPACE, cwd)).replace(/(.)\/+$/, '$1');
  if (joined !== SANDBOX_WORKSPACE && !joined.startsWith(`${SANDBOX_WORKSPACE}/`)) {
    throw new AgentryError('invalid_request', `Expected \`cwd\` inside the workspace, got ${JSON.stringify(cwd)}`);
  }
  return joined;
}

/** Paths the sandbox itself provides; a mount there would replace or hide them. */
const RESERVED = [SANDBOX_WORKSPACE, '/proc', '/dev', '/tmp', '/usr', '/etc', '/bin', '/sbin', '/lib', '/lib64'];

function checkMount(mount: SandboxMount): void {
  for (const [field, path] of [
    ['host', mount.host],
    ['at', mount.at],
  ] as const) {
    if (!posix.isAbsolute(path) || path.includes('\0') || posix.normalize(path) !== path || path === '/') {
      throw new AgentryError(
        'invalid_request',
        `Expected \`mounts[].${field}\` to be a normalised absolute path other than /, got ${JSON.stringify(path)}`,
      );
    }
  }
  const clash = RESERVED.find((r) => mount.at === r || mount.at.startsWith(`${r}/`) || r.startsWith(`${mount.at}/`));
  if (clash) {
    throw new AgentryError(
      'invalid_request',
      `Expected \`mounts[].at\` outside ${clash} (the sandbox provides it), got ${JSON.stringify(mount.at)}`,
    );
  }
}

function positiveInteger(name: string, value: number): string {
  if (!Number.isSafeInteger(value) || value <= 0) {
    throw new AgentryError('invalid_request', `Expected \`limits.${name}\` to be a positive integer, got ${value}`);
  }
  return String(value);
}

/** The argv that runs `config.command` in the sandbox. */
export function bubblewrapArgv(config: BubblewrapConfig): string[] {
  if (!posix.isAbsolute(config.workspace)) {
    throw new AgentryError('invalid_request', `Expected \`workspace\` to be an absolute path, got ${config.workspace}`);
  }
  const argv: string[] = [];
  if (config.cgroupProcs !== undefined && config.cgroupProcs.length > 0) {
    for (const file of config.cgroupProcs) {
      if (!posix.isAbsolute(file) || file === '--') {
        throw new AgentryError('invalid_request', `Expected an absolute cgroup.procs path, got ${file}`);
      }
    }
    argv.push('/bin/sh', '-c', CGROUP_LAUNCHER, 'sh', ...config.cgroupProcs, '--');
  }
  if (config.dropTo) {
    argv.push(
      config.setpriv,
      `--reuid=${config.dropTo.uid}`,
      `--regid=${config.dropTo.gid}`,
      '--clear-groups',
      '--inh-caps=-all',
    );
  }
  argv.push(
    config.bwrap,
    '--unshare-all',
    '--unshare-user',
    '--disable-userns',
    '--die-with-parent',
    '--new-session',
    '--cap-drop',
    'ALL',
  );
  argv.push('--hostname', config.hostname);
  for (const dir of config.readOnly) argv.push('--ro-bind', dir, dir);
  for (const entry of config.rootEntries) {
    if ('symlinkTo' in entry) argv.push('--symlink', entry.symlinkTo, entry.path);
    else argv.push('--ro-bind', entry.path, entry.path);
  }
  for (const path of config.etc) argv.push('--ro-bind-try', path, path);
  const tmpSize = positiveInteger('tmpBytes', config.limits.tmpBytes);
  argv.push('--proc', '/proc', '--dev', '/dev', '--size', tmpSize, '--tmpfs', '/dev/shm');
  argv.push('--size', tmpSize, '--tmpfs', '/tmp');
  argv.push(config.workspaceReadOnly ? '--ro-bind' : '--bind', config.workspace, SANDBOX_WORKSPACE);
  argv.push('--chdir', sandboxCwd(config.cwd));
  for (const mount of config.mounts ?? []) {
    checkMount(mount);
    argv.push(mount.writable ? '--bind' : '--ro-bind', mount.host, mount.at);
  }
  // Last of the mounts: the root and /dev are tmpfs of bwrap's own, unsized; nothing may write there.
  argv.push('--remount-ro', '/dev', '--remount-ro', '/');
  argv.push('--clearenv');
  for (const [name, value] of Object.entries(config.env)) {
    if (name === '' || name.includes('=') || name.includes('\0') || value.includes('\0')) {
      throw new AgentryError(
        'invalid_request',
        `Expected an environment variable name and value, got ${JSON.stringify(name)}`,
      );
    }
    argv.push('--setenv', name, value);
  }
  const { limits } = config;
  argv.push(
    '--',
    config.prlimit,
    `--cpu=${positiveInteger('cpuSeconds', limits.cpuSeconds)}`,
    `--as=${positiveInteger('addressSpaceBytes', limits.addressSpaceBytes)}`,
    `--nproc=${positiveInteger('processes', limits.processes)}`,
    `--fsize=${positiveInteger('fileSizeBytes', limits.fileSizeBytes)}`,
    `--nofile=${positiveInteger('openFiles', limits.openFiles)}`,
    '--',
    ...config.command,
  );
  return argv;
}
