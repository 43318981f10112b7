/**
 * Agents take turns on a server that may ask for sampling: the calls of one agent run together,
 * another agent's wait, and a waiting agent goes before the running agent's later calls.
 */
import { describe, expect, it } from 'vitest';
import { AgentTurns } from '../../src/mcp/agent-turns.js';

describe('AgentTurns', () => {
  it('runs one agent’s calls together; the next agent’s start when they have all ended', async () => {
    const turns = new AgentTurns();
    const log: string[] = [];
    const a1 = await turns.take('a');
    const a2 = await turns.take('a');
    const b = turns.take('b').then((done) => (log.push('b'), done));
    // a's third call comes after b began waiting: it waits behind b.
    const a3 = turns.take('a').then((done) => (log.push('a3'), done));
    expect(turns.waiting).toBe(2);
    a1();
    await Promise.resolve();
    expect(log).toEqual([]);
    a2();
    (await b)();
    (await a3)();
    expect(log).toEqual(['b', 'a3']);
    expect(turns.waiting).toBe(0);
  });

  it('a wait ends with the call’s signal, and leaves the queue', async () => {
    const turns = new AgentTurns();
    const a = await turns.take('a');
    const controller = new AbortController();
    const b = turns.take('b', controller.signal);
    controller.abort(new Error('paused'));
    await expect(b).rejects.toThrow('paused');
    expect(turns.waiting).toBe(0);
    a();
    // Nobody waits: the next call of anyone starts at once.
    (await turns.take('c'))();
  });
});
