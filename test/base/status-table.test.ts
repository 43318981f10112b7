/**
 * Drives every row of the status table (`src/core/status.ts`) through the public API.
 * (Rows about spawned sub-agents live in test/core/sub-agents.test.ts.)
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { AgentRuntime, AgentryError, defineTool, memoryStorage } from 'agentry-runtime';
import { scriptedModel } from 'agentry-runtime/testing';
import { deferred, eventually, openTestRuntime } from '../support/runtime.js';

async function expectCode(p: Promise<unknown>, code: string): Promise<void> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(AgentryError.isInstance(err), `expected AgentryError ${code}, got ${String(err)}`).toBe(true);
  expect((err as AgentryError).code).toBe(code);
}

describe('status table', () => {
  it('create: valid body, active subscription, balance > 0 -> ACTIVE with progress 0 and the goal as USER message', async () => {
    const { runtime } = await openTestRuntime([{ text: 'done' }], { scheduler: 'manual' });
    const created = await runtime.create({ goal: 'Find the answer' });
    expect(created.status).toBe('ACTIVE');
    expect(created.progress).toBe(0);
    const { agent, messages } = await runtime.get(created.agent_id);
    expect(agent.message_count).toBe(1);
    expect(messages).toEqual([expect.objectContaining({ role: 'USER', text: 'Find the answer' })]);
    await runtime.close();
  });

  it('create is refused without an active subscription (subscription_inactive) and without balance (insufficient_credits)', async () => {
    const { runtime } = await openTestRuntime([{ text: 'done' }], { scheduler: 'manual' });
    const { account } = await runtime.accounts.create({ credits: 10 });
    await runtime.accounts.unsubscribe(account.account_id);
    await expectCode(runtime.create({ goal: 'x', accountId: account.account_id }), 'subscription_inactive');
    const broke = await runtime.accounts.create({ credits: 0 });
    await expectCode(runtime.create({ goal: 'x', accountId: broke.account.account_id }), 'insufficient_credits');
    expect((await runtime.list()).data).toHaveLength(0); // nothing half-written
    await runtime.close();
  });

  it('ACTIVE -> COMPLETED when the model ends without tool calls: progress 1.0 and a final ASSISTANT message', async () => {
    const { runtime } = await openTestRuntime([{ text: 'The answer is 42.' }]);
    const { agent_id } = await runtime.create({ goal: 'What is the answer?' });
    const agent = await runtime.waitFor(agent_id);
    expect(agent.status).toBe('COMPLETED');
    expect(agent.progress).toBe(1);
    const { messages } = await runtime.get(agent_id);
    expect(messages.at(-1)).toMatchObject({ role: 'ASSISTANT', text: 'The answer is 42.' });
    await runtime.close();
  });

  it('ACTIVE -> FAILED on an unrecoverable model error, with the reason in status_message', async () => {
    const { runtime } = await openTestRuntime([{ error: { message: 'model exploded', status: 400 } }]);
    const { agent_id } = await runtime.create({ goal: 'x' });
    const agent = await runtime.waitFor(agent_id);
    expect(agent.status).toBe('FAILED');
    expect(agent.status_message).toContain('model exploded');
    await runtime.close();
  });

  it('ACTIVE -> FAILED at the step limit', async () => {
    const loop = {
      toolCalls: [{ name: 'update_plan', input: { steps: [{ title: 'again', status: 'in_progress' }] } }],
    };
    const { runtime } = await openTestRuntime(() => loop, { limits: { maxSteps: 3 } });
    const { agent_id } = await runtime.create({ goal: 'loop forever' });
    const agent = await runtime.waitFor(agent_id);
    expect(agent.status).toBe('FAILED');
    expect(agent.status_message).toMatch(/step limit/);
    await runtime.close();
  });

  it('ACTIVE -> FAILED at the wall-clock limit (time spent ACTIVE, fake clock)', async () => {
    const loop = {
      toolCalls: [{ name: 'update_plan', input: { steps: [{ title: 'again', status: 'in_progress' }] } }],
    };
    const { runtime, clock } = await openTestRuntime(() => loop, {
      scheduler: 'manual',
      limits: { maxWallClockMs: 60_000 },
    });
    const { agent_id } = await runtime.create({ goal: 'slow' });
    await runtime.step(agent_id);
    expect((await runtime.get(agent_id)).agent.status).toBe('ACTIVE');
    clock.advance(61_000);
    const agent = await runtime.step(agent_id);
    expect(agent.status).toBe('FAILED');
    expect(agent.status_message).toMatch(/wall-clock/);
    await runtime.close();
  });

  it('time spent PAUSED does not count toward the wall-clock limit', async () => {
    const loop = {
      toolCalls: [{ name: 'update_plan', input: { steps: [{ title: 'again', status: 'in_progress' }] } }],
    };
    const { runtime, clock } = await openTestRuntime(() => loop, {
      scheduler: 'manual',
      limits: { maxWallClockMs: 60_000 },
    });
    const { agent_id } = await runtime.create({ goal: 'slow' });
    clock.advance(30_000);
    await runtime.pause(agent_id);
    clock.advance(3_600_000);
    await runtime.resume(agent_id);
    clock.advance(20_000);
    expect((await runtime.step(agent_id)).status).toBe('ACTIVE');
    await runtime.close();
  });

  it('ACTIVE -> OUT_OF_CREDITS when a reservation cannot be covered; resume with balance 0 is 402; after a top-up it continues from the last saved step', async () => {
    // The first turn costs exactly the whole balance (10 credits = 100,000 input tokens at 100 credits/M).
    const { runtime, model } = await openTestRuntime(
      [
        {
          toolCalls: [
            {
              name: 'update_plan',
              input: {
                steps: [
                  { title: 'a', status: 'done' },
                  { title: 'b', status: 'pending' },
                ],
              },
            },
          ],
          usage: { inputTokens: 100_000, outputTokens: 0 },
        },
        { text: 'finished' },
      ],
      { defaultAccount: { id: 'local', credits: 10 }, limits: { maxOutputTokens: 100 } },
    );
    const { agent_id } = await runtime.create({ goal: 'spend it all' });
    const stopped = await runtime.waitFor(agent_id);
    expect(stopped.status).toBe('OUT_OF_CREDITS');
    const account = await runtime.accounts.get('local');
    expect(account.balance).toBe(0);
    expect(account.reserved).toBe(0);
    await expectCode(runtime.resume(agent_id), 'insufficient_credits');
    expect((await runtime.get(agent_id)).agent.status).toBe('OUT_OF_CREDITS');
    // pause of an OUT_OF_CREDITS agent leaves it as it is
    expect((await runtime.pause(agent_id)).status).toBe('OUT_OF_CREDITS');

    await runtime.accounts.addCredits('local', 5);
    const callsBefore = model.callCount;
    expect((await runtime.resume(agent_id)).status).toBe('ACTIVE');
    const done = await runtime.waitFor(agent_id);
    expect(done.status).toBe('COMPLETED');
    expect(model.callCount).toBe(callsBefore + 1); // continued from the saved step, nothing redone
    expect(model.calls.at(-1)!.messages).toHaveLength(3); // goal, the tool turn, its results
    await runtime.close();
  });

  it('pause aborts an in-flight model request (hold released), and resume redoes that step', async () => {
    const { runtime, model } = await openTestRuntime([{ text: 'slow answer', delayMs: 60_000 }]);
    const { agent_id } = await runtime.create({ goal: 'think hard' });
    await eventually(() => model.callCount === 1, 5_000, 'the model call');
    expect((await runtime.accounts.get('local')).reserved).toBeGreaterThan(0);
    const paused = await runtime.pause(agent_id);
    expect(paused.status).toBe('PAUSED');
    await runtime.whenIdle();
    const account = await runtime.accounts.get('local');
    expect(account.reserved).toBe(0);
    expect(account.balance).toBe(100); // nothing spent on the aborted call
    const { agent } = await runtime.get(agent_id);
    expect(agent.token_count).toBe(0);
    await runtime.close();
  });

  it('pause lets a running tool call finish and saves its result; no new step starts until resume', async () => {
    const gate = deferred();
    const started = deferred();
    const slowTool = defineTool({
      name: 'slow_write',
      description: 'writes slowly',
      input: z.object({}),
      idempotent: false,
      run: async () => {
        started.resolve();
        await gate.promise;
        return 'written';
      },
    });
    const { runtime, model } = await openTestRuntime(
      [{ toolCalls: [{ name: 'slow_write', input: {} }] }, { text: 'all done' }],
      { tools: [slowTool] },
    );
    const { agent_id } = await runtime.create({ goal: 'write' });
    await started.promise;
    expect((await runtime.pause(agent_id)).status).toBe('PAUSED');
    gate.resolve();
    await runtime.whenIdle();
    expect(model.callCount).toBe(1);
    const { agent } = await runtime.get(agent_id);
    expect(agent.status).toBe('PAUSED');
    const turns = await runtime.storage.listTurns(agent_id);
    expect(turns.at(-1)!.content).toContain('written');

    // PAUSED + pause -> PAUSED (idempotent)
    expect((await runtime.pause(agent_id)).status).toBe('PAUSED');
    // PAUSED + resume (balance > 0) -> ACTIVE
    expect((await runtime.resume(agent_id)).status).toBe('ACTIVE');
    // ACTIVE + resume -> unchanged
    expect((await runtime.resume(agent_id)).status).toBe('ACTIVE');
    expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
    expect(model.callCount).toBe(2);
    await runtime.close();
  });

  it('COMPLETED and FAILED refuse pause and resume with invalid_state', async () => {
    const { runtime } = await openTestRuntime((req) =>
      req.messages[0]!.content[0]!.type === 'text' && (req.messages[0]!.content[0] as { text: string }).text === 'fail'
        ? { error: { message: 'nope' } }
        : { text: 'ok' },
    );
    const ok = await runtime.create({ goal: 'succeed' });
    const bad = await runtime.create({ goal: 'fail' });
    expect((await runtime.waitFor(ok.agent_id)).status).toBe('COMPLETED');
    expect((await runtime.waitFor(bad.agent_id)).status).toBe('FAILED');
    for (const id of [ok.agent_id, bad.agent_id]) {
      await expectCode(runtime.pause(id), 'invalid_state');
      await expectCode(runtime.resume(id), 'invalid_state');
    }
    await runtime.close();
  });

  it('delete works from any status, aborts in-flight work, and later reads are not_found', async () => {
    const { runtime, model } = await openTestRuntime([{ text: 'slow', delayMs: 60_000 }]);
    const { agent_id } = await runtime.create({ goal: 'x' });
    await eventually(() => model.callCount === 1, 5_000, 'the model call');
    expect(await runtime.delete(agent_id)).toEqual({ agent_id, deleted: true });
    await runtime.whenIdle();
    await expectCode(runtime.get(agent_id), 'not_found');
    await expectCode(runtime.pause(agent_id), 'not_found');
    await expectCode(runtime.delete(agent_id), 'not_found');
    expect(await runtime.storage.listMessages(agent_id)).toEqual([]);
    expect((await runtime.accounts.get('local')).reserved).toBe(0);
    await runtime.close();
  });

  it('ACTIVE when the process died -> the next open resumes it from the last saved step', async () => {
    const storage = memoryStorage();
    const model = scriptedModel({
      turns: [
        { toolCalls: [{ name: 'update_plan', input: { steps: [{ title: 'one', status: 'done' }] } }] },
        { text: 'done' },
      ],
    });
    const first = await AgentRuntime.open({ storage, model, scheduler: 'manual' });
    const { agent_id } = await first.create({ goal: 'survive' });
    await first.step(agent_id); // model turn saved
    // the process "dies": the first runtime is abandoned without close()
    const second = await AgentRuntime.open({ storage, model });
    const agent = await second.waitFor(agent_id);
    expect(agent.status).toBe('COMPLETED');
    expect(model.callCount).toBe(2); // the saved turn was not asked for again
    await second.close();
  });
});
