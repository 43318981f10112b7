/**
 * `agentry serve` as the memory tests (`exposed-memory.test.ts`) need it: a forked child process running the HTTP
 * server (with its poll thread) on a SQLite file, so that the test measures this process's RSS and not its own. It
 * tells the parent over IPC `{ ready: { url, key, agentId } }`, and answers `{ kind: 'rss' }` with `{ rss }` (bytes).
 *
 * The agent it makes has a transcript of about 1 MB (five answers of 200 kB) and stays ACTIVE in a tool call that
 * never ends: every event stream opened on it starts with 1 MB to send.
 *
 * argv[2]: the database path; argv[3]: JSON of extra startServer options.
 */
import { z } from 'zod';
import { AgentRuntime, defineTool, sqliteStorage, type Tool } from 'agentry-runtime';
import { startServer } from 'agentry-runtime/http';
import { scriptedModel } from 'agentry-runtime/testing';

const [dbPath, extra = '{}'] = process.argv.slice(2);
const BIG = 'x'.repeat(200_000);

const wait = defineTool({
  name: 'wait',
  description: 'Waits until the agent is stopped.',
  input: z.object({}),
  idempotent: true,
  run: (_input, ctx) =>
    new Promise<string>((resolve) => ctx.signal.addEventListener('abort', () => resolve('stopped'), { once: true })),
});
const noop = defineTool({
  name: 'noop',
  description: 'Does nothing.',
  input: z.object({}),
  idempotent: false,
  run: async () => 'ok',
});

const runtime = await AgentRuntime.open({
  storage: sqliteStorage({ path: dbPath! }),
  tools: [wait as Tool, noop as Tool],
  model: scriptedModel({
    record: false,
    turns: (_request, { turnIndex }) =>
      turnIndex < 5
        ? { text: `${turnIndex} ${BIG}`, toolCalls: [{ name: 'noop', input: {} }] }
        : { text: 'Waiting.', toolCalls: [{ name: 'wait', input: {} }] },
  }),
});
const { account, apiKey } = await runtime.accounts.create({ name: 'tenant', credits: 1000 });
const { agent_id } = await runtime.create({ goal: 'Talk a lot, then wait', accountId: account.account_id });
// Until the agent sits in its endless call: its transcript is complete.
for (;;) {
  const { messages, agent } = await runtime.get(agent_id);
  if (agent.status !== 'ACTIVE') throw new Error(`the agent is ${agent.status}`);
  if (messages.filter((m) => m.role === 'ASSISTANT').length >= 6) break;
  await new Promise((resolve) => setTimeout(resolve, 20));
}
const server = await startServer(runtime, { port: 0, ...(JSON.parse(extra) as object) });

process.on('message', (m: { kind: string }) => {
  if (m.kind === 'rss') process.send!({ rss: process.memoryUsage.rss() });
});
// The parent is done: nothing here needs a clean end (the agent's call would hold a graceful close up).
process.on('disconnect', () => process.exit(0));
process.send!({ ready: { url: server.url, key: apiKey!.key, agentId: agent_id } });
