/**
 * The MCP config format (Claude Code / Claude Desktop `mcpServers`, plus agentry's fields) and tool naming.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseMcpServers, readMcpConfigFile } from '../../src/mcp/config.js';
import { whyLine } from '../../src/mcp/stderr.js';
import { isIdempotent, mcpToolName } from '../../src/mcp/tools.js';

describe('MCP config', () => {
  it('reads a Claude Desktop / Claude Code file unchanged, extra fields included', () => {
    const servers = parseMcpServers(
      {
        mcpServers: {
          files: {
            type: 'stdio',
            command: 'npx',
            args: ['-y', '@modelcontextprotocol/server-filesystem', '${DATA_DIR:-/srv/data}'],
            env: { TOKEN: '${MY_TOKEN}' },
            autoApprove: ['read_file'],
            alwaysAllow: [],
          },
          'my crm': { type: 'http', url: 'https://crm.example.com/mcp', headers: { Authorization: 'Bearer x' } },
          old: { command: 'x', disabled: true },
          codex: { command: 'y', startup_timeout_sec: 2.5, tool_timeout_sec: 30 },
        },
      },
      { MY_TOKEN: 'secret' },
    );
    expect(servers.map((s) => s.name)).toEqual(['files', 'my crm', 'codex']);
    expect(servers[0]).toMatchObject({
      transport: 'stdio',
      prefix: 'files',
      args: ['-y', '@modelcontextprotocol/server-filesystem', '/srv/data'],
      env: { TOKEN: 'secret' },
      startupTimeoutMs: 15_000,
      toolTimeoutMs: 300_000,
      disallowedTools: [],
    });
    expect(servers[1]).toMatchObject({ transport: 'http', prefix: 'my_crm', headers: { Authorization: 'Bearer x' } });
    expect(servers[2]).toMatchObject({ startupTimeoutMs: 2_500, toolTimeoutMs: 30_000 });
  });

  it('errors name the server and the field', () => {
    expect(() => parseMcpServers({ s: { command: '' } })).toThrow(/^mcpServers\.s\.command: must name the program/);
    expect(() => parseMcpServers({ s: { command: 'x', args: 'nope' } })).toThrow(/^mcpServers\.s\.args: /);
    expect(() => parseMcpServers({ s: { type: 'websocket', url: 'ws://x' } })).toThrow(
      /^mcpServers\.s\.type: must be "stdio", "http" or "streamable-http"/,
    );
    expect(() => parseMcpServers({ s: { command: 'x', allowed_tools: [1] } })).toThrow(
      /mcpServers\.s\.allowed_tools\.0/,
    );
    expect(() => parseMcpServers({ s: 'npx server' })).toThrow(/^mcpServers\.s must be an object, got string/);
    expect(() => parseMcpServers([])).toThrow(/mcpServers must be an object of servers by name, got an array/);
  });

  it('reads a file and reports its path', () => {
    const dir = mkdtempSync(join(tmpdir(), 'agentry-mcp-config-'));
    try {
      const file = join(dir, 'mcp.json');
      writeFileSync(file, '{"mcpServers": {"a": {"command": "x"}}}');
      expect(readMcpConfigFile(file)).toEqual({ a: { command: 'x' } });
      writeFileSync(file, '{"mcpServers": ');
      expect(() => readMcpConfigFile(file)).toThrow(`The MCP config ${file} is not valid JSON`);
      writeFileSync(file, '{"servers": {}}');
      expect(() => readMcpConfigFile(file)).toThrow(`The MCP config ${file} must be {"mcpServers"`);
      expect(() => readMcpConfigFile(join(dir, 'missing.json'))).toThrow(/Cannot read the MCP config/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('MCP tool names and hints', () => {
  it('are safe for the Messages API, and long names stay apart', () => {
    expect(mcpToolName('github', 'search_issues')).toBe('mcp__github__search_issues');
    expect(mcpToolName('fs', 'read.file/v2')).toBe('mcp__fs__read_file_v2');
    const long = 'x'.repeat(80);
    const a = mcpToolName('server', `${long}a`);
    const b = mcpToolName('server', `${long}b`);
    expect(a).toMatch(/^[a-zA-Z0-9_-]{64}$/);
    expect(b).toMatch(/^[a-zA-Z0-9_-]{64}$/);
    expect(a).not.toBe(b);
  });

  it('only readOnlyHint or idempotentHint make a call safe to send again', () => {
    const tool = (annotations?: Record<string, boolean>) => ({
      name: 't',
      inputSchema: { type: 'object' as const },
      ...(annotations ? { annotations } : {}),
    });
    expect(isIdempotent(tool())).toBe(false);
    expect(isIdempotent(tool({ destructiveHint: false }))).toBe(false);
    expect(isIdempotent(tool({ readOnlyHint: true }))).toBe(true);
    expect(isIdempotent(tool({ idempotentHint: true }))).toBe(true);
  });
});

describe('roots and sampling in the config', () => {
  it('roots: none by default, the workspace, or a list of directories; sampling only when asked', () => {
    const [plain] = parseMcpServers({ s: { command: 'x' } });
    expect(plain).toMatchObject({ roots: [], sampling: false, samplingMaxTokens: 1024 });
    const [workspace] = parseMcpServers({
      s: { command: 'x', cwd: '/srv/project', roots: 'workspace', sampling: true },
    });
    expect(workspace).toMatchObject({
      roots: [{ uri: 'file:///srv/project', name: 'workspace (project)' }],
      sampling: true,
    });
    const [listed] = parseMcpServers({
      s: { command: 'x', cwd: '/srv', roots: ['data', '/tmp/a b', 'file:///opt/x'] },
    });
    expect(listed!.roots).toEqual([
      { uri: 'file:///srv/data', name: 'data' },
      { uri: 'file:///tmp/a%20b', name: 'a b' },
      { uri: 'file:///opt/x', name: 'x' },
    ]);
    expect(() => parseMcpServers({ s: { command: 'x', roots: ['https://example.com/'] } })).toThrow(
      /mcpServers\.s\.roots\.0: a root must be a directory or a file:\/\/ URI/,
    );
    expect(() => parseMcpServers({ s: { command: 'x', sampling: 'yes' } })).toThrow(/mcpServers\.s\.sampling/);
  });
});

describe('the stderr line that says why a server failed', () => {
  it('is the error, not the first line or a stack frame', () => {
    const node = [
      'node:internal/modules/cjs/loader:1210',
      '  throw err;',
      '  ^',
      '',
      "Error: Cannot find module '/srv/missing.js'",
      '    at Module._resolveFilename (node:internal/modules/cjs/loader:1207:15)',
      '    at node:internal/main/run_main_module:28:49 {',
      "  code: 'MODULE_NOT_FOUND',",
      '  requireStack: []',
      '}',
      '',
      'Node.js v20.20.2',
    ].join('\n');
    expect(whyLine(node)).toBe("Error: Cannot find module '/srv/missing.js'");
    const python = [
      'Traceback (most recent call last):',
      '  File "<string>", line 1, in <module>',
      "ModuleNotFoundError: No module named 'mcp'",
    ].join('\n');
    expect(whyLine(python)).toBe("ModuleNotFoundError: No module named 'mcp'");
    expect(whyLine('starting\nlistening on stdio\n')).toBe('listening on stdio');
    expect(whyLine('')).toBe('');
  });
});
