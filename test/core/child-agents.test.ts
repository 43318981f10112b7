/**
 * Child agents of tools (README.md#tools, "What a tool can use").
 *
 * A tool spawns children with a job of their own through `ctx.spawn([{ goal, instructions, tools, result }])`. Such a
 * child is prompted with its instructions, is offered only its tools plus `submit_result`, and finishes only by a valid
 * `submit_result`: a plain answer gets a reminder, an invalid result gets an error naming the field, and its step limit
 * fails it. The spawning tool suspends while they run and reads their validated results as `data`. Children are
 * ordinary sub-agents: paused, resumed and deleted with the parent, billed to the same account.
 *
 * The crash half of the item (a child resumed from its saved step in a new process) is `test/durability/child-crash.test.ts`.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, type ChildTask, type ModelRequest, type ToolContext } from 'agentry-runtime';
import type { ScriptedTurn } from 'agentry-runtime/testing';
import { eventually, openTestRuntime } from '../support/runtime.js';

const INSTRUCTIONS = 'You research one topic. Look it up, then submit your answer with submit_result.';
const PARENT_FINAL = 'Report: all topics researched.';
const TOPICS = ['alpha', 'beta', 'gamma'] as const;

const Answer = z.object({ answer: z.string(), score: z.number().int().min(0).max(10) });
type Answer = z.infer<typeof Answer>;

/** What each child finally submits. */
const VALID: Record<string, Answer> = {
  alpha: { answer: 'ALPHA is the first letter', score: 9 },
  beta: { answer: 'BETA is the second letter', score: 5 },
  gamma: { answer: 'GAMMA is the third letter', score: 0 },
};
/** What each child submits first, and the field the error must name. */
const INVALID: Record<string, { input: unknown; field: string; why: RegExp }> = {
  alpha: { input: { answer: 'ALPHA', score: 42 }, field: 'score', why: /too big/i },
  beta: { input: { score: 5 }, field: 'answer', why: /expected string/i },
  gamma: { input: { answer: 'GAMMA', score: 7.5 }, field: 'score', why: /expected int/i },
};

/** Priced, so the children's tool use shows in the ledger too. */
const LOOKUP_PRICE = 0.01;

/**
 * The children's tool. It is NOT passed to the runtime: it reaches the catalog only as the research tool's childTools.
 */
const lookup = defineTool({
  name: 'lookup',
  description: 'Looks a key up.',
  input: z.object({ key: z.string() }),
  price: LOOKUP_PRICE,
  idempotent: true,
  run: ({ key }) => ({ key, value: key.toUpperCase() }),
});

type SubAgentPage = Awaited<ReturnType<ToolContext['subAgentResults']>>;
type Spawned = Awaited<ReturnType<ToolContext['spawn']>>;

/** What the research tool saw, call by call (it runs again each time its children wake it). */
interface ResearchLog {
  spawns: Spawned[];
  /** The results it read once every child was done. */
  results: SubAgentPage['results'] | undefined;
}

/**
 * `research {topics}`: one child per topic, suspends until they are done, then returns what they submitted. The
 * pattern of the built-in spawn tool (`createSpawnTool` in src/core/sub-agents.ts).
 */
function researchTool(log: ResearchLog, taskOf: (topic: string) => Partial<ChildTask> = () => ({})) {
  return defineTool({
    name: 'research',
    description: 'Researches topics with one child agent each.',
    input: z.object({ topics: z.array(z.string()).min(1) }),
    idempotent: true,
    childTools: [lookup],
    async run({ topics }, ctx) {
      const spawned = await ctx.spawn(
        topics.map((topic): ChildTask => ({
          goal: `Research ${topic}`,
          instructions: INSTRUCTIONS,
          tools: [lookup],
          result: Answer,
          ...taskOf(topic),
        })),
      );
      log.spawns.push(spawned);
      const finished = (spawned.counts.COMPLETED ?? 0) + (spawned.counts.FAILED ?? 0);
      if (finished < spawned.total) return ctx.suspend(`Researching ${spawned.total - finished} topics`);
      const { results } = await ctx.subAgentResults(ctx.toolCallId, { offset: 0, limit: 100 });
      log.results = results;
      return { results: results.map((r) => ({ index: r.index, status: r.status, data: r.data ?? null })) };
    },
  });
}

