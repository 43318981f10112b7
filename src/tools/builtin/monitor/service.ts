/**
 * @module tools/builtin/monitor/service
 * The monitor's work between calls. Monitors are storage rows, and each has one durable timer (the platform's
 * `timers`) for its next check; nothing per monitor lives in memory. A check is billed at the tool's price, fetches through the
 * guarded fetch (check.ts), and on a change that matters queues the change for the owning agent, adds an ASSISTANT
 * message, emits `monitor.changed` and wakes the agent, whose `monitor` wait then returns the change.
 *
 * The next check is planned from the time of this one, never from the old due time: a runtime that was down for five
 * intervals makes one catch-up check, not five. A check due while its agent is paused (or out of credits) fetches
 * nothing and plans no next one; the agent's resume plans it again. Monitors end with their agent: deleted with it,
 * ended when it is finished or when their `until` passes.
 */
import { createHash } from 'node:crypto';
import { AgentryError } from '../../../errors.js';
import type { AgentRow, MonitorRow, TimerRow } from '../../../storage/adapter.js';
import type { AgentStatus } from '../../../base/status.js';
import { isoTime } from '../../../base/clock.js';
import { monitorTimerId } from '../../monitors.js';
import type { PlatformServices } from '../../platform.js';
import type * as CheckModule from './check.js';
import type { CheckFetch, FetchedPage, TextDiff } from './check.js';
import { MonitorCheckError } from './check-error.js';

/** The checking code (a DOM, a diff library) loads with the first check, not when agentry is imported. */
let checkModule: Promise<typeof CheckModule> | undefined;
const checks = () => (checkModule ??= import('./check.js'));

export const MONITOR_TOOL_NAME = 'monitor';
/** Credits per call and per background check. */
export const MONITOR_PRICE = 0.05;
export const MONITOR_CHECK_TIMER = 'monitor.check';
/** A failing site is reported (message and `monitor.error`) after this many failed checks in a row. */
export const REPORT_AFTER_FAILURES = 3;
/** A failing site's checks back off up to this many intervals apart. */
const MAX_BACKOFF_INTERVALS = 8;
/** The shortest interval when `AGENTRY_MONITOR_MIN_INTERVAL_S` is not set. */
export const DEFAULT_MIN_INTERVAL_S = 60;
/** The interval when the model gives none. */
export const DEFAULT_INTERVAL_S = 3_600;

/** What `wait` returns for a change that mattered (the tool's output, README.md#watching-pages-monitor). */
export interface MonitorChange {
  monitor_id: string;
  url: string;
  diff_summary: string;
  changed_at: string;
}

export interface CreateMonitorInput {
  url: string;
  selector?: string | undefined;
  ignore_selectors?: string[] | undefined;
  condition?: string | undefined;
  interval_s?: number | undefined;
  until?: string | undefined;
  /** Check the page as the browser renders it. */
  render?: boolean | undefined;
}

const CONDITION_SYSTEM =
  'You watch a web page for someone. Given their condition and a change on the page, decide whether the page now ' +
  'meets the condition. Answer YES or NO on the first line, then at most one short sentence why.';

export class MonitorService {
  private services: PlatformServices | undefined;

  constructor(
    /** The platform's guarded fetch, for checks outside any call. */
    private readonly fetch: CheckFetch,
    /** The shortest interval allowed, seconds. */
    readonly minIntervalS: number,
    /** Reads a page as the browser renders it (`render: true`); undefined without a browser. */
    private readonly render?: CheckFetch,
  ) {}

  /** The reader of `render: true` monitors; without a browser, one whose every read fails saying so. */
  private renderer(): CheckFetch {
    return (
      this.render ??
      (() => Promise.reject(new Error('render: true needs the browser, which this runtime does not have')))
    );
  }

  /** Called by `ToolPlatform.attach`: registers the check timer's handler and the resume hook. */
  attach(services: PlatformServices): void {
    this.services = services;
    services.timers.register(MONITOR_CHECK_TIMER, (timer, signal) => this.check(timer, signal));
    services.events.statusHooks.push((row, previous) => {
      // Only a resume plans checks again (a pause needs nothing: the due check sees it and stops).
      if ((previous === 'PAUSED' || previous === 'OUT_OF_CREDITS') && isRunnable(row.status)) {
        this.resumeMonitors(row.agent_id).catch((error: unknown) => services.reportError(error, row.agent_id));
      }
    });
  }

  private get s(): PlatformServices {
    if (!this.services) {
      throw new AgentryError('not_configured', 'the monitor tool needs a runtime: it was not attached to one');
    }
    return this.services;
  }

