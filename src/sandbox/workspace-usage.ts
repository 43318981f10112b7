/**
 * @module sandbox/workspace-usage
 * How much disk a workspace uses, measured with `du` (coreutils). `du` walks with directory descriptors and never
 * follows a symlink (`-P`, its default), stays on one file system (`-x`) and only reads metadata, so a tree the sandbox
 * rearranges while it is measured can make the figure wrong for a moment but can never lead it anywhere else.
 */
import { execFile } from 'node:child_process';

/** Bytes (allocated blocks, so a sparse file counts what it really holds) and inodes. */
export interface WorkspaceUsage {
  bytes: number;
  files: number;
}

function du(duPath: string, args: string[], dir: string): Promise<number | undefined> {
  return new Promise((resolve) => {
    execFile(duPath, [...args, '--', dir], { timeout: 30_000, maxBuffer: 64 * 1024 }, (_error, stdout) => {
      // du exits 1 when a file vanished mid-walk; its total is still printed and still meaningful.
      const value = Number(String(stdout).split(/\s/)[0]);
      resolve(String(stdout).trim() !== '' && Number.isFinite(value) ? value : undefined);
    });
  });
}

/** The workspace's usage, or undefined when `du` could not measure it. */
export async function workspaceUsage(duPath: string, dir: string): Promise<WorkspaceUsage | undefined> {
  const [bytes, files] = await Promise.all([du(duPath, ['-sx', '-B1'], dir), du(duPath, ['-sx', '--inodes'], dir)]);
  return bytes === undefined || files === undefined ? undefined : { bytes, files };
}
