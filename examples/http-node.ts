/**
 * The agent API on plain node:http. Paths that are not agentry's get a 404 in agentry's error shape.
 *
 * Run: ANTHROPIC_API_KEY=... npx tsx examples/http-node.ts   (PORT=8787 picks the port; the default is a free one)
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
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
  // An account with credits and an active subscription; its first API key is returned this once.
  const { account, apiKey } = await runtime.accounts.create({ name: 'example', credits: 100 });

  const server = createServer(createNodeHandler(runtime, options.http));
  await new Promise<void>((resolve) =>
    server.listen(options.port ?? Number(process.env.PORT ?? 0), '127.0.0.1', resolve),
  );
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
  console.log(`Try: curl -H 'x-api-key: ${apiKey}' ${url}/api/agents`);
}
