/**
 * @module tools/builtin/browser-agent
 * `spawn_browser_agent` (README.md#a-real-browser-spawn_browser_agent): one browser child does a task in a real
 * Chromium with tools named after Playwright MCP's (`child-tools.ts`), and the call returns its summary, final URL and
 * data, the screenshots it took (copied to the calling agent as artifacts), a replay script (a plain playwright-core
 * program of the actions it took, also an artifact) and why it stopped: `completed`, `loop_detected`, `max_steps` or
 * `failed`.
 *
 * The call writes its settings (task, start URL, allowed domains) in its durable state before it spawns, so the child's
 * tools read them from storage (they cannot come from the model), and a re-run after a crash re-attaches to the same
 * child. The browser is shared by the runtime (`browser/browser-pool.ts`); a child's context is closed when the child
 * is paused, finishes or is deleted — through the runtime's status hooks, so at once even while its model is thinking.
 */
import { createRequire } from 'node:module';
import { z } from 'zod';
import { AgentryError } from '../../../errors.js';
import {
  BrowserPool,
  CHROMIUM_FLAGS,
  PLAYWRIGHT_INSTALL_HINT,
  type BrowserPoolOptions,
} from '../../../browser/browser-pool.js';
import { findChromium } from '../../../browser/chromium-path.js';
import { replayScript } from '../../../browser/replay.js';
import type { PlatformServices } from '../../platform.js';
import { defineTool, type ChildTask, type Tool, type ToolContext } from '../../define-tool.js';
import { browserChildTools, readChildState, type BrowserCallSettings } from './child-tools.js';
import type { LoopDetectorOptions } from './loop-detector.js';
import { BROWSER_INSTRUCTIONS, BROWSER_STEPS, browserGoal } from './prompts.js';

export const BROWSER_AGENT_TOOL_NAME = 'spawn_browser_agent';
/** The child's tools, by name (submit_result is added by the runtime). */
export const BROWSER_CHILD_TOOL_NAMES = [
  'browser_navigate',
  'browser_snapshot',
  'browser_click',
  'browser_type',
  'browser_select_option',
  'browser_press_key',
  'browser_navigate_back',
  'browser_wait_for',
  'browser_take_screenshot',
] as const;

export type TerminationReason = 'completed' | 'loop_detected' | 'max_steps' | 'failed';

export interface BrowserAgentToolOptions extends BrowserPoolOptions {
  /** Credits per call (the child's model use is billed on its own). @default 1 */
  price?: number;
  /** When the loop detector ends a child. */
  loop?: LoopDetectorOptions;
  /** Characters of snapshot a child's tool result carries at most. @default 12_000 */
  snapshotChars?: number;
}

