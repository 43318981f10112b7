/**
 * @module sandbox/memory-cgroup
 * One memory cgroup per sandbox run, so that the run's whole memory is bounded: every process's pages, and what its
 * tmpfs and SysV shared memory hold (the kernel charges those pages to the cgroup of the process that wrote them).
 * `RLIMIT_AS` alone is per process (×`processes`), and a tmpfs is nobody's process: only a cgroup sees the sum.
 *
 * Both hierarchies are handled:
 * - cgroup v1 (`<root>/memory`, as on this project's CI host): the run's cgroup is made under the runtime's own memory
 *   cgroup (so a limit the host put on the runtime still covers its sandboxes), with `memory.limit_in_bytes` and,
 *   when swap accounting exists, `memory.memsw.limit_in_bytes` at the same figure (no escape into swap);
 * - cgroup v2 (a `cgroup2` mount whose root offers the `memory` controller): under `<root>/agentry/`, with
 *   `memory.max` and `memory.swap.max = 0`. v2 forbids processes in a cgroup whose children have controllers, so the
 *   runtime's own cgroup cannot be the parent; the root can.
 *
 * The same cgroups give the run's CPU time, every process counted, detached ones too (so billing sees them): v2's
 * `cpu.stat` exists in every cgroup; on v1 a `cpuacct` cgroup is made next to the memory one when that hierarchy is
 * mounted and writable. When the run ends, any process still in its cgroup is killed.
 *
 * The launcher (a fixed shell line, run as root before privileges are dropped) writes its own pid to the run's
 * `cgroup.procs` files and then execs bubblewrap, so every process of the sandbox starts inside the cgroup; there is no
 * window in which a process runs outside it. Only root can do this: without root, or without a writable memory
 * hierarchy, {@link findMemoryCgroups} says why and runs go without (see `SandboxLimits.memoryBytes`).
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** The memory cgroup of one run (and, on v1, its CPU-accounting cgroup). */
export interface RunCgroup {
  /** The `cgroup.procs` files the launcher writes its pid to: the memory cgroup's, then the `cpuacct` one's (v1). */
  readonly procsFiles: string[];
  /**
   * After the run: its peak, whether the OOM killer acted, and the CPU time of every process that ever ran in it
   * (`cpuacct.usage` on v1, `cpu.stat`'s `usage_usec` on v2; absent when neither exists), so a detached process is
   * counted as well. Any process still in the cgroup is then killed, and the cgroup removed in the background (its
   * last processes may take a moment to leave it after bwrap has exited; the answer does not wait for that).
   */
  finish(): Promise<{ memoryPeakBytes?: number; memoryExceeded?: boolean; cpuMs?: number }>;
}

/** Makes a memory cgroup per run. */
export interface MemoryCgroups {
  readonly version: 1 | 2;
  create(limitBytes: number): Promise<RunCgroup>;
}

let counter = 0;

function runName(): string {
  return `run-${process.pid}-${++counter}-${Math.random().toString(36).slice(2, 8)}`;
}

async function readNumber(path: string): Promise<number | undefined> {
  const text = await readFile(path, 'utf8').catch(() => undefined);
  const value = Number(text?.trim());
  return text !== undefined && Number.isFinite(value) ? value : undefined;
}

/** `oom_kill N` of memory.oom_control (v1) or memory.events (v2). */
async function oomKills(path: string): Promise<number> {
  const text = await readFile(path, 'utf8').catch(() => '');
  const match = /^oom_kill (\d+)$/m.exec(text);
  return match ? Number(match[1]) : 0;
}

