/**
 * @module tools/builtin/monitor
 * The `monitor` tool (README.md#watching-pages-monitor): `create` a durable watch of a page (or a part of it), `list`
 * and `cancel` them, and `wait` until one reports a change that matters — the wait gives up the agent's run slot and
 * survives restarts. The checks themselves run between calls (service.ts), on durable timers, through the guarded
 * fetch. With `render: true` a page is checked as the browser renders it (its scripts ran), when the browser is
 * available.
 */
import { z } from 'zod';
import { AgentryError } from '../../../errors.js';
import { defineTool, type Tool } from '../../define-tool.js';
import { toMonitorInfo } from '../../monitors.js';
import type { PlatformServices } from '../../platform.js';
import type { CheckFetch } from './check.js';
import {
  DEFAULT_MIN_INTERVAL_S,
  MONITOR_PRICE,
  MONITOR_TOOL_NAME,
  MonitorService,
  watchingMessage,
} from './service.js';

export { MonitorService, watchingMessage, monitorIdFor, MONITOR_TOOL_NAME, MONITOR_PRICE } from './service.js';
export type { MonitorChange } from './service.js';
export { normaliseVolatile } from './normalise.js';

const MonitorInput = z.object({
  action: z.enum(['create', 'list', 'cancel', 'wait']),
  url: z
    .url({ protocol: /^https?$/ })
    .optional()
    .describe('create'),
  selector: z.string().min(1).max(500).optional().describe('create: CSS selector to watch; default main text'),
  ignore_selectors: z.array(z.string().min(1).max(500)).max(50).optional().describe('create: parts to leave out'),
  condition: z.string().min(1).max(1_000).optional().describe('create: e.g. "price below 50"'),
  interval_s: z.number().int().positive().max(31_536_000).optional().describe('create: default 3600'),
  // Checked here rather than with z.iso.datetime(), whose JSON Schema pattern alone is 500 bytes of every request.
  until: z
    .string()
    .max(40)
    .refine((v) => /^\d{4}-\d{2}-\d{2}T/.test(v) && !Number.isNaN(Date.parse(v)), 'must be an ISO 8601 date-time')
    .optional()
    .describe('ISO 8601. create: monitor ends; wait: stop waiting'),
  monitor_id: z.string().min(1).max(100).optional().describe('cancel; wait: only this one'),
  render: z.boolean().optional().describe('create: check the page as the browser renders it'),
});

export type MonitorToolInput = z.infer<typeof MonitorInput>;

export interface MonitorToolOptions {
  /** The platform's guarded fetch, for the checks that run between calls. */
  fetch: CheckFetch;
  /**
   * Reads a page as the browser renders it, for monitors created with `render: true`; absent or failing with a message
   * naming what to install when there is no browser.
   */
  render?: CheckFetch;
  /** Where `AGENTRY_MONITOR_MIN_INTERVAL_S` is read. @default process.env */
  env?: NodeJS.ProcessEnv;
}

/** The tool, with what the platform calls to lend it the runtime's services. */
export type MonitorTool = Tool<MonitorToolInput> & {
  attach(services: PlatformServices): void;
  readonly minIntervalS: number;
};

/**
 * The monitor tool. The built-in platform (src/builtins.ts) makes one, attaches it when the runtime opens, and hands
 * it the guarded fetch.
 *
 * @example
 * const tool = monitorTool({ fetch: guardedFetch });
 * // agent: {"action": "create", "url": "https://shop.example/widget", "selector": ".price", "condition": "below 50"}
 * // agent: {"action": "wait"} -> {"monitor_id": "…", "url": "…", "diff_summary": "Changed: \"$59\" → \"$45\"", …}
 */
