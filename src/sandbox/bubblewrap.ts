/**
 * @module sandbox/bubblewrap
 * The default {@link Sandbox}: bubblewrap, entered as an unprivileged uid, with prlimit on every process. This file
 * only finds the programs and the host's root layout, spawns the argv `bubblewrap-argv.ts` builds, and ends the run:
 * the whole process group is killed (SIGKILL to `-pid`) on timeout or abort, and because the sandbox has its own pid
 * namespace, killing bwrap's init also kills every process inside, including daemonised ones. stdout and stderr are
 * kept up to a cap and then read and dropped, so a chatty command never blocks on a full pipe.
 *
 * Each run's whole memory is bounded by a memory cgroup of its own where the host allows one (`memory-cgroup.ts`),
 * its tmpfs by their size, and its workspace by a disk quota watched with `du` during the run (`workspace-usage.ts`),
 * as is the sum over every workspace of the run's account (`accountWorkspaceBytes`).
 *
 * CPU time is measured for the whole sandbox, detached processes included: by the run's cgroup where there is one
 * (`cpuacct.usage`, v2 `cpu.stat`). Without one, by sampling the process tree under bwrap's init in /proc: each
 * process's own time plus what it reaped (`cutime`, `cstime`), the init's included, which has reaped every orphan,
 * detached ones among them. The tree is sampled every quarter second (for a run that is killed), and once more when
 * the command has ended but before the sandbox may end: the command's shell reports what it waited for on fd 3 and
 * then waits for the host's answer there, so the last sample sees every process that ran, and the ones still running
 * (killed with the pid namespace a moment later). What that misses: a process whose parent set SIGCHLD to SIG_IGN
 * (reaped by nobody, its time reaches no parent) after the last quarter-second sample (SECURITY.md, "Resource
 * bounds").
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { constants, readFileSync } from 'node:fs';
import { access, chown, lstat, mkdtemp, readlink, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import type { Duplex } from 'node:stream';
import { AgentryError } from '../errors.js';
import { bubblewrapArgv, commandArgv, DEFAULT_ETC, sandboxEnv, type RootEntry } from './bubblewrap-argv.js';
import { findMemoryCgroups, type MemoryCgroups, type RunCgroup } from './memory-cgroup.js';
import { workspaceUsage, type WorkspaceUsage } from './workspace-usage.js';
import {
  DEFAULT_SANDBOX_LIMITS,
  type Sandbox,
  type SandboxCommand,
  type SandboxLimits,
  type SandboxProbe,
  type SandboxProcess,
  type SandboxSpawnCommand,
  type SandboxResult,
  type SandboxRunOptions,
} from './sandbox.js';

/** The uid and gid commands run as when the runtime is root (`nobody`/`nogroup` on Debian). */
export const SANDBOX_UID = 65534;
export const SANDBOX_GID = 65534;

/** Options of {@link bubblewrapSandbox}. */
export interface BubblewrapSandboxOptions {
  /**
   * The uid/gid commands run as when the runtime runs as root. Workspaces must be owned by it.
   * @default 65534
   */
  uid?: number;
  /** @default 65534 */
  gid?: number;
  /** Paths of the programs; by default found on `PATH`, then in /usr/bin, /usr/sbin, /bin, /sbin. */
  bwrapPath?: string;
  setprivPath?: string;
  prlimitPath?: string;
  /**
   * Host directories bound read-only at the same path. prlimit must be under one of them.
   * @default ['/usr']
   * @example ['/usr', '/opt/toolchains']
   */
  readOnly?: string[];
  /** Paths under /etc bound read-only when present. @default DEFAULT_ETC */
  etc?: string[];
  /** Limits of commands that set none (each field separately). @default DEFAULT_SANDBOX_LIMITS */
  limits?: Partial<SandboxLimits>;
  /**
   * Whether each run gets a memory cgroup bounding it to `limits.memoryBytes` (when the host allows one: see
   * `memory-cgroup.ts`). `require` refuses to run without one (the probe says why).
   * @default 'auto'
   */
  memoryCgroup?: 'auto' | 'require' | 'off';
  /**
   * Disk all workspaces of one account may use together (bytes, as `du` counts them), for runs that name their
   * account (`SandboxRunOptions.account`). Checked like `workspaceBytes`: before a run (the workspaces of the account
   * this sandbox has run in are measured) and every half second during it; past it the run is killed with
   * `quotaExceeded`. Workspaces of the account not touched since the process started are not counted until a run
   * touches them.
   * @default DEFAULT_ACCOUNT_WORKSPACE_BYTES (2 GiB)
   */
  accountWorkspaceBytes?: number;
}

