/**
 * The console's test bed: a runtime (memory storage, or a SQLite file that {@link ConsoleBed.restart} reopens) with a
 * scripted model whose behaviour the goal picks, two accounts, and the HTTP server (console on) on an ephemeral port.
 * Goals:
 * - `[hold]`: the model turn never ends on its own (pause aborts it; resume starts it again), for pause/resume/delete;
 * - `[gate]`: one turn that waits for `release('<goal marker>')`, then answers;
 * - `[steps]`: three turns, each waiting for `release`, each saying "step N" (the restart test);
 * - `[xss]`: a tool call and an artifact whose input, result, name and final text all carry {@link XSS};
 * - `[fanout N]`: spawns N children (goals `[child] item i`), then answers once they are done;
 * - `[fanout-gate N tag]`: spawns N children with goals `[gate tag-i] item i`, each answering once the test releases
 *   its marker `[gate tag-i]` (a run that moves at the test's pace);
 * - `[child]`: answers after 0.8 to 1.6 s of real time, so that a tree of them runs for a few seconds;
 * - anything else: answers "Done." at once.
 */
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { AgentRuntime, defineTool, memoryStorage, sqliteStorage, type ModelProvider, type Tool } from 'agentry-runtime';
import { startServer, type RunningServer } from 'agentry-runtime/http';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import type { AgentRow } from '../../src/storage/adapter.js';

/** Everything the console must show as text and never run or load. */
export const XSS =
  `<img src="http://127.0.0.1:9/img.png" onerror="alert('img')"><script>alert('script')</script>` +
  `<a href="javascript:alert('link')">link</a> [md link](javascript:alert('md')) ![md img](http://127.0.0.1:9/md.png)` +
  `<svg onload="alert('svg')"></svg>`;

export interface Account {
  id: string;
  key: string;
}

export interface ConsoleBed {
  /** The runtime now (a new one after {@link ConsoleBed.restart}). */
  runtime: AgentRuntime;
  /** http://127.0.0.1:<port> */
  origin: string;
  a: Account;
  b: Account;
  /** Lets the waiting turn of agents whose goal contains `marker` answer. */
  release(marker: string): void;
  /** The markers whose turns wait for their gate now (their model call is in flight). */
  waitingGates(): string[];
  /**
   * Stops the server and the runtime, then `whileDown()`, then opens a new runtime on the same SQLite file and serves
   * it on the same port: a restart of the whole server process, as far as the browser can tell. SQLite beds only.
   */
  restart(whileDown: () => void | Promise<void>): Promise<void>;
  close(): Promise<void>;
}

const xssTool: Tool = defineTool({
  name: 'show_payload',
  description: 'Echoes a payload and keeps it as an artifact.',
  input: z.object({ payload: z.string() }),
  price: 0.5,
  idempotent: true,
  run: async ({ payload }, ctx) => {
    await ctx.artifacts.put({ name: `${payload}.html`, mime_type: 'text/html', data: payload });
    return { echoed: payload, html: XSS };
  },
});

const noteTool: Tool = defineTool({
  name: 'note',
  description: 'Notes a step.',
  input: z.object({ step: z.number() }),
  price: 0.1,
  idempotent: true,
  run: async ({ step }) => ({ noted: step }),
});

/**
 * A model whose turns end at once when their request is aborted, even while the script waits on a gate (the script
 * never sees the signal): a paused agent or a closing runtime is not held up by a gate opened later.
 */
function abortable(model: ModelProvider): ModelProvider {
  return {
    models: model.models,
    generate(request, options) {
      const answer = model.generate(request, options);
      answer.catch(() => {}); // an answer nobody waits for any more
      const aborted = new Promise<never>((_, reject) => {
        const fail = () => reject(Object.assign(new Error('The model request was aborted'), { name: 'AbortError' }));
        if (options.signal.aborted) fail();
        else options.signal.addEventListener('abort', fail, { once: true });
      });
      return Promise.race([answer, aborted]);
    },
  };
}

