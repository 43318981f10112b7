/**
 * Peer: LangGraph.js. One graph invocation: a `parent` node fans out N children with `Send`; each child makes two turns
 * of a zero-latency scripted chat model (a `BaseChatModel` that answers a tool call first, then the tool's result as
 * text) with one `lookup` tool between them, and the parent collects the N answers through a reducer. Compiled with the
 * SQLite checkpointer (`SqliteSaver`) on a fresh temp file and run with `maxConcurrency: 64`; the default
 * recursionLimit (25) suffices, as supersteps, not tasks, count against it.
 *
 * Two shapes of child (`--shape`, see `nodesGraph` and `subgraphGraph`): `nodes` (default) — two nodes of the parent
 * graph, `agent` and `tools`, that a child moves between by `Send`; `subgraph` — a compiled agent-loop subgraph per
 * child, every step of which is checkpointed in its own namespace (about 4x the cost of `nodes`).
 *
 *   node --import tsx peers/langgraph.ts --n 10000      (cwd bench/)
 */
import { setMaxListeners } from 'node:events';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { BaseLanguageModelInput } from '@langchain/core/language_models/base';
import { BaseChatModel, type BindToolsInput } from '@langchain/core/language_models/chat_models';
import { AIMessage, HumanMessage, ToolMessage, type AIMessageChunk, type BaseMessage } from '@langchain/core/messages';
import type { ChatResult } from '@langchain/core/outputs';
import type { Runnable } from '@langchain/core/runnables';
import { tool } from '@langchain/core/tools';
import { Annotation, Command, END, MessagesAnnotation, Send, START, StateGraph } from '@langchain/langgraph';
import { SqliteSaver } from '@langchain/langgraph-checkpoint-sqlite';
import { ToolNode } from '@langchain/langgraph/prebuilt';
import type { Database } from 'better-sqlite3';
import { z } from 'zod';
import { childAnswer, childGoal, peakRssMb, report, scenarioArgs } from '../lib/measure.ts';

const CONCURRENCY = 64;
const { n } = scenarioArgs();
const shape = String(
  parseArgs({ options: { shape: { type: 'string', default: 'nodes' } }, strict: false }).values.shape,
);
if (shape !== 'nodes' && shape !== 'subgraph') throw new Error(`--shape must be nodes or subgraph, not ${shape}`);
// Every running task (and, with --shape subgraph, every runnable inside a running child) races the run's AbortSignal
// (@langchain/core raceWithSignal). The listeners are removed as they finish (checked: 1 left after a run), but with
// 64 tasks in flight there are hundreds at once and Node warns (MaxListenersExceededWarning). Only the warning is off.
setMaxListeners(0);

let turns = 0;
let toolCalls = 0;

/**
 * A zero-latency scripted chat model (the fakes in `@langchain/core/utils/testing` replay one fixed list for every
 * caller, so they cannot serve 10,000 children with different goals): if the last message is a tool result, answer
 * with it; otherwise call `lookup` for the item named in the goal.
 */
class ScriptedChatModel extends BaseChatModel {
  _llmType(): string {
    return 'scripted';
  }

  override bindTools(_tools: BindToolsInput[]): Runnable<BaseLanguageModelInput, AIMessageChunk> {
    return this as unknown as Runnable<BaseLanguageModelInput, AIMessageChunk>;
  }

  async _generate(messages: BaseMessage[]): Promise<ChatResult> {
    turns++;
    const last = messages[messages.length - 1]!;
    if (ToolMessage.isInstance(last)) {
      const text = String(last.content);
      return { generations: [{ text, message: new AIMessage(text) }] };
    }
    const goal = String(messages.find((m) => HumanMessage.isInstance(m))!.content);
    const item = Number(/item (\d+)/.exec(goal)![1]);
    const message = new AIMessage({
      content: '',
      tool_calls: [{ id: `call-${item}`, name: 'lookup', args: { item }, type: 'tool_call' }],
    });
    return { generations: [{ text: '', message }] };
  }
}

const lookup = tool(
  async ({ item }: { item: number }) => {
    toolCalls++;
    return childAnswer(item);
  },
  { name: 'lookup', description: 'Look up an item by number.', schema: z.object({ item: z.number().int() }) },
);

interface Answer {
  i: number;
  text: string;
}
const answersChannel = () =>
  Annotation<Answer[]>({
    reducer: (acc, add) => acc.concat(add),
    default: () => [],
  });

const ParentState = Annotation.Root({ n: Annotation<number>(), answers: answersChannel() });
/** What a child carries from one of its steps to the next (the payload of its `Send`s). */
interface ChildTask {
  i: number;
  messages: BaseMessage[];
}
const model = new ScriptedChatModel({}).bindTools([lookup]);
const firstTask = (i: number): ChildTask => ({ i, messages: [new HumanMessage(childGoal(i))] });

/**
 * shape `nodes` (default): each child is two nodes of the parent graph, `agent` and `tools`, and moves from one to
 * the other by a `Send` carrying its messages (`Command({ goto: Send })`). All children advance together, one
 * superstep per turn; each superstep is one checkpoint, and every task's writes (the messages) are stored.
 */
