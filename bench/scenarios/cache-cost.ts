/**
 * cache-cost: what prompt caching does to the credits a run costs. The real runtime drives the real
 * `@anthropic-ai/sdk` client against agentry's stand-in Messages API with its prompt-cache simulation (breakpoints,
 * the 20-block lookback, minimum length, entries readable once their writer answers, 5-minute TTL), once with caching
 * on and once with `promptCache: false`, and reports the credits of both and their ratio.
 *
 * - `--kind long` (`long-run-cost`): one svc-1-ultra agent, 20 turns, each reading 12 KB (`read_document`).
 * - `--kind fanout` (`fanout-1k-cost`): a svc-1-lite parent spawns `--n` svc-1-ultra children; each calls one tool,
 *   then answers; every call takes `--latency` ms, as a real one does. Also reports the children's input cost ratio
 *   and how many times their shared tools+system prefix was written.
 *
 *   node .build/scenarios/cache-cost.js --kind long
 *   npx tsx bench/scenarios/cache-cost.ts --kind fanout --n 1000      (from the root, on the sources)
 */
import { parseArgs } from 'node:util';
import { z } from '../lib/library-zod.js';
import {
  AgentRuntime,
  anthropicProvider,
  defineTool,
  memoryStorage,
  type ModelProvider,
  type ModelUsage,
} from 'agentry-runtime';
import { fakePromptCache, startFakeAnthropic, type FakeMessagesRequest, type FakeReply } from 'agentry-runtime/testing';
import { peakRssMb, report } from '../lib/measure.js';

const { values } = parseArgs({
  options: {
    kind: { type: 'string', default: 'long' },
    n: { type: 'string', default: '1000' },
    turns: { type: 'string', default: '20' },
    latency: { type: 'string', default: '250' },
  },
  strict: false,
});
const kind = String(values.kind);
const n = Number(values.n);
const turns = Number(values.turns);
const latency = Number(values.latency);

const PAGE = Array.from({ length: 200 }, (_, i) => `Line ${i}: the committee reviewed the findings and noted the gaps.`)
  .join('\n')
  .slice(0, 12_000);
const readDocument = defineTool({
  name: 'read_document',
  description: 'Reads one part of the document under study',
  input: z.object({ part: z.number().int() }),
  price: 0,
  idempotent: true,
  run: ({ part }) => `Part ${part}\n${PAGE}`,
});
const lookup = defineTool({
  name: 'lookup',
  description: 'Looks an item up',
  input: z.object({ item: z.number().int() }),
  price: 0,
  idempotent: true,
  run: ({ item }) => `item ${item} is fine`,
});

const goalOf = (body: FakeMessagesRequest): string => {
  const first = body.messages[0]?.content;
  return typeof first === 'string' ? first : String((Array.isArray(first) ? first[0]?.text : '') ?? '');
};

function handler(body: FakeMessagesRequest): FakeReply {
  const turn = Math.floor(body.messages.length / 2);
  const goal = goalOf(body);
  if (kind === 'long') {
    return turn < turns - 1
      ? { content: [{ type: 'tool_use', name: 'read_document', input: { part: turn } }], usage: { output_tokens: 40 } }
      : { text: 'The findings are consistent.', usage: { output_tokens: 40 } };
  }
  if (goal === 'fan out') {
    return turn === 0
      ? {
          content: [
            {
              type: 'tool_use',
              name: 'spawn_sub_agents',
              input: { tasks: Array.from({ length: n }, (_, i) => ({ goal: `child ${i}`, model: 'svc-1-ultra' })) },
            },
          ],
        }
      : { text: 'all done' };
  }
  const i = Number(goal.slice(6));
  return turn === 0
    ? {
        content: [{ type: 'tool_use', name: 'lookup', input: { item: i } }],
        usage: { output_tokens: 10 },
        delayMs: latency,
      }
    : { text: `answer ${i}`, usage: { output_tokens: 5 }, delayMs: latency };
}

interface RunResult {
  credits: number;
  childInputMicros: number;
  childInputUncachedMicros: number;
  prefixWrites: number;
  wallMs: number;
}

async function runOnce(promptCache: boolean): Promise<RunResult> {
  const cache = fakePromptCache();
  const fake = await startFakeAnthropic({ handler, promptCache: cache });
  const base = anthropicProvider({ baseURL: fake.url, apiKey: 'bench', maxRetries: 0, promptCache });
  const childUsage: ModelUsage[] = [];
  const model: ModelProvider = {
    ...base,
    generate: async (request, options) => {
      const response = await base.generate(request, options);
      const first = request.messages[0]?.content[0];
      if (first?.type === 'text' && first.text.startsWith('child ')) childUsage.push(response.usage);
      return response;
    },
  };
  const runtime = await AgentRuntime.open({
    storage: memoryStorage(),
    model,
    tools: kind === 'long' ? [readDocument] : [lookup],
    defaultAccount: { id: 'local', credits: 1_000_000 },
  });
  const started = performance.now();
  try {
    const { agent_id } =
      kind === 'long'
        ? await runtime.create({ goal: 'Study the document part by part', model: 'svc-1-ultra' })
        : await runtime.create({ goal: 'fan out', model: 'svc-1-lite' });
    const agent = await runtime.waitFor(agent_id);
    if (agent.status !== 'COMPLETED') throw new Error(`the run ended ${agent.status}: ${agent.status_message}`);
    const wallMs = performance.now() - started;
    const ledger = await runtime.storage.listLedger('local');
    const spent = -ledger.filter((l) => l.amount < 0).reduce((sum, l) => sum + l.amount, 0);
    const ultraInput = 500; // micro-credits per token of svc-1-ultra input (the default price table)
    const input = (u: ModelUsage) => u.inputTokens + (u.cacheReadInputTokens ?? 0) + (u.cacheCreationInputTokens ?? 0);
    return {
      credits: spent / 1e6,
      childInputMicros: childUsage.reduce(
        (sum, u) =>
          sum +
          u.inputTokens * ultraInput +
          (u.cacheCreationInputTokens ?? 0) * ultraInput * 1.25 +
          (u.cacheReadInputTokens ?? 0) * ultraInput * 0.1,
        0,
      ),
      childInputUncachedMicros: childUsage.reduce((sum, u) => sum + input(u) * ultraInput, 0),
      prefixWrites: cache.writes.filter((w) => w.region === 'prefix' && w.model.startsWith('claude-opus')).length,
      wallMs,
    };
  } finally {
    await runtime.close();
    await fake.close();
  }
}

const round = (x: number, digits = 3) => Math.round(x * 10 ** digits) / 10 ** digits;
const on = await runOnce(true);
const off = await runOnce(false);
report({
  name: kind === 'long' ? 'long-run-cost' : 'fanout-1k-cost',
  n: kind === 'long' ? 1 : n,
  wall_ms: Math.round(on.wallMs + off.wallMs),
  peak_rss_mb: peakRssMb(),
  credits_cached: round(on.credits, 2),
  credits_uncached: round(off.credits, 2),
  cost_ratio: round(on.credits / off.credits),
  ...(kind === 'long'
    ? { turns }
    : {
        child_input_ratio: round(on.childInputMicros / on.childInputUncachedMicros),
        prefix_writes_cached: on.prefixWrites,
        prefix_writes_uncached: off.prefixWrites,
      }),
});
