/**
 * Fixtures for the web tools' end-to-end tests: loopback HTTP servers that count what reaches them, a name resolver
 * that never asks real DNS, a safety net that stops any connection to a non-loopback address (even if the guard under
 * test were broken), and a scripted model that plays the tool calls written in its agent's goal.
 */
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import ipaddr from 'ipaddr.js';
import { vi } from 'vitest';
import type { ModelRequest, ToolResultBlock } from 'agentry-runtime';
import type { ScriptedModel, ScriptedTurn } from 'agentry-runtime/testing';

/** A request a loopback server received. */
export interface SeenRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  headers: http.IncomingHttpHeaders;
}

export interface LoopbackServer {
  port: number;
  /** `http://127.0.0.1:<port>` or `http://[::1]:<port>`, without a trailing slash. */
  base: string;
  /** Every request received, in order. */
  seen: SeenRequest[];
  close(): Promise<void>;
}

/** Starts a server on a loopback address and an ephemeral port; `handle` answers each request. */
export async function startLoopbackServer(
  handle: (req: http.IncomingMessage, res: http.ServerResponse, url: URL) => void,
  host: '127.0.0.1' | '::1' = '127.0.0.1',
): Promise<LoopbackServer> {
  const seen: SeenRequest[] = [];
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://loopback');
    seen.push({ method: req.method ?? '', path: url.pathname, query: url.searchParams, headers: req.headers });
    handle(req, res, url);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, resolve);
  });
  const { port } = server.address() as AddressInfo;
  return {
    port,
    base: host === '::1' ? `http://[::1]:${port}` : `http://127.0.0.1:${port}`,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/**
 * The `lookup` option of the guarded fetch for tests: each name resolves to the addresses listed, any other name
 * fails as an unknown host would. Real DNS is never asked.
 */
export function fakeLookup(
  names: Record<string, string[]>,
): (hostname: string) => Promise<Array<{ address: string; family: 4 | 6 }>> {
  return async (hostname) => {
    const addresses = names[hostname];
    if (!addresses) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
    return addresses.map((address) => ({ address, family: net.isIP(address) === 6 ? 6 : 4 }));
  };
}

/** True for 127.0.0.0/8, ::1 and their IPv4-mapped forms, bracketed or not. */
function isLoopback(host: string): boolean {
  const ip = host.replace(/^\[|\]$/g, '');
  return ipaddr.isValid(ip) && ipaddr.process(ip).range() === 'loopback';
}

/**
 * Spies on `net.connect` (undici connects through it) and refuses, before any packet is sent, a connection to an
 * address that is not loopback: an IP host directly, a name through the lookup it would connect with. Returns the
 * list of refused targets; a test asserts it stays empty.
 */
export function refuseNonLoopbackConnections(): string[] {
  const violations: string[] = [];
  const realConnect = net.connect;
  vi.spyOn(net, 'connect').mockImplementation(((
    options: net.NetConnectOpts & { host?: string },
    ...rest: unknown[]
  ) => {
    const host = String(options.host ?? 'localhost');
    if (net.isIP(host.replace(/^\[|\]$/g, '')) !== 0 || !('lookup' in options) || !options.lookup) {
      if (!isLoopback(host)) {
        violations.push(host);
        throw new Error(`test safety net: refused to connect to ${host}`);
      }
    } else {
      const lookup = options.lookup;
      options = {
        ...options,
        lookup: (hostname, lookupOptions, callback) =>
          lookup(hostname, lookupOptions, (err, address, family) => {
            const addresses = Array.isArray(address) ? address.map((a) => a.address) : [address];
            if (!err && !addresses.every(isLoopback)) {
              violations.push(`${hostname} -> ${addresses.join(', ')}`);
              callback(new Error('test safety net: not loopback'), '');
              return;
            }
            callback(err, address, family);
          }),
      };
    }
    return (realConnect as (...args: unknown[]) => net.Socket)(options, ...rest);
  }) as typeof net.connect);
  return violations;
}

/** A tool call an agent's goal asks for. */
export interface PlannedCall {
  name: string;
  input: unknown;
}

/** The goal that makes {@link playGoal} call these tools, one per turn, then answer. */
export function goalOf(calls: PlannedCall[]): string {
  return JSON.stringify(calls);
}

/**
 * A model script: the agent's goal is a JSON list of tool calls; turn n makes call n, and the turn after the last
 * answers with the results it saw (`Done: <result>; <result>`), like a model that read them.
 */
export function playGoal(request: ModelRequest, { turnIndex }: { turnIndex: number }): ScriptedTurn {
  const first = request.messages[0]?.content[0];
  const calls = JSON.parse(first?.type === 'text' ? first.text : '[]') as PlannedCall[];
  const call = calls[turnIndex];
  if (call) return { toolCalls: [{ name: call.name, input: call.input }] };
  const results = request.messages
    .flatMap((m) => m.content)
    .filter((b): b is ToolResultBlock => b.type === 'tool_result')
    .map((b) => b.content.slice(0, 200));
  return { text: `Done: ${results.join('; ')}` };
}

/** The requests the model received for one agent, in order. */
export function requestsOf(model: ScriptedModel, agentId: string): ModelRequest[] {
  return model.calls.filter((c) => c.agentId === agentId);
}

/**
 * The tool_result block the model saw at its turn `turn` (the result of the call it made at turn `turn - 1`):
 * the one block of the last message of that request.
 */
export function resultSeenAt(model: ScriptedModel, agentId: string, turn: number): ToolResultBlock {
  const request = requestsOf(model, agentId)[turn];
  if (!request) throw new Error(`the model was not asked for turn ${turn} of ${agentId}`);
  const blocks = request.messages.at(-1)?.content.filter((b): b is ToolResultBlock => b.type === 'tool_result');
  if (blocks?.length !== 1) throw new Error(`turn ${turn} of ${agentId} does not follow exactly one tool result`);
  return blocks[0]!;
}

/** Names of the tools the model was offered in its first request for `agentId`. */
export function toolsOffered(model: ScriptedModel, agentId: string): string[] {
  return requestsOf(model, agentId)[0]?.tools.map((t) => t.name) ?? [];
}
