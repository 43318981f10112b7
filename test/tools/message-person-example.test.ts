/**
 * examples/message-person.ts as a program, offline: the agent's e-mail goes through nodemailer to the example's own
 * SMTP server, arrives with its UTF-8 subject and body intact, and the outbox says `sent`.
 * (Kept beside the tool's tests rather than in test/examples.test.ts, which the other examples share.)
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const root = join(import.meta.dirname, '..', '..');

describe('examples/message-person.ts', () => {
  it('e-mails an allowed person through a local SMTP server and shows the outbox', async () => {
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'examples/message-person.ts'], {
      cwd: root,
      env: { ...process.env, ANTHROPIC_API_KEY: '' },
    });
    expect(stdout).toMatch(
      /^message_person {2}ready {2}email: smtp \(smtp:\/\/127\.0\.0\.1:\d+ as alerts@agentry\.example\)/,
    );
    expect(stdout).toContain('recipients: 1 address');
    expect(stdout).toContain('[ASSISTANT] → message_person {"channel":"email","to":"ada@example.com"');
    expect(stdout).toContain('[ASSISTANT] I e-mailed Ada about the price (status: sent).');
    expect(stdout).toContain('  From: Price watch <alerts@agentry.example>\n  To: ada@example.com\n');
    expect(stdout).toContain('  Subject: Der Preis ist gefallen — 値下がり');
    expect(stdout).toContain('the lamp now costs 49 € (価格: 49ユーロ, цена: 49 евро).');
    expect(stdout).toMatch(/Outbox:\n {2}sent {2}email {2}ada@example\.com {2}<[0-9a-f-]{36}@agentry\.example>/);
    expect(stdout).toContain('status: COMPLETED · outbox {"queued":0,"sent":1,"failed":0,"unknown":0}');
  });
});
