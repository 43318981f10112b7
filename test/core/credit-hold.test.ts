/**
 * Every credit hold ends, and ends once: a step's holds are settled or released on every path it can take (a model
 * answer, a model error and its retry, a pause or delete mid-call, a lost lease before the call or at the commit, a
 * balance that only covers a lowered max_tokens or nothing, a tool call that succeeds, throws, cannot start or
 * waits). After each scenario the gate counts no open hold and storage holds nothing for the account; ending a hold
 * twice releases it once.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, type AgentRow, type StorageAdapter, type Tool, type TurnRow } from 'agentry-runtime';
import { fakeClock, scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { CreditGate } from '../../src/core/credit-gate.js';
import { DEFAULT_PRICES } from '../../src/core/credits.js';
import { RuntimeEvents } from '../../src/core/events.js';
import { runStep } from '../../src/core/loop.js';
import { newRunControl, type RunControl, type StepDeps, type StepOutcome } from '../../src/core/step-types.js';
import type { Toolbox, Toolboxes } from '../../src/core/toolbox.js';
import type { ModelProvider } from '../../src/models/provider.js';
import { LeaseLostError } from '../../src/storage/workers.js';
import { accountWith, agentRow } from './gate-fixtures.js';

const T0 = new Date(0).toISOString();
/** Enough for every call below at the configured max_tokens. */
const PLENTY = 100_000_000;

const lookUp = defineTool({
  name: 'look_up',
  description: 'Looks something up (priced, safe to run again)',
  input: z.object({ q: z.string() }),
  price: 0.5,
  idempotent: true,
  run: ({ q }) => `found ${q}`,
});

const breaks = defineTool({
  name: 'breaks',
  description: 'Always throws (priced)',
  input: z.object({}),
  price: 0.5,
  idempotent: true,
  run: () => {
    throw new Error('the backend is down');
  },
});

const sendMail = defineTool({
  name: 'send_mail',
  description: 'Not safe to run twice (priced)',
  input: z.object({}),
  price: 0.5,
  idempotent: false,
  run: () => 'sent',
});

const waitsForever = defineTool({
  name: 'waits',
  description: 'Suspends until woken (priced)',
  input: z.object({}),
  price: 0.5,
  idempotent: true,
  run: (_input, ctx) => ctx.waitUntil('Waiting for a wake-up'),
});

interface Harness {
  deps: StepDeps;
  gate: CreditGate;
  storage: StorageAdapter;
  control: RunControl;
  /** The max_tokens of each model call made. */
  maxTokens(): number[];
  /** Steps agent A until its step does not say "continue". */
  drive(): Promise<StepOutcome>;
  agent(): Promise<AgentRow>;
  /** Micro-credits storage still holds for the account. */
  reserved(): Promise<number>;
}

async function harness(options: {
  /** The scripted turns, or a function of the model's call count (a failed call saves no turn). */
  turns: ScriptedTurn[] | ((callIndex: number) => ScriptedTurn);
  balance?: number;
  tools?: Tool[];
  model?: (model: ModelProvider) => ModelProvider;
  deps?: Partial<StepDeps>;
}): Promise<Harness> {
  const storage = await accountWith(options.balance ?? PLENTY);
  const gate = new CreditGate(storage);
  const turns = options.turns;
  const scripted = scriptedModel({
    turns: typeof turns === 'function' ? (_request, { callIndex }) => turns(callIndex) : turns,
  });
  const tools = new Map((options.tools ?? []).map((t) => [t.name, t]));
  const box: Toolbox = {
    system: 'You are a test agent.',
    specs: [...tools.values()].map((t) => ({ name: t.name, description: t.description, input_schema: t.jsonSchema })),
    get: (name) => tools.get(name),
    maxSteps: 20,
    needsResult: false,
  };
  const deps: StepDeps = {
    storage,
    credits: gate,
    model: options.model ? options.model(scripted) : scripted,
    toolboxes: { of: () => box } as unknown as Toolboxes,
    platform: null,
    artifactLimits: {} as StepDeps['artifactLimits'],
    prices: DEFAULT_PRICES,
    clock: fakeClock(0),
    events: new RuntimeEvents(),
    limits: {
      maxSteps: 20,
      maxWallClockMs: 3_600_000,
      maxOutputTokens: 1_000,
      minOutputTokens: 64,
      maxToolResultChars: 10_000,
      maxModelRetries: 2,
    },
    subAgents: {
      spawn: () => Promise.reject(new Error('no sub-agents here')),
      waitFor: () => {},
      results: () => Promise.resolve({ total: 0, results: [] }),
    },
    inModelLane: (fn) => fn(),
    backOffModels: () => {},
    inToolLane: (_lane, fn) => fn(),
    ...options.deps,
  };
  const goal: TurnRow = {
    agent_id: 'A',
    idx: 0,
    role: 'user',
    content: JSON.stringify([{ type: 'text', text: 'Do the thing' }]),
    created_at: T0,
  };
  await storage.insertAgents([agentRow('A', { active_since: T0 })], [], [goal]);
  const control = newRunControl();
  return {
    deps,
    gate,
    storage,
    control,
    maxTokens: () => scripted.calls.map((c) => c.maxTokens),
    async drive() {
      for (let i = 0; i < 20; i++) {
        const outcome = await runStep(deps, 'A', control);
        if (outcome.kind !== 'continue') return outcome;
      }
      throw new Error('still going after 20 steps');
    },
    agent: async () => (await storage.getAgent('A'))!,
    reserved: async () => (await storage.getAccount('acc'))!.reserved,
  };
}

