/**
 * MCP tools: an agent uses the tools of an MCP server — here `@modelcontextprotocol/server-everything` over stdio,
 * configured exactly as in Claude Desktop's `mcpServers` — under a scripted model (no key needed, offline). The
 * server starts when the agent first needs its tools and is gone when the runtime closes.
 * Run: npx tsx examples/mcp.ts
 */
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { AgentRuntime, memoryStorage } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';

// The server's entry point, from this project's node_modules (in your own config: "npx", ["-y", "@modelcontextprotocol/server-everything"]).
const everything = join(
  dirname(createRequire(import.meta.url).resolve('@modelcontextprotocol/server-everything/package.json')),
  'dist/index.js',
);

// The scripted model plays Claude: it adds two numbers with the server's get-sum, echoes, then answers.
const model = scriptedModel({
  turns: (request, { turnIndex }): ScriptedTurn => {
    if (turnIndex === 0) {
      const offered = request.tools.filter((t) => t.name.startsWith('mcp__')).map((t) => t.name);
      console.log(`tools offered from MCP: ${offered.join(', ')}`);
      return { toolCalls: [{ name: 'mcp__everything__get-sum', input: { a: 19, b: 23 } }] };
    }
    if (turnIndex === 1) return { toolCalls: [{ name: 'mcp__everything__echo', input: { message: 'hello, MCP' } }] };
    return { text: 'The sum is 42, and the server echoed my greeting.' };
  },
});

const runtime = await AgentRuntime.open({
  storage: memoryStorage(),
  model,
  builtinTools: false,
  mcpServers: {
    everything: { command: process.execPath, args: [everything, 'stdio'], allowed_tools: ['get-sum', 'echo'] },
  },
});
try {
  const { agent_id } = await runtime.create({ goal: 'Add 19 and 23 with the MCP server, then say hello to it' });
  const agent = await runtime.waitFor(agent_id);
  for (const turn of await runtime.storage.listTurns(agent_id)) {
    for (const block of JSON.parse(turn.content) as Array<Record<string, unknown>>) {
      if (block.type === 'tool_use') console.log(`→ ${String(block.name)} ${JSON.stringify(block.input)}`);
      if (block.type === 'tool_result') console.log(`← ${String(block.content)}`);
    }
  }
  const { messages } = await runtime.get(agent_id);
  console.log(`[ASSISTANT] ${messages.at(-1)?.text ?? ''}`);
  for (const t of runtime.toolStatus().filter((s) => s.source === 'mcp')) {
    console.log(`${t.name.padEnd(28)} ${t.ready ? 'ready' : 'not ready'}  ${t.detail.replace(everything, '…')}`);
  }
  console.log(`status: ${agent.status}`);
} finally {
  await runtime.close(); // the server process is gone when this resolves
}
