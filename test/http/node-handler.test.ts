/**
 * The node handler as Connect/Express middleware: it passes what is not agentry's to `next()` (even methods fetch
 * cannot carry), reads a body an earlier parser already consumed, and never rejects, even when the client is gone.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { connect } from 'node:net';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentRuntime, memoryStorage } from 'agentry-runtime';
import { createNodeHandler } from 'agentry-runtime/http';
import { scriptedModel } from 'agentry-runtime/testing';

let runtime: AgentRuntime;
let key: string;

beforeAll(async () => {
  runtime = await AgentRuntime.open({ storage: memoryStorage(), model: scriptedModel({ turns: [{ text: 'Done.' }] }) });
  key = (await runtime.accounts.create({ name: 'n', credits: 10 })).apiKey!.key;
});
afterAll(() => runtime.close());

async function listen(handler: (req: IncomingMessage, res: ServerResponse) => void) {
  const server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

function raw(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let out = '';
    socket.on('data', (c) => {
      out += c.toString();
      if (/\r\n\r\n/.test(out)) socket.end();
    });
    socket.on('close', () => resolve(out));
    socket.on('error', reject);
    socket.write(text);
  });
}

describe('createNodeHandler', () => {
  it("calls next() for paths that are not agentry's, including methods fetch refuses", async () => {
    const nexts: string[] = [];
    const agentry = createNodeHandler(runtime);
    const server = await listen((req, res) => {
      void agentry(req, res, () => {
        nexts.push(`${req.method} ${req.url}`);
        res.end('host app');
      });
    });
    try {
      expect(await (await fetch(`http://127.0.0.1:${server.port}/elsewhere`)).text()).toBe('host app');
      expect(await raw(server.port, 'TRACE /elsewhere HTTP/1.1\r\nHost: x\r\n\r\n')).toMatch(
        /host app|^HTTP\/1\.1 200/,
      );
      const trace = await raw(server.port, 'TRACE /api/agents HTTP/1.1\r\nHost: x\r\n\r\n');
      expect(trace).toMatch(/^HTTP\/1\.1 405/);
      expect(trace).toMatch(/allow: GET, POST/i);
      expect(nexts).toEqual(['GET /elsewhere', 'TRACE /elsewhere']);
    } finally {
      await server.close();
    }
  });

  it('works behind express.json(): a body already parsed is used as sent', async () => {
    const app = express();
    app.use(express.json());
    app.use(createNodeHandler(runtime));
    const server = await listen(app);
    try {
      const r = await fetch(`http://127.0.0.1:${server.port}/api/agents`, {
        method: 'POST',
        headers: { 'x-api-key': key, 'content-type': 'application/json' },
        body: JSON.stringify({ goal: 'Parsed first' }),
      });
      expect(r.status).toBe(201);
      expect(((await r.json()) as { goal: string }).goal).toBe('Parsed first');
    } finally {
      await server.close();
    }
  });

  it('never rejects when the client goes away mid-request', async () => {
    const outcomes: Array<'resolved' | 'rejected'> = [];
    const agentry = createNodeHandler(runtime);
    const server = await listen((req, res) => {
      agentry(req, res).then(
        () => outcomes.push('resolved'),
        () => outcomes.push('rejected'),
      );
    });
    try {
      await new Promise<void>((resolve) => {
        const socket = connect(server.port, '127.0.0.1', () => {
          socket.write(
            `POST /api/agents HTTP/1.1\r\nHost: x\r\nx-api-key: ${key}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{"goal":`,
          );
          setImmediate(() => {
            socket.destroy();
            resolve();
          });
        });
      });
      const deadline = Date.now() + 5_000;
      while (outcomes.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      expect(outcomes).toEqual(['resolved']);
    } finally {
      await server.close();
    }
  });
});
