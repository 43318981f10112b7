/**
 * The agent API inside an Express 5 app, next to the app's own routes. The node handler answers agentry's paths and
 * calls `next()` for every other one, so it can go anywhere in the middleware chain. (Mounted under a path, as in
 * `app.use('/agents-api', handler)`, Express strips the prefix itself: leave `basePath` empty.)
 *
 * Run: ANTHROPIC_API_KEY=... npx tsx examples/http-express.ts   (PORT=8787 picks the port)
 */
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
import express from 'express';
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

  const app = express();
  app.get('/health', (_req, res) => {
    res.json({ ok: true });
  });
  app.use(createNodeHandler(runtime, options.http)); // /api/agents..., /api/openapi.json
  app.use((_req, res) => {
    res.status(404).type('text').send("Not one of this app's pages");
  });

  const server = app.listen(options.port ?? Number(process.env.PORT ?? 0), '127.0.0.1');
  await new Promise<void>((resolve, reject) => server.once('listening', resolve).once('error', reject));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    apiKey: apiKey!.key,
    accountId: account.account_id,
    runtime,
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      if (!options.runtime) await runtime.close();
    },
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { url, apiKey } = await start();
  console.log(`Listening on ${url}`);
  console.log(`API key: ${apiKey}`);
}
