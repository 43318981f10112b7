/**
 * The process `enrich-crash.test.ts` kills and restarts (run with `node --import tsx`).
 *
 *   enrich-crash-worker.ts <dbPath> <eventFile> <corpusBase> first
 *     creates the parent; prints `parent <id>`; once the first children have COMPLETED and the others are in their
 *     submitting turn (which never answers in this run), prints `ready`, and waits to be killed.
 *   enrich-crash-worker.ts <dbPath> <eventFile> <corpusBase> second <parentId>
 *     reopens the file (recovery resumes whatever was running), waits for the parent to finish, prints
 *     `done <status>`, closes and exits 0.
 *
 * The corpus is served by the test process at <corpusBase>, so both runs read the same URLs.
 */
import { AgentRuntime, sqliteStorage } from 'agentry-runtime';
import { scriptedModel } from 'agentry-runtime/testing';
import { corpusSearch, type CorpusServer } from '../fixtures/corpus/veloran.js';
import { COMPANIES, FINISH_FIRST, PARENT_GOAL, entityOf, isChild, logEvent, playTurn } from './enrich-crash-script.js';
import { out, runOrResumeRoot, runWorker } from './worker-main.js';

const [dbPath, eventFile, base, run, parentArg] = process.argv.slice(2);
if (!dbPath || !eventFile || !base || (run !== 'first' && run !== 'second') || (run === 'second' && !parentArg)) {
  process.stderr.write('usage: enrich-crash-worker.ts <dbPath> <eventFile> <corpusBase> first | second <parentId>\n');
  process.exit(2);
}

async function main(): Promise<void> {
  const hang = run === 'first';
  const corpus: CorpusServer = {
    base: base!,
    urlOf: (slug) => `${base}/wiki/${slug}`,
    seen: [],
    close: async () => {},
  };
  let hanging = 0;
  let completed = 0;
  let readyPrinted = false;
  const maybeReady = () => {
    if (hang && !readyPrinted && hanging === COMPANIES.length - FINISH_FIRST && completed === FINISH_FIRST) {
      readyPrinted = true;
      out('ready');
    }
  };
  const model = scriptedModel({
    record: false,
    turns: (req, { turnIndex }) => {
      logEvent(eventFile!, `M ${run} ${req.agentId} ${turnIndex} ${isChild(req) ? entityOf(req) : '-'}`);
      const turn = playTurn(req, turnIndex, corpus.urlOf, hang);
      if (turn instanceof Promise) {
        hanging++;
        maybeReady();
      }
      return turn;
    },
  });
  const runtime = await AgentRuntime.open({
    storage: sqliteStorage({ path: dbPath! }),
    model,
    builtinTools: { search: corpusSearch(corpus), env: {}, fetch: { allow: ['127.0.0.1/32'] } },
    defaultAccount: { id: 'local', credits: 1_000 },
    limits: { maxOutputTokens: 256 },
  });
  runtime.on('error', ({ error, agent_id }) => out(`error ${agent_id} ${String(error)}`));
  // Emitted after the commit that completed the child: its result is on disk.
  runtime.on('agent.status', ({ agent }) => {
    if (agent.status === 'COMPLETED' && agent.parent_id !== null) {
      completed++;
      maybeReady();
    }
  });

  await runOrResumeRoot(runtime, run!, { label: 'parent', goal: PARENT_GOAL, rootId: parentArg });
}

runWorker('enrich-crash-worker', main);
