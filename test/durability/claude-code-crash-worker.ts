/**
 * The process `claude-code-crash.test.ts` kills and restarts (run with `node --import tsx`).
 *
 *   claude-code-crash-worker.ts <dbPath> <dataDir> <marker> first
 *     creates an agent that calls spawn_claude_code_agent (claude-agent-sdk backend); Claude Code's first model turn
 *     runs a long Python wait tagged <marker> in the sandbox, and the worker waits to be killed during it.
 *   claude-code-crash-worker.ts <dbPath> <dataDir> <marker> second <agentId>
 *     reopens the file: recovery runs the call again, which resumes Claude Code's own session; its model, told it was
 *     interrupted, prints `resumed <whether it saw the interruption and the earlier command>`, writes done.txt and
 *     submits. Prints `saw <the call's result>` and `done <status> <message>`, closes and exits 0.
 */
import { AgentRuntime, sqliteStorage, type ModelRequest } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { CLAUDE_CODE_INSTRUCTIONS } from '../../src/tools/builtin/code-agent/prompts.js';
import { out, runOrResumeRoot, runWorker } from './worker-main.js';

const [dbPath, dataDir, marker, run, agentArg] = process.argv.slice(2);
if (!dbPath || !dataDir || !marker || (run !== 'first' && run !== 'second') || (run === 'second' && !agentArg)) {
  process.stderr.write('usage: claude-code-crash-worker.ts <dbPath> <dataDir> <marker> first | second <agentId>\n');
  process.exit(2);
}

async function main(): Promise<void> {
  let claudeTurns = 0;
  const model = scriptedModel({
    record: false,
    turns: (req: ModelRequest, { turnIndex }): ScriptedTurn => {
      if (req.system.includes(CLAUDE_CODE_INSTRUCTIONS)) {
        claudeTurns += 1;
        if (run === 'first') {
          return {
            toolCalls: [{ name: 'Bash', input: { command: `python3 -c 'import time; time.sleep(60)' ${marker}` } }],
          };
        }
        if (claudeTurns === 1) {
          const text = JSON.stringify(req.messages);
          out(`resumed ${text.includes('Your work was interrupted') && text.includes(marker!)}`);
          return { toolCalls: [{ name: 'Write', input: { file_path: '/workspace/done.txt', content: 'ok\n' } }] };
        }
        return {
          toolCalls: [
            { name: 'mcp__agentry__submit_result', input: { summary: 'done.txt written', files: ['done.txt'] } },
          ],
        };
      }
      if (turnIndex === 0) {
        return {
          toolCalls: [
            { id: 'call_code', name: 'spawn_claude_code_agent', input: { task: 'Wait, then write done.txt' } },
          ],
        };
      }
      const result = req.messages.at(-1)!.content.find((b) => b.type === 'tool_result');
      out(`saw ${JSON.stringify(result ?? null)}`);
      return { text: 'Finished.' };
    },
  });
  const runtime = await AgentRuntime.open({
    storage: sqliteStorage({ path: dbPath! }),
    model,
    builtinTools: {
      env: {},
      dataDir,
      only: ['spawn_claude_code_agent'],
      codeAgent: { backend: 'claude-agent-sdk' },
    },
  });
  runtime.on('error', ({ error, agent_id }) => out(`error ${agent_id} ${String(error)}`));
  await runOrResumeRoot(runtime, run!, { label: 'agent', goal: 'Get code written', rootId: agentArg });
}

runWorker('claude-code-crash-worker', main);