export function monitorTool(options: MonitorToolOptions): MonitorTool {
  const minIntervalS = minIntervalFrom(options.env ?? process.env);
  const service = new MonitorService(options.fetch, minIntervalS, options.render);
  const tool = defineTool<MonitorToolInput>({
    name: MONITOR_TOOL_NAME,
    description:
      'Watch web pages for changes. create: start a monitor, returns at once. wait: sleep until a monitor sees a ' +
      'change that matters -> {monitor_id, url, diff_summary, changed_at}, or {timed_out: true} after `until`; call ' +
      `it again to keep watching. list, cancel. Interval at least ${minIntervalS} s; ${MONITOR_PRICE} credits a check.`,
    input: MonitorInput,
    price: MONITOR_PRICE,
    // Every action is safe to repeat: create is keyed by the call, wait keeps the change it took in the call's state.
    idempotent: true,
    describe: (input) =>
      input.action === 'create'
        ? `Setting up a monitor of ${input.url ?? 'a page'}`
        : input.action === 'wait'
          ? 'Waiting for a change'
          : input.action === 'cancel'
            ? 'Cancelling a monitor'
            : 'Listing monitors',
    async run(input, ctx) {
      const agentId = ctx.agent.agent_id;
      switch (input.action) {
        case 'create': {
          if (!input.url) throw new Error('create needs `url`');
          const row = await service.create(
            agentId,
            ctx.toolCallId,
            {
              url: input.url,
              selector: input.selector,
              ignore_selectors: input.ignore_selectors,
              condition: input.condition,
              interval_s: input.interval_s,
              until: input.until,
              render: input.render,
            },
            (url, init) => ctx.fetch(url, init),
            ctx.signal,
          );
          return {
            ...toMonitorInfo(row),
            watching: clip(row.content ?? '', 300),
            note: 'Created. Call monitor with action "wait" to sleep until it reports a change.',
          };
        }
        case 'list':
          return { monitors: (await service.list(agentId)).map(toMonitorInfo) };
        case 'cancel': {
          if (!input.monitor_id) throw new Error('cancel needs `monitor_id`');
          return toMonitorInfo(await service.cancel(agentId, input.monitor_id));
        }
        case 'wait': {
          const change = await service.takeChange(agentId, input.monitor_id, ctx.state);
          if (change) return { ...change };
          const monitors = (await service.list(agentId)).filter(
            (m) => m.status === 'active' && (input.monitor_id === undefined || m.monitor_id === input.monitor_id),
          );
          if (monitors.length === 0) {
            if (
              input.monitor_id !== undefined &&
              !(await service.list(agentId)).some((m) => m.monitor_id === input.monitor_id)
            ) {
              throw new Error(`no monitor ${JSON.stringify(input.monitor_id)} of yours`);
            }
            return { timed_out: true, reason: 'no active monitor is left' };
          }
          // The wait ends at `until`, or when the last of the monitors ends (each with an `until`).
          const ends = monitors.map((m) => (m.until === null ? Infinity : Date.parse(m.until)));
          const deadline = Math.min(input.until === undefined ? Infinity : Date.parse(input.until), Math.max(...ends));
          if (service.now() >= deadline) return { timed_out: true };
          return ctx.waitUntil(watchingMessage(monitors)!, Number.isFinite(deadline) ? { until: deadline } : {});
        }
      }
    },
  });
  return Object.assign(tool, {
    attach: (services: PlatformServices) => service.attach(services),
    minIntervalS,
  });
}

function minIntervalFrom(env: NodeJS.ProcessEnv): number {
  const raw = env['AGENTRY_MONITOR_MIN_INTERVAL_S']?.trim();
  if (!raw) return DEFAULT_MIN_INTERVAL_S;
  const n = Number(raw);
  if (!Number.isFinite(n) || n <= 0) {
    throw new AgentryError(
      'invalid_request',
      `AGENTRY_MONITOR_MIN_INTERVAL_S must be a positive number of seconds; got ${JSON.stringify(raw)}`,
    );
  }
  return n;
}

function clip(s: string, max: number): string {
  return s.length <= max ? s : `${s.slice(0, max - 1)}…`;
}
