/**
 * The agent API beside a Fastify 5 app. Fastify parses bodies (and answers 400/413/415 in its own shape) before any
 * route runs, so agentry is mounted in front of it on the raw Node request, through Fastify's `serverFactory`: the
 * node handler answers agentry's paths and hands every other request to Fastify.
 *
 * Run: ANTHROPIC_API_KEY=... npx tsx examples/http-fastify.ts   (PORT=8787 picks the port)
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
import Fastify from 'fastify';
import { AgentRuntime, memoryStorage } from 'agentry-runtime';
import { createNodeHandler, type FetchHandlerOptions } from 'agentry-runtime/http';

export interface StartOptions {
  port?: number;
  /** A runtime to serve (the caller closes it). Default: a new one on in-memory storage, Claude from the environment. */
  runtime?: AgentRuntime;
  http?: FetchHandlerOptions;
}

export async function start(options: StartOptions = {}) {
  const runtime = options.runtime ?? (await AgentRuntime.open({ storage: memoryStorage() }));
  const { account, apiKey } = await runtime.accounts.create({ name: 'example', credits: 100 });

  const agentry = createNodeHandler(runtime, options.http);
  const app = Fastify({
    serverFactory: (fastifyHandler) =>
      createServer((req, res) => void agentry(req, res, () => fastifyHandler(req, res))),
  });
  app.get('/health', async () => ({ ok: true }));

  await app.listen({ port: options.port ?? Number(process.env.PORT ?? 0), host: '127.0.0.1' });
  const { port } = app.server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    apiKey: apiKey!.key,
    accountId: account.account_id,
    runtime,
    async close() {
      app.server.closeAllConnections();
      await app.close();
      if (!options.runtime) await runtime.close();
    },
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { url, apiKey } = await start();
  console.log(`Listening on ${url}`);
  console.log(`API key: ${apiKey}`);
}
