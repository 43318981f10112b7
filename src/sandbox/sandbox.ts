/**
 * @module sandbox/sandbox
 * The sandbox extension point: run one command, cut off from the network and from the host, in an agent's workspace.
 * The default implementation is bubblewrap ({@link ./bubblewrap.ts}); a host can pass any object of this shape
 * instead (a container runtime, a remote VM). An implementation that cannot isolate says so from `probe()` and
 * refuses `run()`: it never runs a command without its sandbox.
 */

/** Resource limits applied to every process of one run (they are inherited and cannot be raised from inside). */
export interface SandboxLimits {
  /** CPU time, in seconds, of each process (RLIMIT_CPU); past it the process is killed. */
  cpuSeconds: number;
  /** Virtual address space, in bytes, of each process (RLIMIT_AS): a memory hog fails to allocate. */
  addressSpaceBytes: number;
  /**
   * Processes and threads the sandbox's uid may have at once (RLIMIT_NPROC). The kernel counts it per uid on the
   * whole host, so sandboxes sharing a uid share this budget; a fork bomb stops there.
   */
  processes: number;
  /** Largest file a process may write, in bytes (RLIMIT_FSIZE). */
  fileSizeBytes: number;
  /** Open file descriptors per process (RLIMIT_NOFILE). */
  openFiles: number;
  /**
   * Memory of the whole sandbox, in bytes: every process's resident memory plus what its tmpfs (`/tmp`, `/dev/shm`)
   * and SysV shared memory hold, charged to one memory cgroup (v1 or v2) with swap refused. Past it the kernel's OOM
   * killer ends a process of the sandbox, never one of the host. Where no memory cgroup can be made (not root, no
   * writable cgroupfs) it is not enforced; `addressSpaceBytes`, `processes` and `tmpBytes` still bound each part.
   */
  memoryBytes: number;
  /** Size of each of the sandbox's two writable tmpfs, `/tmp` and `/dev/shm` (writes past it fail with ENOSPC). */
  tmpBytes: number;
  /**
   * Disk the workspace may use, in bytes (blocks, as `du` counts them). Checked before each run (a workspace over
   * it refuses to run anything) and every half second during one (the run is killed when it goes over; the result
   * says `quotaExceeded`). A command can overshoot by what it writes in half a second, one file at most
   * `fileSizeBytes` each.
   */
  workspaceBytes: number;
  /** Files and directories the workspace may hold (inodes, as `du --inodes` counts them), checked like the bytes. */
  workspaceFiles: number;
}

/** Limits used when a command gives none. */
export const DEFAULT_SANDBOX_LIMITS: SandboxLimits = {
  cpuSeconds: 60,
  addressSpaceBytes: 4 * 1024 ** 3,
  processes: 256,
  fileSizeBytes: 256 * 1024 ** 2,
  openFiles: 1024,
  // Two sandboxes at these limits take at most ~2 GiB of RAM (tmpfs included) and 2 GiB of disk: a 4 GiB host holds them.
  memoryBytes: 1024 ** 3,
  tmpBytes: 256 * 1024 ** 2,
  workspaceBytes: 1024 ** 3,
  workspaceFiles: 100_000,
};

interface SandboxCommandBase {
  /**
   * Absolute host directory, bound read-write at `/workspace`: the only host path the command can write.
   * The sandbox's uid must be able to write it (see `createWorkspace`).
   */
  workspace: string;
  /**
   * Bind the workspace read-only: for an operation that only reads it (the file tools' Read, Glob, Grep). No disk
   * quota is watched then, as nothing can grow it. @default false
   */
  workspaceReadOnly?: boolean;
  /** Working directory, relative to the workspace. @default '.' */
  cwd?: string;
  /**
   * Extra environment. Nothing of the host's environment passes; the command sees only `PATH`,
   * `HOME=/workspace`, `LANG=C.UTF-8` and these (which may override them).
   */
  env?: Record<string, string>;
  /** Wall-clock limit: past it the whole process group is killed and `timedOut` is true. */
  timeoutMs: number;
  /** @default DEFAULT_SANDBOX_LIMITS */
  limits?: Partial<SandboxLimits>;
  /**
   * Refuse to start (AgentryError `invalid_request`) when the workspace is already over `workspaceBytes` or
   * `workspaceFiles`. Otherwise a run may start over quota (so that it can delete files) and may not grow it further.
   * @default false
   */
  refuseOverQuota?: boolean;
  /** Bytes kept of stdout, and of stderr, each; the rest is read and dropped so the command never blocks. */
  maxOutputBytes: number;
  /**
   * More host paths to show inside, besides the system directories and the workspace: a program the command needs
   * (Claude Code's binary), a unix socket to reach one service of the host by (the model bridge), a directory of the
   * runtime's own. Read-only unless `writable`. They are the host application's choice, never a model's.
   */
  mounts?: SandboxMount[];
}

