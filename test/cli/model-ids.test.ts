/**
 * The CLI about upstream model ids: `agentry serve` warns at start when the server does not list one, and
 * `agentry tools` shows the id behind each public model and whether the server lists it.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeAnthropic, type FakeAnthropic } from 'agentry-runtime/testing';
import { cliEnv, eventually, runCli, startServe, tempDir } from '../http/helpers.js';

let fake: FakeAnthropic;
let tmp: ReturnType<typeof tempDir>;
beforeAll(async () => {
  fake = await startFakeAnthropic();
  tmp = tempDir('agentry-model-ids-');
});
afterAll(async () => {
  await fake.close();
  tmp.remove();
});

describe('upstream model ids in the CLI', () => {
  it('agentry serve warns at start about an id the server does not list, naming the variable', async () => {
    const env = cliEnv({
      ANTHROPIC_BASE_URL: fake.url,
      ANTHROPIC_API_KEY: 'test-key',
      AGENTRY_MODEL_ULTRA: 'claude-opus-0-retired',
    });
    const serve = await startServe(['--db', join(tmp.dir, 'serve.db'), '--no-console'], env);
    try {
      const warning = await eventually(
        async () => (serve.stderr().includes('claude-opus-0-retired') ? serve.stderr() : undefined),
        'the warning about the unlisted id',
      );
      expect(warning).toContain('AGENTRY_MODEL_ULTRA');
      expect(warning).not.toContain('claude-haiku-4-5'); // the listed one is not warned about
    } finally {
      await serve.stop();
    }
  }, 60_000);

  it('agentry tools shows the resolved ids and whether the server lists them', async () => {
    const env = cliEnv({
      ANTHROPIC_BASE_URL: fake.url,
      ANTHROPIC_API_KEY: 'test-key',
      AGENTRY_MODEL_LITE: 'claude-haiku-5-5',
    });
    const { code, stdout } = await runCli(['tools'], env, 60_000);
    expect(code).toBe(0);
    expect(stdout).toMatch(/svc-1-lite\s+claude-haiku-5-5\s+\(listed by the server\)/);
    expect(stdout).toMatch(/svc-1-ultra\s+claude-opus-5-5\s+\(listed by the server\)/);
  }, 60_000);
});
