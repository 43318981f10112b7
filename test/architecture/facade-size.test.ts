/**
 * The loop and the runtime facade stay small: each was split by job (model turn, tool calls, commit; create, list,
 * control, views, wiring), and a new capability gets a module of its own rather than growing them back.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const LIMIT = 500;
const files = ['src/core/loop.ts', 'src/core/agent-runtime.ts'];

describe('the loop and the runtime facade', () => {
  for (const file of files) {
    it(`${file} has fewer than ${LIMIT} lines`, () => {
      const text = readFileSync(fileURLToPath(new URL(`../../${file}`, import.meta.url)), 'utf8');
      expect(text.split('\n').length).toBeLessThan(LIMIT);
    });
  }
});
