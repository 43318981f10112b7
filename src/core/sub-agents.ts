/**
 * @module core/sub-agents
 * Sub-agents: the `spawn_sub_agents` and `read_sub_agent_results` tools and the coordinator that
 * wakes a parent when its children are done.
 *
 * Waiting is durable and cheap. A parent whose children are still running suspends its tool call: the call stays
 * unfinished in storage, the parent gives up its run slot, and the coordinator keeps one small record per waiting
 * parent. Child status events count down; when they may all be done, one authoritative count from storage decides.
 * Waking re-runs the spawn call, which finds its children by their spawn keys instead of spawning again — the same
 * path a parent takes after a crash.
 */
import { randomUUID } from 'node:crypto';
import { newAgentId } from './ids.js';
import { z } from 'zod';
import type { AgentRow, StorageAdapter } from '../storage/adapter.js';
import type { WorkerBus } from '../storage/workers.js';
import {
  defineTool,
  type ChildTask,
  type SpawnedSubAgents,
  type SubAgentTask,
  type Tool,
} from '../tools/define-tool.js';
import type { ChildSpec } from '../storage/adapter.js';
import { isoTime, type Clock } from '../base/clock.js';
import type { RuntimeEvents } from './events.js';
import { changeStatus } from './status-change.js';
import { progressWhileWaiting } from './plan.js';
import { toStatusForm } from './records.js';
import { MAX_GOAL_LENGTH } from './schemas.js';
import { RUNNABLE_STATUSES, type AgentStatus } from '../base/status.js';

export const SPAWN_TOOL_NAME = 'spawn_sub_agents';
export const READ_RESULTS_TOOL_NAME = 'read_sub_agent_results';
export const MAX_SUB_AGENTS_PER_CALL = 10_000;
/**
 * Children written per transaction (see {@link SubAgentCoordinator.spawn}). A chunk's rows live until its commit
 * returns; a chunk of 256 is built and committed between two young-generation collections and dies young, where
 * 1,000 rows outlived them and were promoted to the old generation as garbage: fanout-10k promotes ~70 MB over its
 * run instead of ~98 MB, and V8 grows the old generation by what it promotes. Smaller chunks promote hardly less
 * (128: ~68 MB) and cost PostgreSQL more round trips.
 */
export const SPAWN_CHUNK = 256;
/** Results shown with the spawn summary; the rest are paged with `read_sub_agent_results`. */
const FIRST_RESULTS = 10;
const MAX_RESULT_CHARS = 2_000;

/** A plain sub-agent's task, or a child with its own instructions, tools and result schema. */
export type SpawnTask = SubAgentTask | ChildTask;

export interface SubAgentResult {
  index: number;
  agent_id: string;
  status: AgentStatus;
  /** The child's last ASSISTANT message (its answer), clipped. */
  result: string | null;
  /** For a child with a result schema that completed: the result it submitted, whole. */
  data?: unknown;
}

/** What the loop needs from the sub-agent machinery, as seen by a tool call. */
export interface SubAgentHost {
  /** Creates the children of a tool call in one transaction, or finds them if they exist already. */
  spawn(parent: AgentRow, spawnId: string, tasks: SpawnTask[], traceContext?: string | null): Promise<SpawnedSubAgents>;
  /** Registers a parent whose `spawnId` call suspended, so it is woken when its children are done. */
  waitFor(parentId: string, spawnId: string): void;
  results(
    parentId: string,
    spawnId: string,
    offset: number,
    limit: number,
  ): Promise<{ total: number; results: SubAgentResult[] }>;
}

interface Wait {
  spawnId: string;
  /** Children still runnable at the last count. */
  remaining: number;
  total: number;
  /** Children that stopped running since the last count. */
  events: number;
  counting: boolean;
  countAgain: boolean;
}

