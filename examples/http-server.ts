/**
 * The agent API on a port of its own with `startServer`, as `agentry serve` runs it: over a SQLite file, HTTP runs on a
 * thread of its own that answers polls (GET /api/agents/{id}) from a read-only connection, so they stay fast while
 * this thread steps the agents; every other request is handed to this thread.
 *
 * Run: ANTHROPIC_API_KEY=... npx tsx examples/http-server.ts   (PORT=8787 picks the port; the default is a free one)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentRuntime, sqliteStorage } from 'agentry-runtime';
import { startServer } from 'agentry-runtime/http';

const dir = mkdtempSync(join(tmpdir(), 'agentry-example-'));
const runtime = await AgentRuntime.open({ storage: sqliteStorage({ path: join(dir, 'agentry.db') }) });
// An account with credits and an active subscription; its first API key is returned this once.
const { apiKey } = await runtime.accounts.create({ name: 'example', credits: 100 });

const server = await startServer(runtime, { port: Number(process.env.PORT ?? 0) });
console.log(`Listening on ${server.url}`);
console.log(`API key: ${apiKey!.key}`);
console.log(`Polls answered on the server's own thread: ${server.pollThread}`);
console.log(`Try: curl -H 'x-api-key: ${apiKey!.key}' ${server.url}/api/agents`);

const stop = async () => {
  await server.close();
  await runtime.close();
  rmSync(dir, { recursive: true, force: true });
  process.exit(0);
};
process.once('SIGINT', () => void stop());
process.once('SIGTERM', () => void stop());