  /**
   * Creates a monitor for the agent's call, checking the page once now so a bad URL or selector fails the call
   * itself and the first check's text is the baseline. A re-run of the same call finds the monitor it created.
   */
  async create(
    agentId: string,
    toolCallId: string,
    input: CreateMonitorInput,
    fetch: CheckFetch,
    signal?: AbortSignal,
  ): Promise<MonitorRow> {
    const { storage, clock } = this.s;
    const monitorId = monitorIdFor(agentId, toolCallId);
    const existing = await storage.getMonitor(monitorId);
    if (existing) return existing;
    const now = clock.now();
    const intervalS = input.interval_s ?? Math.max(DEFAULT_INTERVAL_S, this.minIntervalS);
    if (intervalS < this.minIntervalS) {
      throw new Error(
        `interval_s must be at least ${this.minIntervalS} seconds (AGENTRY_MONITOR_MIN_INTERVAL_S); got ${intervalS}`,
      );
    }
    if (input.until !== undefined && Date.parse(input.until) <= now) {
      throw new Error(`until (${input.until}) has passed already; give a time in the future`);
    }
    const spec = { url: input.url, selector: input.selector ?? null, ignoreSelectors: input.ignore_selectors ?? [] };
    const { fetchWatchedText } = await checks();
    const page = await fetchWatchedText(
      input.render ? this.renderer() : fetch,
      spec,
      { etag: null, lastModified: null },
      signal,
    ).catch((err: unknown) => {
      throw err instanceof MonitorCheckError ? new Error(err.message) : err;
    });
    if (page.notModified) throw new Error(`${input.url} answered 304 to a request without validators`);
    const next = now + intervalS * 1000;
    const row: MonitorRow = {
      monitor_id: monitorId,
      agent_id: agentId,
      url: input.url,
      selector: spec.selector,
      ignore_selectors: JSON.stringify(spec.ignoreSelectors),
      condition: input.condition ?? null,
      interval_s: intervalS,
      until: input.until === undefined ? null : isoTime(Date.parse(input.until)),
      status: 'active',
      created_at: isoTime(now),
      last_checked_at: isoTime(now),
      next_check_at: isoTime(next),
      changes: 0,
      last_error: null,
      failures: 0,
      etag: page.etag,
      last_modified: page.lastModified,
      content_sha256: page.sha256,
      content: page.text,
      render: input.render === true,
    };
    const stored = await storage.insertMonitor(row, checkTimer(row, next));
    this.s.timers.noteScheduled(next);
    return stored;
  }

  /** The runtime's clock. */
  now(): number {
    return this.s.clock.now();
  }

  async list(agentId: string): Promise<MonitorRow[]> {
    return this.s.storage.listMonitors(agentId);
  }

  /** Cancels one of the agent's monitors (another agent's is "not found"). Cancelling twice changes nothing. */
  async cancel(agentId: string, monitorId: string): Promise<MonitorRow> {
    const monitor = await this.s.storage.getMonitor(monitorId);
    if (!monitor || monitor.agent_id !== agentId) throw new Error(`no monitor ${JSON.stringify(monitorId)} of yours`);
    if (monitor.status !== 'active') return monitor;
    const cancelled: MonitorRow = { ...monitor, status: 'cancelled', next_check_at: null };
    await this.s.storage.updateMonitor(cancelled, { dropTimer: monitorTimerId(monitorId) });
    return cancelled;
  }

  /**
   * The next queued change for a `wait`: taken from the queue once, and kept in the call's durable state so that a
   * re-run of the same call (after a crash) returns the same change instead of losing it or taking the next.
   */
  async takeChange(
    agentId: string,
    monitorId: string | undefined,
    state: { get<T>(): Promise<T | undefined>; set(value: unknown): Promise<void> },
  ): Promise<MonitorChange | null> {
    const { storage } = this.s;
    const delivered = await state.get<{ seq: number; change: MonitorChange }>();
    if (delivered?.change) {
      await storage.deleteMonitorChange(delivered.seq);
      return delivered.change;
    }
    const queued = await storage.nextMonitorChange(agentId, monitorId);
    if (!queued) return null;
    const change = JSON.parse(queued.change) as MonitorChange;
    await state.set({ seq: queued.seq, change });
    await storage.deleteMonitorChange(queued.seq);
    return change;
  }

