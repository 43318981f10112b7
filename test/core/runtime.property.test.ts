/**
 * Property test of the status table and the credits: random sequences of create / step / pause / resume / delete /
 * top-up against the runtime with a scripted model. After every command: only moves the status table allows occurred,
 * the ledger invariant holds, the balance is never negative, message_count equals the transcript length and token_count
 * equals the scripted usage.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  AgentRuntime,
  AgentryError,
  defineTool,
  memoryStorage,
  nextStatus,
  type AgentStatus,
  type StatusTrigger,
} from 'agentry-runtime';
import { fakeClock, scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';

const probe = defineTool({
  name: 'probe',
  description: 'a priced, idempotent tool',
  input: z.object({ n: z.number() }),
  price: 0.25,
  idempotent: true,
  run: ({ n }) => ({ n }),
});
const poke = defineTool({
  name: 'poke',
  description: 'a priced, non-idempotent tool',
  input: z.object({}),
  price: 0.5,
  idempotent: false,
  run: () => 'poked',
});

const turnArb: fc.Arbitrary<ScriptedTurn> = fc
  .record({
    kind: fc.constantFrom('plan', 'probe', 'poke', 'text+probe'),
    input: fc.integer({ min: 1, max: 30_000 }),
    output: fc.integer({ min: 0, max: 3_000 }),
  })
  .map(({ kind, input, output }) => {
    const usage = { inputTokens: input, outputTokens: output };
    switch (kind) {
      case 'plan':
        return {
          toolCalls: [
            {
              name: 'update_plan',
              input: {
                steps: [
                  { title: 's', status: 'done' },
                  { title: 't', status: 'pending' },
                ],
              },
            },
          ],
          usage,
        };
      case 'probe':
        return { toolCalls: [{ name: 'probe', input: { n: input } }], usage };
      case 'poke':
        return { toolCalls: [{ name: 'poke', input: {} }], usage };
      default:
        return { text: `checking ${input}`, toolCalls: [{ name: 'probe', input: { n: 1 } }], usage };
    }
  });

const scriptArb = fc
  .tuple(fc.array(turnArb, { maxLength: 4 }), fc.integer({ min: 1, max: 30_000 }), fc.integer({ min: 1, max: 3_000 }))
  .map(([middle, input, output]) => [
    ...middle,
    { text: 'final answer', usage: { inputTokens: input, outputTokens: output } },
  ]);

type Command =
  | { op: 'create' }
  | { op: 'step'; i: number }
  | { op: 'pause'; i: number }
  | { op: 'resume'; i: number }
  | { op: 'delete'; i: number }
  | { op: 'topup'; credits: number };

const commandArb: fc.Arbitrary<Command> = fc.oneof(
  { weight: 2, arbitrary: fc.constant({ op: 'create' as const }) },
  { weight: 8, arbitrary: fc.nat(20).map((i) => ({ op: 'step' as const, i })) },
  { weight: 2, arbitrary: fc.nat(20).map((i) => ({ op: 'pause' as const, i })) },
  { weight: 2, arbitrary: fc.nat(20).map((i) => ({ op: 'resume' as const, i })) },
  { weight: 1, arbitrary: fc.nat(20).map((i) => ({ op: 'delete' as const, i })) },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 400 }).map((c) => ({ op: 'topup' as const, credits: c / 100 })) },
);

/** Which triggers may explain a status change caused by each command. */
const ALLOWED: Record<Command['op'], StatusTrigger[]> = {
  create: [],
  step: ['start', 'complete', 'fail', 'exhaust_credits'],
  pause: ['pause'],
  resume: ['resume', 'resume_unstarted'],
  delete: [],
  topup: [],
};

function legal(op: Command['op'], from: AgentStatus, to: AgentStatus): boolean {
  return from === to || ALLOWED[op].some((t) => nextStatus(from, t) === to);
}

describe('runtime properties', () => {
  it('random command sequences keep every invariant', async () => {
    await fc.assert(
      fc.asyncProperty(
        scriptArb,
        fc.integer({ min: 1, max: 2_000 }),
        fc.array(commandArb, { minLength: 1, maxLength: 40 }),
        async (script, initialCents, commands) => {
          const storage = memoryStorage();
          const model = scriptedModel({ turns: script, record: false });
          const runtime = await AgentRuntime.open({
            storage,
            model,
            clock: fakeClock(),
            tools: [probe, poke],
            scheduler: 'manual',
            defaultAccount: { id: 'local', credits: initialCents / 100 },
            limits: { maxSteps: 4, maxOutputTokens: 512 },
          });
          const ids: string[] = [];
          const known = new Map<string, AgentStatus>();
          // usage of the first k assistant turns of the script
          const usageUpTo = (k: number) =>
            script.slice(0, k).reduce((sum, t) => sum + (t.usage?.inputTokens ?? 0) + (t.usage?.outputTokens ?? 0), 0);
          try {
            for (const cmd of commands) {
              const target = 'i' in cmd && ids.length > 0 ? ids[cmd.i % ids.length]! : undefined;
              try {
                switch (cmd.op) {
                  case 'create': {
                    const a = await runtime.create({ goal: `goal ${ids.length}` });
                    expect(a.status).toBe('ACTIVE');
                    ids.push(a.agent_id);
                    known.set(a.agent_id, 'ACTIVE');
                    break;
                  }
                  case 'topup':
                    await runtime.accounts.addCredits('local', cmd.credits);
                    break;
                  default:
                    if (!target) break;
                    if (cmd.op === 'delete') {
                      await runtime.delete(target);
                      known.delete(target);
                    } else if (cmd.op === 'step') await runtime.step(target);
                    else if (cmd.op === 'pause') await runtime.pause(target);
                    else await runtime.resume(target);
                }
              } catch (err) {
                // refusals are fine as long as they are the documented ones
                expect(AgentryError.isInstance(err), String(err)).toBe(true);
                expect(['not_found', 'invalid_state', 'insufficient_credits']).toContain((err as AgentryError).code);
              }

              // only moves the status table allows
              for (const [id, before] of known) {
                const row = await storage.getAgent(id);
                expect(row, 'an agent vanished without delete').not.toBeNull();
                expect(legal(cmd.op, before, row!.status), `${cmd.op}: ${before} -> ${row!.status}`).toBe(true);
                if (cmd.op !== 'step' && cmd.op !== 'pause' && cmd.op !== 'resume') expect(row!.status).toBe(before);
                if (target !== id && cmd.op !== 'create') expect(row!.status).toBe(before);
                known.set(id, row!.status);
                // message_count = transcript length; token_count = scripted usage of the turns taken
                const messages = await storage.listMessages(id);
                expect(row!.message_count).toBe(messages.length);
                const assistantTurns = (await storage.listTurns(id)).filter((t) => t.role === 'assistant').length;
                expect(row!.token_count).toBe(usageUpTo(assistantTurns));
              }
              // ledger invariant and a balance that never goes below zero
              const account = (await storage.getAccount('local'))!;
              const ledger = await storage.listLedger('local');
              expect(ledger.reduce((s, l) => s + l.amount, 0)).toBe(account.balance);
              expect(account.balance).toBeGreaterThanOrEqual(0);
              expect(account.reserved).toBe(0); // manual stepping: no hold outlives its step
            }
          } finally {
            await runtime.close();
          }
        },
      ),
      { numRuns: 250 },
    );
  });
});
