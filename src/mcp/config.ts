/**
 * @module mcp/config
 * The MCP servers configuration, in the format Claude Code and Claude Desktop use, so a user's existing file works
 * unchanged:
 *
 * ```json
 * {"mcpServers": {
 *   "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/data"], "env": {}},
 *   "crm":   {"type": "http", "url": "https://crm.example.com/mcp", "headers": {"Authorization": "Bearer ${CRM_TOKEN}"}}
 * }}
 * ```
 *
 * Fields those clients add (`type: "stdio"`, `disabled`, `autoApprove`, …) are accepted. agentry adds, per server,
 * `allowed_tools` / `disallowed_tools`, timeouts, `roots` (what the server is told it may work on) and `sampling`
 * (whether it may ask the calling agent's model for completions, billed to the agent). `${VAR}` and `${VAR:-default}` in `command`, `args`, `env`, `cwd`,
 * `url` and `headers` are read from the environment, as Claude Code does in `.mcp.json`.
 */
import { readFileSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import { AgentryError } from '../errors.js';

/** Longest a server may take to start and answer `initialize` (then it is marked failed with its stderr). */
export const DEFAULT_STARTUP_TIMEOUT_MS = 15_000;
/** Longest one tool call may take; the request is then cancelled (`notifications/cancelled`), the server kept. */
export const DEFAULT_TOOL_TIMEOUT_MS = 5 * 60_000;

const StringMap = z.record(z.string(), z.string());
const ToolNames = z.array(z.string().min(1)).optional();
const Millis = z
  .number()
  .int()
  .positive()
  .max(24 * 3600_000);
const Seconds = z
  .number()
  .positive()
  .max(24 * 3600);

/** Fields every server takes besides its transport. Extra fields other clients use are let through and ignored. */
const CommonFields = {
  /** Only these tools (by the server's name for them, or the `mcp__…` name) are offered. */
  allowed_tools: ToolNames,
  /** These tools are never offered. */
  disallowed_tools: ToolNames,
  /** Time to start and answer `initialize`. @default 15000 */
  startup_timeout_ms: Millis.optional(),
  /** Time one call may take before it is cancelled. @default 300000 */
  tool_timeout_ms: Millis.optional(),
  /** The same in seconds (Codex names them so). */
  startup_timeout_sec: Seconds.optional(),
  tool_timeout_sec: Seconds.optional(),
  /** Longest result text the model is shown from one call. @default 40000 */
  max_result_chars: z.number().int().positive().optional(),
  /** Respawns: the first waits `backoff_ms`, each next one twice as long, up to `max_backoff_ms`. */
  backoff_ms: z.number().int().min(0).optional(),
  max_backoff_ms: z.number().int().min(0).optional(),
  /** After this many failed starts or exits in a row the server is marked failed for `crash_cooldown_ms`. */
  max_crashes: z.number().int().positive().optional(),
  crash_cooldown_ms: z.number().int().min(0).optional(),
  /** Claude Desktop extensions and Cline use it: a disabled server is left out. */
  disabled: z.boolean().optional(),
  /**
   * The roots the server is told of (MCP `roots`): `"workspace"` (the server's `cwd`, else the runtime's working
   * directory), a list of directories (paths or `file://` URIs), or `false`. @default false: no `roots` capability,
   * so a server keeps the directories its own arguments give it (a filesystem server replaces them with the roots).
   */
  roots: z
    .union([z.literal(false), z.literal('workspace'), z.array(z.string().min(1)).max(100, 'at most 100 roots')])
    .optional(),
  /**
   * Lets the server ask the calling agent's model for a completion (MCP `sampling`): one model turn, billed to the
   * agent like its own. Off unless set: a server could otherwise spend the agent's credits. @default false
   */
  sampling: z.boolean().optional(),
  /** Output tokens of one sampling turn at most, whatever the server asks. @default 1024 */
  sampling_max_tokens: z.number().int().positive().max(64_000).optional(),
  /** Sampling requests one tool call may make at most; later ones are refused. @default 10 */
  sampling_max_requests: z.number().int().positive().max(1000).optional(),
};

const StdioServerSchema = z.looseObject({
  type: z.literal('stdio').optional(),
  command: z.string().min(1, 'must name the program to run'),
  args: z.array(z.string()).default([]),
  env: StringMap.optional(),
  cwd: z.string().min(1).optional(),
  ...CommonFields,
});

const HttpServerSchema = z.looseObject({
  type: z.enum(['http', 'streamable-http', 'streamableHttp']),
  url: z.url({ protocol: /^https?$/, error: 'must be an http(s) URL' }),
  headers: StringMap.optional(),
  ...CommonFields,
});

/** One configured server, checked and with its defaults filled in. */
export type McpServerConfig = {
  /** The name in the file (the key of `mcpServers`). */
  name: string;
  /** The name in tool names: `mcp__<prefix>__<tool>` (letters, digits, `_` and `-`). */
  prefix: string;
  allowedTools: string[] | undefined;
  disallowedTools: string[];
  startupTimeoutMs: number;
  toolTimeoutMs: number;
  maxResultChars: number;
  backoffMs: number;
  maxBackoffMs: number;
  maxCrashes: number;
  crashCooldownMs: number;
  /** The roots declared to the server; empty: the `roots` capability is not declared. */
  roots: Array<{ uri: string; name: string }>;
  /** Whether the server may ask the calling agent's model for completions (`sampling`). */
  sampling: boolean;
  samplingMaxTokens: number;
  samplingMaxRequests: number;
} & (
  | { transport: 'stdio'; command: string; args: string[]; env: Record<string, string>; cwd: string | undefined }
  | { transport: 'http'; url: string; headers: Record<string, string> }
);

/**
 * Checks an `mcpServers` map (or a whole `{"mcpServers": {...}}` file) and fills in defaults. Throws
 * `invalid_request` naming the server and the field. Disabled servers are left out.
 *
 * @example
 * const servers = parseMcpServers({ everything: { command: 'npx', args: ['-y', '@modelcontextprotocol/server-everything'] } });
 * servers[0].prefix; // 'everything'
 */
export function parseMcpServers(
  input: unknown,
  env: NodeJS.ProcessEnv = process.env,
  source = 'mcpServers',
): McpServerConfig[] {
  let map = input;
  if (
    isRecord(map) &&
    isRecord(map.mcpServers) &&
    Object.keys(map).every((k) => k === 'mcpServers' || k.startsWith('$'))
  ) {
    map = map.mcpServers;
  }
  if (!isRecord(map)) {
    throw new AgentryError('invalid_request', `${source} must be an object of servers by name, got ${describe(map)}`);
  }
  const servers: McpServerConfig[] = [];
  const prefixes = new Map<string, string>();
  for (const [name, raw] of Object.entries(map)) {
    const where = `${source}.${name}`;
    if (!/^[\w.\- ]{1,64}$/.test(name)) {
      throw new AgentryError(
        'invalid_request',
        `${where}: a server name must be 1-64 letters, digits, spaces or . _ -`,
      );
    }
    if (!isRecord(raw)) throw new AgentryError('invalid_request', `${where} must be an object, got ${describe(raw)}`);
    if (raw.disabled === true) continue;
    const type = raw.type;
    if (type === 'sse') {
      throw new AgentryError(
        'invalid_request',
        `${where}.type: the SSE transport is deprecated in MCP and not supported; use "http" (Streamable HTTP)`,
      );
    }
    const isHttp = type === 'http' || type === 'streamable-http' || type === 'streamableHttp';
    if (type !== undefined && type !== 'stdio' && !isHttp) {
      throw new AgentryError(
        'invalid_request',
        `${where}.type: must be "stdio", "http" or "streamable-http", got ${JSON.stringify(type)}`,
      );
    }
    const expanded = expandEnv(raw, env, where);
    const parsed = (isHttp ? HttpServerSchema : StdioServerSchema).safeParse(expanded);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      const field = issue.path.length > 0 ? `.${issue.path.join('.')}` : '';
      throw new AgentryError('invalid_request', `${where}${field}: ${issue.message}`, { details: parsed.error.issues });
    }
    const c = parsed.data;
    const prefix = name.replace(/[^a-zA-Z0-9_-]/g, '_');
    const other = prefixes.get(prefix);
    if (other !== undefined) {
      throw new AgentryError(
        'invalid_request',
        `${source}: the servers ${JSON.stringify(other)} and ${JSON.stringify(name)} would both name their tools mcp__${prefix}__…; rename one`,
      );
    }
    prefixes.set(prefix, name);
    const common = {
      name,
      prefix,
      allowedTools: c.allowed_tools,
      disallowedTools: c.disallowed_tools ?? [],
      startupTimeoutMs:
        c.startup_timeout_ms ??
        (c.startup_timeout_sec !== undefined ? Math.round(c.startup_timeout_sec * 1000) : DEFAULT_STARTUP_TIMEOUT_MS),
      toolTimeoutMs:
        c.tool_timeout_ms ??
        (c.tool_timeout_sec !== undefined ? Math.round(c.tool_timeout_sec * 1000) : DEFAULT_TOOL_TIMEOUT_MS),
      maxResultChars: c.max_result_chars ?? 40_000,
      backoffMs: c.backoff_ms ?? 250,
      maxBackoffMs: c.max_backoff_ms ?? 30_000,
      maxCrashes: c.max_crashes ?? 5,
      crashCooldownMs: c.crash_cooldown_ms ?? 60_000,
      roots: rootsOf(c.roots, typeof c.cwd === 'string' ? c.cwd : undefined, where),
      sampling: c.sampling ?? false,
      samplingMaxTokens: c.sampling_max_tokens ?? 1024,
      samplingMaxRequests: c.sampling_max_requests ?? 10,
    };
    if (isHttp) {
      const http = c as z.output<typeof HttpServerSchema>;
      servers.push({ ...common, transport: 'http', url: http.url, headers: http.headers ?? {} });
    } else {
      const stdio = c as z.output<typeof StdioServerSchema>;
      servers.push({
        ...common,
        transport: 'stdio',
        command: stdio.command,
        args: stdio.args,
        env: stdio.env ?? {},
        cwd: stdio.cwd,
      });
    }
  }
  return servers;
}