/** Disk all workspaces of one account may hold together, by default: two full workspaces. */
export const DEFAULT_ACCOUNT_WORKSPACE_BYTES = 2 * 1024 ** 3;

/** How often the workspace quota is checked during a run. */
const QUOTA_CHECK_MS = 500;
/** How often a run without a cgroup has its process tree's CPU time sampled. */
const CPU_SAMPLE_MS = 250;
/** Clock ticks per second of /proc's times (USER_HZ: 100 on every Linux architecture agentry runs on). */
const USER_HZ = 100;

const ROOT_ENTRIES = ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32'];
const FALLBACK_DIRS = ['/usr/bin', '/usr/sbin', '/bin', '/sbin'];

async function findProgram(name: string, explicit: string | undefined): Promise<string | undefined> {
  const candidates = explicit
    ? [explicit]
    : [...(process.env.PATH ?? '').split(delimiter).filter((d) => d.startsWith('/')), ...FALLBACK_DIRS].map((d) =>
        join(d, name),
      );
  for (const path of candidates) {
    try {
      await access(path, constants.X_OK);
      return path;
    } catch {
      // next
    }
  }
  return undefined;
}

/** /bin, /lib, … as the host has them: symlinks into /usr are recreated, real directories are bound. */
async function detectRootEntries(): Promise<RootEntry[]> {
  const entries: RootEntry[] = [];
  for (const path of ROOT_ENTRIES) {
    try {
      const stat = await lstat(path);
      if (stat.isSymbolicLink()) entries.push({ path, symlinkTo: await readlink(path) });
      else if (stat.isDirectory()) entries.push({ path, bind: true });
    } catch {
      // absent on this host
    }
  }
  return entries;
}

/** Direct children of a process (bwrap's init in the sandbox), from /proc. */
function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').split(' ').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/**
 * CPU time of the processes under `roots` and of everything they reaped, in ms: utime + stime + cutime + cstime of
 * each (fields 14-17 of /proc/<pid>/stat). A dead child's time is in its reaper's cutime, and live ones are counted
 * on their own, so nothing is counted twice. Undefined when no process could be read.
 */
function treeCpuMs(roots: number[]): number | undefined {
  let ticks = 0;
  let read = false;
  const queue = [...roots];
  for (let seen = 0; queue.length > 0 && seen < 100_000; seen++) {
    const pid = queue.pop()!;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      continue;
    }
    // The command name (field 2) may hold spaces and parentheses: the fields after it start after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const times = [fields[11], fields[12], fields[13], fields[14]].map(Number);
    if (times.every(Number.isFinite)) {
      ticks += times.reduce((a, b) => a + b, 0);
      read = true;
    }
    queue.push(...childrenOf(pid));
  }
  return read ? Math.round((ticks * 1000) / USER_HZ) : undefined;
}

function largestCpu(a: number | undefined, b: number | undefined): { cpuMs?: number } {
  if (a === undefined && b === undefined) return {};
  return { cpuMs: Math.max(a ?? 0, b ?? 0) };
}

function isRoot(): boolean {
  return typeof process.getuid === 'function' && process.getuid() === 0;
}

type Ended = Awaited<SandboxProcess['exited']>;

interface Host {
  bwrap: string;
  setpriv: string;
  prlimit: string;
  du: string;
  rootEntries: RootEntry[];
  /** The memory cgroups of runs, or why there are none. */
  cgroups: MemoryCgroups | string;
}