const Domain = z
  .string()
  .min(1)
  .max(253)
  .transform((d) =>
    d
      .trim()
      .toLowerCase()
      .replace(/^https?:\/\//, '')
      .replace(/^\*\./, '')
      .replace(/[/:].*$/, '')
      .replace(/\.$/, ''),
  )
  .refine((d) => /^[a-z0-9_.-]+$/.test(d), 'must be a domain name like example.com');

const Input = z.object({
  task: z
    .string()
    .max(20_000)
    .refine((t) => t.trim().length > 0, 'must not be blank')
    .describe('What to do in the browser, in full: the browser agent sees only this'),
  start_url: z.string().url().max(8_000).optional().describe('The page to start on (http or https)'),
  allowed_domains: z
    .array(Domain)
    .max(50)
    .optional()
    .describe('Domains (and their subdomains) the browser agent may navigate to; default: any public site'),
  max_steps: z
    .number()
    .int()
    .min(1)
    .max(BROWSER_STEPS)
    .optional()
    .describe(`Model turns at most (default ${BROWSER_STEPS})`),
});

const ChildResult = z.object({
  summary: z.string().describe('What was done and found'),
  final_url: z.string().describe('The URL of the page the answer is on'),
  data: z.unknown().describe('The values the task asked for, as JSON'),
});

type Output = {
  summary: string;
  final_url: string;
  data: unknown;
  screenshots: string[];
  replay_artifact_id?: string;
  termination_reason: TerminationReason;
};

type State =
  | { settings: BrowserCallSettings; phase: 'running' }
  | { settings: BrowserCallSettings; phase: 'done'; output: Output };

/** Whether playwright-core can be imported, without importing it. */
function playwrightResolvable(): boolean {
  try {
    createRequire(import.meta.url).resolve('playwright-core');
    return true;
  } catch {
    return false;
  }
}

/** The tool, with what the platform needs: readiness, the runtime's services, and deletes. */
export type BrowserAgentTool = Tool<z.input<typeof Input>> & {
  readonly pool: BrowserPool;
  readiness(): { ready: boolean; detail: string };
  /** Takes the runtime's services: storage for the child's state, status hooks to close contexts on pause. */
  attach(services: PlatformServices): void;
  agentsDeleted(agentIds: readonly string[]): Promise<void>;
  close(): Promise<void>;
};

/**
 * The spawn_browser_agent tool. Register it through `builtinTools` (it needs the runtime's storage and status hooks).
 *
 * @example
 * const runtime = await AgentRuntime.open({
 *   builtinTools: { browser: { executablePath: '/usr/bin/chromium' }, fetch: { allow: ['127.0.0.1/32'] } },
 * });
 */
export function browserAgentTool(options: BrowserAgentToolOptions): BrowserAgentTool {
  const pool = new BrowserPool(options);
  let services: PlatformServices | undefined;

  const tool = defineTool({
    name: BROWSER_AGENT_TOOL_NAME,
    description:
      'Hand a task that needs a real web browser (forms, clicks, pages rendered by JavaScript, multi-step flows) to ' +
      'a browser sub-agent, and get back its summary, the final URL, the data it extracted, its screenshots (as ' +
      'artifacts) and a replay script. Give `start_url` to start there and `allowed_domains` to keep it on those sites.',
    input: Input,
    price: options.price ?? 1,
    // A re-run re-attaches to the same child (spawns are keyed by the call); the output, once made, is in the state.
    idempotent: true,
    lane: 'browser',
    childTools: browserChildTools({
      pool,
      services: () => services,
      ...(options.loop ? { loop: options.loop } : {}),
      ...(options.snapshotChars !== undefined ? { snapshotChars: options.snapshotChars } : {}),
    }),
    describe: ({ task }) => `Browsing: ${task.length > 80 ? `${task.slice(0, 77)}...` : task}`,
    async run(raw, ctx) {
      const input = Input.parse(raw);
      const state = await ctx.state.get<State>();
      if (state?.phase === 'done') return state.output;
      const ready = readiness();
      if (!ready.ready) throw new AgentryError('not_configured', `${BROWSER_AGENT_TOOL_NAME}: ${ready.detail}`);
      if (!services) {
        throw new AgentryError(
          'not_configured',
          `${BROWSER_AGENT_TOOL_NAME} needs the runtime's services: register it through builtinTools, not as a custom tool`,
        );
      }
      if (input.start_url !== undefined) {
        const host = new URL(input.start_url).hostname;
        const protocol = new URL(input.start_url).protocol;
        if (protocol !== 'http:' && protocol !== 'https:') {
          throw new AgentryError('invalid_request', `start_url must be http or https, not ${protocol}`);
        }
        const domains = input.allowed_domains;
        if (domains && domains.length > 0 && !domains.some((d) => host === d || host.endsWith(`.${d}`))) {
          throw new AgentryError('invalid_request', `start_url ${input.start_url} is outside allowed_domains`);
        }
      }
      const settings: BrowserCallSettings = {
        task: input.task,
        ...(input.start_url !== undefined ? { start_url: input.start_url } : {}),
        ...(input.allowed_domains !== undefined ? { allowed_domains: input.allowed_domains } : {}),
      };
      // Before the spawn: the child's first tool call reads them.
      if (!state) await ctx.state.set({ settings, phase: 'running' } satisfies State);
      const task: ChildTask = {
        goal: browserGoal(input.task, input.start_url, input.allowed_domains),
        instructions: BROWSER_INSTRUCTIONS,
        tools: [...BROWSER_CHILD_TOOL_NAMES],
        result: ChildResult,
        maxSteps: Math.min(input.max_steps ?? BROWSER_STEPS, BROWSER_STEPS),
      };
      const spawned = await ctx.spawn([task]);
      const done = (spawned.counts.COMPLETED ?? 0) + (spawned.counts.FAILED ?? 0);
      if (done < spawned.total) return ctx.suspend(`Browsing: ${input.task.slice(0, 80)}`, spawned.spawn_id);
      const output = await finish(ctx, services, spawned.spawn_id, input);
      await ctx.state.set({ settings, phase: 'done', output } satisfies State);
      return output;
    },
  });

  async function finish(
    ctx: ToolContext,
    svc: PlatformServices,
    spawnId: string,
    input: z.output<typeof Input>,
  ): Promise<Output> {
    const { results } = await ctx.subAgentResults(spawnId, { offset: 0, limit: 1 });
    const child = results[0];
    if (!child) throw new AgentryError('internal_error', 'the browser child was not found after spawning it');
    await pool.release(child.agent_id);
    const childState = await readChildState(svc, child.agent_id);
    const submitted = ChildResult.safeParse(child.data);
    const loop = (child.data as { termination_reason?: string } | undefined)?.termination_reason === 'loop_detected';
    let reason: TerminationReason = 'completed';
    if (loop) reason = 'loop_detected';
    else if (child.status !== 'COMPLETED') {
      const row = await svc.storage.getAgent(child.agent_id);
      reason = /step limit/.test(row?.status_message ?? '') ? 'max_steps' : 'failed';
    }
    // The screenshots become the caller's artifacts: what the call returns must outlive nothing but the caller.
    const screenshots: string[] = [];
    for (const id of childState?.screenshots ?? []) {
      const art = await svc.storage.getArtifact(child.agent_id, id);
      if (!art) continue;
      const kept = await ctx.artifacts.put({ name: art.row.name, mime_type: 'image/png', data: art.data });
      screenshots.push(kept.artifact_id);
    }
    let replayId: string | undefined;
    const steps = childState?.steps ?? [];
    if (reason === 'completed' && steps.length > 0) {
      const where = findChromium({
        ...(options.executablePath !== undefined ? { executablePath: options.executablePath } : {}),
        ...(options.env !== undefined ? { env: options.env } : {}),
      });
      const script = replayScript(steps, {
        executablePath: where.found ? where.path : 'chromium',
        task: input.task,
        flags: CHROMIUM_FLAGS,
      });
      replayId = (await ctx.artifacts.put({ name: 'replay.mjs', mime_type: 'text/javascript', data: script }))
        .artifact_id;
    }
    const summary = submitted.success
      ? submitted.data.summary
      : `The browser agent did not submit a result (${child.status})${child.result ? `: ${child.result}` : '.'}`;
    return {
      summary,
      final_url: submitted.success ? submitted.data.final_url : (childState?.last_url ?? ''),
      data: submitted.success ? (submitted.data.data ?? null) : null,
      screenshots,
      ...(replayId ? { replay_artifact_id: replayId } : {}),
      termination_reason: reason,
    };
  }

  function readiness(): { ready: boolean; detail: string } {
    const r = pool.readiness();
    if (!r.ready) return r;
    if (!options.loadPlaywright && !playwrightResolvable()) {
      return { ready: false, detail: `playwright-core is missing: ${PLAYWRIGHT_INSTALL_HINT}` };
    }
    return r;
  }

  return Object.assign(tool, {
    pool,
    readiness,
    attach(s: PlatformServices) {
      services = s;
      // Pause, completion, failure, out of credits: whatever stops a child closes its context at once.
      s.events.statusHooks.push((row) => {
        if (row.status !== 'ACTIVE' && pool.has(row.agent_id)) void pool.release(row.agent_id);
      });
    },
    async agentsDeleted(agentIds: readonly string[]) {
      await Promise.all(agentIds.filter((id) => pool.has(id)).map((id) => pool.release(id)));
    },
    close: () => pool.close(),
  }) as BrowserAgentTool;
}
