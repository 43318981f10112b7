/**
 * @module mcp/tools
 * An MCP server's tools as agentry tools: `mcp__<server>__<tool>` (made safe for the Messages API), the server's
 * input schema passed through, crash safety from the annotations, progress shown as the agent's status message, and
 * results turned into what the model is shown (see {@link renderResult}).
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import type { CallToolResult, Tool as McpTool } from '@modelcontextprotocol/sdk/types.js';
import { defineTool, type Tool, type ToolContext } from '../tools/define-tool.js';
import type { ToolPrices } from '../tools/tool-source.js';
import type { McpServerConfig } from './config.js';
import type { McpServerConnection } from './server-connection.js';

/** What the tools use of the runtime while a call runs. */
export interface McpToolHost {
  /** Sets the agent's status message if it still starts with one of `ifStartsWith` (the call's own wording). */
  setStatusMessage(agentId: string, message: string, ifStartsWith: readonly string[]): Promise<void>;
}

/** A tool of a server that is not offered, and why (`agentry tools` lists it). */
export interface LeftOut {
  name: string;
  detail: string;
}

/** The Messages API's rule for tool names. */
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/**
 * `mcp__<server>__<tool>` with every other character made `_`; a name longer than 64 keeps its start and ends with 8
 * hex digits of the full name's hash, so two long names stay apart.
 */
export function mcpToolName(serverPrefix: string, tool: string): string {
  const name = `mcp__${serverPrefix}__${tool.replace(/[^a-zA-Z0-9_-]/g, '_')}`;
  if (name.length <= 64) return name;
  const hash = createHash('sha256').update(`${serverPrefix}\0${tool}`).digest('hex').slice(0, 8);
  return `${name.slice(0, 55)}_${hash}`;
}

/** Whether a call may be sent again after a crash left its outcome unknown (the server says so in annotations). */
export function isIdempotent(tool: McpTool): boolean {
  return tool.annotations?.readOnlyHint === true || tool.annotations?.idempotentHint === true;
}

/** An MCP tool's input: any JSON object. The server validates the fields against its own schema. */
const ObjectInput = z.record(z.string(), z.unknown(), { error: 'must be a JSON object' });

/**
 * The agentry tools of one server's list, filtered by `allowed_tools` / `disallowed_tools`. Throws when two tools
 * would get the same name (the server is then marked failed with that message).
 */
export function toolsOfServer(connection: McpServerConnection, prices: ToolPrices, host: McpToolHost): Tool[] {
  const config = connection.config;
  const byName = new Map<string, string>();
  const tools: Tool[] = [];
  for (const mcp of connection.tools) {
    const name = mcpToolName(config.prefix, mcp.name);
    if (!isOffered(config, mcp.name, name)) continue;
    if (needsTasksTheServerLacks(connection, mcp)) continue;
    const other = byName.get(name);
    if (other !== undefined) {
      throw new Error(
        `its tools ${JSON.stringify(other)} and ${JSON.stringify(mcp.name)} would both be named ${name}; ` +
          `leave one out with disallowed_tools`,
      );
    }
    if (!TOOL_NAME.test(name)) throw new Error(`its tool ${JSON.stringify(mcp.name)} cannot be named for the model`);
    byName.set(name, mcp.name);
    tools.push(mcpTool(connection, mcp, name, prices, host));
  }
  return tools;
}

/**
 * Tools that require task-based execution on a server that does not declare it runs `tools/call` as tasks: they
 * could only fail, so they are not offered, and `agentry tools` says why.
 */
export function toolsLeftOut(connection: McpServerConnection): LeftOut[] {
  const config = connection.config;
  return connection.tools
    .filter((mcp) => isOffered(config, mcp.name, mcpToolName(config.prefix, mcp.name)))
    .filter((mcp) => needsTasksTheServerLacks(connection, mcp))
    .map((mcp) => ({
      name: mcpToolName(config.prefix, mcp.name),
      detail:
        `MCP server ${config.name}: not offered — the tool requires task-based execution (execution.taskSupport ` +
        '"required") and the server does not declare the tasks capability for tools/call',
    }));
}

function needsTasksTheServerLacks(connection: McpServerConnection, mcp: McpTool): boolean {
  return mcp.execution?.taskSupport === 'required' && !connection.runsToolTasks;
}

function isOffered(config: McpServerConfig, original: string, name: string): boolean {
  const listed = (list: readonly string[]) => list.includes(original) || list.includes(name);
  if (config.allowedTools !== undefined && !listed(config.allowedTools)) return false;
  return !listed(config.disallowedTools);
}

