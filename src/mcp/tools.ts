/**
 * @module mcp/tools
 * An MCP server's tools as agentry tools: `mcp__<server>__<tool>` (made safe for the Messages API), the server's
 * input schema passed through, crash safety from the annotations, and results turned into what the model is shown.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import type { CallToolResult, Tool as McpTool } from '@modelcontextprotocol/sdk/types.js';
import type { PriceTable } from '../core/credits.js';
import { defineTool, type Tool, type ToolContext } from '../tools/define-tool.js';
import type { McpServerConfig } from './config.js';
import type { McpServerConnection } from './server-connection.js';

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
export function toolsOfServer(connection: McpServerConnection, prices: PriceTable): Tool[] {
  const config = connection.config;
  const byName = new Map<string, string>();
  const tools: Tool[] = [];
  for (const mcp of connection.tools) {
    const name = mcpToolName(config.prefix, mcp.name);
    if (!isOffered(config, mcp.name, name)) continue;
    const other = byName.get(name);
    if (other !== undefined) {
      throw new Error(
        `its tools ${JSON.stringify(other)} and ${JSON.stringify(mcp.name)} would both be named ${name}; ` +
          `leave one out with disallowed_tools`,
      );
    }
    if (!TOOL_NAME.test(name)) throw new Error(`its tool ${JSON.stringify(mcp.name)} cannot be named for the model`);
    byName.set(name, mcp.name);
    tools.push(mcpTool(connection, mcp, name, prices));
  }
  return tools;
}

function isOffered(config: McpServerConfig, original: string, name: string): boolean {
  const listed = (list: readonly string[]) => list.includes(original) || list.includes(name);
  if (config.allowedTools !== undefined && !listed(config.allowedTools)) return false;
  return !listed(config.disallowedTools);
}

function mcpTool(connection: McpServerConnection, mcp: McpTool, name: string, prices: PriceTable): Tool {
  const server = connection.config.name;
  const { $schema: _ignored, ...schema } = mcp.inputSchema as Record<string, unknown>;
  const description = (mcp.description ?? mcp.title ?? `The tool ${mcp.name} of the MCP server ${server}`).slice(
    0,
    10_000,
  );
  return defineTool({
    name,
    description: description.trim() === '' ? `The tool ${mcp.name} of the MCP server ${server}` : description,
    input: ObjectInput,
    jsonSchema: { ...schema, type: 'object' },
    price: prices.tools[name] ?? 0,
    idempotent: isIdempotent(mcp),
    describe: () => `Calling ${mcp.name} on ${server}`,
    async run(input, ctx) {
      // Pause cancels the request too (DESIGN §3 lets a tool stop at pause and be asked again after the resume): a
      // 30 s call must not hold a pause up. The server is told, and kept.
      const signal = AbortSignal.any([ctx.signal, ctx.pauseSignal]);
      let result: CallToolResult;
      try {
        result = await connection.callTool(mcp.name, input, {
          signal,
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

/**
 * A call's result as the text the model is shown: text blocks as they are, structured content as JSON, images, audio
 * and binary resources saved as artifacts of the agent (the model is told their ids), cut at `maxChars`.
 */
export async function renderResult(
  result: CallToolResult,
  options: { server: string; tool: string; ctx: Pick<ToolContext, 'artifacts'>; maxChars: number },
): Promise<string> {
  const parts: string[] = [];
  let n = 0;
  const save = async (data: string, mime: string, what: string): Promise<string> => {
    const bytes = Buffer.from(data, 'base64');
    const ext = mime.split('/')[1]?.replace(/[^a-z0-9]/gi, '') || 'bin';
    try {
      const saved = await options.ctx.artifacts.put({
        name: `${options.tool}-${++n}.${ext}`,
        mime_type: mime,
        data: bytes,
      });
      return `[${what} ${mime}, ${saved.size} bytes, saved as artifact ${saved.artifact_id}]`;
    } catch (err) {
      return `[${what} ${mime}, ${bytes.length} bytes, not saved: ${err instanceof Error ? err.message : String(err)}]`;
    }
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
    const json = JSON.stringify(result.structuredContent);
    // Servers usually repeat it as a text block for older clients: shown once.
    if (!parts.some((p) => p.trim() === json || safeJsonEqual(p, result.structuredContent))) {
      parts.push(`Structured content: ${json}`);
    }
  }
  const text = parts.join('\n');
  if (text.length <= options.maxChars) return text;
  return `${text.slice(0, options.maxChars)}\n[cut: the result had ${text.length} characters, ${options.maxChars} are shown]`;
}

function safeJsonEqual(text: string, value: unknown): boolean {
  try {
    return JSON.stringify(JSON.parse(text)) === JSON.stringify(value);
  } catch {
    return false;
  }
}
