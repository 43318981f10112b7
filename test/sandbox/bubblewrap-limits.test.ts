/**
 * A sandbox's whole memory (processes + tmpfs) and its disk are bounded. A run that
 * forks, allocates and fills its tmpfs is stopped at its memory limit, and what the host holds for it (the resident
 * memory of its processes, sampled from /proc, and its cgroup's usage, tmpfs included) stays under the limit + 10 %.
 * The tmpfs are sized, the root and /dev are read-only, and the workspace has a disk quota.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bubblewrapSandbox } from '../../src/sandbox/bubblewrap.js';
import { findMemoryCgroups } from '../../src/sandbox/memory-cgroup.js';
import type { SandboxCommand, SandboxLimits } from '../../src/sandbox/sandbox.js';
import { createWorkspace } from '../../src/sandbox/workspace.js';
import { workspaceFileOperation } from '../../src/tools/builtin/code-agent/workspace-files.js';

const sandbox = bubblewrapSandbox();
const probe = await sandbox.probe();
const cgroups = await findMemoryCgroups();
const strict = process.env.AGENTRY_CI_STRICT === '1';
const MiB = 1024 ** 2;

let base: string;
let workspace: string;
beforeAll(async () => {
  base = await mkdtemp(join(tmpdir(), 'agentry-limits-'));
  await chmod(base, 0o755);
  workspace = await createWorkspace(join(base, 'data'), 'limits');
});
afterAll(() => rm(base, { recursive: true, force: true }));

const run = (command: { shell?: string; argv?: string[]; limits?: Partial<SandboxLimits> }) =>
  sandbox.run({ workspace, timeoutMs: 60_000, maxOutputBytes: 64 * 1024, ...command } as SandboxCommand);

/** The memory cgroups of this process's runs (their names carry our pid), as found now. */
function ourRunCgroups(): string[] {
  if (typeof cgroups === 'string') return [];
  const self = readFileSync('/proc/self/cgroup', 'utf8');
  const found: string[] = [];
  for (const parent of [
    `/sys/fs/cgroup/memory${/:memory:(.*)$/m.exec(self)?.[1] ?? ''}/agentry`,
    '/sys/fs/cgroup/memory/agentry',
    '/sys/fs/cgroup/agentry',
  ]) {
    try {
      for (const name of readdirSync(parent)) {
        if (name.startsWith(`run-${process.pid}-`)) found.push(join(parent, name));
      }
    } catch {
      // not this hierarchy
    }
  }
  return found;
}

function residentBytes(pid: string): number {
  try {
    const kb = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kb ? Number(kb) * 1024 : 0;
  } catch {
    return 0;
  }
}