  /** Fires a monitor's check (the timer's handler); true when it planned the next one (its timer moved). */
  private async check(timer: TimerRow, signal: AbortSignal): Promise<boolean> {
    const { storage, clock } = this.s;
    const { monitor_id: monitorId } = JSON.parse(timer.payload) as { monitor_id: string };
    const monitor = await storage.getMonitor(monitorId);
    if (!monitor || monitor.status !== 'active') return false;
    const agent = await storage.getAgent(monitor.agent_id);
    if (!agent) return false;
    const now = clock.now();
    if (agent.status === 'COMPLETED' || agent.status === 'FAILED') {
      await storage.updateMonitor({ ...monitor, status: 'ended', next_check_at: null });
      return false;
    }
    // Paused, out of credits, not started: no fetch, no next check; the resume plans one (resumeMonitors).
    if (agent.status !== 'ACTIVE') {
      await storage.updateMonitor({ ...monitor, next_check_at: null });
      return false;
    }
    if (monitor.until !== null && now >= Date.parse(monitor.until)) {
      await storage.updateMonitor({ ...monitor, status: 'ended', next_check_at: null });
      this.s.wake(agent.agent_id); // a wait that had only this monitor left ends now
      return false;
    }
    if (!(await this.s.chargeTool(agent.agent_id, MONITOR_TOOL_NAME, MONITOR_PRICE))) {
      // Out of credits: stopped like a step that cannot pay. Resume plans the next check.
      await storage.updateMonitor({ ...monitor, next_check_at: null });
      return false;
    }
    let page: FetchedPage;
    try {
      const { fetchWatchedText } = await checks();
      page = await fetchWatchedText(
        monitor.render ? this.renderer() : this.fetch,
        {
          url: monitor.url,
          selector: monitor.selector,
          ignoreSelectors: JSON.parse(monitor.ignore_selectors) as string[],
        },
        { etag: monitor.etag, lastModified: monitor.last_modified },
        signal,
      );
    } catch (err) {
      // Shutting down: not a failure of the site. The timer stays and fires on the next start.
      if (signal.aborted) throw err;
      if (!(err instanceof MonitorCheckError)) throw err;
      return this.failed(agent, monitor, err, now);
    }
    return this.checked(agent, monitor, page, now);
  }

  private async failed(agent: AgentRow, monitor: MonitorRow, err: MonitorCheckError, now: number): Promise<boolean> {
    const failures = monitor.failures + 1;
    const backoff = Math.min(2 ** (failures - 1), MAX_BACKOFF_INTERVALS);
    const next = now + monitor.interval_s * 1000 * backoff;
    const row: MonitorRow = {
      ...monitor,
      failures,
      last_error: err.message,
      last_checked_at: isoTime(now),
      next_check_at: isoTime(next),
    };
    const moved = await this.s.storage.updateMonitor(row, { timer: checkTimer(row, next) });
    this.s.timers.noteScheduled(next);
    // A selector that matches nothing is an error event every time; a failing site is reported once per run of
    // failures, when it reaches the threshold, not on every check.
    const report = failures === REPORT_AFTER_FAILURES;
    if (err.reason === 'selector' || report) {
      this.s.events.emit('monitor.error', {
        agent_id: agent.agent_id,
        monitor_id: monitor.monitor_id,
        url: monitor.url,
        error: err.message,
        failures,
      });
    }
    if (report) {
      await this.s.appendMessage(
        agent.agent_id,
        `Monitor of ${monitor.url}: ${failures} checks in a row failed (${err.message}). Checking less often until it works again.`,
      );
    }
    return moved;
  }

  private async checked(agent: AgentRow, monitor: MonitorRow, page: FetchedPage, now: number): Promise<boolean> {
    const next = now + monitor.interval_s * 1000;
    let row: MonitorRow = {
      ...monitor,
      failures: 0,
      last_error: null,
      last_checked_at: isoTime(now),
      next_check_at: isoTime(next),
    };
    const timer = checkTimer(row, next);
    if (page.notModified || page.sha256 === monitor.content_sha256 || monitor.content === null) {
      // Unchanged (or the first text ever): silent. The next identical check after a change is silent too.
      if (!page.notModified) row = { ...row, ...contentOf(page) };
      const moved = await this.s.storage.updateMonitor(row, { timer });
      this.s.timers.noteScheduled(next);
      await this.sayWatching(agent.agent_id);
      return moved;
    }
    const { diffText } = await checks();
    const diff = diffText(monitor.content, page.text);
    row = { ...row, ...contentOf(page) };
    const matters = monitor.condition === null || (await this.conditionMet(agent.agent_id, monitor, diff, page.text));
    if (!matters) {
      const moved = await this.s.storage.updateMonitor(row, { timer });
      this.s.timers.noteScheduled(next);
      await this.sayWatching(agent.agent_id);
      return moved;
    }
    const change: MonitorChange = {
      monitor_id: monitor.monitor_id,
      url: monitor.url,
      diff_summary: diff.summary,
      changed_at: isoTime(now),
    };
    row.changes = monitor.changes + 1;
    const stored = await this.s.storage.updateMonitor(row, {
      timer,
      change: {
        agent_id: agent.agent_id,
        monitor_id: monitor.monitor_id,
        change: JSON.stringify(change),
        created_at: change.changed_at,
      },
    });
    if (!stored) return false; // cancelled or deleted meanwhile
    this.s.timers.noteScheduled(next);
    await this.s.appendMessage(agent.agent_id, `Change on ${monitor.url}: ${diff.summary}`);
    this.s.events.emit('monitor.changed', { agent_id: agent.agent_id, ...change });
    this.s.wake(agent.agent_id);
    return true;
  }

