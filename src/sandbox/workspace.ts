/**
 * @module sandbox/workspace
 * One directory per agent, `<dataDir>/workspaces/<agentId>`, kept across steps, pauses and restarts, and the one
 * place a sandboxed command may write. When the runtime is root the directory is chowned to the sandbox's uid (65534)
 * with mode 0700: the sandbox can write it, other local users cannot, and root keeps full access. When the runtime is
 * not root, bwrap runs as the runtime's own uid and the directory simply belongs to it.
 *
 * The data directory and `<dataDir>/workspaces` are the runtime's own (see {@link ensurePrivateDir}): created 0700
 * (0710 with the sandbox's group when root, so that uid 65534, and no other user, can traverse them to the workspace
 * bwrap binds), and an existing one owned by anyone else, writable by group or others, a symlink, or under a directory
 * others could rename it in, is refused with an error naming the problem. That closes squatting: a directory made in
 * advance in a shared place such as /tmp is never used. The default data directory is not in /tmp at all
 * ({@link defaultDataDir}).
 *
 * Nothing here opens a path inside a workspace: the file tools do that inside the sandbox (`workspace-files.ts`), and
 * a workspace's contents are deleted inside one too ({@link removeSandboxWritable}).
 */
import { constants } from 'node:fs';
import { chmod, chown, lstat, mkdir, open, realpath, rm, rmdir } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join, sep } from 'node:path';
import { AgentryError } from '../errors.js';
import { SANDBOX_GID, SANDBOX_UID } from './bubblewrap.js';
import type { Sandbox } from './sandbox.js';

/** Who owns a workspace. */
export interface WorkspaceOwner {
  uid: number;
  gid: number;
}

/** The sticky bit (S_ISVTX): in such a directory only an entry's owner may rename or remove it. */
const STICKY = 0o1000;

const AGENT_ID = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;

function isRoot(): boolean {
  return typeof process.getuid === 'function' && process.getuid() === 0;
}

/**
 * Where coding workspaces live by default: `/var/lib/agentry` for root (persistent, and only root can create
 * anything on the way there), else `$XDG_STATE_HOME/agentry` (`~/.local/state/agentry`). Never a shared temporary
 * directory, where another user could make the directory first.
 */
export function defaultDataDir(): string {
  if (isRoot()) return '/var/lib/agentry';
  const state = process.env.XDG_STATE_HOME;
  return join(state && state.startsWith('/') ? state : join(homedir(), '.local', 'state'), 'agentry');
}

/** The workspace directory of an agent (not created). */
export function workspacePath(dataDir: string, agentId: string): string {
  if (!AGENT_ID.test(agentId)) {
    throw new AgentryError(
      'invalid_request',
      `Expected an agent id of letters, digits, - and _, got ${JSON.stringify(agentId)}`,
    );
  }
  return join(dataDir, 'workspaces', agentId);
}

function unsafe(path: string, why: string): AgentryError {
  return new AgentryError(
    'not_configured',
    `The workspace directory ${path} is refused: ${why}. Remove it, or choose another data directory (dataDir).`,
  );
}

/**
 * Every directory on the way to `dir` (its real parent path) must be one no other user can rename entries in: owned
 * by root or the runtime's user, and not writable by group or others unless sticky (like /tmp, where only an entry's
 * owner may rename it). Otherwise a checked directory could be swapped after the check.
 */
async function checkAncestors(dir: string): Promise<void> {
  const me = process.getuid?.() ?? 0;
  const parent = await realpath(dirname(dir));
  const parts = parent.split(sep).filter(Boolean);
  for (let i = 0; i <= parts.length; i++) {
    const path = sep + parts.slice(0, i).join(sep);
    const s = await lstat(path);
    const sticky = (s.mode & STICKY) !== 0;
    if (s.uid !== 0 && s.uid !== me) throw unsafe(dir, `${path} on its way belongs to uid ${s.uid}`);
    if ((s.mode & 0o022) !== 0 && !sticky) throw unsafe(dir, `${path} on its way is writable by other users`);
  }
}

/**
 * Creates `dir` private to the runtime, or checks an existing one, on a descriptor (so the directory checked is the
 * one found, whatever happens to the name meanwhile): a directory, not a symlink, owned by the runtime's user,
 * writable by nobody else. Its mode is then set: 0700, or 0710 with the sandbox's group when root (traversable by
 * the sandbox's uid, which bwrap binds the workspace as, and by no other user).
 */
