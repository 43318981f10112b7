/**
 * fanout (and latency, with --latency): `--parents` root agents each spawn `--n` children through spawn_sub_agents;
 * each child takes 2 model turns (one tool call, then its answer) with the scripted model; SQLite file on disk,
 * every message persisted. Prints wall time, child steps/s and peak RSS. With `--credits`, the account holds only that
 * much: the run must still complete every child (credits under contention).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from '../lib/library-zod.js';
import {
  AgentRuntime,
  defineTool,
  memoryStorage,
  sqliteStorage,
  type ModelProvider,
  type ModelRequest,
  type StorageAdapter,
} from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { childAnswer, childGoal, peakRssMb, report, scenarioArgs, startGcMeasure } from '../lib/measure.js';

export interface FanoutOptions {
  n: number;
  parents: number;
  /** Milliseconds per model call (0 = a zero-latency model). */
  latency: number;
  /** Concurrency of the model lane (and run slots). */
  lane: number;
  /**
   * The account's credits. A small balance (contention-1k) makes most children wait for credits that other children's
   * calls hold: every child must still complete.
   * @default 1e9
   */
  credits?: number;
  /** Records OpenTelemetry spans (an SDK provider, a batch processor, an exporter that drops them). */
  tracing?: boolean;
  /** The storage to run on (pg-fanout: PostgreSQL); default a fresh SQLite file on disk. */
  storage?: () => StorageAdapter;
  /** Called once the runtime is open, before the clock starts (the poll scenario mounts HTTP here). */
  onOpen?: (runtime: AgentRuntime) => Promise<void> | void;
  /** Called when every root has finished, before the runtime closes (the poll scenario stops its load here). */
  onFinished?: () => Promise<void> | void;
}

const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;

/** Spans recorded and batched as in production, then dropped by the exporter (counted, for the result). */
let spansExported = 0;
let tracerProvider: { forceFlush(): Promise<void> } | undefined;
async function droppingTracerProvider() {
  const { TracerProvider, BatchSpanProcessor } = await import('@opentelemetry/sdk-trace');
  const exporter = {
    export(spans: unknown[], done: (r: { code: number }) => void) {
      spansExported += spans.length;
      done({ code: 0 });
    },
    shutdown: async () => undefined,
  };
  const provider = new TracerProvider({ spanProcessors: [new BatchSpanProcessor({ exporter: exporter as never })] });
  tracerProvider = provider;
  return provider;
}

