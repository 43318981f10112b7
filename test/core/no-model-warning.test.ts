import { afterEach, describe, expect, it, vi } from 'vitest';
import { AgentRuntime, memoryStorage } from '../../src/index.js';
import { scriptedModel } from '../../src/testing/index.js';

describe('AgentRuntime.open() without a model', () => {
  afterEach(() => {
    vi.unstubAllEnvs();
    vi.restoreAllMocks();
  });

  it('warns once per process that no model is configured, and not when a model is given', async () => {
    vi.stubEnv('ANTHROPIC_API_KEY', '');
    vi.stubEnv('ANTHROPIC_BASE_URL', '');
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    const given = await AgentRuntime.open({
      storage: memoryStorage(),
      model: scriptedModel({ turns: [{ text: 'Done.' }] }),
      builtinTools: false,
    });
    await given.close();
    expect(warn).not.toHaveBeenCalled();
    for (let i = 0; i < 2; i++) {
      const runtime = await AgentRuntime.open({ storage: memoryStorage(), builtinTools: false });
      await runtime.close();
    }
    expect(warn).toHaveBeenCalledTimes(1);
    expect(String(warn.mock.calls[0]![0])).toMatch(/no model is configured.*ANTHROPIC_API_KEY/);
    expect(warn.mock.calls[0]![1]).toMatchObject({ code: 'AGENTRY_NO_MODEL' });
  });
});