export interface SubAgentOptions {
  models: readonly string[];
  /** Depth of the deepest agent that may still spawn (a root agent is depth 0). */
  maxDepth: number;
  /** The spec stored on a child with its own tools (checked against the runtime's tool catalog). */
  specOf(task: ChildTask): ChildSpec;
  kick(agentId: string): void;
  onError(error: unknown, agentId: string): void;
  /**
   * Several workers (storage/workers.ts): children may finish in another process, whose status events never reach
   * this one. That process announces the parent on the bus (`children`), and waiting parents are counted again;
   * `recountMs` is the backstop for a lost announcement. Absent: one process drives every agent.
   */
  shared?: { bus: WorkerBus; recountMs: number };
}

export function spawnKeyPrefix(spawnId: string): string {
  return `${spawnId}#`;
}

export class SubAgentCoordinator implements SubAgentHost {
  private readonly waits = new Map<string, Wait>();

  constructor(
    private readonly storage: StorageAdapter,
    private readonly clock: Clock,
    private readonly events: RuntimeEvents,
    private readonly options: SubAgentOptions,
  ) {
    events.statusHooks.push(this.onStatus);
    const shared = options.shared;
    if (shared) {
      // Another process's child finished: count the parent again if it waits here (all waits after a reconnect).
      shared.bus.subscribe('children', (parentIds) => {
        for (const id of parentIds ?? [...this.waits.keys()]) if (this.waits.has(id)) void this.count(id);
      });
      this.recounter = setInterval(() => {
        for (const id of this.waits.keys()) void this.count(id);
      }, shared.recountMs);
      this.recounter.unref();
    }
  }

  private recounter: NodeJS.Timeout | undefined;

  /** Stops the backstop recount (several workers). */
  close(): void {
    clearInterval(this.recounter);
  }

  /** Parents waiting on children in this process. */
  get waitingCount(): number {
    return this.waits.size;
  }

  /**
   * Children are written in transactions of {@link SPAWN_CHUNK}, in task order, and each chunk starts as soon as it is
   * saved. Memory stays bounded by one chunk however large the fan-out, and a spawn cut short by a crash is completed
   * when the recovered parent runs the call again: spawn keys are `<call id>#<task index>`, and the children that
   * exist are exactly the first ones.
   */
  async spawn(
    parent: AgentRow,
    spawnId: string,
    tasks: SpawnTask[],
    /** The spawning call's span context: the children's spans join the parent's trace under it. */
    traceContext: string | null = null,
  ): Promise<SpawnedSubAgents> {
    const prefix = spawnKeyPrefix(spawnId);
    const existing = await this.storage.countChildrenByStatus(parent.agent_id, prefix);
    const existingTotal = Object.values(existing).reduce((a, b) => a + (b ?? 0), 0);
    if (existingTotal >= tasks.length) {
      return { spawn_id: spawnId, total: existingTotal, counts: existing, reattached: true };
    }
    if (existingTotal === 0) {
      for (const task of tasks) {
        if (task.model !== undefined && !this.options.models.includes(task.model)) {
          throw new Error(`unknown model ${JSON.stringify(task.model)}; use one of: ${this.options.models.join(', ')}`);
        }
      }
      const depth = await this.depthOf(parent);
      if (depth >= this.options.maxDepth) {
        throw new Error(
          `sub-agents may not spawn deeper than ${this.options.maxDepth} level(s); do this work yourself`,
        );
      }
    }
    for (let from = existingTotal; from < tasks.length; from += SPAWN_CHUNK) {
      await this.insertChildren(parent, prefix, tasks, from, Math.min(tasks.length, from + SPAWN_CHUNK), traceContext);
    }
    const counts = { ...existing, STARTING_UP: (existing.STARTING_UP ?? 0) + tasks.length - existingTotal };
    return { spawn_id: spawnId, total: tasks.length, counts, reattached: existingTotal > 0 };
  }

