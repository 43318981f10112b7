import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { newAgentId } from '../../src/core/ids.js';

describe('newAgentId', () => {
  it('makes RFC 9562 version-7 UUIDs', () => {
    const id = newAgentId();
    expect(z.uuid().safeParse(id).success).toBe(true);
    expect(id[14]).toBe('7');
    expect('89ab').toContain(id[19]);
  });

  it('encodes the creation millisecond in the first 48 bits', () => {
    const ms = Date.UTC(2030, 0, 1);
    const id = newAgentId(ms + 1_000_000); // later than any id made so far in this process
    expect(parseInt(id.slice(0, 8) + id.slice(9, 13), 16)).toBe(ms + 1_000_000);
  });

  it('sorts in creation order and never repeats, even within one millisecond', () => {
    const ids = Array.from({ length: 10_000 }, () => newAgentId());
    expect(new Set(ids).size).toBe(ids.length);
    expect([...ids].sort()).toEqual(ids);
  });

  it('stays ordered past 4,096 ids in one millisecond and when the clock steps back', () => {
    const now = Date.now() + 10_000_000;
    const burst = Array.from({ length: 5_000 }, () => newAgentId(now));
    const afterStepBack = newAgentId(now - 5);
    const ids = [...burst, afterStepBack];
    expect([...ids].sort()).toEqual(ids);
    expect(new Set(ids).size).toBe(ids.length);
  });
});
