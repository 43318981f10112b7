/**
 * The process `child-crash.test.ts` kills and restarts (run with `node --import tsx`).
 *
 *   child-crash-worker.ts <dbPath> <eventFile> first
 *     creates the parent; prints `parent <id>`; once both children have taken their first step and are in their
 *     second model turn (which never answers in this run), prints `in-second-turn`, and waits to be killed.
 *   child-crash-worker.ts <dbPath> <eventFile> second <parentId>
 *     reopens the file (recovery resumes whatever was running), waits for the parent to finish, prints
 *     `done <status>`, closes and exits 0.
 *
 * Events (model calls, tool runs, spawns) go to <eventFile>, see `child-crash-script.ts`.
 */
import { AgentRuntime, sqliteStorage } from 'agentry-runtime';
import { scriptedModel } from 'agentry-runtime/testing';
import { CHILDREN, CHILD_INSTRUCTIONS, PARENT_GOAL, logEvent, playTurn, researchTool } from './child-crash-script.js';
import { out, runOrResumeRoot, runWorker } from './worker-main.js';

const [dbPath, eventFile, run, parentArg] = process.argv.slice(2);
if (!dbPath || !eventFile || (run !== 'first' && run !== 'second') || (run === 'second' && !parentArg)) {
  process.stderr.write('usage: child-crash-worker.ts <dbPath> <eventFile> first | second <parentId>\n');
  process.exit(2);
}

async function main(): Promise<void> {
  const hang = run === 'first';
  let childrenInSecondTurn = 0;
  const model = scriptedModel({
    record: false,
    turns: (req, { turnIndex }) => {
      logEvent(eventFile!, `M ${run} ${req.agentId} ${turnIndex}`);
      if (hang && req.system === CHILD_INSTRUCTIONS && turnIndex === 1) {
        if (++childrenInSecondTurn === CHILDREN.length) out('in-second-turn');
      }
      return playTurn(req, turnIndex, hang);
    },
  });
  const runtime = await AgentRuntime.open({
    storage: sqliteStorage({ path: dbPath! }),
    model,
    tools: [researchTool(eventFile!, run!)],
    builtinTools: false,
    defaultAccount: { id: 'local', credits: 100 },
    limits: { maxOutputTokens: 256 },
  });
  runtime.on('error', ({ error, agent_id }) => out(`error ${agent_id} ${String(error)}`));

  await runOrResumeRoot(runtime, run!, { label: 'parent', goal: PARENT_GOAL, rootId: parentArg });
}

runWorker('child-crash-worker', main);
