/**
 * @module tools/registry
 * The set of tools a runtime offers its agents, by name.
 */
import { AgentryError } from '../errors.js';
import type { ModelToolSpec } from '../models/provider.js';
import type { Tool } from './define-tool.js';
import type { ToolSource } from './tool-source.js';

export class ToolRegistry {
  private readonly byName = new Map<string, Tool>();
  private specsCache: ModelToolSpec[] | null = null;
  /** Tools that change while the runtime runs (MCP servers), asked at every step; see {@link addSource}. */
  private readonly sources: ToolSource[] = [];
  /** The tools of each source as last seen: a source returns the same array while nothing changed. */
  private seen: Array<readonly Tool[]> = [];
  private dynamicByName = new Map<string, Tool>();

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

  /**
   * Adds tools that come and go (an MCP server's): they are offered from the step after they appear. A source's tool
   * named like a registered one is left out (the registered one wins); sources name their tools apart (`mcp__…`).
   */
  addSource(source: ToolSource): void {
    this.sources.push(source);
    this.seen.push([]);
    this.specsCache = null;
  }

  /** Starts what the sources start on first use; undefined when there is nothing to wait for. */
  prepare(): Promise<void> | undefined {
    let waits: Array<Promise<void>> | undefined;
    for (const source of this.sources) {
      const p = source.prepare?.();
      if (p) (waits ??= []).push(p);
    }
    return waits ? Promise.all(waits).then(() => undefined) : undefined;
  }

  get(name: string): Tool | undefined {
    const tool = this.byName.get(name);
    if (tool || this.sources.length === 0) return tool;
    this.refresh();
    return this.dynamicByName.get(name);
  }

  /** The tools, in the order they were registered. */
  all(): Tool[] {
    return [...this.byName.values()];
  }

  /** The tools as the model sees them (computed again only when a source's tools changed). */
  specs(): ModelToolSpec[] {
    if (this.sources.length > 0) this.refresh();
    this.specsCache ??= [...this.byName.values(), ...this.dynamicByName.values()].map((t) => ({
      name: t.name,
      description: t.description,
      input_schema: t.jsonSchema,
    }));
    return this.specsCache;
  }

  /** Reads the sources' tools; rebuilds the dynamic index when one of them returned a new array. */
  private refresh(): void {
    let changed = false;
    const now = this.sources.map((source, i) => {
      const tools = source.tools();
      if (tools !== this.seen[i]) changed = true;
      return tools;
    });
    if (!changed) return;
    this.seen = now;
    const dynamic = new Map<string, Tool>();
    for (const tools of now) {
      for (const tool of tools) {
        if (!this.byName.has(tool.name) && !dynamic.has(tool.name)) dynamic.set(tool.name, tool);
      }
    }
    this.dynamicByName = dynamic;
    this.specsCache = null;
  }
}