function mcpTool(
  connection: McpServerConnection,
  mcp: McpTool,
  name: string,
  prices: ToolPrices,
  host: McpToolHost,
): Tool {
  const server = connection.config.name;
  const { $schema: _ignored, ...schema } = mcp.inputSchema as Record<string, unknown>;
  const description = (mcp.description ?? mcp.title ?? `The tool ${mcp.name} of the MCP server ${server}`).slice(
    0,
    10_000,
  );
  const calling = `Calling ${mcp.name} on ${server}`;
  return defineTool({
    name,
    description: description.trim() === '' ? `The tool ${mcp.name} of the MCP server ${server}` : description,
    input: ObjectInput,
    jsonSchema: { ...schema, type: 'object' },
    price: prices.tools[name] ?? 0,
    idempotent: isIdempotent(mcp),
    describe: () => calling,
    async run(input, ctx) {
      // Pause cancels the request too (a tool that can stop at a pause may, and the model is told the outcome): a
      // 30 s call must not hold a pause up. The server is told, and kept.
      const signal = AbortSignal.any([ctx.signal, ctx.pauseSignal]);
      const agentId = ctx.agent.agent_id;
      const progress = new StatusWriter((message) => host.setStatusMessage(agentId, message, [calling, `${name}: `]));
      let result: CallToolResult;
      try {
        result = await connection.callTool(mcp.name, input, {
          signal,
          agentId,
          idempotent: isIdempotent(mcp),
          onProgress: (p) => progress.write(`${name}: ${describeProgress(p)}`),
          ...(ctx.traceparent !== undefined ? { traceparent: ctx.traceparent } : {}),
        });
      } catch (err) {
        if (ctx.pauseSignal.aborted && !ctx.signal.aborted) {
          throw new Error(
            `The call was cancelled because the agent was paused (the MCP server ${server} was told); whether it ` +
              'took effect is unknown. Call it again if it is still needed.',
            { cause: err },
          );
        }
        throw err;
      } finally {
        // The last progress line lands before the step that follows writes its own status.
        await progress.settled();
      }
      const text = await renderResult(result, {
        server,
        tool: mcp.name,
        ctx,
        maxChars: connection.config.maxResultChars,
      });
      if (result.isError) throw new Error(`${mcp.name} (MCP server ${server}) reported an error: ${text}`);
      return text;
    },
  }) as Tool;
}

/** `3/5`, `3/5: Analyzing content…`, `3` or the message alone. */
function describeProgress(p: { progress?: number; total?: number; message?: string }): string {
  const count = p.progress === undefined ? '' : p.total !== undefined ? `${p.progress}/${p.total}` : `${p.progress}`;
  const message = p.message?.replace(/\s+/g, ' ').trim().slice(0, 200) ?? '';
  return count && message ? `${count} — ${message}` : count || message;
}

/**
 * Status messages written one at a time, the latest winning: a server may report progress faster than storage
 * writes, and only the newest line is worth writing.
 */
class StatusWriter {
  private pending: string | undefined;
  private writing: Promise<void> | undefined;

  constructor(private readonly writeOne: (message: string) => Promise<void>) {}

  write(message: string): void {
    this.pending = message;
    this.writing ??= this.drain();
  }

  async settled(): Promise<void> {
    await this.writing;
  }

  private async drain(): Promise<void> {
    while (this.pending !== undefined) {
      const message = this.pending;
      this.pending = undefined;
      await this.writeOne(message).catch(() => undefined); // a status line is not worth failing a call over
    }
    this.writing = undefined;
  }
}

/**
 * A call's result as the text the model is shown: text blocks as they are; images, audio and binary resources saved
 * as artifacts of the agent (the model is told their ids; their bytes are never pasted into the text); structured
 * content only when it holds a value the text lacks, with binary data left out; cut at `maxChars`.
 *
 * Images reach the model as the artifact line, not as image blocks: the runtime's turns carry text tool results only
 * (docs/decisions.md, "MCP results").
 */
