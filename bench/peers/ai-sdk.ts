/**
 * Peer: Vercel AI SDK. One parent fans out N children with p-limit 64; each child is one `generateText` call
 * against AI SDK's own mock model (`MockLanguageModelV3` from `ai/test`) with one `lookup` tool and
 * `stopWhen: stepCountIs(2)`: turn 1 calls `lookup`, turn 2 answers with the tool's result read back from the
 * prompt. Nothing is persisted.
 *
 *   node --import tsx peers/ai-sdk.ts --n 10000      (cwd bench/)
 */
import type { LanguageModelV3CallOptions, LanguageModelV3GenerateResult } from '@ai-sdk/provider';
import { generateText, stepCountIs, tool } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import pLimit from 'p-limit';
import { z } from 'zod';
import { childAnswer, childGoal, peakRssMb, report, scenarioArgs } from '../lib/measure.ts';

const CONCURRENCY = 64;
const { n } = scenarioArgs();

const usage = {
  inputTokens: { total: 0, noCache: 0, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 0, text: 0, reasoning: 0 },
};

/** The text of the last tool result in the prompt, if any. */
function lastToolResult(options: LanguageModelV3CallOptions): string | undefined {
  for (let m = options.prompt.length - 1; m >= 0; m--) {
    const msg = options.prompt[m]!;
    if (msg.role !== 'tool') continue;
    for (const part of msg.content) {
      if (part.type !== 'tool-result') continue;
      const out = part.output;
      if (out.type === 'text') return out.value;
      if (out.type === 'json') return String(out.value);
    }
  }
  return undefined;
}

/** A zero-latency scripted model for child `i`: a tool call first, then the tool's result as the final text. */
function childModel(i: number): MockLanguageModelV3 {
  return new MockLanguageModelV3({
    doGenerate: async (options): Promise<LanguageModelV3GenerateResult> => {
      const result = lastToolResult(options);
      if (result === undefined) {
        return {
          content: [
            { type: 'tool-call', toolCallId: `call-${i}`, toolName: 'lookup', input: JSON.stringify({ item: i }) },
          ],
          finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
          usage,
          warnings: [],
        };
      }
      return {
        content: [{ type: 'text', text: result }],
        finishReason: { unified: 'stop', raw: 'stop' },
        usage,
        warnings: [],
      };
    },
  });
}

const lookup = tool({
  description: 'Look up an item by number.',
  inputSchema: z.object({ item: z.number().int() }),
  execute: async ({ item }) => childAnswer(item),
});

let turns = 0;
let toolCalls = 0;

async function child(i: number): Promise<string> {
  const result = await generateText({
    model: childModel(i),
    prompt: childGoal(i),
    tools: { lookup },
    stopWhen: stepCountIs(2),
  });
  turns += result.steps.length;
  toolCalls += result.steps.reduce((k, s) => k + s.toolCalls.length, 0);
  return result.text;
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
    `peer:ai-sdk: ${answers.length} answers, ${wrong} wrong, ${turns} turns, ${toolCalls} tool calls (n=${n})`,
  );
  process.exit(1);
}

report({
  name: 'peer:ai-sdk',
  n,
  wall_ms: Math.round(wall_ms),
  peak_rss_mb: peakRssMb(),
  cpu_ms: Math.round((cpu.user + cpu.system) / 1000),
  turns,
  tool_calls: toolCalls,
  turns_per_s: Math.round((turns / wall_ms) * 1000),
  concurrency: CONCURRENCY,
  persistence: 'none',
});
