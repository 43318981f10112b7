/**
 * @module storage/sqlite/monitors
 * The SQLite side of durable timers and monitors (tables of migration 4): the statements, and the writes the writer
 * (writer.ts) runs inside its batches. Kept apart from statements.ts because nothing else touches these tables.
 */
import type Database from 'better-sqlite3';
import type { MonitorChangeRow, MonitorRow, TimerRow } from '../adapter.js';
import type { Bind, Stmt } from './statements.js';
import { ID_SET } from './statements.js';

/** Columns in {@link MonitorRow} order. */
const MONITOR_COLUMNS =
  'monitor_id, agent_id, url, selector, ignore_selectors, condition, interval_s, until, status, created_at, ' +
  'last_checked_at, next_check_at, changes, last_error, failures, etag, last_modified, content_sha256, content, render';
const TIMER_COLUMNS = 'timer_id, agent_id, due_at, kind, payload';

export function prepareMonitorStatements(db: Database.Database) {
  const p = <R = unknown>(sql: string): Stmt<R> => db.prepare<Bind[], R>(sql);
  const pluck = <R>(sql: string): Stmt<R> => db.prepare<Bind[], R>(sql).pluck() as unknown as Stmt<R>;
  return {
    agentExists: pluck<number>('SELECT 1 FROM agents WHERE agent_id = ?'),
    // Like tool states, the timer of an agent that does not exist (any more) is dropped.
    putTimer: p(
      `INSERT INTO timers (${TIMER_COLUMNS}) SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM agents WHERE agent_id = ?) ` +
        'ON CONFLICT (timer_id) DO UPDATE SET agent_id = excluded.agent_id, due_at = excluded.due_at, ' +
        'kind = excluded.kind, payload = excluded.payload',
    ),
    deleteTimer: p('DELETE FROM timers WHERE timer_id = ?'),
    deleteTimerIfDue: p('DELETE FROM timers WHERE timer_id = ? AND due_at = ?'),
    // Reads the (due_at) index as a range: only due rows are touched.
    dueTimers: p<TimerRow>(`SELECT ${TIMER_COLUMNS} FROM timers WHERE due_at <= ? ORDER BY due_at LIMIT ?`),
    nextDue: pluck<number | null>('SELECT min(due_at) FROM timers'),
    insertMonitor: p(
      `INSERT INTO monitors (${MONITOR_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    ),
    getMonitor: p<SqlMonitorRow>(`SELECT ${MONITOR_COLUMNS} FROM monitors WHERE monitor_id = ?`),
    listMonitors: p<SqlMonitorRow>(`SELECT ${MONITOR_COLUMNS} FROM monitors WHERE agent_id = ? ORDER BY seq`),
    updateMonitor: p(
      'UPDATE monitors SET url = ?, selector = ?, ignore_selectors = ?, condition = ?, interval_s = ?, until = ?, ' +
        'status = ?, last_checked_at = ?, next_check_at = ?, changes = ?, last_error = ?, failures = ?, etag = ?, ' +
        "last_modified = ?, content_sha256 = ?, content = ? WHERE monitor_id = ? AND status = 'active'",
    ),
    pushChange: p('INSERT INTO monitor_changes (agent_id, monitor_id, change, created_at) VALUES (?, ?, ?, ?)'),
    nextChange: p<MonitorChangeRow>(
      'SELECT seq, agent_id, monitor_id, change, created_at FROM monitor_changes WHERE agent_id = ? ORDER BY seq LIMIT 1',
    ),
    nextChangeOf: p<MonitorChangeRow>(
      'SELECT seq, agent_id, monitor_id, change, created_at FROM monitor_changes WHERE agent_id = ? AND monitor_id = ? ' +
        'ORDER BY seq LIMIT 1',
    ),
    deleteChange: p('DELETE FROM monitor_changes WHERE seq = ?'),
    deleteTimersOf: p(`DELETE FROM timers WHERE agent_id IN ${ID_SET}`),
    deleteMonitorsOf: p(`DELETE FROM monitors WHERE agent_id IN ${ID_SET}`),
    deleteChangesOf: p(`DELETE FROM monitor_changes WHERE agent_id IN ${ID_SET}`),
  };
}

export type MonitorStatements = ReturnType<typeof prepareMonitorStatements>;

/** A monitor as SQLite answers it: `render` is 0 or 1. */
export type SqlMonitorRow = Omit<MonitorRow, 'render'> & { render: number };

export function monitorFromSql(row: SqlMonitorRow): MonitorRow {
  return { ...row, render: row.render === 1 };
}

function monitorParams(m: MonitorRow): Bind[] {
  return [
    m.monitor_id,
    m.agent_id,
    m.url,
    m.selector,
    m.ignore_selectors,
    m.condition,
    m.interval_s,
    m.until,
    m.status,
    m.created_at,
    m.last_checked_at,
    m.next_check_at,
    m.changes,
    m.last_error,
    m.failures,
    m.etag,
    m.last_modified,
    m.content_sha256,
    m.content,
    m.render ? 1 : 0,
  ];
}

export function putTimer(s: MonitorStatements, t: TimerRow): void {
  s.putTimer.run(t.timer_id, t.agent_id, t.due_at, t.kind, t.payload, t.agent_id);
}

/** Inside the writer's transaction: the existing monitor wins (a re-run call finds the one it created). */
export function insertMonitor(
  s: MonitorStatements,
  monitor: MonitorRow,
  timer: TimerRow | null,
): MonitorRow | 'no_agent' {
  const existing = s.getMonitor.get(monitor.monitor_id);
  if (existing) return monitorFromSql(existing);
  if (s.agentExists.get(monitor.agent_id) === undefined) return 'no_agent';
  s.insertMonitor.run(...monitorParams(monitor));
  if (timer) putTimer(s, timer);
  return monitor;
}

export function updateMonitor(
  s: MonitorStatements,
  m: MonitorRow,
  also: { change?: Omit<MonitorChangeRow, 'seq'>; timer?: TimerRow; dropTimer?: string },
): boolean {
  const changed = s.updateMonitor.run(
    m.url,
    m.selector,
    m.ignore_selectors,
    m.condition,
    m.interval_s,
    m.until,
    m.status,
    m.last_checked_at,
    m.next_check_at,
    m.changes,
    m.last_error,
    m.failures,
    m.etag,
    m.last_modified,
    m.content_sha256,
    m.content,
    m.monitor_id,
  ).changes;
  if (changed === 0) return false;
  if (also.change)
    s.pushChange.run(also.change.agent_id, also.change.monitor_id, also.change.change, also.change.created_at);
  if (also.dropTimer !== undefined) s.deleteTimer.run(also.dropTimer);
  if (also.timer) putTimer(s, also.timer);
  return true;
}

/** Part of deleting an agent tree: its timers, monitors and queued changes go with it. */
export function deleteMonitorsOf(s: MonitorStatements, idSet: string): void {
  s.deleteTimersOf.run(idSet);
  s.deleteMonitorsOf.run(idSet);
  s.deleteChangesOf.run(idSet);
}
