/**
 * The memory cgroup of a run, on a stand-in cgroup tree (the real v1 hierarchy is exercised by
 * bubblewrap-limits.test.ts): which hierarchy is chosen, which files are written, and why there is none.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findMemoryCgroups } from '../../src/sandbox/memory-cgroup.js';

let fake: string;
beforeAll(async () => {
  fake = await mkdtemp(join(tmpdir(), 'agentry-cgroup-'));
});
afterAll(() => rm(fake, { recursive: true, force: true }));

describe('findMemoryCgroups', () => {
  it('says why there is none when the runtime is not root, or nothing is mounted', async () => {
    expect(await findMemoryCgroups({ isRoot: false })).toMatch(/not root/);
    expect(await findMemoryCgroups({ isRoot: true, mounts: '', selfCgroup: '' })).toMatch(/no cgroup filesystem/);
  });

  it('cgroup v2: enables memory under <root>/agentry and writes memory.max and memory.swap.max for each run', async () => {
    const root = join(fake, 'v2');
    await mkdir(root);
    await writeFile(join(root, 'cgroup.controllers'), 'cpu io memory pids\n');
    const found = await findMemoryCgroups({
      isRoot: true,
      mounts: `cgroup2 ${root} cgroup2 rw,nosuid 0 0\n`,
      selfCgroup: '0::/user.slice\n',
    });
    if (typeof found === 'string') throw new Error(found);
    expect(found.version).toBe(2);
    expect(await readFile(join(root, 'cgroup.subtree_control'), 'utf8')).toBe('+memory');
    expect(await readFile(join(root, 'agentry', 'cgroup.subtree_control'), 'utf8')).toBe('+memory');
    const run = await found.create(123_456_789);
    const dir = run.procsFiles[0]!.replace(/\/cgroup\.procs$/, '');
    expect(dir.startsWith(join(root, 'agentry', `run-${process.pid}-`))).toBe(true);
    expect(await readFile(join(dir, 'memory.max'), 'utf8')).toBe('123456789');
    await writeFile(join(dir, 'memory.peak'), '1000\n');
    await writeFile(join(dir, 'memory.events'), 'low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n');
    expect(await run.finish()).toEqual({ memoryPeakBytes: 1000, memoryExceeded: true });
  });

  it('refuses a v2 hierarchy without the memory controller, naming it', async () => {
    const root = join(fake, 'v2-hugetlb');
    await mkdir(root);
    await writeFile(join(root, 'cgroup.controllers'), 'hugetlb\n');
    expect(
      await findMemoryCgroups({ isRoot: true, mounts: `cgroup2 ${root} cgroup2 rw 0 0\n`, selfCgroup: '0::/\n' }),
    ).toMatch(/has no memory controller/);
  });

  it('cgroup v1: under the runtime own memory cgroup, limit_in_bytes and memsw at the same figure', async () => {
    const hierarchy = join(fake, 'memory');
    const own = join(hierarchy, 'svc');
    await mkdir(join(own, 'agentry'), { recursive: true });
    await writeFile(join(own, 'cgroup.procs'), '');
    await writeFile(join(own, 'agentry', 'memory.limit_in_bytes'), '');
    const found = await findMemoryCgroups({
      isRoot: true,
      mounts: `cgroup ${hierarchy} cgroup rw,memory 0 0\n`,
      selfCgroup: '4:memory:/svc\n0::/\n',
    });
    if (typeof found === 'string') throw new Error(found);
    expect(found.version).toBe(1);
    // a real cgroupfs makes these files itself in a new cgroup; the stand-in has none, so memsw is skipped
    const run = await found.create(64 * 1024 * 1024);
    expect(run.procsFiles[0]!.startsWith(join(own, 'agentry', 'run-'))).toBe(true);
    expect(await readFile(run.procsFiles[0]!.replace('cgroup.procs', 'memory.limit_in_bytes'), 'utf8')).toBe(
      '67108864',
    );
    expect(await run.finish()).toEqual({ memoryExceeded: false });
  });
});
