/**
 * No pattern of a model runs on the runtime's event loop. A coding child greps adversarial
 * lines with catastrophic patterns (`^(a+)+$` on 28 `a`s and a `!` took the old in-process `Grep` 9.5 s per line,
 * doubling with each `a`) and globs with a pattern whose regular expression backtracked exponentially (it ran in the
 * sandbox until its 30 s limit; the matcher is now a linear-time NFA, so it answers at once). Meanwhile another agent
 * keeps taking steps, and HTTP requests, a poll and a route of the router's own thread, answer within 100 ms (95th
 * percentile, see below), and the event loop's delay stays within it.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  AgentRuntime,
  defineTool,
  sqliteStorage,
  type ModelRequest,
  type Tool,
  type ToolResultBlock,
} from 'agentry-runtime';
import { startServer } from 'agentry-runtime/http';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { bubblewrapSandbox } from '../../src/sandbox/bubblewrap.js';
import { CODE_AGENT_TOOL_NAME, codeAgentTool } from '../../src/tools/builtin/code-agent/index.js';
import { CODER_INSTRUCTIONS } from '../../src/tools/builtin/code-agent/prompts.js';
import { ripgrepReadiness } from '../../src/tools/builtin/code-agent/ripgrep.js';
import { skippable } from '../support/skip.js';

const sandbox = bubblewrapSandbox();
const probe = await sandbox.probe();
const strict = process.env.AGENTRY_CI_STRICT === '1';
/** Grep is ripgrep in the sandbox: without `rg` the test skips here, saying so (and fails under strict). */
const rg = ripgrepReadiness();
const skipReason = !probe.ok ? probe.reason : !rg.ready ? rg.detail : null;
const BOUND_MS = 100;

function p95(values: number[]): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return Math.round(sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.95))]!);
}
const TICK_MS = 50;

let base: string;
beforeAll(async () => {
  base = await mkdtemp(join(tmpdir(), 'agentry-grep-'));
  await chmod(base, 0o755);
});
afterAll(() => rm(base, { recursive: true, force: true }));

const DEEP = Array.from({ length: 24 }, () => 'a').join('/');
const SETUP = [
  `python3 -c "open('big.txt','w').write(('a'*28+'!\\n')*20000 + ('a'*3000+'\\n')*50 + ('ab '*2000+'!\\n')*50)"`,
  `mkdir -p ${DEEP} && touch ${DEEP}/b`,
].join(' && ');
const CATASTROPHIC = ['^(a+)+$', '(a|aa)+!$', '(a*)*b', '^(\\w+\\s?)*$', '^(a|a?)+$'];
const BACKTRACKING_GLOB = `${Array.from({ length: 20 }, () => '**/').join('')}z`;

