// The core chooses no backend: its defaults (storage, model, tracer) come from the package's entry point. This file
// imports the core alone, never src/index.ts, so the entry point has provided nothing here.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { AgentRuntime } from '../../src/core/agent-runtime.js';
import { provideRuntimeDefaults } from '../../src/core/runtime-defaults.js';
import type { Telemetry } from '../../src/core/telemetry.js';
import { memoryStorage } from '../../src/storage/memory.js';
import { scriptedModel } from '../../src/testing/index.js';

describe('AgentRuntime.open() from the core alone', () => {
  beforeEach(() => {
    // Were a default storage chosen after all, it would be this one and not a file in the checkout.
    vi.stubEnv('AGENTRY_DB', ':memory:');
  });
  afterEach(() => vi.unstubAllEnvs());

  it('asks for `storage` and `model` by name instead of choosing a backend', async () => {
    const model = scriptedModel({ turns: [{ text: 'Done.' }] });
    await expect(AgentRuntime.open({ model, builtinTools: false })).rejects.toMatchObject({
      code: 'invalid_request',
      message: expect.stringMatching(/`storage` is required/),
    });
    await expect(AgentRuntime.open({ storage: memoryStorage(), builtinTools: false })).rejects.toMatchObject({
      code: 'invalid_request',
      message: expect.stringMatching(/`model` is required/),
    });
  });

  it('uses the defaults it is given: the storage, the model and the tracer', async () => {
    const storage = memoryStorage();
    const model = scriptedModel({ turns: [{ text: 'Done.' }] });
    const created: string[] = [];
    const tracer: Telemetry = {
      agentCreated: (row) => {
        created.push(row.agent_id);
        return null;
      },
      agentRun: () => ({
        chat: () => ({ within: (fn) => fn(), end: () => {} }),
        tool: () => ({ traceparent: null, within: (fn) => fn(), end: () => {} }),
        event: () => {},
        end: () => {},
      }),
    };
    const asked: unknown[] = [];
    provideRuntimeDefaults({
      storage: async () => storage,
      model: async (o) => (asked.push(o), model),
      tracing: async (settings) => (asked.push(settings), tracer),
    });
    const runtime = await AgentRuntime.open({ builtinTools: false, tracing: { captureMessageContent: true } });
    try {
      expect(runtime.storage).toBe(storage);
      expect(asked).toEqual([{ warnWithoutKey: true }, { captureMessageContent: true }]);
      const { agent_id } = await runtime.create({ goal: 'Say done' });
      expect((await runtime.waitFor(agent_id)).status).toBe('COMPLETED');
      expect(created).toEqual([agent_id]);
    } finally {
      await runtime.close();
    }
  });
});
