/**
 * The agent API in a Hono app on @hono/node-server. Hono speaks fetch, so it calls agentry's fetch handler directly
 * with the raw `Request`; here the API lives under `/v1` (`basePath`), next to the app's own routes.
 *
 * Run: ANTHROPIC_API_KEY=... npx tsx examples/http-hono.ts   (PORT=8787 picks the port)
 */
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { AgentRuntime, memoryStorage } from 'agentry-runtime';
import { createFetchHandler, type FetchHandlerOptions } from 'agentry-runtime/http';

export interface StartOptions {
  port?: number;
  /** A runtime to serve (the caller closes it). Default: a new one on in-memory storage, Claude from the environment. */
  runtime?: AgentRuntime;
  http?: FetchHandlerOptions;
}

export async function start(options: StartOptions = {}) {
  const runtime = options.runtime ?? (await AgentRuntime.open({ storage: memoryStorage() }));
  const { account, apiKey } = await runtime.accounts.create({ name: 'example', credits: 100 });

  const agentry = createFetchHandler(runtime, { ...options.http, basePath: '/v1' });
  const app = new Hono();
  app.get('/health', (c) => c.json({ ok: true }));
  app.all('/v1/api/*', (c) => agentry(c.req.raw));

  const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
    const s = serve(
      { fetch: app.fetch, port: options.port ?? Number(process.env.PORT ?? 0), hostname: '127.0.0.1' },
      () => resolve(s),
    );
  });
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}/v1`,
    apiKey: apiKey!.key,
    accountId: account.account_id,
    runtime,
    async close() {
      if ('closeAllConnections' in server) server.closeAllConnections();
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