describe('Grep and Glob patterns never run on the event loop', () => {
  // What the test below needs, each a test of its own: skipped with the reason on a user's machine without it, a
  // failure under AGENTRY_CI_STRICT=1.
  it.skipIf(!probe.ok && !strict)(
    skippable('bubblewrap works here (needed by the test below)', !strict && !probe.ok && probe.reason),
    () => {
      expect(probe).toEqual({ ok: true });
    },
  );
  it.skipIf(!rg.ready && !strict)(
    skippable(
      'ripgrep (rg) is installed (needed by the test below: Grep is ripgrep)',
      !strict && !rg.ready && rg.detail,
    ),
    () => {
      expect(rg).toMatchObject({ ready: true });
    },
  );

  it.skipIf(skipReason !== null && !strict)(
    skippable(
      'catastrophic patterns on adversarial lines: another agent steps, a poll and a route answer within 100 ms',
      !strict && skipReason,
    ),
    async () => {
      let window: { start: number; end?: number } | undefined;
      let coderResults: ToolResultBlock[] = [];
      const otherSteps: number[] = [];
      const tick = defineTool({
        name: 'tick',
        description: 'Waits a moment.',
        input: z.object({}),
        idempotent: true,
        run: () => new Promise((resolve) => setTimeout(() => resolve('tick'), TICK_MS)),
      });
      const script = (req: ModelRequest, { turnIndex }: { turnIndex: number }): ScriptedTurn => {
        if (req.system === CODER_INSTRUCTIONS) {
          if (turnIndex === 0) return { toolCalls: [{ name: 'Bash', input: { command: SETUP } }] };
          if (turnIndex === 1) {
            window = { start: performance.now() };
            return {
              toolCalls: [
                ...CATASTROPHIC.map((pattern) => ({ name: 'Grep', input: { pattern, path: 'big.txt' } })),
                { name: 'Glob', input: { pattern: BACKTRACKING_GLOB } },
              ],
            };
          }
          window!.end = performance.now();
          coderResults = (req.messages.at(-1)!.content as ToolResultBlock[]).filter((b) => b.type === 'tool_result');
          return { toolCalls: [{ name: 'submit_result', input: { summary: 'Grepped.' } }] };
        }
        if (JSON.stringify(req.messages[0]).includes('Tick until')) {
          otherSteps.push(performance.now());
          return window?.end === undefined ? { toolCalls: [{ name: 'tick', input: {} }] } : { text: 'Ticked.' };
        }
        if (turnIndex === 0) return { toolCalls: [{ name: CODE_AGENT_TOOL_NAME, input: { task: 'Grep.' } }] };
        return { text: 'Done.' };
      };
      const runtime = await AgentRuntime.open({
        storage: sqliteStorage({ path: join(base, 'agentry.db') }),
        model: scriptedModel({ turns: script }),
        builtinTools: false,
        tools: [codeAgentTool({ dataDir: join(base, 'data'), sandbox }) as Tool, tick as Tool],
        limits: { maxSteps: 10_000 },
      });
      const { account, apiKey } = await runtime.accounts.create({ name: 't', credits: 1_000_000, subscribe: true });
      const server = await startServer(runtime, { port: 0, rateLimit: false });
      const headers = { 'x-api-key': apiKey!.key };
      const delay = monitorEventLoopDelay({ resolution: 10 });
      try {
        const lead = await runtime.create({ goal: 'Get some grepping done', accountId: account.account_id });
        await new Promise<void>((resolve) => {
          const wait = () => (window ? resolve() : setTimeout(wait, 5));
          wait();
        });
        await runtime.create({ goal: 'Tick until told to stop', accountId: account.account_id });
        delay.enable();

        const answers: number[] = [];
        while (window!.end === undefined) {
          for (const url of [`${server.url}/api/agents/${lead.agent_id}`, `${server.url}/api/agents`]) {
            const started = performance.now();
            const r = await fetch(url, { headers });
            await r.arrayBuffer();
            expect(r.status).toBe(200);
            answers.push(performance.now() - started);
          }
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        delay.disable();

        expect((await runtime.waitFor(lead.agent_id, { signal: AbortSignal.timeout(120_000) })).status).toBe(
          'COMPLETED',
        );

        // The greps ran (ripgrep: linear, done in a blink); so did the glob (an NFA: no backtracking).
        const greps = coderResults.slice(0, CATASTROPHIC.length);
        const glob = coderResults.at(-1);
        expect(greps.map((r) => r.is_error === true)).toEqual(CATASTROPHIC.map(() => false));
        expect(greps[0]!.content).toMatch(/^big\.txt:20001:a{300}…$/m); // ^(a+)+$: the lines of a's only
        expect(greps[1]!.content).toMatch(/^big\.txt:1:a{28}!$/m);
        expect(greps[1]!.content).toMatch(/\(19800 more matches\)$/);
        expect(glob).toMatchObject({ content: 'No files found.' });
        expect(glob!.is_error).not.toBe(true);

        const during = otherSteps.filter((t) => t >= window!.start && t <= window!.end!);
        const gaps = during.slice(1).map((t, i) => t - during[i]! - TICK_MS);
        const report = {
          window_ms: Math.round(window!.end! - window!.start),
          other_steps: during.length,
          step_overhead_p95_ms: p95(gaps),
          step_overhead_max_ms: Math.round(Math.max(0, ...gaps)),
          http_answers: answers.length,
          http_p95_ms: p95(answers),
          http_max_ms: Math.round(Math.max(...answers)),
          event_loop_delay_p95_ms: Math.round(delay.percentile(95) / 1e6),
          event_loop_delay_max_ms: Math.round(delay.max / 1e6),
        };
        console.log(`grep/glob window: ${JSON.stringify(report)}`);
        // Within 100 ms, as answers go on a shared CI host: its 95th percentile. The maximum is held to a second, as
        // scheduling on a loaded host stalls any process that long now and then, grep or no grep (the same test with
        // `sleep 20` in place of the patterns shows the same stalls); the old in-process Grep stalled for minutes.
        expect(report.step_overhead_p95_ms).toBeLessThan(BOUND_MS);
        expect(report.http_p95_ms).toBeLessThan(BOUND_MS);
        expect(report.event_loop_delay_p95_ms).toBeLessThan(BOUND_MS);
        expect(report.event_loop_delay_max_ms).toBeLessThan(1_000);
        expect(report.http_max_ms).toBeLessThan(1_000);
      } finally {
        await server.close();
        await runtime.close();
      }
    },
    180_000,
  );
});