describe('sandbox memory limits', () => {
  // Stands in for what the tests of this file need; a failure under AGENTRY_CI_STRICT=1 when it is missing.
  it.runIf(strict)(
    'bubblewrap works and a memory cgroup is writable (needed by the 4 sandbox tests in this file)',
    () => {
      expect(probe).toEqual({ ok: true });
      expect(typeof cgroups === 'string' ? cgroups : 'ok').toBe('ok');
    },
  );

  it.skipIf(!probe.ok || typeof cgroups === 'string')(
    `a run that forks, allocates and fills its tmpfs is stopped at its memory limit; the host holds < limit + 10 %${
      typeof cgroups === 'string' ? ` (skipped: ${cgroups})` : ''
    }`,
    async () => {
      const memoryBytes = 256 * MiB;
      // 8 children of 64 MiB each (touched, so resident), while the parent fills /tmp and /dev/shm (96 MiB each):
      // 704 MiB asked for in all, against 256.
      const script = [
        'import os, time',
        'kids = []',
        'for i in range(8):',
        '    pid = os.fork()',
        '    if pid == 0:',
        '        b = bytearray(64 * 1024 * 1024)',
        '        for j in range(0, len(b), 4096): b[j] = 1',
        '        time.sleep(3)',
        '        os._exit(0)',
        '    kids.append(pid)',
        'for path in ("/tmp/fill", "/dev/shm/fill"):',
        '    try:',
        '        with open(path, "wb") as f:',
        '            for k in range(96): f.write(b"x" * 1024 * 1024)',
        '    except OSError as e:',
        '        print("write stopped:", e, flush=True)',
        'killed = 0',
        'for pid in kids:',
        '    _, status = os.waitpid(pid, 0)',
        '    killed += os.WIFSIGNALED(status)',
        'print("children killed:", killed, flush=True)',
      ].join('\n');
      let peakResident = 0;
      let peakUsage = 0;
      let sampling = true;
      const sampler = (async () => {
        while (sampling) {
          for (const dir of ourRunCgroups()) {
            try {
              const pids = readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean);
              peakResident = Math.max(
                peakResident,
                pids.map(residentBytes).reduce((a, b) => a + b, 0),
              );
              const usage = Number(readFileSync(join(dir, 'memory.usage_in_bytes'), 'utf8'));
              if (Number.isFinite(usage)) peakUsage = Math.max(peakUsage, usage);
            } catch {
              // the run ended between the listing and the read
            }
          }
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      })();
      const r = await run({
        argv: ['python3', '-c', script],
        limits: { memoryBytes, tmpBytes: 96 * MiB },
      });
      sampling = false;
      await sampler;
      console.log(
        `memory: limit ${memoryBytes / MiB} MiB, cgroup peak ${Math.round((r.memoryPeakBytes ?? 0) / MiB)} MiB, ` +
          `sampled usage ${Math.round(peakUsage / MiB)} MiB, sampled resident ${Math.round(peakResident / MiB)} MiB; ` +
          `exceeded: ${r.memoryExceeded}; ${r.stdout.trim().replaceAll('\n', '; ')}`,
      );
      expect(r.memoryExceeded).toBe(true);
      expect(r.stdout).toMatch(/children killed: [1-8]/);
      expect(r.memoryPeakBytes).toBeLessThanOrEqual(memoryBytes * 1.1);
      expect(peakUsage).toBeGreaterThan(0);
      expect(peakUsage).toBeLessThanOrEqual(memoryBytes * 1.1);
      expect(peakResident).toBeLessThanOrEqual(memoryBytes * 1.1);
      // removed after the run (in the background: its last processes may take a moment to leave it)
      const deadline = Date.now() + 10_000;
      while (ourRunCgroups().length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(ourRunCgroups()).toEqual([]);
    },
    120_000,
  );
});

describe.skipIf(!probe.ok)('sandbox tmpfs and disk limits', () => {
  it('sizes /tmp and /dev/shm, and leaves no other tmpfs writable (the root and /dev are read-only)', async () => {
    const r = await run({
      shell:
        'head -c 20000000 /dev/zero > /tmp/f; echo tmp=$(stat -c %s /tmp/f); ' +
        'head -c 20000000 /dev/zero > /dev/shm/f; echo shm=$(stat -c %s /dev/shm/f); ' +
        'echo x > /rootfile || echo root-ro; mkdir /dev/x || echo dev-ro; echo ok > /dev/null && echo null-ok',
      limits: { tmpBytes: 8 * MiB },
    });
    expect(r.stdout).toMatch(/^tmp=8388608$/m);
    expect(r.stdout).toMatch(/^shm=8388608$/m);
    expect(r.stdout).toMatch(/^root-ro$/m);
    expect(r.stdout).toMatch(/^dev-ro$/m);
    expect(r.stdout).toMatch(/^null-ok$/m);
  });

  it('kills a run that takes the workspace past its disk quota; a run that deletes files still runs', async () => {
    const r = await run({
      shell: 'for i in $(seq 1 40); do head -c 1000000 /dev/zero > big-$i; sleep 0.05; done; echo finished',
      limits: { workspaceBytes: 8 * MiB },
    });
    expect(r).toMatchObject({ quotaExceeded: true, signal: 'SIGKILL' });
    expect(r.stdout).not.toContain('finished');
    // over the quota now: a file-tool write is refused; a command may still run, and delete
    const quota = bubblewrapSandbox({ limits: { workspaceBytes: 8 * MiB } });
    const write = { op: 'write', path: 'more.txt', label: 'more.txt', content: 'x', encoding: 'utf8' } as const;
    await expect(workspaceFileOperation(quota, workspace, write)).rejects.toThrow(/over its disk quota/);
    const cleanup = await run({ shell: 'rm -f big-*; echo cleaned', limits: { workspaceBytes: 8 * MiB } });
    expect(cleanup).toMatchObject({ exitCode: 0, stdout: 'cleaned\n' });
    expect(cleanup.quotaExceeded).toBeUndefined();
    await expect(workspaceFileOperation(quota, workspace, write)).resolves.toMatchObject({ bytes: 1 });
  });

  it('kills a run that creates more files than its quota allows', async () => {
    const r = await run({
      shell: 'mkdir many && cd many && for i in $(seq 1 5000); do : > f-$i; done; sleep 2; echo finished',
      limits: { workspaceFiles: 1_000 },
    });
    expect(r).toMatchObject({ quotaExceeded: true });
    expect(r.stdout).not.toContain('finished');
    await run({ shell: 'rm -rf many' });
  });
});
