/**
 * @module sandbox/workspace
 * One directory per agent, `<dataDir>/workspaces/<agentId>`, kept across steps, pauses and restarts, and the one
 * place a sandboxed command may write. When the runtime is root the directory is chowned to the sandbox's uid (65534)
 * with mode 0700: the sandbox can write it, other local users cannot, and root keeps full access. Mode 0777 would
 * work without chown but would let every local user tamper with an agent's files. When the runtime is not root,
 * bwrap runs as the runtime's own uid and the directory simply belongs to it.
 *
 * Files the sandbox creates belong to uid 65534; a file the runtime writes in from the host belongs to root and must
 * be chowned (see {@link chownToSandbox}) before the sandbox can change it.
 *
 * The parent directories must be traversable by the sandbox's uid (bwrap binds the workspace after dropping
 * privileges): a data directory under /root (mode 0700) does not work; /var/lib/agentry or /srv/agentry does.
 */
import { chown, lstat, mkdir, realpath, rm } from 'node:fs/promises';
import { dirname, isAbsolute, join, normalize, relative, sep } from 'node:path';
import { AgentryError } from '../errors.js';
import { SANDBOX_GID, SANDBOX_UID } from './bubblewrap.js';

/** Who owns a workspace. */
export interface WorkspaceOwner {
  uid: number;
  gid: number;
}

const AGENT_ID = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;

function isRoot(): boolean {
  return typeof process.getuid === 'function' && process.getuid() === 0;
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

/**
 * Creates (or keeps) the workspace of an agent and returns its absolute path. When root, it is chowned to `owner`.
 * @default owner {uid: 65534, gid: 65534}
 */
export async function createWorkspace(
  dataDir: string,
  agentId: string,
  owner: WorkspaceOwner = { uid: SANDBOX_UID, gid: SANDBOX_GID },
): Promise<string> {
  const path = workspacePath(dataDir, agentId);
  // 0711 on the parent: the sandbox's uid can traverse it to the workspace but cannot list the other agents.
  await mkdir(join(dataDir, 'workspaces'), { recursive: true, mode: 0o711 });
  await mkdir(path, { recursive: true, mode: 0o700 });
  if (isRoot()) await chown(path, owner.uid, owner.gid);
  return realpath(path);
}

/** Gives a file or directory the runtime wrote into a workspace to the sandbox's uid (no-op when not root). */
export async function chownToSandbox(
  path: string,
  owner: WorkspaceOwner = { uid: SANDBOX_UID, gid: SANDBOX_GID },
): Promise<void> {
  if (isRoot()) await chown(path, owner.uid, owner.gid);
}

/** Deletes an agent's workspace and everything in it (symlinks inside are removed, never followed). */
export async function removeWorkspace(dataDir: string, agentId: string): Promise<void> {
  await rm(workspacePath(dataDir, agentId), { recursive: true, force: true });
}

function refuse(relativePath: string, why: string): AgentryError {
  return new AgentryError('invalid_request', `Path ${JSON.stringify(relativePath)} is refused: ${why}`);
}

function inside(root: string, path: string): boolean {
  const rel = relative(root, path);
  return rel === '' || (!rel.startsWith(`..${sep}`) && rel !== '..' && !isAbsolute(rel));
}

/**
 * The host path of `relativePath` inside the workspace `root`, for the runtime's own reads and writes. Refuses
 * absolute paths, any `..` segment, and paths that lead out through a symlink: the real path of the target (or, for a
 * path that does not exist yet, of its nearest existing ancestor) must lie inside the real path of the root, and a
 * dangling symlink is refused. (A symlink could still be swapped in between this check and the use; the sandbox
 * itself is the boundary that holds regardless.)
 */
export async function resolveInWorkspace(root: string, relativePath: string): Promise<string> {
  if (relativePath.includes('\0')) throw refuse(relativePath, 'it contains a NUL byte');
  if (isAbsolute(relativePath)) throw refuse(relativePath, 'paths are relative to the workspace');
  if (relativePath.split(/[\\/]+/).includes('..')) throw refuse(relativePath, '`..` is not allowed');
  const realRoot = await realpath(root);
  const target = join(realRoot, normalize(relativePath));
  for (let probe = target; ; probe = dirname(probe)) {
    let real: string;
    try {
      real = await realpath(probe);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      const isLink = await lstat(probe).then(
        (s) => s.isSymbolicLink(),
        () => false,
      );
      if (isLink) throw refuse(relativePath, 'it is a symlink to nothing');
      if (probe === realRoot || dirname(probe) === probe) throw refuse(relativePath, 'the workspace does not exist');
      continue;
    }
    if (!inside(realRoot, real)) throw refuse(relativePath, 'it leads out of the workspace through a symlink');
    return target;
  }
}
