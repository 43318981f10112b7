/**
 * Embedded run: a scripted agent (a stand-in for Claude, no key needed) plans, calls a custom tool, and completes.
 * Prints the transcript and what it spent. Run: npx tsx examples/embedded.ts
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { AgentRuntime, defineTool, sqliteStorage } from 'agentry-runtime';
import { scriptedModel } from 'agentry-runtime/testing';

const dir = mkdtempSync(join(tmpdir(), 'agentry-embedded-'));

// A custom tool: the agent can look up the population of a city.
const population = defineTool({
  name: 'city_population',
  description: 'Population of a city, from a small built-in table',
  input: z.object({ city: z.string() }),
  price: 0.5, // credits per call
  idempotent: true,
  describe: ({ city }) => `Looking up ${city}`,
  run: ({ city }) => {
    const table: Record<string, number> = { paris: 2_102_650, lyon: 522_250 };
    const value = table[city.toLowerCase()];
    if (value === undefined) throw new Error(`no data for ${city}`);
    return { city, population: value };
  },
});

// The scripted model plays the part of Claude: plan, call the tool twice, answer.
const model = scriptedModel({
  turns: [
    {
      text: 'I will look up both cities, then compare.',
      toolCalls: [
        {
          name: 'update_plan',
          input: {
            steps: [
              { title: 'Look up populations', status: 'in_progress' },
              { title: 'Compare', status: 'pending' },
            ],
          },
        },
        { name: 'city_population', input: { city: 'Paris' } },
        { name: 'city_population', input: { city: 'Lyon' } },
      ],
      usage: { inputTokens: 1_200, outputTokens: 150 },
    },
    {
      text: 'Paris (2,102,650) is about four times as populous as Lyon (522,250).',
      usage: { inputTokens: 1_500, outputTokens: 40 },
    },
  ],
});

const runtime = await AgentRuntime.open({
  storage: sqliteStorage({ path: join(dir, 'agentry.db') }),
  model,
  tools: [population],
});
try {
  runtime.on('agent.progress', ({ agent }) =>
    console.log(`  … ${agent.status_message} (${Math.round(agent.progress * 100)}%)`),
  );
  const created = await runtime.create({ goal: 'How much bigger is Paris than Lyon?' });
  console.log(`created ${created.agent_id} (${created.status})`);
  const agent = await runtime.waitFor(created.agent_id);
  const { messages } = await runtime.get(created.agent_id);
  console.log(
    `\nstatus: ${agent.status}, progress ${agent.progress}, ${agent.token_count} tokens, ${agent.credits_spent} credits spent`,
  );
  console.log('\ntranscript:');
  for (const m of messages) console.log(`  [${m.role}] ${m.text}`);
  const account = await runtime.accounts.get(runtime.defaultAccountId);
  console.log(`\naccount balance: ${account.balance} credits`);
  if (agent.status !== 'COMPLETED') process.exitCode = 1;
} finally {
  await runtime.close();
  rmSync(dir, { recursive: true, force: true });
}
