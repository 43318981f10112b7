/**
 * @module storage/sqlite/runner-lock
 * One runtime process drives the agents of a SQLite file. Two would both recover the same ACTIVE agents and step them
 * twice (and each would keep its own credit holds). A lock file next to the database holds the pid of the process
 * that drives it; a lock left by a process that no longer exists is taken over, so a crash never locks a file out.
 * Processes that only read or administer the file (the CLI's `keys`, `credits`, `agents` commands) take no lock.
 */
import { closeSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { AgentryError } from '../../errors.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Takes the lock for this process; throws `invalid_state` naming the other process if one holds it. */
export function acquireRunnerLock(lockPath: string, database: string): void {
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const fd = openSync(lockPath, 'wx');
      writeSync(fd, String(process.pid));
      closeSync(fd);
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    let holder = NaN;
    try {
      holder = Number(readFileSync(lockPath, 'utf8').trim());
    } catch {
      continue; // removed meanwhile: try again
    }
    if (holder === process.pid) return; // this process drives it already (a runtime reopened after close)
    if (Number.isInteger(holder) && holder > 0 && alive(holder)) {
      throw new AgentryError(
        'invalid_state',
        `The database ${JSON.stringify(database)} is already driven by another agentry process (pid ${holder}). ` +
          'Use another database (--db), or stop that process first.',
      );
    }
    try {
      unlinkSync(lockPath); // left by a process that died
    } catch {
      // another process took it over first: the next attempt decides
    }
  }
  throw new AgentryError('invalid_state', `Could not take the runner lock ${JSON.stringify(lockPath)}`);
}

export function releaseRunnerLock(lockPath: string): void {
  try {
    if (Number(readFileSync(lockPath, 'utf8').trim()) === process.pid) unlinkSync(lockPath);
  } catch {
    // already gone
  }
}
