/**
 * Budgets that are spent, not stranded: the input bound learns from the usage the provider
 * reported and is counted exactly before an agent gives up, so an agent stops OUT_OF_CREDITS only when what is left
 * cannot pay the exact cost of the call it could not make; every hold still covers its call's real cost, the ledger
 * is exact and the balance never goes below zero.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  AgentRuntime,
  defineTool,
  memoryStorage,
  type ModelMessage,
  type ModelProvider,
  type ModelRequest,
  type StorageAdapter,
  type TurnRow,
} from 'agentry-runtime';
import { fakeClock, scriptedModel, scriptedTokenizer, type ScriptedTurn } from 'agentry-runtime/testing';
import { DEFAULT_PRICES, modelCost, modelReservation } from '../../src/core/credits.js';

const ULTRA = DEFAULT_PRICES.models['svc-1-ultra']!;
const LITE = DEFAULT_PRICES.models['svc-1-lite']!;
const FLOOR = 256;

/** About 12 KB of English, about 4 bytes a token under the tokenizer below. */
const DOCUMENT = Array.from(
  { length: 200 },
  (_, i) => `Paragraph ${i}: the committee reviewed the findings and noted the open questions.`,
)
  .join('\n')
  .slice(0, 12_000);

const readDocument = defineTool({
  name: 'read_document',
  description: 'Reads one part of the document under study',
  input: z.object({ part: z.number().int() }),
  idempotent: true,
  run: ({ part }) => `Part ${part}\n${DOCUMENT}`,
});

/**
 * Watches every hold and every settlement of a storage: a settlement's costs must never exceed its hold, and the
 * balance (less holds) never goes below zero.
 */
function watchHolds(storage: StorageAdapter): { holds: Map<string, number>; violations: string[] } {
  const holds = new Map<string, number>();
  const violations: string[] = [];
  const s = storage as StorageAdapter & Required<Pick<StorageAdapter, 'reserveNow'>>;
  const reserveNow = s.reserveNow.bind(s);
  s.reserveNow = (request) => {
    const refusal = reserveNow(request);
    if (refusal === null) holds.set(request.id, request.amount);
    return refusal;
  };
  const commitStep = s.commitStep.bind(s);
  s.commitStep = async (commit) => {
    const spent = new Map<string, number>();
    for (const st of commit.settlements ?? []) {
      spent.set(st.reservation_id, (spent.get(st.reservation_id) ?? 0) + st.ledger.cost);
    }
    for (const [id, cost] of spent) {
      const held = holds.get(id);
      if (held !== undefined && cost > held) violations.push(`hold ${id}: ${cost} spent of ${held} held`);
    }
    const result = await commitStep(commit);
    for (const st of commit.settlements ?? []) {
      const account = await s.getAccount(st.ledger.account_id);
      if (account && (account.balance < 0 || account.balance < account.reserved)) {
        violations.push(`balance ${account.balance}, reserved ${account.reserved}`);
      }
    }
    return result;
  };
  return { holds, violations };
}

async function expectLedgerExact(storage: StorageAdapter): Promise<void> {
  const account = (await storage.getAccount('local'))!;
  const ledger = await storage.listLedger('local');
  expect(account.balance).toBeGreaterThanOrEqual(0);
  expect(account.reserved).toBe(0);
  expect(ledger.reduce((sum, l) => sum + l.amount, 0)).toBe(account.balance);
}

const messagesOf = (turns: TurnRow[]): ModelMessage[] =>
  turns.map((t) => ({ role: t.role, content: JSON.parse(t.content) as ModelMessage['content'] }));

/** "Out of credits: the next step needs X credits (exactly N input tokens and F output tokens); … has Y credits left" */
function parseStop(message: string): { needed: number; inputTokens: number; outputTokens: number; left: number } {
  const m =
    /^Out of credits: the next step needs ([\d.]+) credits \(exactly ([\d,]+) input tokens and ([\d,]+) output tokens\); the account balance has ([\d.]+) credits left$/.exec(
      message,
    );
  if (!m) throw new Error(`unexpected status message: ${message}`);
  const int = (s: string) => Number(s.replaceAll(',', ''));
  return {
    needed: Math.round(Number(m[1]) * 1e6),
    inputTokens: int(m[2]!),
    outputTokens: int(m[3]!),
    left: Math.round(Number(m[4]) * 1e6),
  };
}