export async function runFanout(o: FanoutOptions): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(tmpdir(), 'agentry-bench-'));
  const lookup = defineTool({
    name: 'lookup',
    description: 'Looks an item up',
    input: z.object({ item: z.number() }),
    idempotent: true,
    run: ({ item }) => childAnswer(item),
  });
  const delay = o.latency > 0 ? { delayMs: o.latency } : {};
  const model = scriptedModel({
    record: false,
    turns: (req, { turnIndex }): ScriptedTurn => {
      const goal = goalOf(req);
      if (goal.startsWith('fan out')) {
        return turnIndex === 0
          ? {
              toolCalls: [
                {
                  name: 'spawn_sub_agents',
                  input: { tasks: Array.from({ length: o.n }, (_, i) => ({ goal: childGoal(i) })) },
                },
              ],
              ...delay,
            }
          : { text: 'all children reported', ...delay };
      }
      const i = Number(/^child (\d+):/.exec(goal)![1]);
      return turnIndex === 0
        ? { toolCalls: [{ name: 'lookup', input: { item: i } }], ...delay }
        : { text: childAnswer(i), ...delay };
    },
  });
  // How many model calls were in flight at once: under a small balance, the credit holds decide it, not the lane.
  let inFlight = 0;
  let peakInFlight = 0;
  const counted: ModelProvider = {
    ...model,
    generate: async (request, options) => {
      peakInFlight = Math.max(peakInFlight, ++inFlight);
      try {
        return await model.generate(request, options);
      } finally {
        inFlight--;
      }
    },
  };
  const runtime = await AgentRuntime.open({
    storage: o.storage?.() ?? sqliteStorage({ path: join(dir, 'bench.db') }),
    model: counted,
    tools: [lookup],
    defaultAccount: { id: 'local', credits: o.credits ?? 1e9 },
    // run slots by default: models + tools, so the model lane stays full while some agents commit their steps
    concurrency: { models: o.lane, tools: o.lane },
    tracing: o.tracing ? { tracerProvider: await droppingTracerProvider() } : false,
  });
  await o.onOpen?.(runtime);
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  const gc = startGcMeasure();
  const roots: string[] = [];
  for (let p = 0; p < o.parents; p++) roots.push((await runtime.create({ goal: `fan out ${o.n} #${p}` })).agent_id);
  const finals = await Promise.all(roots.map((id) => runtime.waitFor(id)));
  const wallMs = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  const gcSeen = gc.stop();
  // The run's peak, read before the checks below: they list every agent and all 20,000 ledger rows, work the floor
  // does not do, and their garbage could lift the process's high-water mark after the run is over.
  const runPeakRssMb = peakRssMb();
  await o.onFinished?.();

  // Check the work really happened: every child COMPLETED, every answer saved, the ledger balances.
  const completed = (await runtime.storage.listAgentIdsByStatus(['COMPLETED'])).length;
  const total = o.n * o.parents + o.parents;
  if (finals.some((a) => a.status !== 'COMPLETED') || completed !== total) {
    throw new Error(
      `expected ${total} COMPLETED agents, got ${completed} (roots: ${finals.map((a) => a.status).join(',')})`,
    );
  }
  const account = (await runtime.storage.getAccount('local'))!;
  const ledger = await runtime.storage.listLedger('local');
  if (ledger.reduce((s, l) => s + l.amount, 0) !== account.balance) throw new Error('ledger invariant broken');
  const children = o.n * o.parents;
  await runtime.close();
  await tracerProvider?.forceFlush(); // the batch processor's last spans, for the count
  rmSync(dir, { recursive: true, force: true });
  return {
    n: children,
    parents: o.parents,
    wall_ms: Math.round(wallMs),
    child_steps_per_s: Math.round((2 * children) / (wallMs / 1000)),
    us_per_child: Math.round((wallMs * 1000) / children),
    // This process's CPU (all its threads) over the same window: on a busy machine it drifts less than the wall.
    cpu_ms: Math.round((cpu.user + cpu.system) / 1000),
    peak_rss_mb: runPeakRssMb,
    // The same after the checks (and closing): the high-water mark of the whole process.
    peak_rss_with_checks_mb: peakRssMb(),
    // What the collector saw over the same window: allocation does not drift with the machine's load.
    ...gcSeen,
    ledger_rows: ledger.length,
    credits_spent: Math.round((o.credits ?? 1e9) * 1e6 - account.balance) / 1e6,
    peak_model_calls_in_flight: peakInFlight,
    ...(o.tracing ? { tracing: true, spans_exported: spansExported } : {}),
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const args = scenarioArgs();
  const result = await runFanout({
    n: args.n,
    parents: Number(args.parents),
    latency: Number(args.latency),
    lane: Number(args.lane),
    credits: Number(args.credits),
    tracing: args.tracing === true,
    // `--storage memory`: nothing persisted, like the peers that keep no state (bench/peers/README.md)
    ...(args.storage === 'memory' ? { storage: () => memoryStorage() } : {}),
  });
  const latency = Number(args.latency);
  const ideal = latency > 0 ? (2 * latency * args.n * Number(args.parents)) / Number(args.lane) : undefined;
  report({
    name: latency > 0 ? 'latency' : 'fanout',
    ...(result as { n: number; wall_ms: number; peak_rss_mb: number }),
    storage: args.storage === 'memory' ? 'memory' : 'sqlite',
    ...(ideal ? { ideal_ms: ideal, wall_over_ideal: Math.round((Number(result.wall_ms) / ideal) * 1000) / 1000 } : {}),
  });
}
