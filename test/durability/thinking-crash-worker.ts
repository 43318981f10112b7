/**
 * The process `thinking-crash.test.ts` kills and restarts (run with `node --import tsx`).
 *
 *   thinking-crash-worker.ts <db> <messagesApiUrl> first
 *     creates an svc-1-ultra agent (thinking on) that talks to the test's stand-in Messages API through the real SDK;
 *     prints `agent <id>` and waits to be killed (the stand-in holds one of its model calls).
 *   thinking-crash-worker.ts <db> <messagesApiUrl> second <agentId>
 *     reopens the database; recovery redoes the interrupted model call from the turn log, thinking blocks and all.
 *     Prints `done <status> <status_message>`, closes and exits 0.
 */
import { AgentRuntime, anthropicProvider } from 'agentry-runtime';
import { lookupTool } from '../models/thinking-fixtures.js';
import { out, runOrResumeRoot, runWorker, storageAt } from './worker-main.js';

export const THINKING_GOAL = 'Are items 0, 1 and 2 in stock?';

const [db, url, run, agentArg] = process.argv.slice(2);
if (!db || !url || (run !== 'first' && run !== 'second') || (run === 'second' && !agentArg)) {
  process.stderr.write('usage: thinking-crash-worker.ts <db> <messagesApiUrl> first | second <agentId>\n');
  process.exit(2);
}

async function main(): Promise<void> {
  const runtime = await AgentRuntime.open({
    storage: storageAt(db!),
    model: anthropicProvider({
      baseURL: url!,
      apiKey: 'sk-test',
      maxRetries: 0,
      // A model that takes a budget: the stand-in then refuses a tool-use loop whose last turn lost its thinking, as
      // the API does (adaptive models may skip thinking on a turn, so there only an altered block is refused).
      models: { 'svc-1-ultra': 'claude-opus-4-5' },
    }),
    tools: [lookupTool],
    builtinTools: false,
    defaultAccount: { id: 'local', credits: 1_000 },
    limits: { maxOutputTokens: 4096 },
  });
  runtime.on('error', ({ error, agent_id }) => out(`error ${agent_id} ${String(error)}`));
  await runOrResumeRoot(runtime, run!, { label: 'agent', goal: THINKING_GOAL, rootId: agentArg, model: 'svc-1-ultra' });
}

runWorker('thinking-crash-worker', main);
