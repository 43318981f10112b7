/**
 * Metered tools (`ToolDefinition.meter`, `ctx.meter`): priced per unit of use (a browser's minutes, a sandbox's CPU
 * seconds), reserved for the most units the input allows, charged for the units reported and never more; and a
 * price set only in the price table bills a tool whose own price is 0.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, type AgentryError } from 'agentry-runtime';
import { openTestRuntime } from '../support/runtime.js';

/** Reports `used` units of a job that may use up to `max`. */
const job = defineTool({
  name: 'job',
  description: 'metered work',
  input: z.object({ max: z.number(), used: z.number() }),
  price: 0.5,
  meter: { unit: 'second', maxUnits: (input) => input.max },
  idempotent: true,
  run: ({ used }, ctx) => {
    ctx.meter(used / 2);
    ctx.meter(used / 2);
    return 'ok';
  },
});

const free = defineTool({
  name: 'free_unless_priced',
  description: 'priced only by the table',
  input: z.object({}),
  idempotent: true,
  run: () => 'ok',
});

async function toolCharges(calls: Array<{ name: string; input: Record<string, unknown> }>, credits = 100) {
  const t = await openTestRuntime([{ toolCalls: calls }, { text: 'done' }], {
    tools: [job, free],
    builtinTools: false,
    prices: {
      models: { 'svc-1-lite': { inputPerMillion: 0, outputPerMillion: 0 } },
      tools: { free_unless_priced: 0.3 },
    },
    defaultAccount: { id: 'local', credits },
  });
  const { agent_id } = await t.runtime.create({ goal: 'meter' });
  const agent = await t.runtime.waitFor(agent_id);
  const ledger = (await t.storage.listLedger('local')).filter((r) => r.kind === 'tool');
  await t.runtime.close();
  return { agent, charges: ledger.map((r) => [r.item, -r.amount]) };
}

describe('metered tools', () => {
  it('charges the units reported, at the unit price', async () => {
    const { agent, charges } = await toolCharges([{ name: 'job', input: { max: 10, used: 3 } }]);
    expect(agent.status).toBe('COMPLETED');
    expect(charges).toEqual([['job', 1_500_000]]);
  });

  it('never charges more than it reserved, whatever the tool reports', async () => {
    const { charges } = await toolCharges([{ name: 'job', input: { max: 2, used: 50 } }]);
    expect(charges).toEqual([['job', 1_000_000]]);
  });

  it('reserves the most units the input allows: a balance that cannot cover them stops the agent first', async () => {
    const { agent, charges } = await toolCharges([{ name: 'job', input: { max: 1_000, used: 1 } }], 10);
    expect(agent.status).toBe('OUT_OF_CREDITS');
    expect(charges).toEqual([]);
  });

  it('bills a price set only in the price table for a tool whose own price is 0', async () => {
    const { charges } = await toolCharges([{ name: 'free_unless_priced', input: {} }]);
    expect(charges).toEqual([['free_unless_priced', 300_000]]);
  });

  it('refuses a meter without maxUnits at definition', () => {
    expect(() =>
      defineTool({
        name: 'bad',
        description: 'x',
        input: z.object({}),
        meter: { unit: 'second' } as never,
        idempotent: true,
        run: () => 'x',
      }),
    ).toThrow(/meter/);
    const err = (() => {
      try {
        defineTool({
          name: 'bad',
          description: 'x',
          input: z.object({}),
          idempotent: true,
          meter: 3 as never,
          run: () => '',
        });
      } catch (e) {
        return e as AgentryError;
      }
    })();
    expect(err?.code).toBe('invalid_request');
  });
});
