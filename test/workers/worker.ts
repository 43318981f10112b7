/**
 * One worker process of the worker tests. Run it from the repository root as
 *
 *   node --import tsx test/workers/worker.ts '<config as JSON>'
 *
 * It opens a runtime on PostgreSQL in worker mode (several of these drive the agents of one schema), with the scripted
 * model of `script.ts` (each assistant text tagged with this worker's name) and the `note` and `hold` tools, all
 * writing to the shared log. It prints `ready <name> <worker id>` once it steps agents, then takes commands on stdin,
 * one a line, `<n> <command> <argument>`, and answers each with `reply <n> ok <json>` or `reply <n> err <message>`:
 *
 *   create <goal…>       creates an agent, answers its id
 *   pause|resume|delete <agent id>   the runtime's call; `X <command> <agent>` goes to the shared log when it returned
 *
 * SIGTERM closes the runtime and exits 0 after printing `closed`. Lines go out with writeSync, so a line printed just
 * before a SIGKILL or a SIGSTOP is never stuck in a buffer.
 */
import { writeSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { z } from 'zod';
import { AgentRuntime, type ModelProvider, type ModelRequest } from 'agentry-runtime';
import { scriptedModel } from 'agentry-runtime/testing';
import { postgresStorage } from 'agentry-runtime/storage/postgres';
import { SharedLog, scriptedTurn, workerTools } from './script.js';

export const WorkerConfigSchema = z
  .object({
    /** The worker's name in the log and in the assistant texts (letters, digits, `-`). */
    name: z.string().regex(/^[A-Za-z0-9-]{1,20}$/),
    /** postgres:// URL with `?schema=`. */
    db: z.string().regex(/^postgres(ql)?:\/\//),
    /** The shared log. */
    log: z.string().min(1),
    leaseMs: z.number().int().min(1_000).default(2_000),
    heartbeatMs: z.number().int().min(100).default(300),
    /** The gone-worker grace (postgresStorage's default when absent: 3 s, at most the lease). */
    goneAfterMs: z.number().int().min(500).optional(),
    claimAhead: z.number().int().min(0).optional(),
    /** Opens the storage `exclusive` (one process per database): the harness's own check without worker mode. */
    exclusive: z.boolean().default(false),
    runSlots: z.number().int().positive().optional(),
    /** Real time each model call takes (abortable). */
    modelDelayMs: z.number().int().min(0).default(10),
    /** Real time the note tool waits before and after its effect. */
    noteDelayMs: z.number().int().min(0).default(5),
    /** Writes a `B` line this often when set: the tests read the workers' own passing of time from it. */
    beatMs: z.number().int().positive().optional(),
    credits: z.number().positive().default(1_000),
    maxConnections: z.number().int().positive().default(10),
  })
  .strict();

export type WorkerConfig = z.input<typeof WorkerConfigSchema>;

function out(line: string): void {
  writeSync(1, `${line}\n`);
}

/** The scripted model, wrapped so every call logs when it starts and how it ended. */
function loggedModel(log: SharedLog, delayMs: number): ModelProvider {
  const inner = scriptedModel({
    record: false,
    turns: (request, { turnIndex }) => scriptedTurn(goalOf(request), turnIndex, log.worker, delayMs),
  });
  return {
    models: inner.models,
    async generate(request, options) {
      const turn = request.messages.filter((m) => m.role === 'assistant').length;
      log.write('M+', request.agentId, turn);
      let outcome = 'error';
      try {
        const response = await inner.generate(request, options);
        outcome = 'ok';
        return response;
      } catch (error) {
        if (options.signal.aborted) outcome = 'abort';
        throw error;
      } finally {
        log.write('M-', request.agentId, turn, outcome);
      }
    },
  };
}

function goalOf(request: ModelRequest): string {
  const block = request.messages[0]?.content[0] as { type?: string; text?: string } | undefined;
  return block?.type === 'text' && typeof block.text === 'string' ? block.text : '';
}

const CommandSchema = z.discriminatedUnion('command', [
  z.object({ n: z.string(), command: z.literal('create'), arg: z.string().min(1) }),
  z.object({ n: z.string(), command: z.enum(['pause', 'resume', 'delete']), arg: z.string().min(1) }),
]);

async function main(): Promise<void> {
  const config = WorkerConfigSchema.parse(JSON.parse(process.argv[2] ?? '{}'));
  const log = new SharedLog(config.log, config.name);
  const storage = postgresStorage({
    connectionString: config.db,
    leaseMs: config.leaseMs,
    heartbeatMs: config.heartbeatMs,
    maxConnections: config.maxConnections,
    ...(config.goneAfterMs !== undefined ? { goneAfterMs: config.goneAfterMs } : {}),
    ...(config.exclusive ? { exclusive: true } : {}),
  });
  const runtime = await AgentRuntime.open({
    storage,
    model: loggedModel(log, config.modelDelayMs),
    tools: workerTools(log, config.noteDelayMs),
    builtinTools: false,
    defaultAccount: { id: 'local', credits: config.credits },
    limits: { maxOutputTokens: 256, maxSteps: 1_000 },
    concurrency: {
      ...(config.runSlots ? { runSlots: config.runSlots } : {}),
      ...(config.claimAhead !== undefined ? { claimAhead: config.claimAhead } : {}),
    },
  });
  runtime.on('error', ({ error, agent_id }) => {
    const message = String(error).replace(/\s+/g, ' ');
    log.write('E', agent_id ?? '-', message);
    out(`error ${agent_id} ${message}`);
  });
  if (config.beatMs) setInterval(() => log.write('B'), config.beatMs);
  else setInterval(() => {}, 60_000); // alive until told to stop

  process.on('SIGTERM', () => {
    void runtime.close().then(() => {
      log.close();
      out('closed');
      process.exit(0);
    });
  });

  createInterface({ input: process.stdin }).on('line', (line) => {
    const [n = '', command = '', ...rest] = line.split(' ');
    const parsed = CommandSchema.safeParse({ n, command, arg: rest.join(' ') });
    if (!parsed.success) return out(`reply ${n} err bad command: ${line}`);
    const c = parsed.data;
    const run = async (): Promise<unknown> => {
      if (c.command === 'create') return (await runtime.create({ goal: c.arg })).agent_id;
      const answer = await runtime[c.command](c.arg);
      log.write('X', c.command, c.arg);
      return answer;
    };
    run().then(
      (value) => out(`reply ${c.n} ok ${JSON.stringify(value)}`),
      (error: unknown) => out(`reply ${c.n} err ${String(error).replace(/\s+/g, ' ')}`),
    );
  });

  log.write('ready', storage.workers?.workerId ?? '-');
  out(`ready ${config.name} ${storage.workers?.workerId ?? '-'}`);
}

main().catch((err: unknown) => {
  process.stderr.write(`worker failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
