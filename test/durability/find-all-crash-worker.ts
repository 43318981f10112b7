/**
 * The process `find-all-crash.test.ts` kills and restarts (run with `node --import tsx`). The corpus is served by the
 * test process, so its URLs stay the same across both workers.
 *
 *   find-all-crash-worker.ts <dbPath> <eventFile> <corpusBase> first
 *     creates the lead agent; prints `lead <id>`; once the generation phase is over, the verifiers of FINISHING have
 *     completed and those of HANGING are in their second model turn (which never answers in this run), prints
 *     `ready`, and waits to be killed.
 *   find-all-crash-worker.ts <dbPath> <eventFile> <corpusBase> second <leadId>
 *     reopens the file (recovery resumes whatever was running), waits for the lead to finish, prints
 *     `done <status>`, closes and exits 0.
 *
 * Events (model calls by role, searches) go to <eventFile>, see `find-all-crash-script.ts`.
 */
import { AgentRuntime, sqliteStorage, type SearchProvider } from 'agentry-runtime';
import { scriptedModel } from 'agentry-runtime/testing';
import { corpusSearch } from '../fixtures/corpus/veloran.js';
import { FINISHING, HANGING, LEAD_GOAL, candidateOf, logEvent, playTurn, roleOf } from './find-all-crash-script.js';
import { out, runOrResumeRoot, runWorker } from './worker-main.js';

const [dbPath, eventFile, corpusBase, run, leadArg] = process.argv.slice(2);
if (!dbPath || !eventFile || !corpusBase || (run !== 'first' && run !== 'second') || (run === 'second' && !leadArg)) {
  process.stderr.write('usage: find-all-crash-worker.ts <dbPath> <eventFile> <corpusBase> first | second <leadId>\n');
  process.exit(2);
}

async function main(): Promise<void> {
  const hang = run === 'first';
  const urlOf = (slug: string) => `${corpusBase}/wiki/${slug}`;
  const corpus = corpusSearch({ base: corpusBase!, urlOf, seen: [], close: async () => {} });
  const search: SearchProvider = {
    name: corpus.name,
    search: (q) => {
      logEvent(eventFile!, `Q ${run} ${q.query.replaceAll(' ', '_')}`);
      return corpus.search(q);
    },
  };

  const hanging = new Set<string>();
  const finished = new Set<string>();
  let ready = false;
  const maybeReady = () => {
    if (!ready && hanging.size === HANGING.length && finished.size === FINISHING.length) {
      ready = true;
      out('ready');
    }
  };
  const model = scriptedModel({
    record: false,
    turns: (req, { turnIndex }) => {
      const role = roleOf(req);
      logEvent(eventFile!, `M ${run} ${role} ${req.agentId} ${turnIndex}`);
      if (hang && role === 'verifier' && turnIndex === 1) {
        const goal = (req.messages[0]!.content[0] as { text: string }).text;
        if (HANGING.includes(candidateOf(goal)?.name ?? '')) {
          hanging.add(req.agentId);
          maybeReady();
        }
      }
      return playTurn(req, turnIndex, urlOf, hang);
    },
  });
  const runtime = await AgentRuntime.open({
    storage: sqliteStorage({ path: dbPath! }),
    model,
    builtinTools: { search, env: {}, fetch: { allow: ['127.0.0.1/32'] } },
    defaultAccount: { id: 'local', credits: 1_000 },
    limits: { maxOutputTokens: 256 },
  });
  runtime.on('error', ({ error, agent_id }) => out(`error ${agent_id} ${String(error)}`));
  runtime.on('agent.status', ({ agent }) => {
    if (agent.status === 'COMPLETED' && FINISHING.includes(candidateOf(agent.goal)?.name ?? '')) {
      finished.add(agent.agent_id);
      maybeReady();
    }
  });

  await runOrResumeRoot(runtime, run!, { label: 'lead', goal: LEAD_GOAL, rootId: leadArg });
}

runWorker('find-all-crash-worker', main);