const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
const topicOf = (req: ModelRequest) => goalOf(req).replace(/^Research /, '');
const isChild = (req: ModelRequest) => req.system === INSTRUCTIONS;
const lastBlock = (req: ModelRequest) => req.messages.at(-1)!.content.at(-1)!;
const submit = (input: unknown) => ({ toolCalls: [{ name: 'submit_result', input }] });

/** The parent: one research call over `topics`, then a final answer. */
function parentTurn(turnIndex: number, topics: readonly string[] = TOPICS): ScriptedTurn {
  return turnIndex === 0 ? { toolCalls: [{ name: 'research', input: { topics } }] } : { text: PARENT_FINAL };
}

/** Each child: a plain answer, a lookup, an invalid result, then a valid one. */
function stubbornThenValid(req: ModelRequest, turnIndex: number): ScriptedTurn {
  const topic = topicOf(req);
  switch (turnIndex) {
    case 0:
      return { text: `I am fairly sure ${topic} is a Greek letter.` };
    case 1:
      return { toolCalls: [{ name: 'lookup', input: { key: topic } }] };
    case 2:
      return submit(INVALID[topic]!.input);
    default:
      return submit(VALID[topic]);
  }
}

async function childrenOf(runtime: Awaited<ReturnType<typeof openTestRuntime>>['runtime'], parentId: string) {
  const page = await runtime.list({ parentId, limit: 100 });
  const rows = await Promise.all(page.data.map(async (c) => (await runtime.storage.getAgent(c.agent_id))!));
  // Spawn keys are `<call id>#<task index>`: task order.
  return rows.sort((a, b) => Number(a.spawn_key!.split('#')[1]) - Number(b.spawn_key!.split('#')[1]));
}

/** The full scenario of items 1 and 5: three children that stumble twice each before they submit. */
async function runResearch() {
  const log: ResearchLog = { spawns: [], results: undefined };
  const t = await openTestRuntime(
    (req, { turnIndex }) => (isChild(req) ? stubbornThenValid(req, turnIndex) : parentTurn(turnIndex)),
    { tools: [researchTool(log)] },
  );
  const { agent_id } = await t.runtime.create({ goal: 'Research the first three Greek letters' });
  const parent = await t.runtime.waitFor(agent_id);
  const children = await childrenOf(t.runtime, agent_id);
  return { ...t, log, parent, children };
}

const microsOf = (credits: number) => Math.round(credits * 1_000_000);

