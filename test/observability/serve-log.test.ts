/**
 * `agentry serve`'s log as an operator tails it (a child process, its stdout read as it comes): every line on stdout
 * is JSON; the API key and the words for people are on stderr; a request's access line is out within a second of its
 * answer, whichever thread answered it (a poll answered on the server's own thread, the console, an event stream
 * opened and closed); a provider failure is a warning; and the log is flushed when the process ends on an uncaught
 * exception.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  startFakeAnthropic,
  type FakeAnthropic,
  type FakeMessagesRequest,
  type FakeReply,
} from 'agentry-runtime/testing';
import { cliEnv, eventually, ROOT, startServe, tempDir, type ServeProcess } from '../http/helpers.js';

/** How soon after its answer a request's line must be on stdout: `tail -f` shows it at once, not minutes later. */
const LINE_DEADLINE_MS = 1000;

type LogLine = Record<string, unknown>;

function goalOf(body: FakeMessagesRequest): string {
  const first = body.messages[0]?.content;
  return typeof first === 'string' ? first : (first ?? []).map((b) => String(b.text ?? '')).join(' ');
}

function handler(body: FakeMessagesRequest): FakeReply {
  if (goalOf(body) === 'refused') return { status: 400, message: 'this model is not available to you' };
  return { text: 'done', usage: { input_tokens: 10, output_tokens: 2 } };
}

let fake: FakeAnthropic;
let tmp: ReturnType<typeof tempDir>;
let serve: ServeProcess;
let nextId = 0;
/** An agent that completed, whose streams end at once. */
let doneAgent: string;

/** The JSON lines on stdout so far; a line that is not JSON fails the test. */
function logLines(): LogLine[] {
  return serve
    .stdout()
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => {
      try {
        return JSON.parse(l) as LogLine;
      } catch {
        throw new Error(`a line on stdout is not JSON: ${l}`);
      }
    });
}

/** Polls stdout until a line matches, for at most `ms` (no sleep: each look waits for the next event-loop turn). */
async function lineWithin(match: (l: LogLine) => boolean, ms: number, what: string): Promise<LogLine> {
  const deadline = performance.now() + ms;
  for (;;) {
    const found = logLines().find(match);
    if (found) return found;
    if (performance.now() > deadline) throw new Error(`no log line for ${what} within ${ms} ms:\n${serve.stdout()}`);
    await new Promise((r) => setImmediate(r));
  }
}

/** Sends a request with a request id of its own and waits for its access line. */
async function requestAndItsLine(path: string, init: RequestInit = {}) {
  const requestId = `log-test-${++nextId}`;
  const response = await fetch(`${serve.url}${path}`, {
    ...init,
    headers: { 'x-api-key': serve.apiKey!, 'x-request-id': requestId, ...(init.headers ?? {}) },
  });
  const body = await response.text();
  const line = await lineWithin(
    (l) => l.msg === 'request' && l.request_id === requestId,
    LINE_DEADLINE_MS,
    `${init.method ?? 'GET'} ${path}`,
  );
  return { response, body, line };
}

async function create(goal: string): Promise<string> {
  const { response, body } = await requestAndItsLine('/api/agents', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ goal }),
  });
  expect(response.status).toBe(201);
  return (JSON.parse(body) as { agent_id: string }).agent_id;
}

beforeAll(async () => {
  fake = await startFakeAnthropic({ handler });
  tmp = tempDir('agentry-serve-log-');
  serve = await startServe(
    ['--db', join(tmp.dir, 'agentry.db'), '--rate-limit', 'off', '--log-level', 'info'],
    cliEnv({ ANTHROPIC_BASE_URL: fake.url, ANTHROPIC_API_KEY: 'test-key' }),
  );
}, 60_000);

afterAll(async () => {
  await serve?.stop();
  await fake?.close();
  tmp?.remove();
});