/**
 * Reads an MCP servers file (`--mcp-config`, `AGENTRY_MCP_CONFIG`): `{"mcpServers": {...}}` as Claude Code and
 * Claude Desktop write it. Returns the `mcpServers` map, for the runtime's `mcpServers` option.
 */
export function readMcpConfigFile(path: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new AgentryError('invalid_request', `Cannot read the MCP config ${path}: ${(err as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new AgentryError('invalid_request', `The MCP config ${path} is not valid JSON: ${(err as Error).message}`);
  }
  if (!isRecord(json) || !isRecord(json.mcpServers)) {
    throw new AgentryError('invalid_request', `The MCP config ${path} must be {"mcpServers": {"<name>": {...}}}`);
  }
  // Checked now, so a bad file is reported with its path before anything starts.
  parseMcpServers(json.mcpServers, process.env, `${path}: mcpServers`);
  return json.mcpServers;
}

/** The `roots` field as file URIs with names: `"workspace"` is the server's working directory. */
function rootsOf(
  value: false | 'workspace' | string[] | undefined,
  cwd: string | undefined,
  where: string,
): Array<{ uri: string; name: string }> {
  if (value === undefined || value === false) return [];
  const dirs = value === 'workspace' ? [cwd ?? process.cwd()] : value;
  return dirs.map((dir, i) => {
    let url: URL;
    if (dir.startsWith('file://')) {
      try {
        url = new URL(dir);
      } catch {
        throw new AgentryError('invalid_request', `${where}.roots.${i}: not a valid file:// URI`);
      }
    } else if (/^[a-z][a-z0-9+.-]*:/i.test(dir) && !isAbsolute(dir)) {
      throw new AgentryError('invalid_request', `${where}.roots.${i}: a root must be a directory or a file:// URI`);
    } else {
      url = pathToFileURL(resolve(cwd ?? process.cwd(), dir));
    }
    const name = decodeURIComponent(url.pathname.replace(/\/+$/, '').split('/').pop() || '/');
    return { uri: url.href, name: value === 'workspace' ? `workspace (${name})` : name };
  });
}

/** `${VAR}` and `${VAR:-default}` in the fields that reach a process or a request. */
function expandEnv(raw: Record<string, unknown>, env: NodeJS.ProcessEnv, where: string): Record<string, unknown> {
  const expand = (value: unknown, field: string): unknown => {
    if (typeof value === 'string') {
      return value.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g, (_m, name: string, fallback?: string) => {
        const v = env[name];
        if (v !== undefined && v !== '') return v;
        if (fallback !== undefined) return fallback;
        throw new AgentryError(
          'invalid_request',
          `${where}.${field}: the environment variable ${name} is not set (write \${${name}:-default} for a default)`,
        );
      });
    }
    if (Array.isArray(value)) return value.map((v, i) => expand(v, `${field}.${i}`));
    if (isRecord(value))
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, expand(v, `${field}.${k}`)]));
    return value;
  };
  const out = { ...raw };
  for (const field of ['command', 'args', 'env', 'cwd', 'url', 'headers']) {
    if (field in out) out[field] = expand(out[field], field);
  }
  return out;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function describe(v: unknown): string {
  return v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v;
}