/** The scenario's end: no hold is open in the gate, in storage, or left on the driver. */
async function expectNoHold(h: Harness): Promise<void> {
  expect(h.gate.openHolds).toBe(0);
  expect(await h.reserved()).toBe(0);
  expect([...h.control.holds].filter((hold) => hold.isOpen)).toEqual([]);
}

describe('every path of a step ends its credit holds', () => {
  it('a model call that answers: the hold is settled by the commit', async () => {
    const h = await harness({ turns: [{ text: 'Done.' }] });
    expect(await h.drive()).toEqual({ kind: 'stop' });
    expect((await h.agent()).status).toBe('COMPLETED');
    expect((await h.agent()).credits_spent).toBeGreaterThan(0);
    await expectNoHold(h);
  });

  it('a model error that is retried, then one that fails the agent: each hold is released', async () => {
    const h = await harness({
      turns: (i) =>
        i === 0
          ? { error: { message: 'overloaded', retryable: true, status: 500 } }
          : { error: { message: 'bad request', retryable: false, status: 400 } },
    });
    expect((await h.drive()).kind).toBe('retry');
    await expectNoHold(h);
    expect(await h.drive()).toEqual({ kind: 'stop' });
    expect((await h.agent()).status).toBe('FAILED');
    await expectNoHold(h);
  });

  it('a pause while the model call is in flight: the hold is released', async () => {
    const h = await harness({ turns: [{ text: 'late', delayMs: 60_000 }] });
    const stepping = h.drive();
    await waitFor(() => h.gate.openHolds === 1);
    h.control.model.abort(new Error('paused'));
    expect(await stepping).toEqual({ kind: 'stop' });
    await expectNoHold(h);
  });

  it('a delete while the model call is in flight: the gate ends the hold, and the step ending it again is a no-op', async () => {
    const h = await harness({ turns: [{ text: 'late', delayMs: 60_000 }] });
    let releases = 0;
    const release = h.storage.release.bind(h.storage);
    h.storage.release = async (id) => {
      releases++;
      return release(id);
    };
    const stepping = h.drive();
    await waitFor(() => h.gate.openHolds === 1);
    const [hold] = [...h.control.holds];
    h.control.abortAll(new Error('agent deleted'));
    await h.storage.deleteAgentTree('A');
    h.gate.agentsGone(['A']);
    expect(hold!.ended).toEqual({ how: 'released', reason: 'its agent was deleted' });
    expect(await stepping).toEqual({ kind: 'stop' });
    // The step's own release found the hold ended: storage was not asked to drop it again.
    expect(releases).toBe(0);
    await expectNoHold(h);
  });

  it('a lease lost before the model call (mayProceed says no): the hold is released', async () => {
    const h = await harness({ turns: [{ text: 'never' }], deps: { mayProceed: () => Promise.resolve(false) } });
    expect(await h.drive()).toEqual({ kind: 'stop' });
    await expectNoHold(h);
  });

  it('a lease lost at the commit (the fenced commit throws): the step releases the hold as it ends', async () => {
    const h = await harness({ turns: [{ text: 'Done.' }] });
    h.storage.commitStep = () => Promise.reject(new LeaseLostError('A'));
    await expect(h.drive()).rejects.toBeInstanceOf(LeaseLostError);
    await expectNoHold(h);
  });

  it('a balance that covers only a lowered max_tokens: the lowered hold is settled', async () => {
    // About 300 input tokens at the cache-write price and 1,000 output tokens would need ~0.5 credits; 0.3 covers
    // a shorter answer.
    const h = await harness({
      turns: [{ text: 'Short.', usage: { inputTokens: 100, outputTokens: 10 } }],
      balance: 300_000,
    });
    expect(await h.drive()).toEqual({ kind: 'stop' });
    expect((await h.agent()).status).toBe('COMPLETED');
    expect(h.maxTokens()[0]).toBeLessThan(1_000);
    await expectNoHold(h);
  });

  it('a balance that covers nothing: OUT_OF_CREDITS, and no hold was left', async () => {
    const h = await harness({ turns: [{ text: 'never' }], balance: 1_000 });
    expect(await h.drive()).toEqual({ kind: 'stop' });
    expect((await h.agent()).status).toBe('OUT_OF_CREDITS');
    await expectNoHold(h);
  });

  it('tool calls that succeed and that throw: their hold settles with the next model turn', async () => {
    const h = await harness({
      turns: [
        {
          toolCalls: [
            { name: 'look_up', input: { q: 'x' } },
            { name: 'breaks', input: {} },
          ],
        },
        { text: 'Done.' },
      ],
      tools: [lookUp, breaks],
    });
    expect(await h.drive()).toEqual({ kind: 'stop' });
    expect((await h.agent()).status).toBe('COMPLETED');
    const calls = await h.storage.listToolCalls('A', 1);
    expect(calls.map((c) => [c.name, c.is_error])).toEqual([
      ['look_up', false],
      ['breaks', true],
    ]);
    await expectNoHold(h);
  });

  it('a call that must never run twice, after a pause landed in storage: it does not start and its hold is released', async () => {
    const h = await harness({ turns: [{ toolCalls: [{ name: 'send_mail', input: {} }] }], tools: [sendMail] });
    // The model turn commits; the pause lands (in another process) before the call is marked started.
    expect(await runStep(h.deps, 'A', h.control)).toEqual({ kind: 'continue' });
    const agent = await h.agent();
    await h.storage.changeStatus('A', { from: ['ACTIVE'], to: 'PAUSED', patch: {} }, T0);
    h.control.committedRow = agent;
    expect(await runStep(h.deps, 'A', h.control)).toEqual({ kind: 'stop' });
    await expectNoHold(h);
  });

  it('a call that suspends: no settlement consumed its hold, so it is released', async () => {
    const h = await harness({ turns: [{ toolCalls: [{ name: 'waits', input: {} }] }], tools: [waitsForever] });
    expect(await h.drive()).toEqual({ kind: 'stop' });
    expect((await h.agent()).status_message).toBe('Waiting for a wake-up');
    await expectNoHold(h);
  });
});