/** Removes an emptied cgroup; its last processes may still be exiting for a moment after bwrap has. */
async function removeCgroup(dir: string): Promise<void> {
  for (let attempt = 0; attempt < 200; attempt++) {
    try {
      await rmdir(dir);
      return;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return;
      if (code !== 'EBUSY') return;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }
}

/** SIGKILL to every process left in a cgroup: nothing the run started outlives it, not even a detached process. */
async function killLeftovers(procsFile: string): Promise<void> {
  const text = await readFile(procsFile, 'utf8').catch(() => '');
  for (const pid of text.split('\n').filter(Boolean).map(Number)) {
    try {
      if (pid > 1 && pid !== process.pid) process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
}

/** CPU time in ms from `cpuacct.usage` (nanoseconds, v1) or `cpu.stat`'s `usage_usec` (v2). */
async function cpuMsOf(file: string, version: 1 | 2): Promise<number | undefined> {
  if (version === 1) {
    const ns = await readNumber(file);
    return ns === undefined ? undefined : Math.round(ns / 1e6);
  }
  const text = await readFile(file, 'utf8').catch(() => '');
  const match = /^usage_usec (\d+)$/m.exec(text);
  return match ? Math.round(Number(match[1]) / 1000) : undefined;
}

function v1Cgroups(hierarchy: string, cpuHierarchy: string | undefined): MemoryCgroups {
  return {
    version: 1,
    async create(limitBytes) {
      const name = runName();
      const dir = join(hierarchy, name);
      const cpuDir = cpuHierarchy === undefined ? undefined : join(cpuHierarchy, name);
      await mkdir(dir);
      if (cpuDir !== undefined) {
        await mkdir(cpuDir).catch(async (error: unknown) => {
          await removeCgroup(dir);
          throw error;
        });
      }
      try {
        await writeFile(join(dir, 'memory.limit_in_bytes'), String(limitBytes));
        // Swap accounting: memory + swap at the same figure, so nothing escapes into swap.
        const memsw = join(dir, 'memory.memsw.limit_in_bytes');
        if (existsSync(memsw)) await writeFile(memsw, String(limitBytes));
      } catch (error) {
        await removeCgroup(dir);
        if (cpuDir !== undefined) await removeCgroup(cpuDir);
        throw error;
      }
      return {
        procsFiles: [join(dir, 'cgroup.procs'), ...(cpuDir !== undefined ? [join(cpuDir, 'cgroup.procs')] : [])],
        async finish() {
          await killLeftovers(join(dir, 'cgroup.procs'));
          const peak = await readNumber(join(dir, 'memory.max_usage_in_bytes'));
          const kills = await oomKills(join(dir, 'memory.oom_control'));
          const cpuMs = cpuDir === undefined ? undefined : await cpuMsOf(join(cpuDir, 'cpuacct.usage'), 1);
          void removeCgroup(dir);
          if (cpuDir !== undefined) void removeCgroup(cpuDir);
          return {
            ...(peak !== undefined ? { memoryPeakBytes: peak } : {}),
            memoryExceeded: kills > 0,
            ...(cpuMs !== undefined ? { cpuMs } : {}),
          };
        },
      };
    },
  };
}

function v2Cgroups(parent: string): MemoryCgroups {
  return {
    version: 2,
    async create(limitBytes) {
      const dir = join(parent, runName());
      await mkdir(dir);
      try {
        await writeFile(join(dir, 'memory.max'), String(limitBytes));
        const swap = join(dir, 'memory.swap.max');
        if (existsSync(swap)) await writeFile(swap, '0');
      } catch (error) {
        await removeCgroup(dir);
        throw error;
      }
      return {
        procsFiles: [join(dir, 'cgroup.procs')],
        async finish() {
          await killLeftovers(join(dir, 'cgroup.procs'));
          const peak = await readNumber(join(dir, 'memory.peak'));
          const kills = await oomKills(join(dir, 'memory.events'));
          const cpuMs = await cpuMsOf(join(dir, 'cpu.stat'), 2);
          void removeCgroup(dir);
          return {
            ...(peak !== undefined ? { memoryPeakBytes: peak } : {}),
            memoryExceeded: kills > 0,
            ...(cpuMs !== undefined ? { cpuMs } : {}),
          };
        },
      };
    },
  };
}

/** Where the cgroup filesystems are: `/proc/self/mounts` lines of type cgroup (v1, memory) and cgroup2. */
function cgroupMounts(mounts: string): { v1Memory?: string; v1Cpu?: string; v2?: string } {
  const found: { v1Memory?: string; v1Cpu?: string; v2?: string } = {};
  for (const line of mounts.split('\n')) {
    const [, at, type, options] = line.split(' ');
    if (!at || !type) continue;
    if (type === 'cgroup' && options?.split(',').includes('memory')) found.v1Memory ??= at;
    if (type === 'cgroup' && options?.split(',').includes('cpuacct')) found.v1Cpu ??= at;
    if (type === 'cgroup2') found.v2 ??= at;
  }
  return found;
}

/** The runtime's own cgroup path in a v1 hierarchy (`4:memory:/a/b`) or v2 (`0::/a/b`). */
function ownCgroup(selfCgroup: string, controller: string | null): string {
  for (const line of selfCgroup.split('\n')) {
    const [, controllers, path] = line.split(':');
    if (path === undefined) continue;
    if (controller === null ? controllers === '' : controllers?.split(',').includes(controller)) return path;
  }
  return '/';
}

/**
 * Where v1 runs' CPU-accounting cgroups go (under the runtime's own `cpuacct` cgroup), or undefined when there is no
 * writable `cpuacct` hierarchy: CPU is then measured by the process tree only (see `bubblewrap.ts`).
 */
async function v1CpuParent(v1Cpu: string | undefined, self: string): Promise<string | undefined> {
  if (v1Cpu === undefined) return undefined;
  const own = join(v1Cpu, ownCgroup(self, 'cpuacct'));
  const parent = join(existsSync(join(own, 'cgroup.procs')) ? own : v1Cpu, 'agentry');
  try {
    await mkdir(parent, { recursive: true });
    return existsSync(join(parent, 'cpuacct.usage')) ? parent : undefined;
  } catch {
    return undefined;
  }
}

/** Where to look; the defaults are the running system's (tests point them at a fake tree). */
export interface CgroupHost {
  mounts?: string;
  selfCgroup?: string;
  isRoot?: boolean;
}

/**
 * The memory cgroups this host allows, or why there are none. v1's memory hierarchy is preferred when mounted (a
 * host with both has its memory controller there); else a v2 hierarchy whose root offers `memory`.
 */
export async function findMemoryCgroups(host: CgroupHost = {}): Promise<MemoryCgroups | string> {
  const isRoot = host.isRoot ?? (typeof process.getuid === 'function' && process.getuid() === 0);
  if (!isRoot) return 'the runtime is not root (only root can put a sandbox into a cgroup of its own)';
  const mounts = host.mounts ?? (await readFile('/proc/self/mounts', 'utf8').catch(() => ''));
  const self = host.selfCgroup ?? (await readFile('/proc/self/cgroup', 'utf8').catch(() => ''));
  const { v1Memory, v1Cpu, v2 } = cgroupMounts(mounts);
  const failures: string[] = [];
  if (v1Memory) {
    const own = join(v1Memory, ownCgroup(self, 'memory'));
    const base = existsSync(join(own, 'cgroup.procs')) ? own : v1Memory;
    const parent = join(base, 'agentry');
    try {
      await mkdir(parent, { recursive: true });
      if (!existsSync(join(parent, 'memory.limit_in_bytes'))) throw new Error('no memory.limit_in_bytes');
      return v1Cgroups(parent, await v1CpuParent(v1Cpu, self));
    } catch (error) {
      failures.push(`cgroup v1 memory at ${v1Memory}: ${(error as Error).message}`);
    }
  }
  if (v2) {
    const controllers = await readFile(join(v2, 'cgroup.controllers'), 'utf8').catch(() => '');
    if (!controllers.split(/\s+/).includes('memory')) {
      failures.push(`cgroup v2 at ${v2} has no memory controller`);
    } else {
      try {
        const parent = join(v2, 'agentry');
        await writeFile(join(v2, 'cgroup.subtree_control'), '+memory');
        await mkdir(parent, { recursive: true });
        await writeFile(join(parent, 'cgroup.subtree_control'), '+memory');
        return v2Cgroups(parent);
      } catch (error) {
        failures.push(`cgroup v2 at ${v2}: ${(error as Error).message}`);
      }
    }
  }
  return failures.length > 0 ? failures.join('; ') : 'no cgroup filesystem is mounted';
}