export async function openConsoleBed(options: { sqlitePath?: string } = {}): Promise<ConsoleBed> {
  const gates = new Map<string, { promise: Promise<void>; resolve: () => void; released: boolean }>();
  const gate = (key: string) => {
    let g = gates.get(key);
    if (!g) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      g = { promise, resolve, released: false };
      gates.set(key, g);
    }
    return g;
  };
  const waiting = new Set<string>();
  const newModel = () =>
    scriptedModel({
      record: false,
      turns: async (request, { turnIndex }): Promise<ScriptedTurn> => {
        const goal = JSON.stringify(request.messages[0] ?? '');
        const marker = /\[(?:gate|steps)[^\]]*\]/.exec(goal)?.[0];
        if (goal.includes('[hold]')) return { text: 'holding', delayMs: 3_600_000 };
        const child = /\[child\] item (\d+)/.exec(goal);
        if (child) return { text: `Item ${child[1]} checked.`, delayMs: 800 + (Number(child[1]) % 5) * 200 };
        // Children that hold their model call's credits for good: on a small balance, the others wait for credits.
        const holding = /\[fanout-hold (\d+)\]/.exec(goal);
        if (holding) {
          const tasks = Array.from({ length: Number(holding[1]) }, (_, i) => ({ goal: `[hold] item ${i + 1}` }));
          return turnIndex === 0
            ? { text: 'Spawning.', toolCalls: [{ name: 'spawn_sub_agents', input: { tasks } }] }
            : { text: 'Done.' };
        }
        const gated = /\[fanout-gate (\d+) ([\w-]+)\]/.exec(goal);
        if (gated) {
          const tasks = Array.from({ length: Number(gated[1]) }, (_, i) => ({
            goal: `[gate ${gated[2]}-${i + 1}] item ${i + 1}`,
          }));
          return turnIndex === 0
            ? {
                text: `Spawning ${tasks.length} gated checks.`,
                toolCalls: [{ name: 'spawn_sub_agents', input: { tasks } }],
              }
            : { text: 'All items checked.' };
        }
        const fanout = /\[fanout (\d+)\]/.exec(goal);
        if (fanout) {
          const n = Number(fanout[1]);
          return turnIndex === 0
            ? {
                text: `Spawning ${n} checks.`,
                toolCalls: [
                  {
                    name: 'spawn_sub_agents',
                    input: { tasks: Array.from({ length: n }, (_, i) => ({ goal: `[child] item ${i + 1}` })) },
                  },
                ],
              }
            : { text: 'All items checked.' };
        }
        if (goal.includes('[gate') && marker) {
          waiting.add(marker);
          await gate(marker).promise.finally(() => waiting.delete(marker));
          return { text: 'Finished: the answer is 42.' };
        }
        if (goal.includes('[steps') && marker) {
          await gate(`${marker}#${turnIndex}`).promise;
          return turnIndex < 2
            ? { text: `step ${turnIndex + 1}`, toolCalls: [{ name: 'note', input: { step: turnIndex + 1 } }] }
            : { text: 'step 3: all done' };
        }
        if (goal.includes('[xss]')) {
          return turnIndex === 0
            ? { text: XSS, toolCalls: [{ name: 'show_payload', input: { payload: XSS } }] }
            : { text: `${XSS}\n\n# Heading\n[another](javascript:alert('md2'))` };
        }
        return { text: 'Done.' };
      },
    });
  const openRuntime = () =>
    AgentRuntime.open({
      storage: options.sqlitePath === undefined ? memoryStorage() : sqliteStorage({ path: options.sqlitePath }),
      model: abortable(newModel()),
      tools: [xssTool, noteTool],
      builtinTools: false,
      // Held turns wait on gates the runtime cannot see; a close aborts them at once.
      closeTimeoutMs: 50,
    });
  let runtime = await openRuntime();
  const created = await Promise.all(
    ['alpha', 'beta'].map(async (name) => {
      const { account, apiKey } = await runtime.accounts.create({ name, credits: 1_000 });
      return { id: account.account_id, key: apiKey!.key };
    }),
  );
  let server: RunningServer | null = await startServer(runtime, { port: 0, console: true });
  const port = server.port;
  const bed: ConsoleBed = {
    runtime,
    origin: server.url,
    a: created[0]!,
    b: created[1]!,
    release(marker) {
      const g = gate(marker);
      g.released = true;
      g.resolve();
    },
    waitingGates: () => [...waiting],
    async restart(whileDown) {
      await server?.close();
      server = null;
      await runtime.close();
      await whileDown();
      runtime = await openRuntime();
      bed.runtime = runtime;
      server = await startServer(runtime, { port, console: true });
    },
    async close() {
      await server?.close();
      // Held turns end with their agents.
      for (const agent of (await runtime.list({ limit: 1000 })).data) {
        await runtime.delete(agent.agent_id).catch(() => {});
      }
      await runtime.close();
    },
  };
  return bed;
}

/** A parent (PAUSED) with `n` children (finished or paused), written straight to storage: nothing runs. */
export async function insertTree(runtime: AgentRuntime, accountId: string, n: number): Promise<string> {
  const now = new Date().toISOString();
  const base = (id: string): AgentRow => ({
    agent_id: id,
    account_id: accountId,
    parent_id: null,
    root_id: id,
    spawn_key: null,
    goal: 'Check 10,000 items',
    model: 'svc-1-lite',
    status: 'PAUSED',
    progress: 0.5,
    status_message: `Waiting for ${n} sub-agents`,
    token_count: 0,
    message_count: 1,
    credits_spent: 0,
    sub_agent_count: 0,
    max_credits: null,
    tree_spent: 0,
    tree_reserved: 0,
    step_count: 1,
    started: true,
    active_ms: 0,
    active_since: null,
    plan: null,
    spec: null,
    created_at: now,
    updated_at: now,
  });
  const parentId = randomUUID();
  await runtime.storage.insertAgents(
    [base(parentId)],
    [{ message_id: randomUUID(), agent_id: parentId, role: 'USER', text: 'Check 10,000 items', timestamp: now }],
    [],
  );
  const statuses = ['COMPLETED', 'COMPLETED', 'COMPLETED', 'FAILED', 'PAUSED'] as const;
  for (let from = 0; from < n; from += 1000) {
    const rows: AgentRow[] = [];
    for (let i = from; i < Math.min(n, from + 1000); i += 1) {
      rows.push({
        ...base(randomUUID()),
        parent_id: parentId,
        root_id: parentId,
        spawn_key: `toolu_fanout#${i}`,
        goal: `Child task number ${i + 1}: check item ${i + 1}`,
        status: statuses[i % statuses.length]!,
        progress: 1,
        started: true,
      });
    }
    await runtime.storage.insertAgents(rows, [], []);
  }
  return parentId;
}

/** Polls `check` until true or the deadline (no fixed sleeps). */
export async function eventually(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Signs in over HTTP, as the page does; returns the `Cookie` header value. */
export async function signIn(origin: string, key: string): Promise<string> {
  const response = await fetch(`${origin}/console/api/session`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', origin },
    body: JSON.stringify({ api_key: key }),
  });
  if (response.status !== 200) throw new Error(`sign-in answered ${response.status}`);
  return response.headers.get('set-cookie')!.split(';')[0]!;
}