/** One host path bound into the sandbox. */
export interface SandboxMount {
  /** Absolute host path (a file, a directory or a unix socket). */
  host: string;
  /** Absolute path inside the sandbox, outside `/workspace`, `/proc`, `/dev` and `/tmp`. */
  at: string;
  /** @default false */
  writable?: boolean;
}

/**
 * One command to run: an argv (no shell) or a shell line run by `/bin/sh -c`. `stdin`, when given, is written to the
 * command's standard input, which is then closed (otherwise the command reads an empty input).
 */
export type SandboxCommand =
  | (SandboxCommandBase & { argv: string[]; shell?: undefined; stdin?: string | Uint8Array })
  | (SandboxCommandBase & { shell: string; argv?: undefined; stdin?: string | Uint8Array });

/** How one run ended. */
export interface SandboxResult {
  /**
   * Exit code of the command; one killed by a signal inside reports 128 + the signal's number, as a shell does
   * (137: SIGKILL, e.g. past `cpuSeconds`; 153: SIGXFSZ, past `fileSizeBytes`). Null when the run was killed.
   */
  exitCode: number | null;
  /** `SIGKILL` when the run was killed on timeout or abort, else null. */
  signal: string | null;
  stdout: string;
  stderr: string;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  /** True when the wall-clock timeout killed the run. */
  timedOut: boolean;
  durationMs: number;
  /**
   * CPU time (user + system), in milliseconds, of every process of the sandbox, detached ones included (the run's
   * cgroup, or the process tree that bwrap reaped); what CPU-second billing charges. Absent when the sandbox could not
   * measure it.
   */
  cpuMs?: number;
  /** The most memory the whole sandbox held at once (its memory cgroup's peak); absent without a memory cgroup. */
  memoryPeakBytes?: number;
  /** True when the kernel's OOM killer ended a process of the sandbox at `memoryBytes`. */
  memoryExceeded?: boolean;
  /**
   * True when the run was killed because the workspace went over `workspaceBytes` or `workspaceFiles`, or the
   * account's workspaces together over their bound.
   */
  quotaExceeded?: boolean;
}

/** A command started with {@link Sandbox.spawn}: its limits, but no output cap (the caller reads the streams). */
export type SandboxSpawnCommand = Omit<SandboxCommandBase, 'maxOutputBytes'> & { argv: string[] };

/**
 * A process running in a sandbox, its standard streams open to the caller (Claude Code speaks JSON lines over them).
 * The wall-clock limit and the abort signal still kill it, and everything it started, as in `run()`.
 */
export interface SandboxProcess {
  stdin: NodeJS.WritableStream;
  stdout: NodeJS.ReadableStream;
  stderr: NodeJS.ReadableStream;
  /** Kills every process of the sandbox at once (SIGKILL); `exited` then resolves. */
  kill(): void;
  /** How it ended: `exitCode`, `signal`, `timedOut`, `durationMs` and `cpuMs` as in {@link SandboxResult}. */
  exited: Promise<Omit<SandboxResult, 'stdout' | 'stderr' | 'stdoutTruncated' | 'stderrTruncated'>>;
}

/** Whether a sandbox can run commands here, and if not, why (naming what to install or set). */
export type SandboxProbe = { ok: true } | { ok: false; reason: string };

/** Options of one run. */
export interface SandboxRunOptions {
  /** Aborting kills the whole process group at once; the run then resolves with `signal: 'SIGKILL'`. */
  signal?: AbortSignal;
  /**
   * The account the run is for: sandbox slots are shared fairly between accounts (`sandbox-slots.ts`) and the disk
   * of all of an account's workspaces is bounded together. Absent: the runtime's own work (no account's bound).
   */
  account?: string;
}

/** Runs commands isolated from the network and the host. */
export interface Sandbox {
  /** Short name for logs and `agentry tools`, e.g. `bubblewrap`. */
  readonly name: string;
  /** Checks once (the answer is cached) that a tiny command runs and cannot reach the network. */
  probe(): Promise<SandboxProbe>;
  /**
   * Runs one command. Rejects with an `AgentryError` (`not_configured`) when the probe failed, and
   * (`invalid_request`) when the command is malformed; a command that fails, times out or is aborted resolves.
   */
  run(command: SandboxCommand, options?: SandboxRunOptions): Promise<SandboxResult>;
  /**
   * Starts one long-running process whose standard streams the caller drives (a coding agent of its own, such as
   * Claude Code). Optional: a sandbox without it cannot host the `claude-agent-sdk` backend. Rejects like `run()`.
   */
  spawn?(command: SandboxSpawnCommand, options?: SandboxRunOptions): Promise<SandboxProcess>;
}