export async function renderResult(
  result: CallToolResult,
  options: { server: string; tool: string; ctx: Pick<ToolContext, 'artifacts'>; maxChars: number },
): Promise<string> {
  const parts: string[] = [];
  /** The artifact line of each saved base64 payload, so structured content that repeats it can point to it. */
  const saved = new Map<string, string>();
  let n = 0;
  const save = async (data: string, mime: string, what: string): Promise<string> => {
    const known = saved.get(data);
    if (known !== undefined) return known;
    const bytes = Buffer.from(data, 'base64');
    const ext = mime.split('/')[1]?.replace(/[^a-z0-9]/gi, '') || 'bin';
    let line: string;
    try {
      const artifact = await options.ctx.artifacts.put({
        name: `${options.tool}-${++n}.${ext}`,
        mime_type: mime,
        data: bytes,
      });
      line = `[${what} ${mime}, ${artifact.size} bytes, saved as artifact ${artifact.artifact_id}]`;
    } catch (err) {
      line = `[${what} ${mime}, ${bytes.length} bytes, not saved: ${err instanceof Error ? err.message : String(err)}]`;
    }
    saved.set(data, line);
    return line;
  };
  for (const block of result.content ?? []) {
    switch (block.type) {
      case 'text':
        parts.push(block.text);
        break;
      case 'image':
        parts.push(await save(block.data, block.mimeType, 'image'));
        break;
      case 'audio':
        parts.push(await save(block.data, block.mimeType, 'audio'));
        break;
      case 'resource_link':
        parts.push(`[resource ${block.uri}${block.name ? ` (${block.name})` : ''}]`);
        break;
      case 'resource': {
        const r = block.resource;
        if ('text' in r && typeof r.text === 'string') parts.push(`[resource ${r.uri}]\n${r.text}`);
        else if ('blob' in r && typeof r.blob === 'string') {
          parts.push(await save(r.blob, r.mimeType ?? 'application/octet-stream', `resource ${r.uri}:`));
        }
        break;
      }
      default:
        parts.push(`[${(block as { type: string }).type} content]`);
    }
  }
  if (result.structuredContent !== undefined) {
    const placeholders = new Set<string>();
    const shown = withoutBinary(result.structuredContent, saved, placeholders);
    if (addsToText(shown, parts.join('\n'), placeholders)) {
      parts.push(`Structured content: ${JSON.stringify(shown)}`);
    }
  }
  const text = parts.join('\n');
  if (text.length <= options.maxChars) return text;
  return `${text.slice(0, options.maxChars)}\n[cut: the result had ${text.length} characters, ${options.maxChars} are shown]`;
}

/** A string that is base64 data (or a base64 `data:` URL) rather than words. */
function isBase64Data(value: string, short = false): boolean {
  if (/^data:[^,]{0,200};base64,/i.test(value)) return true;
  if (value.length < (short ? 16 : 128)) return false;
  return /^[A-Za-z0-9+/_-]+={0,2}$/.test(value);
}

/**
 * Structured content with binary data replaced by a line saying what it was: the artifact line when the same bytes
 * came as a content block, else its size. `placeholders` collects the lines put in.
 */
function withoutBinary(value: unknown, saved: ReadonlyMap<string, string>, placeholders: Set<string>): unknown {
  const replace = (data: string, mime: unknown): string => {
    const line =
      saved.get(data) ??
      `[${typeof mime === 'string' ? `${mime} ` : ''}data, ${Math.floor((data.length * 3) / 4)} bytes, left out]`;
    placeholders.add(line);
    return line;
  };
  const walk = (v: unknown, key: string | undefined, parent: Record<string, unknown> | undefined): unknown => {
    if (typeof v === 'string') {
      // `data` of an image or audio block and `blob` of a resource are binary at any length.
      const binaryField = (key === 'data' || key === 'blob') && parent !== undefined && 'mimeType' in parent;
      return isBase64Data(v, binaryField) ? replace(v, parent?.mimeType) : v;
    }
    if (Array.isArray(v)) return v.map((item) => walk(item, undefined, undefined));
    if (typeof v === 'object' && v !== null) {
      const record = v as Record<string, unknown>;
      return Object.fromEntries(Object.entries(record).map(([k, item]) => [k, walk(item, k, record)]));
    }
    return v;
  };
  return walk(value, undefined, undefined);
}

/**
 * Whether structured content holds a value the text does not show: servers usually repeat it as a text block (JSON,
 * or words around the same numbers), and the model is then shown it once. Keys are not compared, only values.
 */
function addsToText(value: unknown, text: string, placeholders: ReadonlySet<string>): boolean {
  const flat = text.replace(/\s+/g, ' ');
  const shows = (leaf: unknown): boolean => {
    if (leaf === null || leaf === undefined) return true;
    if (typeof leaf === 'string') {
      if (placeholders.has(leaf)) return true;
      const s = leaf.replace(/\s+/g, ' ').trim();
      return s === '' || flat.includes(s) || flat.includes(JSON.stringify(s).slice(1, -1));
    }
    if (typeof leaf === 'number' || typeof leaf === 'boolean') {
      const word = String(leaf).replace(/[.+]/g, '\\$&');
      return new RegExp(`(^|[^\\w.])${word}($|[^\\w.]|\\.(?!\\d))`).test(flat);
    }
    if (Array.isArray(leaf)) return leaf.every(shows);
    if (typeof leaf === 'object') return Object.values(leaf).every(shows);
    return false;
  };
  return !shows(value);
}