describe('child agents of tools', () => {
  it('children get only their instructions and tools, are reminded, see why a result is rejected, and submit data the tool receives', async () => {
    const { runtime, storage, model, log, parent, children } = await runResearch();
    expect(parent.status, parent.status_message).toBe('COMPLETED');
    expect(children.map((c) => c.goal)).toEqual(TOPICS.map((t) => `Research ${t}`));

    // The parent is offered research (and the runtime's own tools), never the children's lookup or submit_result.
    const parentTools = model.calls.filter((c) => c.agentId === parent.agent_id)[0]!.tools.map((t) => t.name);
    expect(parentTools).toContain('research');
    expect(parentTools).not.toContain('lookup');
    expect(parentTools).not.toContain('submit_result');

    for (const [i, child] of children.entries()) {
      const topic = TOPICS[i]!;
      expect(child.status, child.status_message).toBe('COMPLETED');
      expect(child.parent_id).toBe(parent.agent_id);
      expect(child.step_count).toBe(4);
      // The spec is stored on the row: tools by name, the result schema as JSON Schema.
      const spec = JSON.parse(child.spec!) as Record<string, unknown>;
      expect(spec).toMatchObject({ instructions: INSTRUCTIONS, tools: ['lookup'] });
      expect(spec.result_schema).toMatchObject({
        type: 'object',
        properties: { answer: { type: 'string' }, score: { type: 'integer', minimum: 0, maximum: 10 } },
        required: ['answer', 'score'],
      });

      const requests = model.calls.filter((c) => c.agentId === child.agent_id);
      expect(requests).toHaveLength(4);
      for (const req of requests) {
        expect(req.system).toBe(INSTRUCTIONS);
        expect(req.tools.map((t) => t.name).sort()).toEqual(['lookup', 'submit_result']);
        // submit_result takes the result schema, rebuilt from the stored JSON Schema.
        expect(req.tools.find((t) => t.name === 'submit_result')!.input_schema).toMatchObject({
          properties: { answer: { type: 'string' }, score: { type: 'integer', minimum: 0, maximum: 10 } },
          required: ['answer', 'score'],
        });
      }
      // First USER message: the goal verbatim.
      expect(requests[0]!.messages).toEqual([{ role: 'user', content: [{ type: 'text', text: `Research ${topic}` }] }]);
      // A plain answer does not finish it: a reminder user turn follows, and it goes on.
      expect(requests[1]!.messages.at(-2)).toEqual({
        role: 'assistant',
        content: [{ type: 'text', text: `I am fairly sure ${topic} is a Greek letter.` }],
      });
      const reminder = lastBlock(requests[1]!);
      expect(requests[1]!.messages.at(-1)!.role).toBe('user');
      expect(reminder.type).toBe('text');
      expect((reminder as { text: string }).text).toMatch(/call submit_result/);
      // Its own tool works for it, though the runtime was never given it.
      expect(lastBlock(requests[2]!)).toMatchObject({
        type: 'tool_result',
        content: JSON.stringify({ key: topic, value: topic.toUpperCase() }),
      });
      expect((lastBlock(requests[2]!) as { is_error?: boolean }).is_error).toBeUndefined();
      // The invalid result is an error naming the field and why; the child tries again.
      const rejected = lastBlock(requests[3]!) as { type: string; content: string; is_error?: boolean };
      expect(rejected.type).toBe('tool_result');
      expect(rejected.is_error).toBe(true);
      expect(rejected.content).toMatch(/invalid input for submit_result/);
      expect(rejected.content).toMatch(new RegExp(`at ${INVALID[topic]!.field}\\b`));
      expect(rejected.content).toMatch(INVALID[topic]!.why);

      // Its last ASSISTANT message is the JSON of the valid result.
      const messages = await storage.listMessages(child.agent_id);
      expect(messages.at(-1)).toMatchObject({ role: 'ASSISTANT', text: JSON.stringify(VALID[topic]) });
      expect(messages[0]).toMatchObject({ role: 'USER', text: `Research ${topic}` });
    }

    // The tool suspended, was woken once, and read the three validated objects.
    expect(log.spawns.map((s) => s.reattached)).toEqual([false, true]);
    expect(log.spawns[1]).toMatchObject({ total: 3, counts: { COMPLETED: 3 } });
    expect(log.results).toEqual(
      children.map((c, index) => ({
        index,
        agent_id: c.agent_id,
        status: 'COMPLETED',
        result: JSON.stringify(VALID[TOPICS[index]!]),
        data: VALID[TOPICS[index]!],
      })),
    );
    // ... and returned them to the parent's model, which then finished.
    const parentRequests = model.calls.filter((c) => c.agentId === parent.agent_id);
    expect(parentRequests).toHaveLength(2);
    const toolResult = lastBlock(parentRequests[1]!) as { type: string; content: string; is_error?: boolean };
    expect(toolResult.type).toBe('tool_result');
    expect(toolResult.is_error).toBeUndefined();
    expect(JSON.parse(toolResult.content)).toEqual({
      results: TOPICS.map((t, index) => ({ index, status: 'COMPLETED', data: VALID[t] })),
    });
    const { messages } = await runtime.get(parent.agent_id);
    expect(messages.at(-1)).toMatchObject({ role: 'ASSISTANT', text: PARENT_FINAL });
    expect(parent.sub_agent_count).toBe(3);
    await runtime.close();
  });

  it('a child that never submits fails at its step limit, and the spawning tool sees it FAILED', async () => {
    const log: ResearchLog = { spawns: [], results: undefined };
    const { runtime, model } = await openTestRuntime(
      (req, { turnIndex }) => {
        if (!isChild(req)) return parentTurn(turnIndex, ['alpha', 'stubborn']);
        if (topicOf(req) === 'stubborn') return { text: `still thinking (${turnIndex})` };
        return submit(VALID.alpha);
      },
      { tools: [researchTool(log, (topic) => (topic === 'stubborn' ? { maxSteps: 3 } : {}))] },
    );
    const { agent_id } = await runtime.create({ goal: 'Research alpha and a stubborn topic' });
    const parent = await runtime.waitFor(agent_id);
    expect(parent.status, parent.status_message).toBe('COMPLETED');

    const [ok, stubborn] = await childrenOf(runtime, agent_id);
    expect(ok!.status).toBe('COMPLETED');
    expect(stubborn!.status).toBe('FAILED');
    expect(stubborn!.status_message).toBe('Failed: step limit reached (3 model turns)');
    expect(stubborn!.step_count).toBe(3);
    expect(JSON.parse(stubborn!.spec!)).toMatchObject({ max_steps: 3 });
    const requests = model.calls.filter((c) => c.agentId === stubborn!.agent_id);
    expect(requests).toHaveLength(3); // no fourth model turn
    for (const req of requests.slice(1)) expect((lastBlock(req) as { text: string }).text).toMatch(/submit_result/);

    expect(log.results).toEqual([
      {
        index: 0,
        agent_id: ok!.agent_id,
        status: 'COMPLETED',
        result: JSON.stringify(VALID.alpha),
        data: VALID.alpha,
      },
      // A failed child has no data: only its last words.
      { index: 1, agent_id: stubborn!.agent_id, status: 'FAILED', result: 'still thinking (2)' },
    ]);
    const toolResult = lastBlock(model.calls.filter((c) => c.agentId === agent_id)[1]!) as { content: string };
    expect(JSON.parse(toolResult.content)).toEqual({
      results: [
        { index: 0, status: 'COMPLETED', data: VALID.alpha },
        { index: 1, status: 'FAILED', data: null },
      ],
    });
    await runtime.close();
  });

  it('spawning with a tool the runtime does not know fails the call with a clear error, and spawns nothing', async () => {
    const stranger = defineTool({
      name: 'stranger',
      description: 'Known to nobody.',
      input: z.object({}),
      idempotent: true,
      run: () => 'hello',
    });
    // Same name as the catalog's lookup, another tool: refused too, or a child could run code the runtime never saw.
    const impostor = defineTool({ ...lookup, run: () => 'not the real lookup' });
    const variants = {
      name: { tools: ['no_such_tool'] },
      object: { tools: [stranger] },
      impostor: { tools: [impostor] },
      schema: { tools: [lookup], result: z.string() },
    } as const;
    const spawnWith = defineTool({
      name: 'spawn_with',
      description: 'Spawns one child with a broken task.',
      input: z.object({ variant: z.enum(['name', 'object', 'impostor', 'schema']) }),
      idempotent: true,
      childTools: [lookup],
      async run({ variant }, ctx) {
        await ctx.spawn([{ goal: 'Do it', instructions: INSTRUCTIONS, result: Answer, ...variants[variant] }]);
        return ctx.suspend('should not get here');
      },
    });
    const { runtime, model, storage } = await openTestRuntime(
      (_req, { turnIndex }) =>
        turnIndex === 0
          ? { toolCalls: Object.keys(variants).map((variant) => ({ name: 'spawn_with', input: { variant } })) }
          : { text: 'Could not spawn.' },
      { tools: [spawnWith] },
    );
    const { agent_id } = await runtime.create({ goal: 'Spawn broken children' });
    const parent = await runtime.waitFor(agent_id);
    expect(parent.status, parent.status_message).toBe('COMPLETED');

    const results = model.calls[1]!.messages.at(-1)!.content as Array<{ content: string; is_error?: boolean }>;
    expect(results).toHaveLength(4);
    for (const r of results) expect(r.is_error).toBe(true);
    const [byName, byObject, byImpostor, bySchema] = results.map((r) => r.content);
    const unknownTool = (name: string) =>
      `Error: A child's tool "${name}" is not known to the runtime: pass it to AgentRuntime.open({ tools }) ` +
      "or list it in the spawning tool's childTools";
    expect(byName).toBe(unknownTool('no_such_tool'));
    expect(byObject).toBe(unknownTool('stranger'));
    expect(byImpostor).toBe(unknownTool('lookup'));
    expect(bySchema).toBe("Error: A child's result schema must be a z.object(...)");

    expect(parent.sub_agent_count).toBe(0);
    expect((await runtime.list({ parentId: agent_id })).data).toEqual([]);
    expect((await storage.listAgents({ limit: 100 })).rows.map((r) => r.agent_id)).toEqual([agent_id]);
    await runtime.close();
  });

  it("data holds only the result schema's fields, not extra keys the child submitted", async () => {
    const log: ResearchLog = { spawns: [], results: undefined };
    const { runtime } = await openTestRuntime(
      (req, { turnIndex }) => {
        if (!isChild(req)) return parentTurn(turnIndex, ['alpha']);
        const rejected = (lastBlock(req) as { is_error?: boolean }).is_error === true;
        return submit(turnIndex === 0 || !rejected ? { ...VALID.alpha, note: 'smuggled' } : VALID.alpha);
      },
      { tools: [researchTool(log)] },
    );
    const { agent_id } = await runtime.create({ goal: 'Research alpha' });
    expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
    expect(log.results!.map((r) => r.data)).toEqual([VALID.alpha]);
    await runtime.close();
  });

  it('a spawning tool that is not idempotent gets its children’s results when they wake it', async () => {
    const researchOnce = defineTool({
      name: 'research_once',
      description: 'Researches alpha with one child; not safe to run twice.',
      input: z.object({}),
      idempotent: false,
      childTools: [lookup],
      async run(_input, ctx) {
        const spawned = await ctx.spawn([
          { goal: 'Research alpha', instructions: INSTRUCTIONS, tools: ['lookup'], result: Answer },
        ]);
        if ((spawned.counts.COMPLETED ?? 0) < spawned.total) return ctx.suspend('Researching alpha');
        const { results } = await ctx.subAgentResults(ctx.toolCallId, { offset: 0, limit: 10 });
        return { data: results.map((r) => r.data) };
      },
    });
    const { runtime, model } = await openTestRuntime(
      (req, { turnIndex }) =>
        isChild(req)
          ? submit(VALID.alpha)
          : turnIndex === 0
            ? { toolCalls: [{ name: 'research_once', input: {} }] }
            : { text: PARENT_FINAL },
      { tools: [researchOnce] },
    );
    const { agent_id } = await runtime.create({ goal: 'Research alpha once' });
    expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
    const toolResult = lastBlock(model.calls.filter((c) => c.agentId === agent_id)[1]!) as { content: string };
    expect(toolResult.content).not.toMatch(/outcome of this call is unknown/);
    expect(JSON.parse(toolResult.content)).toEqual({ data: [VALID.alpha] });
    await runtime.close();
  });

  describe('children are paused, resumed and deleted with the parent', () => {
    /** Children whose first model turn hangs (abortably) while `hold.on`, then submit at once. */
    async function openHeld() {
      const hold = { on: true, inFlight: 0 };
      const log: ResearchLog = { spawns: [], results: undefined };
      const t = await openTestRuntime(
        (req, { turnIndex }) => {
          if (!isChild(req)) return parentTurn(turnIndex);
          if (!hold.on) return submit(VALID[topicOf(req)]);
          hold.inFlight++;
          return { ...submit(VALID[topicOf(req)]), delayMs: 60_000 };
        },
        { tools: [researchTool(log)] },
      );
      const { agent_id } = await t.runtime.create({ goal: 'Research the first three Greek letters' });
      await eventually(() => hold.inFlight === 3, 5_000, 'three children in their model turn');
      return { ...t, hold, log, parentId: agent_id };
    }

    it('pausing the parent pauses its running children; resuming it finishes them all', async () => {
      const { runtime, model, hold, log, parentId } = await openHeld();
      const childIds = (await childrenOf(runtime, parentId)).map((c) => c.agent_id);
      expect(childIds).toHaveLength(3);

      expect((await runtime.pause(parentId)).status).toBe('PAUSED');
      await runtime.whenIdle();
      const paused = await childrenOf(runtime, parentId);
      expect(paused.map((c) => c.status)).toEqual(['PAUSED', 'PAUSED', 'PAUSED']);
      // Their in-flight model turns were aborted: nothing was saved, the step is redone on resume.
      expect(paused.map((c) => c.step_count)).toEqual([0, 0, 0]);
      expect((await runtime.get(parentId)).agent.status).toBe('PAUSED');
      const callsWhilePaused = model.callCount;
      await runtime.whenIdle();
      expect(model.callCount).toBe(callsWhilePaused);

      hold.on = false;
      expect((await runtime.resume(parentId)).status).toBe('ACTIVE');
      const parent = await runtime.waitFor(parentId);
      expect(parent.status, parent.status_message).toBe('COMPLETED');
      const done = await childrenOf(runtime, parentId);
      expect(done.map((c) => c.agent_id)).toEqual(childIds); // the same children, not new ones
      expect(done.map((c) => c.status)).toEqual(['COMPLETED', 'COMPLETED', 'COMPLETED']);
      expect(done.map((c) => c.step_count)).toEqual([1, 1, 1]);
      for (const id of childIds) expect(model.calls.filter((c) => c.agentId === id)).toHaveLength(2); // 1 aborted
      expect(log.results!.map((r) => r.data)).toEqual(TOPICS.map((t) => VALID[t]));

      // The aborted turns cost nothing: one model charge per child, and every hold is gone.
      const ledger = await runtime.storage.listLedger('local');
      for (const id of childIds) expect(ledger.filter((l) => l.agent_id === id && l.kind === 'model')).toHaveLength(1);
      const account = (await runtime.storage.getAccount('local'))!;
      expect(account.reserved).toBe(0);
      expect(ledger.reduce((s, l) => s + l.amount, 0)).toBe(account.balance);
      await runtime.close();
    });

    it('deleting the parent while its children run deletes them', async () => {
      const { runtime, storage, parentId } = await openHeld();
      const childIds = (await childrenOf(runtime, parentId)).map((c) => c.agent_id);
      expect(childIds).toHaveLength(3);

      await runtime.delete(parentId);
      await runtime.whenIdle();
      for (const id of [parentId, ...childIds]) {
        await expect(runtime.get(id)).rejects.toMatchObject({ code: 'not_found' });
        expect(await storage.getAgent(id)).toBeNull();
        expect(await storage.listMessages(id)).toEqual([]);
        expect(await storage.listTurns(id)).toEqual([]);
      }
      expect((await runtime.list({ limit: 100 })).data).toEqual([]);
      const account = (await storage.getAccount('local'))!;
      expect(account.reserved).toBe(0);
      await runtime.close();
    });
  });

  it("the children's model and tool use is charged to the parent's account: Σ ledger = balance", async () => {
    const { runtime, storage, parent, children } = await runResearch();
    expect(parent.status).toBe('COMPLETED');
    const account = (await storage.getAccount('local'))!;
    const ledger = await storage.listLedger('local');
    expect(ledger.reduce((s, l) => s + l.amount, 0)).toBe(account.balance);
    expect(account.reserved).toBe(0);
    expect(ledger.every((l) => l.account_id === 'local')).toBe(true);

    for (const child of children) {
      const rows = ledger.filter((l) => l.agent_id === child.agent_id);
      // One model charge per turn it took (4, with the default scripted usage), one tool charge for its lookup.
      expect(rows.filter((l) => l.kind === 'model').map((l) => [l.item, l.tokens_in, l.tokens_out])).toEqual(
        Array.from({ length: 4 }, () => ['svc-1-lite', 100, 20]),
      );
      expect(rows.filter((l) => l.kind === 'tool').map((l) => [l.item, l.amount])).toEqual([
        ['lookup', -microsOf(LOOKUP_PRICE)],
      ]);
      expect(rows.reduce((s, l) => s - l.amount, 0)).toBe(child.credits_spent);
      expect(child.credits_spent).toBeGreaterThan(0);
    }
    // The tree's spend is the parent's and the children's.
    const spent = ledger.filter((l) => l.amount < 0).reduce((s, l) => s - l.amount, 0);
    const root = (await storage.getAgent(parent.agent_id))!;
    expect(root.credits_spent + children.reduce((s, c) => s + c.credits_spent, 0)).toBe(spent);
    expect(root.tree_spent).toBe(spent);
    expect((await runtime.accounts.get('local')).balance).toBe(account.balance / 1_000_000);
    await runtime.close();
  });
});
