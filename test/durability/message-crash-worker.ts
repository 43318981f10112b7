/**
 * The process `message-crash.test.ts` kills and restarts (run with `node --import tsx`).
 *
 *   message-crash-worker.ts <dbPath> <smtpUrl> first
 *     creates an agent whose first turn calls message_person (e-mail through the test's SMTP server, which takes the
 *     message but never answers it in this run); prints `agent <id>` and waits to be killed.
 *   message-crash-worker.ts <dbPath> <smtpUrl> second <agentId>
 *     reopens the file (the outbox entry left `queued` becomes `unknown`, recovery tells the model the call's outcome
 *     is unknown); the model tries the same message once more, then answers with every tool result it saw. Prints
 *     `done <status> <status_message>`, closes and exits 0.
 */
import { AgentRuntime, sqliteStorage, type ModelRequest, type ToolResultBlock } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { out, runOrResumeRoot, runWorker } from './worker-main.js';

export const ALERT = {
  channel: 'email',
  to: 'ada@example.com',
  subject: 'Price alert: below 50',
  body: 'The price is now 49 €.',
} as const;

const [dbPath, smtpUrl, run, agentArg] = process.argv.slice(2);
if (!dbPath || !smtpUrl || (run !== 'first' && run !== 'second') || (run === 'second' && !agentArg)) {
  process.stderr.write('usage: message-crash-worker.ts <dbPath> <smtpUrl> first | second <agentId>\n');
  process.exit(2);
}

/** Turn 0 and 1 send the alert (the second is the model trying again after the crash); turn 2 reports the results. */
function playTurn(request: ModelRequest, turnIndex: number): ScriptedTurn {
  if (turnIndex < 2) return { toolCalls: [{ name: 'message_person', input: ALERT }] };
  const results = request.messages
    .flatMap((m) => m.content)
    .filter((b): b is ToolResultBlock => b.type === 'tool_result')
    .map((b) => b.content);
  return { text: results.join('\n---\n') };
}

async function main(): Promise<void> {
  const model = scriptedModel({ record: false, turns: (req, { turnIndex }) => playTurn(req, turnIndex) });
  const runtime = await AgentRuntime.open({
    storage: sqliteStorage({ path: dbPath! }),
    model,
    builtinTools: {
      env: {},
      only: ['message_person'],
      messaging: { smtpUrl: smtpUrl!, from: 'alerts@agentry.test', allow: ['ada@example.com'] },
    },
    defaultAccount: { id: 'local', credits: 100 },
    limits: { maxOutputTokens: 256 },
  });
  runtime.on('error', ({ error, agent_id }) => out(`error ${agent_id} ${String(error)}`));
  await runOrResumeRoot(runtime, run!, { label: 'agent', goal: 'Tell Ada the price fell.', rootId: agentArg });
}

runWorker('message-crash-worker', main);
