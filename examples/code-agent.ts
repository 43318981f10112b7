/**
 * A coding agent in a sandbox, offline: the lead agent hands a task to `spawn_claude_code_agent` with an acceptance
 * command. The coder writes fib.py, runs it, sees it is wrong, fixes it with Edit, runs it again and submits; the
 * runtime then re-runs the acceptance command itself on the final files and reports `verified`. Prints the commands
 * with their exit codes, the files kept as artifacts, the verdict and the credits spent.
 * Run: npx tsx examples/code-agent.ts   (needs bubblewrap: apt-get install bubblewrap)
 *
 * It runs twice, once per backend:
 * - `runtime` (the default): a child agent of the runtime's model with Claude Code's six tools (Bash, Read, Write,
 *   Edit, Glob, Grep);
 * - `claude-agent-sdk`: Claude Code itself (npm install @anthropic-ai/claude-agent-sdk) in the same sandbox, its model
 *   turns going through the runtime's billed model bridge to the runtime's model. Skipped, with a line saying so,
 *   when the package is not installed.
 *
 * Everything is the real runtime, the real sandbox and (second run) the real Claude Code, except the model: a scripted
 * one plays Claude so that it runs without a key. With a key, drop `model` and the script:
 *
 *   const runtime = await AgentRuntime.open({ builtinTools: { codeAgent: { backend: 'claude-agent-sdk' } } });
 *   await runtime.create({ goal: 'Have a coding agent write fib.py and check it prints 34 last' });
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentRuntime, memoryStorage, type ModelRequest, type ToolResultBlock } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';

const TASK = {
  task: 'Write fib.py that prints the first 10 Fibonacci numbers (0 to 34), one per line',
  acceptance_command: 'test "$(python3 fib.py | tail -n 1)" = 34',
};

/** The coder's moves, the same for both backends (Claude Code wants absolute paths; the runtime's tools take both). */
const CODER: Array<{ name: string; input: Record<string, unknown> }> = [
  {
    name: 'Write',
    input: {
      file_path: '/workspace/fib.py',
      content: 'a, b = 0, 1\nfor _ in range(9):\n    print(a)\n    a, b = b, a + b\n',
    },
  },
  { name: 'Bash', input: { command: 'python3 fib.py | tail -n 1', description: 'last number' } },
  { name: 'Edit', input: { file_path: '/workspace/fib.py', old_string: 'range(9)', new_string: 'range(10)' } },
  { name: 'Bash', input: { command: 'python3 fib.py | tail -n 1', description: 'last number again' } },
];

const names = (req: ModelRequest) => req.tools.map((t) => t.name);

function script(submitTool: string, seen: { result?: ToolResultBlock }) {
  let coderTurn = 0;
  let leadTurn = 0;
  return (req: ModelRequest): ScriptedTurn => {
    if (names(req).includes(submitTool)) {
      const move = CODER[coderTurn++];
      if (move) return { toolCalls: [move] };
      return {
        toolCalls: [
          {
            name: submitTool,
            input: {
              summary: 'fib.py prints 0 to 34; the first run stopped at 21, fixed with range(10)',
              files: ['fib.py'],
            },
          },
        ],
      };
    }
    if (leadTurn++ === 0) return { toolCalls: [{ name: 'spawn_claude_code_agent', input: TASK }] };
    seen.result = (req.messages.at(-1)!.content as ToolResultBlock[]).find((b) => b.type === 'tool_result');
    return { text: 'The coding agent wrote fib.py and the runtime verified it.' };
  };
}

async function run(backend: 'runtime' | 'claude-agent-sdk'): Promise<void> {
  const dataDir = await mkdtemp(join(tmpdir(), 'agentry-example-code-'));
  await chmod(dataDir, 0o711); // the sandbox's uid must traverse it to reach the workspace
  const seen: { result?: ToolResultBlock } = {};
  const submitTool = backend === 'runtime' ? 'submit_result' : 'mcp__agentry__submit_result';
  const runtime = await AgentRuntime.open({
    storage: memoryStorage(),
    model: scriptedModel({ turns: script(submitTool, seen) }),
    builtinTools: { env: {}, dataDir, only: ['spawn_claude_code_agent'], codeAgent: { backend } },
    defaultAccount: { id: 'local', credits: 100 },
  });
  try {
    const status = runtime.toolStatus().find((t) => t.name === 'spawn_claude_code_agent')!;
    console.log(
      `# backend ${backend}\nspawn_claude_code_agent: ${status.ready ? 'ready' : 'NOT READY'} — ${status.detail}`,
    );
    if (!status.ready) return;
    const { agent_id } = await runtime.create({ goal: 'Have a coding agent write fib.py' });
    const agent = await runtime.waitFor(agent_id, { signal: AbortSignal.timeout(120_000) });
    const output = JSON.parse(seen.result?.content ?? '{}') as {
      summary?: string;
      commands?: Array<{ command: string; exit_code: number | null }>;
      files?: Array<{ path: string; size: number; artifact_id: string }>;
      verified?: boolean;
    };
    for (const c of output.commands ?? []) console.log(`  $ ${c.command}   → exit ${c.exit_code}`);
    for (const f of output.files ?? [])
      console.log(`  file ${f.path} (${f.size} bytes) kept as artifact ${f.artifact_id}`);
    console.log(`  summary: ${output.summary}`);
    console.log(`  verified: ${output.verified} (the runtime re-ran: ${TASK.acceptance_command})`);
    console.log(`status: ${agent.status} · ${agent.credits_spent} credits spent\n`);
  } finally {
    await runtime.close();
    await rm(dataDir, { recursive: true, force: true });
  }
}

await run('runtime');
await run('claude-agent-sdk');