describe('budgets that are spent, not stranded', () => {
  // About 4 bytes a token as Claude counts English, and the worst case a provider can report: a token per byte.
  for (const [builtinTools, bytesPerToken] of [
    [false, 4],
    [true, 4],
    [true, 1],
  ] as const) {
    it(`ultra on 100 credits reading ~12 KB a turn stops only when the exact cost of its next call is more than is left (built-in tools ${builtinTools ? 'offered' : 'off'}, ${bytesPerToken} bytes a token)`, async () => {
      const tokenizer = scriptedTokenizer(bytesPerToken);
      const model = scriptedModel({
        tokenizer,
        turns: (_req, { turnIndex }): ScriptedTurn =>
          turnIndex < 60
            ? { toolCalls: [{ name: 'read_document', input: { part: turnIndex } }], usage: { outputTokens: 60 } }
            : { text: 'Read it all.' },
      });
      const storage = memoryStorage();
      const watch = watchHolds(storage);
      const runtime = await AgentRuntime.open({
        storage,
        model,
        clock: fakeClock(),
        tools: [readDocument],
        defaultAccount: { id: 'local', credits: 100 },
        ...(builtinTools ? {} : { builtinTools: false }),
      });
      try {
        const { agent_id } = await runtime.create({ goal: 'Study the document, part by part', model: 'svc-1-ultra' });
        const agent = await runtime.waitFor(agent_id);
        await runtime.whenIdle();
        await expectLedgerExact(storage);
        expect(watch.violations).toEqual([]);

        // Settlement is exact: every model call is charged what the tokenizer counted for it, plus its output.
        const ledger = (await storage.listLedger('local')).filter((l) => l.kind === 'model');
        expect(ledger).toHaveLength(model.calls.length);
        model.calls.forEach((call, i) => {
          expect(ledger[i]!.tokens_in).toBe(tokenizer(call));
          expect(-ledger[i]!.amount).toBe(modelCost(ULTRA, { inputTokens: tokenizer(call), outputTokens: 60 }));
        });
        // Before the input bound learned, the agent stopped after 8 calls at ~4 bytes a token.
        if (bytesPerToken === 4) expect(model.calls.length).toBeGreaterThan(9);

        if (agent.status === 'COMPLETED') return;
        expect(agent.status).toBe('OUT_OF_CREDITS');
        const left = (await storage.getAccount('local'))!.balance;
        // The call it could not make: the conversation as saved, with the system prompt and tools every call sent.
        const last = model.calls.at(-1)!;
        const next: ModelRequest = { ...last, messages: messagesOf(await storage.listTurns(agent_id)) };
        const exactCost = modelCost(ULTRA, { inputTokens: tokenizer(next), outputTokens: FLOOR });
        expect(left).toBeLessThan(exactCost);
        // Before the input bound learned, ~48.8 (~38.8 with the built-in tools) of the 100 credits were left at this
        // point.
        if (bytesPerToken === 4) expect(left).toBeLessThan(20_000_000);
        const stop = parseStop(agent.status_message);
        expect(stop).toEqual({ needed: exactCost, inputTokens: tokenizer(next), outputTokens: FLOOR, left });
      } finally {
        await runtime.close();
      }
    });
  }

  it('300 children with the built-in tools offered spend >= 2.7 of 3 credits; none stops while it could pay its exact count', async () => {
    const LEAD = 'lead';
    const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
    const tokenizer = scriptedTokenizer(4);
    const model = scriptedModel({
      record: false,
      tokenizer,
      turns: (req, { turnIndex }): ScriptedTurn => {
        if (goalOf(req) === LEAD) {
          if (turnIndex > 0) return { text: 'all done', usage: { outputTokens: 10 } };
          const tasks = Array.from({ length: 300 }, (_, i) => ({ goal: `child ${i}` }));
          return { toolCalls: [{ name: 'spawn_sub_agents', input: { tasks } }], usage: { outputTokens: 10 } };
        }
        return { text: `answer to ${goalOf(req)}`, usage: { outputTokens: 20 } };
      },
    });
    const childCalls: ModelRequest[] = [];
    const recording: ModelProvider = {
      ...model,
      generate: (request, options) => {
        if (childCalls.length === 0 && goalOf(request) !== LEAD) childCalls.push(request);
        return model.generate(request, options);
      },
    };
    const storage = memoryStorage();
    const watch = watchHolds(storage);
    const runtime = await AgentRuntime.open({
      storage,
      model: recording,
      clock: fakeClock(),
      defaultAccount: { id: 'local', credits: 3 },
    });
    try {
      const { agent_id } = await runtime.create({ goal: LEAD });
      await runtime.waitFor(agent_id);
      await runtime.whenIdle();
      await expectLedgerExact(storage);
      expect(watch.violations).toEqual([]);
      const counts = await storage.countChildrenByStatus(agent_id, '');
      expect((counts.COMPLETED ?? 0) + (counts.OUT_OF_CREDITS ?? 0)).toBe(300);
      const balance = (await storage.getAccount('local'))!.balance;
      if (counts.COMPLETED !== 300) expect(3_000_000 - balance).toBeGreaterThanOrEqual(2_700_000);

      // Every child that stopped could not pay the exact count of its first call at the 256-token floor.
      const stopped = await storage.listAgents({ parent_id: agent_id, status: 'OUT_OF_CREDITS', limit: 300 });
      const { system, tools } = childCalls[0]!;
      for (const child of stopped.rows) {
        const stop = parseStop(child.status_message);
        const exact = tokenizer({ system, tools, messages: messagesOf(await storage.listTurns(child.agent_id)) });
        expect(stop.inputTokens).toBe(exact);
        expect(stop.needed).toBe(modelCost(LITE, { inputTokens: exact, outputTokens: FLOOR }));
        expect(stop.left).toBeLessThan(stop.needed);
        expect(stop.left).toBeGreaterThanOrEqual(balance);
      }
    } finally {
      await runtime.close();
    }
  });

  it('property: through the runtime no hold is below the real cost of its call, the ledger is exact, and a stop is justified', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(1, 2, 4, 6),
        fc.array(fc.integer({ min: 0, max: 16_000 }), { minLength: 1, maxLength: 8 }),
        fc.array(fc.string({ unit: 'grapheme', maxLength: 300 }), { maxLength: 4 }),
        fc.integer({ min: 1, max: 60 }),
        fc.constantFrom('svc-1-lite', 'svc-1-ultra'),
        // A small window makes the loop elide old tool results: the learned prefix no longer applies.
        fc.constantFrom(6_000, 20_000, 200_000),
        async (bytesPerToken, sizes, descriptions, credits, modelId, window) => {
          const tokenizer = scriptedTokenizer(bytesPerToken);
          const blob = defineTool({
            name: 'blob',
            description: 'Returns a text of the size asked',
            input: z.object({ size: z.number().int() }),
            idempotent: true,
            run: ({ size }) => 'é token '.repeat(Math.ceil(size / 9)).slice(0, size),
          });
          const extra = descriptions.map((d, i) =>
            defineTool({
              name: `extra_${i}`,
              description: d || 'x',
              input: z.object({}),
              idempotent: true,
              run: () => 'ok',
            }),
          );
          const scripted = scriptedModel({
            tokenizer,
            // Every turn uses all of its max_tokens: the hold's only slack is then what its input bound left.
            turns: (req, { turnIndex }): ScriptedTurn =>
              turnIndex < sizes.length
                ? {
                    toolCalls: [{ name: 'blob', input: { size: sizes[turnIndex] } }],
                    usage: { outputTokens: req.maxTokens },
                  }
                : { text: 'done', usage: { outputTokens: req.maxTokens } },
          });
          const model: ModelProvider = { ...scripted, contextWindow: () => window };
          const storage = memoryStorage();
          const watch = watchHolds(storage);
          const runtime = await AgentRuntime.open({
            storage,
            model,
            clock: fakeClock(),
            tools: [blob, ...extra],
            builtinTools: false,
            defaultAccount: { id: 'local', credits },
          });
          try {
            const { agent_id } = await runtime.create({ goal: 'Read the blobs', model: modelId });
            const agent = await runtime.waitFor(agent_id);
            await runtime.whenIdle();
            expect(watch.violations).toEqual([]);
            await expectLedgerExact(storage);
            expect(['COMPLETED', 'OUT_OF_CREDITS']).toContain(agent.status);
            if (agent.status === 'OUT_OF_CREDITS') {
              const stop = parseStop(agent.status_message);
              expect(stop.left).toBeLessThan(stop.needed);
              expect(stop.left).toBe((await storage.getAccount('local'))!.balance);
            }
          } finally {
            await runtime.close();
          }
        },
      ),
      { numRuns: 25 },
    );
  });

  it('a provider that reports no usage keeps the byte bound; one that does reserves far less on later calls', async () => {
    const turns: ScriptedTurn[] = [
      { toolCalls: [{ name: 'read_document', input: { part: 0 } }] },
      { toolCalls: [{ name: 'read_document', input: { part: 1 } }] },
      { text: 'done' },
    ];
    const reservations = async (usage: 'none' | 'tokenizer') => {
      const tokenizer = scriptedTokenizer(4);
      const model =
        usage === 'none'
          ? scriptedModel({ turns: turns.map((t) => ({ ...t, usage: { inputTokens: 0, outputTokens: 5 } })) })
          : scriptedModel({ turns, tokenizer });
      const storage = memoryStorage();
      const { holds } = watchHolds(storage);
      const runtime = await AgentRuntime.open({ storage, model, clock: fakeClock(), tools: [readDocument] });
      const { agent_id } = await runtime.create({ goal: 'read' });
      expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
      await runtime.close();
      const byteBound = model.calls.map((c) => modelReservation(LITE, c));
      return { held: [...holds.values()], byteBound, exact: model.calls.map((c) => tokenizer(c)) };
    };
    const none = await reservations('none');
    expect(none.held).toEqual(none.byteBound);
    const learned = await reservations('tokenizer');
    expect(learned.held[0]).toBe(learned.byteBound[0]); // nothing known yet
    for (const i of [1, 2]) {
      expect(learned.held[i]).toBeLessThan(learned.byteBound[i]!);
      expect(learned.held[i]).toBeGreaterThanOrEqual(
        modelCost(LITE, { inputTokens: learned.exact[i]!, outputTokens: 4_096 }),
      );
    }
  });

  it('without countTokens an agent stops on the learned bound, and says "up to"', async () => {
    const tokenizer = scriptedTokenizer(4);
    const counting = scriptedModel({
      tokenizer,
      turns: () => ({ toolCalls: [{ name: 'read_document', input: { part: 0 } }], usage: { outputTokens: 60 } }),
    });
    const { countTokens: _dropped, ...model } = counting;
    const runtime = await AgentRuntime.open({
      storage: memoryStorage(),
      model: { ...model, generate: (r, o) => counting.generate(r, o) },
      clock: fakeClock(),
      tools: [readDocument],
      builtinTools: false,
      defaultAccount: { id: 'local', credits: 30 },
    });
    try {
      const { agent_id } = await runtime.create({ goal: 'read', model: 'svc-1-ultra' });
      const agent = await runtime.waitFor(agent_id);
      expect(agent.status).toBe('OUT_OF_CREDITS');
      expect(agent.status_message).toMatch(
        /^Out of credits: the next step needs up to [\d.]+ credits \(at most [\d,]+ input tokens and 256 output tokens\); the account balance has [\d.]+ credits left$/,
      );
    } finally {
      await runtime.close();
    }
  });
});
