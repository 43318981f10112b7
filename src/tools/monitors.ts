/**
 * @module tools/monitors
 * What the monitor tool (tools/builtin/monitor) and the runtime agree on about a monitor: the id of its check timer
 * and the form its record takes in answers. Both sides import this file, so the tool needs nothing of core's
 * internals and core nothing of the tool: the runtime's `monitors()` and `cancelMonitor()` and the tool's own answers
 * to the model show a monitor the same way.
 */
import type { MonitorInfo } from '../core/schemas.js';
import type { MonitorRow } from '../storage/adapter.js';

/** The id of a monitor's check timer: the monitor tool schedules it, and `runtime.cancelMonitor` drops it. */
export function monitorTimerId(monitorId: string): string {
  return `monitor.check:${monitorId}`;
}

/** A monitor row as the status form (and `runtime.monitors()`) shows it: its state, not the page text it keeps. */
export function toMonitorInfo(row: MonitorRow): MonitorInfo {
  return {
    monitor_id: row.monitor_id,
    url: row.url,
    interval_s: row.interval_s,
    last_checked_at: row.last_checked_at,
    next_check_at: row.next_check_at,
    changes: row.changes,
    last_error: row.last_error,
    status: row.status,
    selector: row.selector,
    condition: row.condition,
    until: row.until,
    render: row.render,
  };
}