describe('CreditHold', () => {
  it('ends once: a second release is a no-op, settling after a release does nothing, charging it throws', async () => {
    const storage = await accountWith(1_000);
    let releases = 0;
    const release = storage.release.bind(storage);
    storage.release = async (id) => {
      releases++;
      return release(id);
    };
    const gate = new CreditGate(storage);
    const result = await gate.hold({ account_id: 'acc', agent_id: 'A', root_id: 'A', amount: 400, purpose: 'test' });
    if (!result.granted) throw new Error('not granted');
    const { hold } = result;
    expect([hold.accountId, hold.amount, hold.purpose, hold.isOpen]).toEqual(['acc', 400, 'test', true]);
    expect(gate.openHolds).toBe(1);
    expect(await hold.release('first')).toBe(true);
    expect(await hold.release('second')).toBe(false);
    expect(hold.settled()).toBe(false);
    expect(hold.ended).toEqual({ how: 'released', reason: 'first' });
    expect(releases).toBe(1);
    expect(gate.openHolds).toBe(0);
    expect((await storage.getAccount('acc'))!.reserved).toBe(0);
    expect(() => hold.settlement({ kind: 'tool', item: 't', cost: 1, at: T0 })).toThrow(/has ended/);
  });

  it('settled by itself: charged once, and a release afterwards is a no-op', async () => {
    const storage = await accountWith(1_000);
    const gate = new CreditGate(storage);
    const result = await gate.hold({ account_id: 'acc', agent_id: 'A', root_id: 'A', amount: 400, purpose: 'test' });
    if (!result.granted) throw new Error('not granted');
    expect(await result.hold.settle({ kind: 'tool', item: 't', cost: 150, at: T0 })).toBe(150);
    expect(await result.hold.release('late')).toBe(false);
    const account = (await storage.getAccount('acc'))!;
    expect([account.balance, account.reserved, gate.openHolds]).toEqual([850, 0, 0]);
  });

  it('a settlement storage refuses releases the hold', async () => {
    const storage = await accountWith(1_000);
    storage.settle = () => Promise.reject(new Error('disk full'));
    const gate = new CreditGate(storage);
    const result = await gate.hold({ account_id: 'acc', agent_id: 'A', root_id: 'A', amount: 400, purpose: 'test' });
    if (!result.granted) throw new Error('not granted');
    await expect(result.hold.settle({ kind: 'tool', item: 't', cost: 150, at: T0 })).rejects.toThrow('disk full');
    expect(result.hold.ended).toEqual({ how: 'released', reason: 'its settlement failed' });
    expect([(await storage.getAccount('acc'))!.reserved, gate.openHolds]).toEqual([0, 0]);
  });
});

/** Polls a condition the step reaches asynchronously, with a deadline. */
async function waitFor(check: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('timed out waiting for condition');
    await new Promise((r) => setImmediate(r));
  }
}
