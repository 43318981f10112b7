/**
 * `agentry run` end to end: the real CLI in a child process, the real Anthropic SDK, a local Messages API server.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { sqliteStorage } from 'agentry-runtime';
import { startFakeAnthropic, type FakeAnthropic, type FakeAnthropicHandler } from 'agentry-runtime/testing';
import { eventually } from '../support/runtime.js';

const CLI = join(import.meta.dirname, '../../src/cli/index.ts');

interface Run {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  exit: Promise<number | null>;
}

function runCli(args: string[], env: Record<string, string | undefined>): Run {
  const cleanEnv = { ...process.env };
  delete cleanEnv.ANTHROPIC_API_KEY;
  delete cleanEnv.ANTHROPIC_BASE_URL;
  delete cleanEnv.AGENTRY_DB;
  const child = spawn(process.execPath, ['--import', 'tsx', CLI, ...args], {
    env: { ...cleanEnv, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const exit = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  return { child, stdout: () => out, stderr: () => err, exit };
}

let dir: string;
let fake: FakeAnthropic | undefined;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'agentry-run-'));
});
afterEach(async () => {
  await fake?.close();
  fake = undefined;
  rmSync(dir, { recursive: true, force: true });
});

async function withFake(handler: FakeAnthropicHandler) {
  fake = await startFakeAnthropic({ handler });
  return { ANTHROPIC_BASE_URL: fake.url, ANTHROPIC_API_KEY: 'sk-test' };
}

async function agentStatus(db: string, id: string): Promise<string | undefined> {
  const storage = sqliteStorage({ path: db });
  await storage.init();
  try {
    return (await storage.getAgent(id))?.status;
  } finally {
    await storage.close();
  }
}

describe('agentry run', () => {
  it('without a key or base URL it exits at once and says how to set one', async () => {
    const run = runCli(['run', 'do something', '--db', join(dir, 'a.db')], {});
    expect(await run.exit).toBe(2);
    expect(run.stderr()).toContain('ANTHROPIC_API_KEY');
    expect(run.stderr()).toContain('ANTHROPIC_BASE_URL');
  });

  it('runs to COMPLETED with progress lines and the transcript, exit 0', async () => {
    const env = await withFake((body) =>
      body.messages.length === 1
        ? {
            content: [
              { type: 'text', text: 'Planning first.' },
              {
                type: 'tool_use',
                name: 'update_plan',
                input: {
                  steps: [
                    { title: 'Look around', status: 'in_progress' },
                    { title: 'Answer', status: 'pending' },
                  ],
                },
              },
            ],
            usage: { input_tokens: 500, output_tokens: 50 },
          }
        : { text: 'The answer is 42.', usage: { input_tokens: 600, output_tokens: 10 } },
    );
    const db = join(dir, 'a.db');
    const run = runCli(['run', 'What is the answer?', '--db', db], env);
    expect(await run.exit).toBe(0);
    const out = run.stdout();
    expect(out).toContain('goal: What is the answer?');
    expect(out).toContain('agent: Planning first.');
    expect(out).toMatch(/\[#*-*\]\s+0%\s+ACTIVE\s+Look around/);
    expect(out).toContain('agent: The answer is 42.');
    expect(out).toMatch(/\[#{24}\] 100%\s+COMPLETED/);
    expect(out).toContain('1,160 tokens');
    expect(out.indexOf('Planning first.')).toBeLessThan(out.indexOf('The answer is 42.'));
  });

  it('exits 1 when the agent FAILS, with the server message', async () => {
    const env = await withFake(() => ({ status: 400, message: 'prompt is too long (test)' }));
    const run = runCli(['run', 'x', '--db', join(dir, 'a.db')], env);
    expect(await run.exit).toBe(1);
    expect(run.stdout()).toContain('FAILED');
    expect(run.stdout()).toContain('prompt is too long (test)');
  });

  it('exits 3 when the budget runs out (OUT_OF_CREDITS)', async () => {
    const env = await withFake(() => ({ text: 'never reached' }));
    const run = runCli(['run', 'x', '--db', join(dir, 'a.db'), '--credits', '0.001'], env);
    expect(await run.exit).toBe(3);
    expect(run.stdout()).toContain('OUT_OF_CREDITS');
  });

  it('rejects an unknown model with exit 2', async () => {
    const env = await withFake(() => ({ text: 'ok' }));
    const run = runCli(['run', 'x', '--db', join(dir, 'a.db'), '--model', 'gpt-9'], env);
    expect(await run.exit).toBe(2);
    expect(run.stderr()).toContain('Unknown model');
  });

  it('Ctrl-C pauses the agent; --resume continues it to COMPLETED', async () => {
    let slow = true;
    const env = await withFake(() => (slow ? { text: 'too slow', delayMs: 60_000 } : { text: 'Resumed and done.' }));
    const db = join(dir, 'a.db');
    const first = runCli(['run', 'Take your time', '--db', db], env);
    await eventually(() => fake!.requests.length === 1, 20_000, 'the first model request');
    first.child.kill('SIGINT');
    expect(await first.exit).toBe(130);
    const id = /agentry run --resume ([0-9a-f-]{36})/.exec(first.stdout())?.[1];
    expect(id, first.stdout()).toBeDefined();
    expect(await agentStatus(db, id!)).toBe('PAUSED');
    expect(fake!.disconnects).toBe(1); // the in-flight request was aborted

    slow = false;
    const second = runCli(['run', '--resume', id!, '--db', db], env);
    expect(await second.exit).toBe(0);
    expect(second.stdout()).toContain('goal: Take your time');
    expect(second.stdout()).toContain('agent: Resumed and done.');
    expect(await agentStatus(db, id!)).toBe('COMPLETED');
  });
});
