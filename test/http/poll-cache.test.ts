import { describe, expect, it } from 'vitest';
import { AgentryError } from 'agentry-runtime';
import type { KeyAuthentication, PollSource } from '../../src/http/poll.js';
import { keptUntilChange } from '../../src/http/poll-cache.js';

/** A source that counts its reads and answers from a mutable state, with a counter the test moves. */
function fakeSource() {
  const state = {
    counter: 1,
    reads: { keys: 0, agents: 0 },
    keys: new Map<string, string>([['k1', 'acc1']]),
    agents: new Map<string, { account: string; json: string }>([['a1', { account: 'acc1', json: '{"v":1}' }]]),
  };
  const source: PollSource = {
    async authenticate(key) {
      state.reads.keys++;
      const account = key === null ? undefined : state.keys.get(key);
      if (!account) throw new AgentryError('unauthorized', 'Unknown API key');
      return { account: { account_id: account }, keyHash: `h-${key}` } as unknown as KeyAuthentication;
    },
    async getJson(agentId, { accountId }) {
      state.reads.agents++;
      const agent = state.agents.get(agentId);
      if (!agent || agent.account !== accountId) throw new AgentryError('not_found', 'Agent was not found');
      return agent.json;
    },
  };
  return { state, source };
}

async function poll(source: PollSource, key: string | null, agentId: string): Promise<string> {
  source.begin?.();
  const { account } = await source.authenticate(key);
  return source.getJson(agentId, { accountId: account.account_id });
}

describe('keptUntilChange', () => {
  it('answers repeated polls from what it read until the counter moves', async () => {
    const { state, source } = fakeSource();
    const cached = keptUntilChange(source, () => state.counter);
    expect(await poll(cached, 'k1', 'a1')).toBe('{"v":1}');
    expect(await poll(cached, 'k1', 'a1')).toBe('{"v":1}');
    expect(state.reads).toEqual({ keys: 1, agents: 1 });

    state.agents.set('a1', { account: 'acc1', json: '{"v":2}' });
    expect(await poll(cached, 'k1', 'a1')).toBe('{"v":1}'); // the counter has not moved: nothing was committed
    state.counter++;
    expect(await poll(cached, 'k1', 'a1')).toBe('{"v":2}');
    expect(state.reads).toEqual({ keys: 2, agents: 2 });
  });

  it('drops a deleted key with the next change, and never keeps a failure', async () => {
    const { state, source } = fakeSource();
    const cached = keptUntilChange(source, () => state.counter);
    await poll(cached, 'k1', 'a1');
    state.keys.delete('k1');
    state.counter++;
    await expect(poll(cached, 'k1', 'a1')).rejects.toMatchObject({ code: 'unauthorized' });
    await expect(poll(cached, 'k1', 'a1')).rejects.toMatchObject({ code: 'unauthorized' });
    await expect(poll(cached, 'nope', 'a1')).rejects.toMatchObject({ code: 'unauthorized' });
    await expect(poll(cached, null, 'a1')).rejects.toMatchObject({ code: 'unauthorized' });
    expect(state.reads.keys).toBe(5);
  });

  it('keeps answers per account: another account asking for the agent is refused, not served', async () => {
    const { state, source } = fakeSource();
    state.keys.set('k2', 'acc2');
    const cached = keptUntilChange(source, () => state.counter);
    expect(await poll(cached, 'k1', 'a1')).toBe('{"v":1}');
    await expect(poll(cached, 'k2', 'a1')).rejects.toMatchObject({ code: 'not_found' });
    await expect(poll(cached, 'k2', 'a1')).rejects.toMatchObject({ code: 'not_found' });
    expect(await poll(cached, 'k1', 'a1')).toBe('{"v":1}');
  });

  it('does not keep what a poll read while another poll saw the counter move', async () => {
    const { state, source } = fakeSource();
    let gate: Promise<void> | undefined;
    let openGate!: () => void;
    const slow: PollSource = {
      authenticate: (key) => source.authenticate(key),
      async getJson(agentId, scope) {
        const json = await source.getJson(agentId, scope); // read now, in the state of its time
        if (gate) await gate;
        return json;
      },
    };
    const cached = keptUntilChange(slow, () => state.counter);
    gate = new Promise<void>((resolve) => (openGate = resolve));
    const first = poll(cached, 'k1', 'a1');
    await expect.poll(() => state.reads.agents).toBe(1);
    state.agents.set('a1', { account: 'acc1', json: '{"v":2}' });
    state.counter++;
    cached.begin!(); // a second poll begins and sees the change
    gate = undefined;
    openGate();
    expect(await first).toBe('{"v":1}');
    expect(await poll(cached, 'k1', 'a1')).toBe('{"v":2}'); // the first poll's answer was not kept
  });

  it('keeps no more than its limits', async () => {
    const { state, source } = fakeSource();
    for (let i = 2; i <= 4; i++) state.agents.set(`a${i}`, { account: 'acc1', json: 'x'.repeat(10) });
    const cached = keptUntilChange(source, () => state.counter, { entries: 2, chars: 20 });
    for (const id of ['a2', 'a3', 'a4', 'a2', 'a3', 'a4']) await poll(cached, 'k1', id);
    // a2 and a3 fill 20 chars; a4 is read each time
    expect(state.reads.agents).toBe(4);
  });
});