  private async insertChildren(
    parent: AgentRow,
    prefix: string,
    tasks: SpawnTask[],
    from: number,
    to: number,
    traceContext: string | null,
  ): Promise<void> {
    const now = isoTime(this.clock.now());
    const rows: AgentRow[] = [];
    // Children of one call mostly share a spec (their goals differ): it is built once per distinct result schema,
    // instructions, tools and step limit, not once per child.
    const specs = new Map<unknown, Map<string, string>>();
    const specText = (task: ChildTask) => {
      let byShape = specs.get(task.result);
      if (!byShape) specs.set(task.result, (byShape = new Map()));
      const tools = task.tools.map((t) => (typeof t === 'string' ? t : t.name));
      const shape = JSON.stringify([task.instructions, tools, task.maxSteps ?? null]);
      let text = byShape.get(shape);
      if (text === undefined) byShape.set(shape, (text = JSON.stringify(this.options.specOf(task))));
      return text;
    };
    for (let i = from; i < to; i++) {
      const task = tasks[i]!;
      rows.push({
        agent_id: newAgentId(),
        account_id: parent.account_id,
        parent_id: parent.agent_id,
        root_id: parent.root_id,
        spawn_key: `${prefix}${i}`,
        goal: task.goal,
        model: task.model ?? parent.model,
        status: 'STARTING_UP',
        progress: 0,
        status_message: 'Waiting for a run slot',
        token_count: 0,
        message_count: 1,
        credits_spent: 0,
        sub_agent_count: 0,
        max_credits: null,
        tree_spent: 0,
        tree_reserved: 0,
        step_count: 0,
        started: false,
        active_ms: 0,
        active_since: null,
        plan: null,
        spec: isChildTask(task) ? specText(task) : null,
        created_at: now,
        updated_at: now,
        trace_context: traceContext,
      });
    }
    await this.storage.insertAgents(
      rows,
      rows.map((r) => ({
        message_id: randomUUID(),
        agent_id: r.agent_id,
        role: 'USER' as const,
        text: r.goal,
        timestamp: now,
      })),
      rows.map((r) => ({
        agent_id: r.agent_id,
        idx: 0,
        role: 'user' as const,
        content: JSON.stringify([{ type: 'text', text: r.goal }]),
        created_at: now,
      })),
    );
    const hasListeners = this.events.listenerCount('agent.created') > 0;
    for (const r of rows) {
      if (hasListeners) this.events.emit('agent.created', { agent: toStatusForm(r) });
      this.options.kick(r.agent_id);
    }
  }

  waitFor(parentId: string, spawnId: string): void {
    this.waits.set(parentId, { spawnId, remaining: Infinity, total: 0, events: 0, counting: false, countAgain: false });
    // Children that finished between the spawn call's read and now sent no event this wait saw: count once now.
    void this.count(parentId);
  }

  async results(
    parentId: string,
    spawnId: string,
    offset: number,
    limit: number,
  ): Promise<{ total: number; results: SubAgentResult[] }> {
    const prefix = spawnKeyPrefix(spawnId);
    const counts = await this.storage.countChildrenByStatus(parentId, prefix);
    const total = Object.values(counts).reduce((a, b) => a + (b ?? 0), 0);
    const page = await this.storage.findAgentsBySpawnKey(parentId, prefix, { offset, limit });
    const results = await Promise.all(
      page.map(async (child, i) => {
        const messages = await this.storage.listMessages(child.agent_id);
        const answer = messages.findLast((m) => m.role === 'ASSISTANT');
        const result: SubAgentResult = {
          index: offset + i,
          agent_id: child.agent_id,
          status: child.status,
          result: answer ? clip(answer.text, MAX_RESULT_CHARS) : null,
        };
        // A child with a spec completes only through submit_result, whose validated input is its last message.
        if (child.spec !== null && child.status === 'COMPLETED' && answer) result.data = JSON.parse(answer.text);
        return result;
      }),
    );
    return { total, results };
  }

  /** The two tools agents use. */
  tools(): Tool[] {
    return [createSpawnTool(), createReadResultsTool()] as Tool[];
  }