/** What a run is started with besides its command. */
interface LaunchExtras {
  cgroup?: RunCgroup;
  /** Bytes for the command's stdin (then closed). */
  input?: string | Uint8Array;
  /** The workspace's usage at the start: the run may not take it past max(quota, this). */
  usageAtStart?: WorkspaceUsage;
  /** The run's account and what its other workspaces held at the start (the account's disk bound). */
  account?: { name: string; others: number; atStart: number };
}

/**
 * The default sandbox. `probe()` runs once; `run()` refuses (AgentryError `not_configured`) when the probe failed.
 *
 * @example
 * const sandbox = bubblewrapSandbox();
 * const r = await sandbox.run({ shell: 'python3 -c "print(2)"', workspace, timeoutMs: 10_000, maxOutputBytes: 65536 });
 */
export function bubblewrapSandbox(options: BubblewrapSandboxOptions = {}): Sandbox {
  const uid = options.uid ?? SANDBOX_UID;
  const gid = options.gid ?? SANDBOX_GID;
  const readOnly = options.readOnly ?? ['/usr'];
  const etc = options.etc ?? DEFAULT_ETC;
  const baseLimits: SandboxLimits = { ...DEFAULT_SANDBOX_LIMITS, ...options.limits };
  const memoryCgroup = options.memoryCgroup ?? 'auto';
  const accountBytes = options.accountWorkspaceBytes ?? DEFAULT_ACCOUNT_WORKSPACE_BYTES;
  positiveLimit('accountWorkspaceBytes', accountBytes);
  /** Per account: each workspace it ran in, with the bytes last measured there. */
  const accountDisk = new Map<string, Map<string, number>>();
  let host: Promise<Host | string> | undefined;
  let probed: Promise<SandboxProbe> | undefined;

  /** The programs and the root layout, or why they are unusable. */
  function findHost(): Promise<Host | string> {
    host ??= (async () => {
      if (process.platform !== 'linux') return `bubblewrap needs Linux, this is ${process.platform}`;
      const [bwrap, setpriv, prlimit, du] = await Promise.all([
        findProgram('bwrap', options.bwrapPath),
        findProgram('setpriv', options.setprivPath),
        findProgram('prlimit', options.prlimitPath),
        findProgram('du', undefined),
      ]);
      const missing = [
        !bwrap && 'bwrap (install the bubblewrap package)',
        !setpriv && isRoot() && 'setpriv (util-linux)',
        !prlimit && 'prlimit (util-linux)',
        !du && 'du (coreutils)',
      ].filter(Boolean);
      if (missing.length > 0) return `the sandbox needs ${missing.join(', ')}`;
      if (!readOnly.some((dir) => prlimit!.startsWith(`${dir.replace(/\/$/, '')}/`))) {
        return `prlimit (${prlimit}) must be under a read-only directory of the sandbox (${readOnly.join(', ')})`;
      }
      const cgroups = memoryCgroup === 'off' ? 'memory cgroups are off (memoryCgroup: off)' : await findMemoryCgroups();
      if (memoryCgroup === 'require' && typeof cgroups === 'string') {
        return `a memory cgroup is required (memoryCgroup: require) but ${cgroups}`;
      }
      return {
        bwrap: bwrap!,
        setpriv: setpriv ?? 'setpriv',
        prlimit: prlimit!,
        du: du!,
        rootEntries: await detectRootEntries(),
        cgroups,
      };
    })();
    return host;
  }

  /**
   * Starts the command in a new sandbox and ends it on timeout or abort. `exited` resolves when bwrap has exited and
   * its streams are closed; the caller reads stdout and stderr (and writes stdin when it is a pipe).
   */
  function launch(
    h: Host,
    command: SandboxSpawnCommand | SandboxCommand,
    stdin: 'ignore' | 'pipe',
    signal: AbortSignal | undefined,
    extras: LaunchExtras,
  ): { child: ChildProcess; kill: () => void; exited: Promise<Ended> } {
    const limits: SandboxLimits = { ...baseLimits, ...command.limits };
    let argv: string[];
    try {
      argv = bubblewrapArgv({
        ...(extras.cgroup ? { cgroupProcs: extras.cgroup.procsFiles } : {}),
        bwrap: h.bwrap,
        setpriv: h.setpriv,
        prlimit: h.prlimit,
        dropTo: isRoot() ? { uid, gid } : null,
        readOnly,
        rootEntries: h.rootEntries,
        etc,
        hostname: 'sandbox',
        workspace: command.workspace,
        ...(command.workspaceReadOnly ? { workspaceReadOnly: true } : {}),
        cwd: command.cwd ?? '.',
        ...(command.mounts ? { mounts: command.mounts } : {}),
        env: sandboxEnv(command.env),
        limits,
        command: ['/bin/sh', '-c', CPU_REPORTER, 'sh', ...commandArgv(command)],
      });
    } catch (error) {
      void extras.cgroup?.finish();
      throw error;
    }
    const started = performance.now();
    const child = spawn(argv[0]!, argv.slice(1), {
      detached: true,
      stdio: [stdin, 'pipe', 'pipe', 'pipe'],
      env: {},
    });
    if (extras.input !== undefined) {
      // A command that exits without reading all of it closes the pipe: that is its business, not an error here.
      child.stdin!.on('error', () => undefined);
      child.stdin!.end(extras.input);
    }
    let timedOut = false;
    let quotaExceeded = false;
    let killed = false;
    let ended = false;
    let fallback: NodeJS.Timeout | undefined;
    const killGroup = () => {
      if (ended || child.pid === undefined) return;
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    };
    // SIGKILL to bwrap's init inside the sandbox first: the kernel then kills every process of the pid namespace,
    // and bwrap, which waits for it, exits and is reaped here. Killing bwrap first would leave its init to the
    // host's pid 1 to reap (a zombie for a while). The whole group is killed as well a moment later, or at once
    // when the init cannot be found.
    const killSandbox = () => {
      if (ended || killed || child.pid === undefined) return;
      killed = true;
      const inits = childrenOf(child.pid);
      for (const pid of inits) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      if (inits.length === 0) killGroup();
      else fallback = setTimeout(killGroup, 500);
    };
    const onAbort = () => killSandbox();
    const timer = setTimeout(() => {
      timedOut = true;
      killSandbox();
    }, command.timeoutMs);
    // The disk quota: a run may not take the workspace past the quota, or past what it held at the start when that
    // was more already (so that a command can still delete files in a workspace over its quota).
    let quotaTimer: NodeJS.Timeout | undefined;
    const allowed = {
      bytes: Math.max(limits.workspaceBytes, extras.usageAtStart?.bytes ?? 0),
      files: Math.max(limits.workspaceFiles, extras.usageAtStart?.files ?? 0),
    };
    const account = extras.account;
    const accountAllowed = account ? Math.max(accountBytes, account.atStart) : Infinity;
    const checkQuota = async () => {
      const usage = await workspaceUsage(h.du, command.workspace);
      if (ended || killed) return;
      if (usage && account) accountDisk.get(account.name)?.set(command.workspace, usage.bytes);
      const others = account ? otherWorkspaces(account.name, command.workspace) : 0;
      if (
        usage &&
        (usage.bytes > allowed.bytes || usage.files > allowed.files || usage.bytes + others > accountAllowed)
      ) {
        quotaExceeded = true;
        killSandbox();
        return;
      }
      quotaTimer = setTimeout(() => void checkQuota(), QUOTA_CHECK_MS);
    };
    if (!command.workspaceReadOnly) quotaTimer = setTimeout(() => void checkQuota(), QUOTA_CHECK_MS);
    signal?.addEventListener('abort', onAbort, { once: true });
    if (signal?.aborted) killSandbox();

    // Without a cgroup, the whole tree's CPU is sampled (see the module's comment).
    let sampledCpuMs: number | undefined;
    let cpuTimer: NodeJS.Timeout | undefined;
    const sampleTree = () => {
      if (ended || child.pid === undefined) return;
      const ms = treeCpuMs(childrenOf(child.pid));
      if (ms !== undefined) sampledCpuMs = Math.max(sampledCpuMs ?? 0, ms);
    };
    const sampleEvery = () => {
      sampleTree();
      if (!ended) cpuTimer = setTimeout(sampleEvery, CPU_SAMPLE_MS);
    };
    if (!extras.cgroup) cpuTimer = setTimeout(sampleEvery, CPU_SAMPLE_MS / 2);
    // The command's shell writes its `times` (two lines) on fd 3 and waits for a line back: the last sample is taken
    // in between, while the sandbox and every process in it still exist. Without it a run that ends between two
    // samples would go unbilled for its last quarter second, or entirely when it is shorter than that.
    let cpuReport = '';
    let answered = false;
    const reporter = child.stdio[3] as Duplex;
    reporter.on('error', () => undefined);
    reporter.on('data', (chunk: Buffer) => {
      if (cpuReport.length < 256) cpuReport += chunk.toString('utf8');
      if (answered || cpuReport.split('\n').length < 3) return;
      answered = true;
      if (!extras.cgroup) {
        clearTimeout(cpuTimer);
        sampleTree();
      }
      reporter.write('\n');
    });
    child.on('exit', () => {
      // The command is done, or bwrap was killed: either way the pid namespace is gone with bwrap's init.
      ended = true;
    });
    const exited = new Promise<Ended>((resolve, reject) => {
      child.on('error', (error) => {
        clearTimeout(timer);
        clearTimeout(cpuTimer);
        clearTimeout(quotaTimer);
        void extras.cgroup?.finish();
        signal?.removeEventListener('abort', onAbort);
        reject(new AgentryError('not_configured', `the sandbox could not start: ${error.message}`, { cause: error }));
      });
      child.on('close', (code, sig) => {
        ended = true;
        clearTimeout(cpuTimer);
        clearTimeout(timer);
        clearTimeout(fallback);
        clearTimeout(quotaTimer);
        signal?.removeEventListener('abort', onAbort);
        const durationMs = Math.round((performance.now() - started) * 10) / 10;
        const memory = extras.cgroup?.finish() ?? Promise.resolve({});
        void memory.then((m) =>
          resolve({
            // Killed on timeout or abort: reported as SIGKILL, whether bwrap died of it or exited after its init did.
            exitCode: killed ? null : code,
            signal: killed ? 'SIGKILL' : sig,
            timedOut,
            durationMs,
            // The cgroup's figure (`m`) when there is one: it sees every process. Else the larger of the command's
            // report and the sampled tree.
            ...largestCpu(cpuTimeOf(killed ? '' : cpuReport).cpuMs, sampledCpuMs),
            ...m,
            ...(quotaExceeded ? { quotaExceeded } : {}),
          }),
        );
      });
    });
    return { child, kill: killSandbox, exited };
  }

  /** Bytes last measured in the account's workspaces other than `workspace`. */
  function otherWorkspaces(account: string, workspace: string): number {
    let sum = 0;
    for (const [path, bytes] of accountDisk.get(account) ?? []) if (path !== workspace) sum += bytes;
    return sum;
  }

  async function runSandboxed(
    h: Host,
    command: SandboxCommand,
    signal?: AbortSignal,
    account?: string,
  ): Promise<SandboxResult> {
    if (signal?.aborted) {
      return {
        exitCode: null,
        signal: 'SIGKILL',
        stdout: '',
        stderr: '',
        stdoutTruncated: false,
        stderrTruncated: false,
        timedOut: false,
        durationMs: 0,
      };
    }
    const { child, exited } = launch(
      h,
      command,
      command.stdin !== undefined ? 'pipe' : 'ignore',
      signal,
      await prepare(h, command, command.stdin, account),
    );
    const capture = (stream: NodeJS.ReadableStream) => {
      const chunks: Buffer[] = [];
      const state = { kept: 0, truncated: false, chunks };
      stream.on('data', (chunk: Buffer) => {
        const room = command.maxOutputBytes - state.kept;
        if (chunk.length <= room) {
          chunks.push(chunk);
          state.kept += chunk.length;
        } else {
          if (room > 0) chunks.push(chunk.subarray(0, room));
          state.kept += Math.max(room, 0);
          state.truncated = true; // past the cap the bytes are read and dropped
        }
      });
      return state;
    };
    const out = capture(child.stdout!);
    const err = capture(child.stderr!);
    const ended = await exited;
    return {
      ...ended,
      stdout: Buffer.concat(out.chunks).toString('utf8'),
      stderr: Buffer.concat(err.chunks).toString('utf8'),
      stdoutTruncated: out.truncated,
      stderrTruncated: err.truncated,
    };
  }

  async function probeOnce(): Promise<SandboxProbe> {
    const h = await findHost();
    if (typeof h === 'string') return { ok: false, reason: h };
    const workspace = await mkdtemp(join(tmpdir(), 'agentry-sandbox-probe-'));
    try {
      if (isRoot()) await chown(workspace, uid, gid);
      const r = await runSandboxed(h, {
        argv: ['/bin/cat', '/proc/net/dev'],
        workspace,
        timeoutMs: 10_000,
        maxOutputBytes: 64 * 1024,
      });
      if (r.exitCode !== 0) {
        return {
          ok: false,
          reason: `bubblewrap could not run a command (exit ${r.exitCode ?? r.signal}): ${r.stderr.trim()}`,
        };
      }
      // Lines 3.. of /proc/net/dev are interfaces; in a fresh network namespace only the loopback exists.
      const interfaces = r.stdout
        .split('\n')
        .slice(2)
        .map((l) => l.split(':')[0]!.trim())
        .filter(Boolean);
      if (interfaces.some((name) => name !== 'lo')) {
        return { ok: false, reason: `the sandbox can see network interfaces (${interfaces.join(', ')})` };
      }
      return { ok: true };
    } catch (error) {
      return { ok: false, reason: `bubblewrap could not run a command: ${(error as Error).message}` };
    } finally {
      await rm(workspace, { recursive: true, force: true });
    }
  }

  const probe = (): Promise<SandboxProbe> => (probed ??= probeOnce());

  /** The run's memory cgroup (when the host allows one) and the workspace's usage at the start. */
  async function prepare(
    h: Host,
    command: SandboxSpawnCommand | SandboxCommand,
    input?: string | Uint8Array,
    accountName?: string,
  ): Promise<LaunchExtras> {
    const limits: SandboxLimits = { ...baseLimits, ...command.limits };
    positiveLimit('memoryBytes', limits.memoryBytes);
    positiveLimit('workspaceBytes', limits.workspaceBytes);
    positiveLimit('workspaceFiles', limits.workspaceFiles);
    // A read-only workspace cannot grow: no quota to watch.
    const usageAtStart = command.workspaceReadOnly ? undefined : await workspaceUsage(h.du, command.workspace);
    if (
      command.refuseOverQuota &&
      usageAtStart &&
      (usageAtStart.bytes > limits.workspaceBytes || usageAtStart.files > limits.workspaceFiles)
    ) {
      throw new AgentryError(
        'invalid_request',
        `The workspace is over its disk quota (${usageAtStart.bytes} bytes in ${usageAtStart.files} files; the ` +
          `limits are ${limits.workspaceBytes} bytes and ${limits.workspaceFiles} files): delete files first`,
      );
    }
    const account =
      accountName !== undefined && usageAtStart
        ? await measureAccount(h, accountName, command.workspace, usageAtStart.bytes)
        : undefined;
    if (command.refuseOverQuota && account && account.others + usageAtStart!.bytes > accountBytes) {
      throw new AgentryError(
        'invalid_request',
        `The account's workspaces are over their disk quota (${account.others + usageAtStart!.bytes} bytes; the ` +
          `limit is ${accountBytes} bytes across workspaces): delete files first`,
      );
    }
    const cgroup = typeof h.cgroups === 'string' ? undefined : await h.cgroups.create(limits.memoryBytes);
    return {
      ...(cgroup ? { cgroup } : {}),
      ...(account ? { account } : {}),
      ...(input !== undefined ? { input } : {}),
      ...(usageAtStart ? { usageAtStart } : {}),
    };
  }

  /**
   * Re-measures the account's other workspaces (dropping those that are gone) and records this one: what the
   * account's disk bound is checked against during the run.
   */
  async function measureAccount(
    h: Host,
    name: string,
    workspace: string,
    bytes: number,
  ): Promise<NonNullable<LaunchExtras['account']>> {
    let known = accountDisk.get(name);
    if (!known) accountDisk.set(name, (known = new Map()));
    known.set(workspace, bytes);
    for (const path of [...known.keys()]) {
      if (path === workspace) continue;
      const usage = await workspaceUsage(h.du, path);
      if (usage) known.set(path, usage.bytes);
      else known.delete(path);
    }
    const others = otherWorkspaces(name, workspace);
    return { name, others, atStart: others + bytes };
  }

  /** The host, once the probe passed, and the checks every command must pass. */
  async function ready(command: SandboxSpawnCommand | SandboxCommand): Promise<Host> {
    const probed = await probe();
    if (!probed.ok) throw new AgentryError('not_configured', `No sandbox available: ${probed.reason}`);
    const h = await findHost();
    if (typeof h === 'string') throw new AgentryError('not_configured', `No sandbox available: ${h}`);
    if (!Number.isFinite(command.timeoutMs) || command.timeoutMs <= 0) {
      throw new AgentryError(
        'invalid_request',
        `Expected \`timeoutMs\` to be a positive number, got ${command.timeoutMs}`,
      );
    }
    const workspace = await stat(command.workspace).catch(() => undefined);
    if (!workspace?.isDirectory()) {
      throw new AgentryError('invalid_request', `Expected \`workspace\` to be a directory, got ${command.workspace}`);
    }
    return h;
  }

  return {
    name: 'bubblewrap',
    probe,
    async run(command, runOptions: SandboxRunOptions = {}) {
      if (!Number.isSafeInteger(command.maxOutputBytes) || command.maxOutputBytes < 0) {
        throw new AgentryError(
          'invalid_request',
          `Expected \`maxOutputBytes\` to be a non-negative integer, got ${command.maxOutputBytes}`,
        );
      }
      const h = await ready(command);
      return runSandboxed(h, command, runOptions.signal, runOptions.account);
    },
    async spawn(command, runOptions: SandboxRunOptions = {}): Promise<SandboxProcess> {
      const h = await ready(command);
      const { child, kill, exited } = launch(
        h,
        command,
        'pipe',
        runOptions.signal,
        await prepare(h, command, undefined, runOptions.account),
      );
      // A start that fails rejects `exited`; the caller sees it there, not as an unhandled rejection here.
      exited.catch(() => undefined);
      return { stdin: child.stdin!, stdout: child.stdout!, stderr: child.stderr!, kill, exited };
    },
  };
}

