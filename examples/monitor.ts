/**
 * An agent that watches a product page and says when the price drops below $50, offline: a local page whose price
 * the example changes, a scripted stand-in for Claude, and a fake clock (each `clock.advance(60_000)` is a minute
 * passing) so that an hour of watching takes a second. With a real model and clock it is the same code without the
 * `clock` and `model` options.
 *
 *   npx tsx examples/monitor.ts
 */
import { AgentRuntime, memoryStorage, type ModelRequest, type ToolResultBlock } from 'agentry-runtime';
import { fakeClock, scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { startPricePage } from '../test/fixtures/price-page.js';

const page = await startPricePage({ product: 'Widget Pro', price: 59 });
const clock = fakeClock(Date.parse('2026-03-02T09:00:00.000Z'));

/** The agent: create a monitor, wait, and answer with the change it was woken with. */
function agentTurn(req: ModelRequest, turnIndex: number): ScriptedTurn {
  if (turnIndex === 0) {
    return {
      toolCalls: [
        {
          name: 'monitor',
          input: {
            action: 'create',
            url: page.url,
            selector: '.price',
            condition: 'price below 50',
            interval_s: 300,
            until: new Date(clock.now() + 3 * 3_600_000).toISOString(),
          },
        },
      ],
    };
  }
  const last = req.messages.at(-1)!.content as ToolResultBlock[];
  const result = JSON.parse(last[0]!.content) as Record<string, unknown>;
  if (turnIndex === 1) return { toolCalls: [{ name: 'monitor', input: { action: 'wait' } }] };
  if (result.timed_out) return { text: 'The price did not drop below $50 in three hours.' };
  return { text: `The price dropped: ${String(result.diff_summary)} (${String(result.url)}).` };
}

/** The monitor's condition check: a short model call with the change (no tools offered). */
function conditionTurn(req: ModelRequest): ScriptedTurn {
  const prompt = (req.messages[0]!.content[0] as { text: string }).text;
  const added = /Lines added:\n([\s\S]*?)\n\n/.exec(prompt)?.[1] ?? '';
  const price = Number(/\$(\d+(?:\.\d+)?)/.exec(added)?.[1] ?? NaN);
  return { text: price < 50 ? 'YES: the price is below 50.' : 'NO: still 50 or more.' };
}

const runtime = await AgentRuntime.open({
  storage: memoryStorage(),
  clock,
  model: scriptedModel({
    turns: (req, { turnIndex }) => (req.tools.length === 0 ? conditionTurn(req) : agentTurn(req, turnIndex)),
  }),
  builtinTools: {
    only: ['monitor'],
    fetch: { allow: ['127.0.0.1/32'] }, // the local page; public sites need nothing
    env: { AGENTRY_MONITOR_MIN_INTERVAL_S: '60' },
  },
});
runtime.on('monitor.changed', (e) => console.log(`monitor.changed: ${e.diff_summary}`));

const { agent_id } = await runtime.create({ goal: 'Tell me when the Widget Pro costs less than $50.' });
/** Lets a minute pass on the fake clock, and waits until the monitor's check at that time is done. */
async function minutesPass(minutes: number): Promise<void> {
  clock.advance(minutes * 60_000);
  const at = new Date(clock.now()).toISOString();
  while ((await runtime.monitors(agent_id))[0]?.last_checked_at !== at) await new Promise((r) => setImmediate(r));
}
while (!(await runtime.get(agent_id)).agent.status_message.startsWith('Watching')) {
  await new Promise((r) => setImmediate(r));
}
console.log(`status: ${(await runtime.get(agent_id)).agent.status_message}`);

// Five minutes later the shop changes the price, but not below $50: the condition says no.
page.set({ price: 54, updatedAt: '09:04' });
await minutesPass(5);
console.log(`09:05 check: ${(await runtime.monitors(agent_id))[0]!.changes} changes that matter`);
// Five more minutes: a sale.
page.set({ price: 45, updatedAt: '09:09' });
await minutesPass(5);
const done = await runtime.waitFor(agent_id);

const { messages, agent } = await runtime.get(agent_id);
for (const m of messages) console.log(`[${m.role}] ${m.text}`);
const [m] = await runtime.monitors(agent_id);
console.log(`monitor: ${m!.url} every ${m!.interval_s} s, ${m!.changes} change(s), status ${m!.status}`);
console.log(`status: ${done.status}, ${agent.credits_spent} credits spent`);
await runtime.close();
await page.close();