  private readonly onStatus = (agent: AgentRow, previous: AgentStatus): void => {
    const parentId = agent.parent_id;
    if (!parentId) return;
    if (!RUNNABLE_STATUSES.includes(previous) || RUNNABLE_STATUSES.includes(agent.status)) return;
    const wait = this.waits.get(parentId);
    if (!wait) {
      // The parent may wait in another process (several workers): tell it. The bus sends a parent once per batch.
      this.options.shared?.bus.publish('children', parentId);
      return;
    }
    wait.events++;
    // Count again when all may be done, and about 20 times over a fan-out for the parent's progress.
    if (wait.events >= wait.remaining || wait.events >= Math.max(1, Math.floor(wait.total / 20)))
      void this.count(parentId);
  };

  private async count(parentId: string): Promise<void> {
    const wait = this.waits.get(parentId);
    if (!wait) return;
    if (wait.counting) {
      wait.countAgain = true;
      return;
    }
    wait.counting = true;
    try {
      do {
        wait.countAgain = false;
        wait.events = 0;
        await this.decide(parentId, wait);
      } while (wait.countAgain && this.waits.get(parentId) === wait);
    } catch (err) {
      this.options.onError(err, parentId);
    } finally {
      wait.counting = false;
    }
  }

  private async decide(parentId: string, wait: Wait): Promise<void> {
    const counts = await this.storage.countChildrenByStatus(parentId, spawnKeyPrefix(wait.spawnId));
    const n = (s: AgentStatus) => counts[s] ?? 0;
    const total = Object.values(counts).reduce((a, b) => a + (b ?? 0), 0);
    const running = n('ACTIVE') + n('STARTING_UP');
    wait.total = total;
    wait.remaining = running;
    const parent = await this.storage.getAgent(parentId);
    if (!parent) {
      this.waits.delete(parentId);
      return;
    }
    if (running === 0 && n('OUT_OF_CREDITS') > 0) {
      // The tree ran out: the parent stops too, and a resume of it resumes the children.
      this.waits.delete(parentId);
      await changeStatus(
        this.deps(),
        parent,
        'exhaust_credits',
        { status_message: `Out of credits: ${describeChildren(counts, total)}` },
        { mark: true },
      );
      return;
    }
    if (running === 0 && n('PAUSED') === 0) {
      this.waits.delete(parentId);
      this.options.kick(parentId);
      return;
    }
    const message =
      running === 0
        ? `Waiting: ${describeChildren(counts, total)}`
        : `Waiting for ${running.toLocaleString('en-US')} of ${describeChildren(counts, total)}`;
    // Only children that finished for good move the bar: one out of credits or paused will run again.
    const done = n('COMPLETED') + n('FAILED');
    const progress = progressWhileWaiting(parent.plan, total === 0 ? 0 : done / total);
    // A paused parent keeps saying it is paused.
    if (parent.status !== 'ACTIVE' || (parent.status_message === message && parent.progress === progress)) return;
    const result = await this.storage.commitStep({
      agent_id: parentId,
      patch: { status_message: message, progress, updated_at: isoTime(this.clock.now()) },
    });
    if (result.agent && this.events.listenerCount('agent.progress') > 0) {
      this.events.emit('agent.progress', { agent: toStatusForm(result.agent) });
    }
  }

  private deps() {
    return { storage: this.storage, clock: this.clock, events: this.events };
  }

  private async depthOf(agent: AgentRow): Promise<number> {
    let depth = 0;
    let current: AgentRow | null = agent;
    while (current?.parent_id) {
      depth++;
      current = await this.storage.getAgent(current.parent_id);
    }
    return depth;
  }
}

const SpawnInput = z.object({
  tasks: z
    .array(
      z.object({
        goal: z
          .string()
          .trim()
          .min(1)
          .max(MAX_GOAL_LENGTH)
          .describe('What this sub-agent should achieve, self-contained'),
        model: z.string().optional().describe('Model for this sub-agent; defaults to yours'),
      }),
    )
    .min(1)
    .max(MAX_SUB_AGENTS_PER_CALL),
});

