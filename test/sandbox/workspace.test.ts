import { mkdir, mkdtemp, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentryError } from '../../src/errors.js';
import { createWorkspace, removeWorkspace, resolveInWorkspace, workspacePath } from '../../src/sandbox/workspace.js';

let dataDir: string;
let root: string;

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'agentry-ws-'));
  root = await createWorkspace(dataDir, 'agent-1');
  await mkdir(join(root, 'src'));
  await writeFile(join(root, 'src', 'a.py'), 'print(1)\n');
  await symlink('/etc', join(root, 'hostetc'));
  await symlink('src', join(root, 'inner-link'));
  await symlink('/nonexistent/x', join(root, 'dangling'));
  await symlink('../../', join(root, 'src', 'up'));
});
afterAll(() => rm(dataDir, { recursive: true, force: true }));

describe('workspaces', () => {
  it('lives under <dataDir>/workspaces/<agentId>, owned by the sandbox uid when root', async () => {
    expect(root).toBe(join(dataDir, 'workspaces', 'agent-1'));
    const s = await stat(root);
    expect(s.mode & 0o777).toBe(0o700);
    if (process.getuid?.() === 0) expect([s.uid, s.gid]).toEqual([65534, 65534]);
    expect((await stat(join(dataDir, 'workspaces'))).mode & 0o777).toBe(0o711);
    expect(await createWorkspace(dataDir, 'agent-1')).toBe(root); // kept, not recreated
  });

  it('refuses agent ids that are paths', () => {
    for (const id of ['..', '../x', 'a/b', '', '.hidden'])
      expect(() => workspacePath(dataDir, id)).toThrow(AgentryError);
  });

  it('removes a workspace without following the symlinks in it', async () => {
    const other = await createWorkspace(dataDir, 'agent-2');
    const outside = join(dataDir, 'keep.txt');
    await writeFile(outside, 'keep');
    await symlink(dataDir, join(other, 'to-data'));
    await removeWorkspace(dataDir, 'agent-2');
    await expect(stat(other)).rejects.toThrow();
    expect((await stat(outside)).size).toBe(4);
  });
});

describe('resolveInWorkspace', () => {
  it('resolves paths inside the workspace, existing or not', async () => {
    expect(await resolveInWorkspace(root, 'src/a.py')).toBe(join(root, 'src', 'a.py'));
    expect(await resolveInWorkspace(root, './src/new/deep.txt')).toBe(join(root, 'src', 'new', 'deep.txt'));
    expect(await resolveInWorkspace(root, 'inner-link/a.py')).toBe(join(root, 'inner-link', 'a.py'));
    expect(await resolveInWorkspace(root, '.')).toBe(root);
  });

  it.each([
    ['..', /`\.\.`/],
    ['src/../../etc/passwd', /`\.\.`/],
    ['/etc/passwd', /relative/],
    ['hostetc/passwd', /symlink/],
    ['hostetc', /symlink/],
    ['hostetc/new-file', /symlink/],
    ['src/up/x', /symlink/],
    ['dangling', /symlink to nothing/],
    ['a\0b', /NUL/],
  ])('refuses %j', async (path, message) => {
    await expect(resolveInWorkspace(root, path)).rejects.toThrow(message);
  });
});