describe('agentry serve logs', () => {
  it('keeps stdout to JSON lines: the API key and the banner are on stderr', async () => {
    expect(serve.apiKey).toMatch(/^agk_/);
    expect(serve.stderr()).toMatch(/^API key: agk_\S+$/m);
    expect(serve.stderr()).toMatch(/^agentry listening on http:\/\/\S+ \(database: .*\)$/m);
    await lineWithin((l) => l.msg === 'agentry serve started', LINE_DEADLINE_MS, 'the start');
    expect(serve.stdout()).not.toContain(serve.apiKey!);
    expect(serve.stdout()).not.toContain('API key');
    expect(logLines().length).toBeGreaterThan(0); // and every one of them parsed
  });

  it("writes a request's line within a second, for polls answered on the server's thread too", async () => {
    const id = await create('log me');
    const { response, line } = await requestAndItsLine(`/api/agents/${id}`);
    expect(response.status).toBe(200);
    expect(line).toMatchObject({ method: 'GET', route: 'get', status: 200, thread: 'poll', level: 30 });
    const missing = await requestAndItsLine(`/api/agents/${id.replace(/.$/, (c) => (c === '0' ? '1' : '0'))}`);
    expect(missing.line).toMatchObject({ route: 'get', status: 404, thread: 'poll' });
    const listed = await requestAndItsLine('/api/agents');
    expect(listed.line).toMatchObject({ route: 'list', status: 200 });
    expect(listed.line.thread).toBeUndefined(); // answered on the runtime's thread
  });

  it('logs every console call', async () => {
    const home = await requestAndItsLine('/console', { redirect: 'manual' });
    expect(home.line).toMatchObject({ method: 'GET', route: 'console', status: home.response.status });
    const page = await requestAndItsLine('/console/sign-in');
    expect(page.line).toMatchObject({ method: 'GET', route: 'console', status: 200 });
    const signIn = await requestAndItsLine('/console/sign-in', { method: 'POST' });
    expect(signIn.line).toMatchObject({ method: 'POST', route: 'console', status: signIn.response.status });
  });

  it('logs an event stream when it opens and when it closes, with how long it lasted and why', async () => {
    const id = await create('stream me');
    await eventually(async () => {
      const r = await fetch(`${serve.url}/api/agents/${id}`, { headers: { 'x-api-key': serve.apiKey! } });
      return ((await r.json()) as { agent: { status: string } }).agent.status === 'COMPLETED' ? true : undefined;
    }, 'the agent to complete');
    // The agent is done: its stream sends the transcript and the status, and ends.
    const { response, line } = await requestAndItsLine(`/api/agents/${id}/events`);
    expect(response.status).toBe(200);
    expect(line).toMatchObject({ route: 'events', status: 200 });
    const opened = await lineWithin(
      (l) => l.msg === 'event stream opened' && l.request_id === line.request_id,
      LINE_DEADLINE_MS,
      'the stream opening',
    );
    expect(opened).toMatchObject({ agent_id: id, event: 'open' });
    const closed = await lineWithin(
      (l) => l.msg === 'event stream closed' && l.request_id === line.request_id,
      LINE_DEADLINE_MS,
      'the stream closing',
    );
    expect(closed).toMatchObject({ agent_id: id, event: 'close', reason: 'finished', duration_ms: expect.any(Number) });
    doneAgent = id;
  });

  it("logs the console's event streams too", async () => {
    // Sign-in takes the key in x-api-key (the server's thread reads no body before a key works).
    const session = await fetch(`${serve.url}/console/api/session`, {
      method: 'POST',
      headers: { 'x-api-key': serve.apiKey!, origin: serve.url },
    });
    expect(session.status).toBe(200);
    const cookie = session.headers.get('set-cookie')!.split(';')[0]!;
    const requestId = 'log-test-console-stream';
    const response = await fetch(`${serve.url}/console/api/agents/${doneAgent}/events`, {
      headers: { cookie, 'x-request-id': requestId },
    });
    expect(response.status).toBe(200);
    await response.text();
    const matching = (msg: string) => (l: LogLine) => l.msg === msg && l.request_id === requestId;
    await lineWithin(matching('request'), LINE_DEADLINE_MS, 'the console stream request');
    await lineWithin(matching('event stream opened'), LINE_DEADLINE_MS, 'the console stream opening');
    const closed = await lineWithin(matching('event stream closed'), LINE_DEADLINE_MS, 'the console stream closing');
    expect(closed).toMatchObject({ agent_id: doneAgent, reason: 'finished' });
  });

  it('logs a provider failure as a warning', async () => {
    const id = await create('refused');
    const warning = await eventually(
      async () => logLines().find((l) => l.msg === 'model provider failed' && l.agent_id === id),
      'the provider failure',
    );
    expect(warning).toMatchObject({ level: 40, status: 400, retryable: false, provider: 'anthropic' });
  });
});

describe('the serve logger at the end of a process', () => {
  it('writes its lines and the exception, with its stack, before an uncaught exception ends the process', async () => {
    const script = [
      "import { createServeLogger, flushLogAtExit } from './src/cli/logging.ts';",
      "const logger = createServeLogger('info', {});",
      'flushLogAtExit(logger);',
      "for (let i = 0; i < 3; i++) logger.info({ i }, 'before');",
      "setImmediate(() => { throw new Error('boom'); });",
    ].join('\n');
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const code = await new Promise<number | null>((r) => child.once('close', r));
    expect(code, stderr).toBe(1);
    const lines = stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as LogLine);
    expect(lines.filter((l) => l.msg === 'before')).toHaveLength(3);
    const fatal = lines.find((l) => l.msg === 'uncaught exception')!;
    expect(fatal.level).toBe(60);
    expect((fatal.err as { stack: string }).stack).toMatch(/boom\n\s+at /);
    expect(stderr).toContain('boom');
  });
});
