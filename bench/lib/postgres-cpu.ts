/**
 * The PostgreSQL server's CPU time spent on one benchmark run: user + system time, from /proc, of the backends whose
 * connections carry the run's `application_name` (the server's background writers are not in it). Read before the
 * pool closes. Zero when the server is not on this machine.
 */
import { readFileSync } from 'node:fs';
import type pg from 'pg';

/** USER_HZ on Linux: /proc's clock ticks per second. */
const TICKS = 100;

export async function serverCpuMs(admin: pg.Client, applicationName: string): Promise<number> {
  const { rows } = await admin.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [
    applicationName,
  ]);
  let total = 0;
  for (const { pid } of rows) {
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      total += Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15 of stat)
    } catch {
      // the server is not on this machine, or the backend is gone: no figure
    }
  }
  return Math.round((total * 1000) / TICKS);
}
