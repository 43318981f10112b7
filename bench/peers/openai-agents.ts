/**
 * Peer: OpenAI Agents JS (`@openai/agents-core`). One parent fans out N children with p-limit 64; each child is one
 * `runner.run(agent, goal)` of a shared Agent — what `run()` does, on a Runner with `tracingDisabled: true` — whose
 * model is a zero-latency fake implementing the package's `Model` interface (the package ships no testing model):
 * turn 1 returns a `function_call` to the `lookup` tool, turn 2 an assistant message carrying the tool's result read
 * back from the input. `maxTurns: 2`. Tracing disabled; nothing persisted (no session).
 *
 *   node --import tsx peers/openai-agents.ts --n 10000      (cwd bench/)
 */
import {
  Agent,
  Runner,
  setTracingDisabled,
  tool,
  Usage,
  type AgentInputItem,
  type Model,
  type ModelRequest,
  type ModelResponse,
  type StreamEvent,
} from '@openai/agents-core';
import pLimit from 'p-limit';
import { z } from 'zod';
import { childAnswer, childGoal, peakRssMb, report, scenarioArgs } from '../lib/measure.ts';

const CONCURRENCY = 64;
const { n } = scenarioArgs();

// Both switches: the global trace provider, and the runner's own flag (which also skips creating no-op spans).
setTracingDisabled(true);
const runner = new Runner({ tracingDisabled: true });

/** The text of the user's goal and of the last tool result in the model's input. */
function readInput(input: string | AgentInputItem[]): { goal: string; toolResult?: string } {
  if (typeof input === 'string') return { goal: input };
  let goal = '';
  let toolResult: string | undefined;
  for (const item of input) {
    if (item.type === 'function_call_result') {
      const out = item.output;
      toolResult =
        typeof out === 'string' ? out : !Array.isArray(out) && out.type === 'text' ? out.text : JSON.stringify(out);
    } else if ('role' in item && item.role === 'user') {
      goal =
        typeof item.content === 'string' ? item.content : item.content.map((c) => ('text' in c ? c.text : '')).join('');
    }
  }
  return { goal, toolResult };
}

/** A scripted model: a `lookup` call for the item named in the goal, then the tool's result as the answer. */
class FakeModel implements Model {
  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    const { goal, toolResult } = readInput(request.input);
    const usage = new Usage({ requests: 1, inputTokens: 0, outputTokens: 0, totalTokens: 0 });
    if (toolResult === undefined) {
      const item = Number(/item (\d+)/.exec(goal)![1]);
      return {
        usage,
        output: [
          {
            type: 'function_call',
            callId: `call-${item}`,
            name: 'lookup',
            status: 'completed',
            arguments: JSON.stringify({ item }),
          },
        ],
      };
    }
    return {
      usage,
      output: [
        {
          type: 'message',
          role: 'assistant',
          status: 'completed',
          content: [{ type: 'output_text', text: toolResult }],
        },
      ],
    };
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<StreamEvent> {
    throw new Error('FakeModel: streaming not used by this benchmark');
  }
}

const lookup = tool({
  name: 'lookup',
  description: 'Look up an item by number.',
  parameters: z.object({ item: z.number().int() }),
  execute: async ({ item }) => childAnswer(item),
});

const agent = new Agent({
  name: 'child',
  instructions: 'Look up the item named in the goal and report it.',
  model: new FakeModel(),
  tools: [lookup],
});

let turns = 0;
let toolCalls = 0;

async function child(i: number): Promise<string> {
  const result = await runner.run(agent, childGoal(i), { maxTurns: 2 });
  turns += result.rawResponses.length;
  toolCalls += result.newItems.filter((it) => it.type === 'tool_call_item').length;
  return String(result.finalOutput);
}

const limit = pLimit(CONCURRENCY);
const cpu0 = process.cpuUsage();
const t0 = performance.now();
const answers = await Promise.all(Array.from({ length: n }, (_, i) => limit(() => child(i))));
const wall_ms = performance.now() - t0;
const cpu = process.cpuUsage(cpu0);

let wrong = 0;
for (let i = 0; i < n; i++) if (answers[i] !== childAnswer(i)) wrong++;
if (answers.length !== n || wrong !== 0 || turns !== 2 * n || toolCalls !== n) {
  console.error(
    `peer:openai-agents: ${answers.length} answers, ${wrong} wrong, ${turns} turns, ${toolCalls} tool calls (n=${n})`,
  );
  process.exit(1);
}

report({
  name: 'peer:openai-agents',
  n,
  wall_ms: Math.round(wall_ms),
  peak_rss_mb: peakRssMb(),
  cpu_ms: Math.round((cpu.user + cpu.system) / 1000),
  turns,
  tool_calls: toolCalls,
  turns_per_s: Math.round((turns / wall_ms) * 1000),
  concurrency: CONCURRENCY,
  persistence: 'none',
  tracing: 'disabled',
});
