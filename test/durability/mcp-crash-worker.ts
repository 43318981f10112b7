/**
 * The process `mcp-crash.test.ts` kills and restarts (run with `node --import tsx`).
 *
 *   mcp-crash-worker.ts <dbPath> <dir> <tool> first
 *     creates an agent whose first turn calls the MCP tool `mcp__counting__<tool>` of the fixture server; the server
 *     moves its counter, then holds the answer for 60 s; the worker waits to be killed during that call.
 *   mcp-crash-worker.ts <dbPath> <dir> <tool> second <agentId>
 *     reopens the file (recovery decides about the call whose outcome is unknown), waits for the agent to finish,
 *     prints `saw <what the model was shown>` and `done <status> <message>`, closes and exits 0.
 *
 * The fixture writes its counter to <dir>/counter and its events to <dir>/events.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AgentRuntime, sqliteStorage } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { out, runOrResumeRoot, runWorker } from './worker-main.js';

const [dbPath, dir, tool, run, agentArg] = process.argv.slice(2);
if (!dbPath || !dir || !tool || (run !== 'first' && run !== 'second') || (run === 'second' && !agentArg)) {
  process.stderr.write('usage: mcp-crash-worker.ts <dbPath> <dir> <tool> first | second <agentId>\n');
  process.exit(2);
}

const FIXTURE = fileURLToPath(new URL('../mcp/fixtures/counting-server.mjs', import.meta.url));

async function main(): Promise<void> {
  const model = scriptedModel({
    record: false,
    turns: (req, { turnIndex }): ScriptedTurn => {
      if (turnIndex === 0) return { toolCalls: [{ id: 'call_count', name: `mcp__counting__${tool}`, input: {} }] };
      // What the model was shown for the call: its tool result.
      const result = req.messages.at(-1)!.content.find((b) => b.type === 'tool_result');
      out(`saw ${JSON.stringify(result ?? null)}`);
      return { text: 'Finished.' };
    },
  });
  const runtime = await AgentRuntime.open({
    storage: sqliteStorage({ path: dbPath! }),
    model,
    builtinTools: false,
    mcpServers: {
      counting: {
        command: process.execPath,
        args: [FIXTURE, `--tag=${dir}`],
        env: {
          MCP_COUNTER: join(dir!, 'counter'),
          MCP_EVENTS: join(dir!, 'events'),
          MCP_HOLD_MS: run === 'first' ? '60000' : '0',
        },
      },
    },
  });
  runtime.on('error', ({ error, agent_id }) => out(`error ${agent_id} ${String(error)}`));
  await runOrResumeRoot(runtime, run!, { label: 'agent', goal: `Count with ${tool}`, rootId: agentArg });
}

runWorker('mcp-crash-worker', main);
