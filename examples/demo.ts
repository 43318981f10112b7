/**
 * `npm run demo`: agentry working offline, no key needed.
 *
 * Everything here is the real runtime — SQLite storage, the step loop, credits, tools, sub-agents, progress — except
 * the model: a scripted stand-in plays Claude's part so the demo runs without a key or a network. With a key, the
 * same job runs on Claude through `node bin/agentry.js run "<goal>"`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { AgentRuntime, defineTool, sqliteStorage, type ModelRequest, type ToolResultBlock } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { ProgressView, subAgentLabel } from '../src/cli/progress.js';

const CITIES: Record<string, { country: string; population: number; area_km2: number }> = {
  Paris: { country: 'France', population: 2_102_650, area_km2: 105.4 },
  Berlin: { country: 'Germany', population: 3_596_999, area_km2: 891.1 },
  Madrid: { country: 'Spain', population: 3_332_035, area_km2: 604.3 },
  Rome: { country: 'Italy', population: 2_748_109, area_km2: 1_287.4 },
  Vienna: { country: 'Austria', population: 1_982_097, area_km2: 414.9 },
};

// A real tool: validated input, a price per call, and a status message while it runs.
const cityFacts = defineTool({
  name: 'city_facts',
  description: 'Population and area of a European capital (from a built-in table)',
  input: z.object({ city: z.string() }),
  price: 0.2,
  idempotent: true,
  describe: ({ city }) => `Looking up ${city}`,
  run: ({ city }) => {
    const facts = CITIES[city];
    if (!facts) throw new Error(`no data for ${city}`);
    return { city, ...facts, density_per_km2: Math.round(facts.population / facts.area_km2) };
  },
});

const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
const lastResults = (req: ModelRequest): string[] =>
  req.messages
    .at(-1)!
    .content.filter((b): b is ToolResultBlock => b.type === 'tool_result')
    .map((b) => b.content);

/** The stand-in for Claude: it decides each turn from the conversation, like a model would. */
const model = scriptedModel({
  record: false,
  turns: (req, { turnIndex }): ScriptedTurn => {
    const goal = goalOf(req);
    const city = /^Find the population density of (\w+)$/.exec(goal)?.[1];
    if (city) {
      // a sub-agent: look the city up, then answer
      if (turnIndex === 0)
        return {
          toolCalls: [{ name: 'city_facts', input: { city } }],
          usage: { inputTokens: 900, outputTokens: 40 },
          delayMs: 150,
        };
      const facts = JSON.parse(lastResults(req)[0]!) as { density_per_km2: number; population: number };
      return {
        text: `${city}: ${facts.density_per_km2.toLocaleString('en-US')} people per km² (population ${facts.population.toLocaleString('en-US')}).`,
        usage: { inputTokens: 1_000, outputTokens: 30 },
        delayMs: 150,
      };
    }
    // the lead agent: plan, fan out one sub-agent per city, then write the report
    const plan = (done: number) => ({
      name: 'update_plan',
      input: {
        steps: [
          { title: 'Research each capital in parallel', status: done > 0 ? 'done' : 'in_progress' },
          { title: 'Rank by population density', status: done > 1 ? 'done' : done === 1 ? 'in_progress' : 'pending' },
          { title: 'Write the summary', status: 'pending' },
        ],
      },
    });
    if (turnIndex === 0) {
      return {
        text: 'I will research the five capitals in parallel with one sub-agent each, then rank them.',
        toolCalls: [
          plan(0),
          {
            name: 'spawn_sub_agents',
            input: { tasks: Object.keys(CITIES).map((c) => ({ goal: `Find the population density of ${c}` })) },
          },
        ],
        usage: { inputTokens: 1_800, outputTokens: 160 },
        delayMs: 300,
      };
    }
    if (turnIndex === 1) {
      return { toolCalls: [plan(1)], usage: { inputTokens: 2_600, outputTokens: 60 }, delayMs: 300 };
    }
    const spawnResult = req.messages
      .flatMap((m) => m.content)
      .find((b): b is ToolResultBlock => b.type === 'tool_result' && b.content.includes('"spawn_id"'))!;
    const spawn = JSON.parse(spawnResult.content) as { results: Array<{ result: string }> };
    const ranked = spawn.results
      .map((r) => ({
        line: r.result,
        density: Number(/: ([\d,]+) people/.exec(r.result)?.[1]?.replace(/,/g, '') ?? 0),
      }))
      .sort((a, b) => b.density - a.density)
      .map((r, i) => `${i + 1}. ${r.line}`);
    return {
      text: `Population density of five European capitals, densest first:\n${ranked.join('\n')}`,
      usage: { inputTokens: 3_100, outputTokens: 220 },
      delayMs: 300,
    };
  },
});

const dir = mkdtempSync(join(tmpdir(), 'agentry-demo-'));
const runtime = await AgentRuntime.open({
  storage: sqliteStorage({ path: join(dir, 'demo.db') }),
  model,
  tools: [cityFacts],
  defaultAccount: { id: 'local', credits: 25 },
});
const view = new ProgressView({
  write: (t) => process.stdout.write(t),
  isTTY: Boolean(process.stdout.isTTY),
  columns: process.stdout.columns,
});

console.log('agentry demo — the real runtime on SQLite, with a scripted stand-in for Claude (no key, no network)\n');
try {
  const goal = 'Rank Paris, Berlin, Madrid, Rome and Vienna by population density';
  const created = await runtime.create({ goal });
  let subAgents = 0;
  runtime.on('agent.created', ({ agent }) => {
    if (agent.parent_id === created.agent_id) subAgents++;
  });
  runtime.on('agent.message', ({ agent_id, message }) => {
    if (agent_id === created.agent_id) view.message(message);
  });
  runtime.on('agent.progress', ({ agent }) => {
    if (agent.agent_id === created.agent_id) view.update(agent);
  });
  runtime.on('agent.status', ({ agent }) => {
    if (agent.agent_id === created.agent_id) view.update(agent);
    else if (agent.status === 'COMPLETED') view.note(`  ${subAgentLabel(agent)} completed`);
  });
  view.message({ role: 'USER', text: goal });
  const final = await runtime.waitFor(created.agent_id);
  view.update(final);
  view.finish();
  const account = await runtime.accounts.get('local');
  const tree = await runtime.list({ parentId: created.agent_id, limit: 100 });
  console.log(
    `\n${final.status} · ${subAgents} sub-agents (${tree.data.filter((a) => a.status === 'COMPLETED').length} completed) · ` +
      `${final.token_count.toLocaleString('en-US')} tokens for the lead agent · ${(25 - account.balance).toFixed(4)} credits spent in all · ` +
      `ledger rows: ${(await runtime.accounts.ledger('local')).length}`,
  );
  console.log(
    '\nWith a key, the same runtime works on Claude:  ANTHROPIC_API_KEY=sk-ant-... node bin/agentry.js run "<your goal>"',
  );
  if (final.status !== 'COMPLETED') process.exitCode = 1;
} finally {
  await runtime.close();
  rmSync(dir, { recursive: true, force: true });
}
