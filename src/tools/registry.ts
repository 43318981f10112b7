/**
 * @module tools/registry
 * The set of tools a runtime offers its agents, by name.
 */
import { AgentryError } from '../errors.js';
import type { ModelToolSpec } from '../models/provider.js';
import type { Tool } from './define-tool.js';

export class ToolRegistry {
  private readonly byName = new Map<string, Tool>();
  private specsCache: ModelToolSpec[] | null = null;

  constructor(tools: Iterable<Tool> = []) {
    for (const t of tools) this.register(t);
  }

  register(tool: Tool): void {
    if (this.byName.has(tool.name)) {
      throw new AgentryError('invalid_request', `Two tools are named ${JSON.stringify(tool.name)}`);
    }
    this.byName.set(tool.name, tool);
    this.specsCache = null;
  }

  get(name: string): Tool | undefined {
    return this.byName.get(name);
  }

  /** The tools, in the order they were registered. */
  all(): Tool[] {
    return [...this.byName.values()];
  }

  /** The tools as the model sees them (computed once). */
  specs(): ModelToolSpec[] {
    this.specsCache ??= [...this.byName.values()].map((t) => ({
      name: t.name,
      description: t.description,
      input_schema: t.jsonSchema,
    }));
    return this.specsCache;
  }
}