function createSpawnTool(): Tool<z.infer<typeof SpawnInput>> {
  return defineTool({
    name: SPAWN_TOOL_NAME,
    description:
      `Start 1 to ${MAX_SUB_AGENTS_PER_CALL.toLocaleString('en-US')} sub-agents, one per task, that work in parallel, ` +
      'and wait until all of them are done. Returns counts by status and the first results; page through the rest ' +
      `with ${READ_RESULTS_TOOL_NAME}. Sub-agents spend from the same credit budget as you.`,
    input: SpawnInput,
    price: 0.1,
    // Re-running re-attaches to the children it spawned (they are keyed by this call), so it is safe to repeat.
    idempotent: true,
    describe: ({ tasks }) => `Starting ${tasks.length.toLocaleString('en-US')} sub-agents`,
    async run({ tasks }, ctx) {
      const { total, counts } = await ctx.spawn(tasks);
      // Stopped children (paused, out of credits) are not done: the coordinator decides what the parent does.
      const running = total - (counts.COMPLETED ?? 0) - (counts.FAILED ?? 0);
      if (running > 0) {
        return ctx.suspend(
          `Waiting for ${running.toLocaleString('en-US')} of ${total.toLocaleString('en-US')} sub-agents`,
        );
      }
      const { results } = await ctx.subAgentResults(ctx.toolCallId, { offset: 0, limit: FIRST_RESULTS });
      return {
        spawn_id: ctx.toolCallId,
        total,
        counts,
        results,
        ...(total > results.length
          ? {
              more:
                `Showing ${results.length} of ${total} results. Call ${READ_RESULTS_TOOL_NAME} with ` +
                `{"spawn_id": "${ctx.toolCallId}", "offset": ${results.length}} for more.`,
            }
          : {}),
      };
    },
  });
}

const ReadResultsInput = z.object({
  spawn_id: z.string().min(1).max(200).describe('The spawn_id returned by spawn_sub_agents'),
  offset: z.number().int().min(0).default(0),
  limit: z.number().int().min(1).max(100).default(20),
});

function createReadResultsTool(): Tool<z.input<typeof ReadResultsInput>> {
  return defineTool({
    name: READ_RESULTS_TOOL_NAME,
    description: 'Page through the results of sub-agents started by spawn_sub_agents.',
    input: ReadResultsInput,
    price: 0,
    idempotent: true,
    describe: () => 'Reading sub-agent results',
    async run(input, ctx) {
      const { spawn_id, offset, limit } = ReadResultsInput.parse(input);
      const page = await ctx.subAgentResults(spawn_id, { offset, limit });
      if (page.total === 0) throw new Error(`no sub-agents were spawned by ${JSON.stringify(spawn_id)}`);
      return { spawn_id, total: page.total, offset, results: page.results };
    },
  });
}

/** "1,000 sub-agents: 812 completed, 3 failed, 185 out of credits" (running children are left to the caller). */
export function describeChildren(counts: Partial<Record<AgentStatus, number>>, total: number): string {
  const parts: string[] = [];
  for (const [status, words] of CHILD_OUTCOME_WORDS) {
    const n = counts[status] ?? 0;
    if (n > 0) parts.push(`${n.toLocaleString('en-US')} ${words}`);
  }
  const head = `${total.toLocaleString('en-US')} sub-agent${total === 1 ? '' : 's'}`;
  return parts.length > 0 ? `${head}: ${parts.join(', ')}` : head;
}

const CHILD_OUTCOME_WORDS: ReadonlyArray<[AgentStatus, string]> = [
  ['COMPLETED', 'completed'],
  ['FAILED', 'failed'],
  ['OUT_OF_CREDITS', 'out of credits'],
  ['PAUSED', 'paused'],
];

function isChildTask(task: SpawnTask): task is ChildTask {
  return 'instructions' in task;
}

function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)} [… ${text.length - max} more characters]`;
}
