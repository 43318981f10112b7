/**
 * Toolboxes of children with a spec: what specs have in common is built once and shared, frozen.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { SUBMIT_RESULT_TOOL_NAME, Toolboxes, type Toolbox } from '../../src/core/toolbox.js';
import type { AgentRow } from '../../src/storage/adapter.js';
import { defineTool, type ChildTask, type Tool } from '../../src/tools/define-tool.js';
import { ToolRegistry } from '../../src/tools/registry.js';

const lookup = defineTool({
  name: 'lookup',
  description: 'Looks an item up',
  input: z.object({ item: z.number() }),
  idempotent: true,
  run: ({ item }) => `item ${item}`,
}) as Tool;
const fetchNote = defineTool({
  name: 'fetch_note',
  description: 'Fetches a note',
  input: z.object({ id: z.string() }),
  idempotent: true,
  run: ({ id }) => `note ${id}`,
}) as Tool;

const standard: Toolbox = {
  system: 'standard',
  specs: [],
  get: () => undefined,
  maxSteps: 50,
  needsResult: false,
};

function boxes(): Toolboxes {
  return new Toolboxes(standard, new ToolRegistry([lookup, fetchNote]));
}

/** A child row whose spec is what `task` stores. */
function childOf(toolboxes: Toolboxes, task: Omit<ChildTask, 'goal'>): AgentRow {
  return { spec: JSON.stringify(toolboxes.specOf({ goal: 'g', ...task })) } as AgentRow;
}

describe('Toolboxes', () => {
  it('shares the definitions of a tool list, and submit_result per result schema, between specs', () => {
    const t = boxes();
    const answer = z.object({ answer: z.string() });
    const a = t.of(childOf(t, { instructions: 'A', tools: ['lookup', 'fetch_note'], result: answer }));
    const b = t.of(childOf(t, { instructions: 'B', tools: ['lookup', 'fetch_note'], result: answer, maxSteps: 3 }));
    const c = t.of(
      childOf(t, { instructions: 'C', tools: ['lookup', 'fetch_note'], result: z.object({ n: z.number() }) }),
    );
    expect(a).not.toBe(b);
    expect([a.system, b.system, b.maxSteps]).toEqual(['A', 'B', 3]);
    expect(a.specs.map((s) => s.name)).toEqual(['lookup', 'fetch_note', SUBMIT_RESULT_TOOL_NAME]);
    // The same objects, frozen: nothing is built again per spec, and no toolbox can change another's.
    for (let i = 0; i < 3; i++) expect(b.specs[i]).toBe(a.specs[i]);
    for (let i = 0; i < 2; i++) expect(c.specs[i]).toBe(a.specs[i]);
    expect(c.specs[2]).not.toBe(a.specs[2]);
    expect(a.specs.every((s) => Object.isFrozen(s))).toBe(true);
    expect(a.specs[0]).toEqual({ name: 'lookup', description: 'Looks an item up', input_schema: lookup.jsonSchema });
    // Each toolbox still checks its own result schema.
    expect(a.get(SUBMIT_RESULT_TOOL_NAME)!.input.safeParse({ answer: 'x' }).success).toBe(true);
    expect(c.get(SUBMIT_RESULT_TOOL_NAME)!.input.safeParse({ answer: 'x' }).success).toBe(false);
    expect(c.get('lookup')).toBe(lookup);
    expect(c.get('nope')).toBeUndefined();
  });

  it('offers a different tool list its own definitions, in the order of the spec', () => {
    const t = boxes();
    const answer = z.object({ answer: z.string() });
    const a = t.of(childOf(t, { instructions: 'A', tools: ['lookup', 'fetch_note'], result: answer }));
    const d = t.of(childOf(t, { instructions: 'A', tools: ['fetch_note'], result: answer }));
    expect(d.specs.map((s) => s.name)).toEqual(['fetch_note', SUBMIT_RESULT_TOOL_NAME]);
    expect(d.get('lookup')).toBeUndefined();
    expect(d.specs[1]).toBe(a.specs[2]);
  });

  it('refuses a spec that names a tool twice, as it did when each spec built its own registry', () => {
    const t = boxes();
    const row = {
      spec: JSON.stringify({ instructions: 'x', tools: ['lookup', 'lookup'], result_schema: { type: 'object' } }),
    };
    expect(() => t.of(row as AgentRow)).toThrow('Two tools are named "lookup"');
  });
});