export async function ensurePrivateDir(dir: string, sandboxGid: number = SANDBOX_GID): Promise<void> {
  await mkdir(dirname(dir), { recursive: true, mode: 0o755 });
  await checkAncestors(dir);
  await mkdir(dir, { mode: 0o700 }).catch((error: NodeJS.ErrnoException) => {
    if (error.code !== 'EEXIST') throw error;
  });
  let handle;
  try {
    handle = await open(dir, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ELOOP' || code === 'ENOTDIR') throw unsafe(dir, 'it is a symlink or not a directory');
    throw error;
  }
  try {
    const s = await handle.stat();
    const me = process.getuid?.() ?? s.uid;
    if (!s.isDirectory()) throw unsafe(dir, 'it is not a directory');
    if (s.uid !== me) throw unsafe(dir, `it belongs to uid ${s.uid}, not to the runtime's uid ${me}`);
    if ((s.mode & 0o022) !== 0) {
      throw unsafe(
        dir,
        `it is writable by ${(s.mode & 0o002) !== 0 ? 'others' : 'its group'} (mode ${modeOf(s.mode)})`,
      );
    }
    if (isRoot()) {
      await handle.chown(me, sandboxGid);
      await handle.chmod(0o710);
    } else {
      await handle.chmod(0o700);
    }
  } finally {
    await handle.close();
  }
}

function modeOf(mode: number): string {
  return `0${(mode & 0o7777).toString(8)}`;
}

/**
 * Creates (or keeps) the workspace of an agent and returns its absolute path. The data directory and
 * `<dataDir>/workspaces` are made private first ({@link ensurePrivateDir}); when root, the workspace is chowned to
 * `owner`.
 * @default owner {uid: 65534, gid: 65534}
 */
export async function createWorkspace(
  dataDir: string,
  agentId: string,
  owner: WorkspaceOwner = { uid: SANDBOX_UID, gid: SANDBOX_GID },
): Promise<string> {
  const path = workspacePath(dataDir, agentId);
  await ensurePrivateDir(dataDir, owner.gid);
  await ensurePrivateDir(join(dataDir, 'workspaces'), owner.gid);
  await mkdir(path, { mode: 0o700 }).catch((error: NodeJS.ErrnoException) => {
    if (error.code !== 'EEXIST') throw error;
  });
  // Only the runtime can create entries in `workspaces` (checked above): this is the directory it made.
  const s = await lstat(path);
  if (!s.isDirectory()) throw unsafe(path, 'it is not a directory');
  if (isRoot()) {
    await chown(path, owner.uid, owner.gid);
    await chmod(path, 0o700);
  }
  return realpath(path);
}

/** Gives a file or directory the runtime wrote into a workspace to the sandbox's uid (no-op when not root). */
export async function chownToSandbox(
  path: string,
  owner: WorkspaceOwner = { uid: SANDBOX_UID, gid: SANDBOX_GID },
): Promise<void> {
  if (isRoot()) await chown(path, owner.uid, owner.gid);
}

/**
 * Deletes an agent's workspace and everything in it. With a sandbox (the one its commands ran in), the contents are
 * deleted inside a sandbox, as its user (see {@link removeSandboxWritable}).
 */
export async function removeWorkspace(dataDir: string, agentId: string, sandbox?: Sandbox): Promise<void> {
  await removeSandboxWritable(workspacePath(dataDir, agentId), sandbox);
}

/** Makes every directory writable by its owner, then deletes depth-first without following a symlink. */
const EMPTY_WORKSPACE = 'chmod -R u+rwX /workspace 2>/dev/null; exec find /workspace -mindepth 1 -delete';

/**
 * Removes a directory the sandbox can write. Its contents are deleted inside a sandbox, by the sandbox's user: a
 * recursive delete by root on the host walks by name, and a sandboxed process still running could swap a directory
 * for a symlink mid-walk and have root delete files elsewhere. Only the emptied directory itself is removed on the
 * host (rmdir, which deletes nothing else). Without a sandbox (none configured, or none available here, so no
 * sandboxed process can be running either) it is removed on the host.
 */
export async function removeSandboxWritable(dir: string, sandbox?: Sandbox): Promise<void> {
  const stat = await lstat(dir).catch(() => undefined);
  if (!stat) return;
  if (!stat.isDirectory() || !sandbox || !(await sandbox.probe()).ok) {
    await rm(dir, { recursive: true, force: true });
    return;
  }
  for (let pass = 0; pass < 3; pass++) {
    await sandbox.run({ shell: EMPTY_WORKSPACE, workspace: dir, timeoutMs: 120_000, maxOutputBytes: 4_096 });
    try {
      await rmdir(dir);
      return;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return;
      if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw error;
    }
  }
  throw new AgentryError('internal_error', `Could not empty ${dir}: something kept writing into it`);
}