function nodesGraph() {
  return new StateGraph(ParentState)
    .addNode(
      'parent',
      (state) => new Command({ goto: Array.from({ length: state.n }, (_, i) => new Send('agent', firstTask(i))) }),
      {
        ends: ['agent'],
      },
    )
    .addNode(
      'agent',
      async (state) => {
        const { i, messages } = state as unknown as ChildTask;
        const message = (await model.invoke(messages)) as AIMessage;
        if (message.tool_calls?.length)
          return new Command({ goto: new Send('tools', { i, messages: [...messages, message] }) });
        return new Command({ update: { answers: [{ i, text: String(message.content) }] } });
      },
      { ends: ['tools'] },
    )
    .addNode(
      'tools',
      async (state) => {
        const { i, messages } = state as unknown as ChildTask;
        const calls = (messages[messages.length - 1] as AIMessage).tool_calls ?? [];
        const results: ToolMessage[] = await Promise.all(
          calls.map((call) => lookup.invoke({ ...call, type: 'tool_call' as const })),
        );
        return new Command({ goto: new Send('agent', { i, messages: [...messages, ...results] }) });
      },
      { ends: ['agent'] },
    )
    .addEdge(START, 'parent');
}

/**
 * shape `subgraph`: each child is the usual agent loop (model <-> ToolNode) compiled as a subgraph and added as the
 * parent's `child` node; the parent `Send`s N tasks to it. Each child is its own Pregel run whose every superstep is
 * checkpointed under the child's namespace (5 checkpoints per child). The model node's final text is also written to
 * `answers`, which the subgraph returns to the parent's reducer.
 */
function subgraphGraph() {
  const ChildState = Annotation.Root({
    ...MessagesAnnotation.spec,
    i: Annotation<number>(),
    answers: answersChannel(),
  });
  const childGraph = new StateGraph(ChildState)
    .addNode('model', async (state) => {
      const message = (await model.invoke(state.messages)) as AIMessage;
      if (message.tool_calls?.length) return { messages: [message] };
      return { messages: [message], answers: [{ i: state.i, text: String(message.content) }] };
    })
    .addNode('tools', new ToolNode([lookup]))
    .addEdge(START, 'model')
    .addConditionalEdges(
      'model',
      (state) => ((state.messages[state.messages.length - 1] as AIMessage).tool_calls?.length ? 'tools' : END),
      ['tools', END],
    )
    .addEdge('tools', 'model')
    .compile();
  return new StateGraph(ParentState)
    .addNode(
      'parent',
      (state) => new Command({ goto: Array.from({ length: state.n }, (_, i) => new Send('child', firstTask(i))) }),
      {
        ends: ['child'],
      },
    )
    .addNode('child', childGraph)
    .addEdge(START, 'parent');
}

const dir = mkdtempSync(join(tmpdir(), 'peer-langgraph-'));
const dbPath = join(dir, 'checkpoints.db');
const checkpointer = SqliteSaver.fromConnString(dbPath);
const graph = (shape === 'subgraph' ? subgraphGraph() : nodesGraph()).compile({ checkpointer });

const cpu0 = process.cpuUsage();
const t0 = performance.now();
const final = await graph.invoke(
  { n, answers: [] },
  { configurable: { thread_id: 'peer-langgraph' }, maxConcurrency: CONCURRENCY },
);
const wall_ms = performance.now() - t0;
const cpu = process.cpuUsage(cpu0);

const answers = new Array<string | undefined>(n);
for (const a of final.answers) answers[a.i] = a.text;
let wrong = 0;
for (let i = 0; i < n; i++) if (answers[i] !== childAnswer(i)) wrong++;

const db = (checkpointer as unknown as { db: Database }).db;
const count = (table: string) => (db.prepare(`SELECT count(*) AS c FROM ${table}`).get() as { c: number }).c;
const checkpoints = count('checkpoints');
const writes = count('writes');
db.close();
const dbMb =
  ['', '-wal'].reduce((s, suffix) => {
    try {
      return s + statSync(dbPath + suffix).size;
    } catch {
      return s;
    }
  }, 0) /
  2 ** 20;
rmSync(dir, { recursive: true, force: true });

if (final.answers.length !== n || wrong !== 0 || turns !== 2 * n || toolCalls !== n) {
  console.error(
    `peer:langgraph: ${final.answers.length} answers, ${wrong} wrong, ${turns} turns, ${toolCalls} tool calls (n=${n})`,
  );
  process.exit(1);
}

report({
  name: 'peer:langgraph',
  n,
  wall_ms: Math.round(wall_ms),
  peak_rss_mb: peakRssMb(),
  cpu_ms: Math.round((cpu.user + cpu.system) / 1000),
  turns,
  tool_calls: toolCalls,
  turns_per_s: Math.round((turns / wall_ms) * 1000),
  concurrency: CONCURRENCY,
  shape,
  persistence: 'sqlite checkpointer',
  checkpoints,
  checkpoint_writes: writes,
  db_mb: Math.round(dbMb * 10) / 10,
});
