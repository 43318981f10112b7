/**
 * Workspaces: where they live, who owns them, the private data directory (squatting refused),
 * removal without following symlinks, and the path rules of the file helper that runs inside the sandbox.
 */
import { chmod, chown, lstat, mkdir, mkdtemp, readdir, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentryError } from '../../src/errors.js';
import { bubblewrapSandbox } from '../../src/sandbox/bubblewrap.js';
import { createWorkspace, ensurePrivateDir, removeWorkspace, workspacePath } from '../../src/sandbox/workspace.js';
import { workspaceFileOperation } from '../../src/tools/builtin/code-agent/workspace-files.js';

const isRoot = process.getuid?.() === 0;
const sandbox = bubblewrapSandbox();
const probe = await sandbox.probe();
let base: string;
let dataDir: string;
let root: string;

beforeAll(async () => {
  base = await mkdtemp(join(tmpdir(), 'agentry-ws-'));
  await chmod(base, 0o755);
  dataDir = join(base, 'data');
  root = await createWorkspace(dataDir, 'agent-1');
});
afterAll(() => rm(base, { recursive: true, force: true }));

describe('workspaces', () => {
  it('lives under <dataDir>/workspaces/<agentId>, owned by the sandbox uid when root; the data directory is private', async () => {
    expect(root).toBe(join(dataDir, 'workspaces', 'agent-1'));
    const s = await stat(root);
    expect(s.mode & 0o777).toBe(0o700);
    if (isRoot) expect([s.uid, s.gid]).toEqual([65534, 65534]);
    for (const dir of [dataDir, join(dataDir, 'workspaces')]) {
      const d = await stat(dir);
      // root: traversable by the sandbox's group only (bwrap binds the workspace as uid/gid 65534); else 0700
      expect(d.mode & 0o777).toBe(isRoot ? 0o710 : 0o700);
      expect(d.uid).toBe(process.getuid?.());
      if (isRoot) expect(d.gid).toBe(65534);
    }
    expect(await createWorkspace(dataDir, 'agent-1')).toBe(root); // kept, not recreated
  });

  it('refuses agent ids that are paths', () => {
    for (const id of ['..', '../x', 'a/b', '', '.hidden'])
      expect(() => workspacePath(dataDir, id)).toThrow(AgentryError);
  });

  it('removes a workspace without following the symlinks in it (on the host without a sandbox)', async () => {
    const other = await createWorkspace(dataDir, 'agent-2');
    const outside = join(base, 'keep.txt');
    await writeFile(outside, 'keep');
    await symlink(base, join(other, 'to-data'));
    await removeWorkspace(dataDir, 'agent-2');
    await expect(stat(other)).rejects.toThrow();
    expect((await stat(outside)).size).toBe(4);
  });

  it.skipIf(!probe.ok)('removes a workspace inside the sandbox, as its user, then the empty directory', async () => {
    const other = await createWorkspace(dataDir, 'agent-3');
    const outside = join(base, 'keep-too.txt');
    await writeFile(outside, 'keep');
    await symlink(base, join(other, 'to-data'));
    const r = await sandbox.run({
      shell: 'mkdir -p a/b/c && echo x > a/b/c/f && chmod 000 a/b',
      workspace: other,
      timeoutMs: 10_000,
      maxOutputBytes: 1_000,
    });
    expect(r.exitCode).toBe(0);
    await removeWorkspace(dataDir, 'agent-3', sandbox);
    await expect(lstat(other)).rejects.toThrow();
    expect((await stat(outside)).size).toBe(4);
  });
});

describe('the private data directory (squatting refused)', () => {
  it('refuses a data directory another user made first, and creates nothing in it', async () => {
    const squatted = join(base, 'squatted');
    await mkdir(squatted, { mode: 0o777 });
    await chmod(squatted, 0o777);
    if (isRoot) await chown(squatted, 1234, 1234);
    await expect(createWorkspace(squatted, 'victim')).rejects.toThrow(
      isRoot ? /refused: it belongs to uid 1234/ : /refused: it is writable by others/,
    );
    expect(await readdir(squatted)).toEqual([]);
  });

  it.runIf(isRoot)('refuses a directory of the runtime that others can write (mode 0777 or 0775)', async () => {
    for (const mode of [0o777, 0o775]) {
      const loose = join(base, `loose-${mode.toString(8)}`);
      await mkdir(loose);
      await chmod(loose, mode);
      await expect(createWorkspace(loose, 'a')).rejects.toMatchObject({
        code: 'not_configured',
        message: expect.stringMatching(/refused: it is writable by (others|its group)/),
      });
      expect(await readdir(loose)).toEqual([]);
    }
  });

  it('refuses a data directory that is a symlink, and a `workspaces` inside it that is one', async () => {
    const target = join(base, 'elsewhere');
    await mkdir(target, { mode: 0o700 });
    await symlink(target, join(base, 'linked'));
    await expect(createWorkspace(join(base, 'linked'), 'a')).rejects.toThrow(/refused: it is a symlink/);
    const data = join(base, 'planted');
    await ensurePrivateDir(data);
    await symlink(target, join(data, 'workspaces'));
    await expect(createWorkspace(data, 'a')).rejects.toThrow(/workspaces is refused: it is a symlink/);
    expect(await readdir(target)).toEqual([]);
  });

  it('refuses a data directory under a directory others can write (not sticky): it could be swapped', async () => {
    const open = join(base, 'open');
    await mkdir(open);
    await chmod(open, 0o777);
    await expect(createWorkspace(join(open, 'data'), 'a')).rejects.toThrow(/on its way is writable by other users/);
    // under /tmp (sticky) it is fine: only an entry's owner can rename it there
    await expect(createWorkspace(join(base, 'fine'), 'a')).resolves.toBe(join(base, 'fine', 'workspaces', 'a'));
  });
});

describe.skipIf(!probe.ok)('paths of the file helper (inside the sandbox)', () => {
  beforeAll(async () => {
    const r = await sandbox.run({
      shell:
        'mkdir src && echo "print(1)" > src/a.py && ln -s /etc hostetc && ln -s src inner-link && ' +
        'ln -s /nonexistent/x dangling && ln -s ../../ src/up',
      workspace: root,
      timeoutMs: 10_000,
      maxOutputBytes: 1_000,
    });
    expect(r.exitCode).toBe(0);
  });
  const read = (path: string) =>
    workspaceFileOperation(sandbox, root, { op: 'read', path, label: path, max_bytes: 1_000, encoding: 'utf8' });

  it('reads inside the workspace, through a symlink that stays inside too', async () => {
    expect(await read('src/a.py')).toEqual({ ok: true, content: 'print(1)\n' });
    await expect(read('inner-link/a.py')).resolves.toMatchObject({ content: 'print(1)\n' });
  });

  it.each([
    ['hostetc/passwd', /through a symlink/],
    ['hostetc', /through a symlink/],
    ['hostetc/new-file', /through a symlink/],
    ['src/up/x', /through a symlink/],
    ['dangling', /symlink to nothing/],
    ['missing.txt', /File does not exist/],
    ['src', /Not a file/],
  ])('refuses %j', async (path, message) => {
    await expect(read(path)).rejects.toThrow(message);
  });
});