function positiveLimit(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value <= 0) {
    throw new AgentryError('invalid_request', `Expected \`limits.${name}\` to be a positive integer, got ${value}`);
  }
}

/**
 * The command runs as the child of a shell that, when it has ended, writes the CPU time of the command and every
 * process it waited for (`times`) to fd 3, then waits for a line back on it (the host's last sample of the tree is
 * taken in between). The command does not inherit fd 3 (`3>&-`), so it can neither forge the figure nor answer; the
 * shell exits with the command's status (128 + signal when a signal killed it). What the command did not wait for is
 * in the cgroup's figure, or the sampled tree's.
 */
const CPU_REPORTER = '"$@" 3>&-; status=$?; times >&3; read -r _ <&3; exit $status';

/** `times` prints the shell's own user and system time, then its children's: `0m0.430000s 0m0.010000s`. */
function cpuTimeOf(report: string): { cpuMs?: number } {
  const children = report.trim().split('\n')[1];
  const times = children?.match(/^(\d+)m([\d.]+)s (\d+)m([\d.]+)s$/);
  if (!times) return {};
  const [, um, us, sm, ss] = times;
  const ms = (Number(um) * 60 + Number(us) + Number(sm) * 60 + Number(ss)) * 1000;
  return Number.isFinite(ms) ? { cpuMs: Math.round(ms) } : {};
}