  /** The short model call of a monitor with a condition: does the page now meet it? Billed to the agent. */
  private async conditionMet(agentId: string, monitor: MonitorRow, diff: TextDiff, text: string): Promise<boolean> {
    const prompt = [
      `Condition: ${monitor.condition}`,
      `Page: ${monitor.url}`,
      `Lines removed:\n${diff.removed.slice(0, 20).join('\n') || '(none)'}`,
      `Lines added:\n${diff.added.slice(0, 20).join('\n') || '(none)'}`,
      `The watched text now (start):\n${text.slice(0, 2_000)}`,
      'Does the page now meet the condition? Answer YES or NO first.',
    ].join('\n\n');
    const answer = await this.s.askModel(agentId, { system: CONDITION_SYSTEM, prompt, maxTokens: 64 });
    return /^\W*yes\b/i.test(answer);
  }

  /** "Watching <url>; next check 12:05" while the agent waits (its message says so), from its monitors' rows. */
  private async sayWatching(agentId: string): Promise<void> {
    const monitors = (await this.s.storage.listMonitors(agentId)).filter((m) => m.status === 'active');
    const message = watchingMessage(monitors);
    if (message) await this.s.setStatusMessage(agentId, message, WATCHING);
  }

  /** After a resume: each active monitor without a planned check gets one, at once if its interval has passed. */
  private async resumeMonitors(agentId: string): Promise<void> {
    const { storage, clock } = this.s;
    const now = clock.now();
    for (const monitor of await storage.listMonitors(agentId)) {
      if (monitor.status !== 'active' || monitor.next_check_at !== null) continue;
      const last = monitor.last_checked_at === null ? now : Date.parse(monitor.last_checked_at);
      const next = Math.max(now, last + monitor.interval_s * 1000);
      const row = { ...monitor, next_check_at: isoTime(next) };
      await storage.updateMonitor(row, { timer: checkTimer(row, next) });
      this.s.timers.noteScheduled(next);
    }
  }
}

const WATCHING = 'Watching ';

/** The status message of an agent waiting on its monitors, or null when none is active. */
export function watchingMessage(monitors: readonly MonitorRow[]): string | null {
  if (monitors.length === 0) return null;
  const planned = monitors.filter((m) => m.next_check_at !== null).map((m) => Date.parse(m.next_check_at!));
  const what = monitors.length === 1 ? monitors[0]!.url : `${monitors[0]!.url} and ${monitors.length - 1} more`;
  if (planned.length === 0) return `${WATCHING}${what}`;
  // Hours and minutes, UTC: the status message is read at a glance; the status form has the exact times.
  const at = new Date(Math.min(...planned)).toISOString().slice(11, 16);
  return `${WATCHING}${what}; next check ${at}`;
}

function contentOf(page: Extract<FetchedPage, { notModified: false }>): Partial<MonitorRow> {
  return { content: page.text, content_sha256: page.sha256, etag: page.etag, last_modified: page.lastModified };
}

function checkTimer(monitor: MonitorRow, dueAt: number): TimerRow {
  return {
    timer_id: monitorTimerId(monitor.monitor_id),
    agent_id: monitor.agent_id,
    due_at: dueAt,
    kind: MONITOR_CHECK_TIMER,
    payload: JSON.stringify({ monitor_id: monitor.monitor_id }),
  };
}

/** A monitor's id is derived from the call that created it, so a re-run after a crash finds it (UUID-shaped). */
export function monitorIdFor(agentId: string, toolCallId: string): string {
  const h = createHash('sha256').update(`${agentId}\u0000${toolCallId}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-8${h.slice(13, 16)}-${((parseInt(h[16]!, 16) & 3) | 8).toString(16)}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

function isRunnable(status: AgentStatus): boolean {
  return status === 'ACTIVE' || status === 'STARTING_UP';
}
