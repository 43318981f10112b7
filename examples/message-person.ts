/**
 * message_person, offline: an agent e-mails one allowed person through a real SMTP exchange (nodemailer talking to an
 * in-process `smtp-server` on 127.0.0.1), and the outbox records the attempt before it is sent and how it ended.
 * Prints the tool's status, the transcript, the e-mail as the server received it, and the outbox.
 * Run: npx tsx examples/message-person.ts
 *
 * Everything is the real runtime — SQLite storage, the step loop, credits, the built-in tool, its allowlist and
 * outbox, nodemailer — except the stand-ins that keep it offline: a local SMTP server and a scripted model.
 *
 * For real mail, set the environment (or pass `builtinTools.messaging`) and drop the stand-ins:
 *
 *   SMTP_URL=smtps://user:pass@smtp.example.com:465 AGENTRY_EMAIL_FROM='Alerts <alerts@example.com>' \
 *   AGENTRY_MESSAGE_ALLOW=me@example.com ANTHROPIC_API_KEY=sk-ant-… \
 *   node bin/agentry.js run "E-mail me (me@example.com) a haiku about durable agents"
 *
 * SMS works the same way through Twilio: TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN, TWILIO_FROM, and a `+` prefix in
 * AGENTRY_MESSAGE_ALLOW (`+4930`).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import PostalMime from 'postal-mime';
import { SMTPServer } from 'smtp-server';
import { AgentRuntime, sqliteStorage, type ContentBlock } from 'agentry-runtime';
import { scriptedModel } from 'agentry-runtime/testing';

// The mail server, on loopback: accepts every message and keeps it (no TLS, no login: it is local).
const inbox: string[] = [];
const smtp = new SMTPServer({
  secure: false,
  authOptional: true,
  disabledCommands: ['STARTTLS'],
  logger: false,
  onData(stream, _session, callback) {
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => {
      inbox.push(Buffer.concat(chunks).toString('utf8'));
      callback();
    });
  },
});
await new Promise<void>((resolve) => smtp.listen(0, '127.0.0.1', () => resolve()));
const smtpUrl = `smtp://127.0.0.1:${(smtp.server.address() as AddressInfo).port}`;

// The model: one call of message_person, then an answer that says what happened.
const ALERT = {
  channel: 'email',
  to: 'ada@example.com',
  subject: 'Der Preis ist gefallen — 値下がり',
  body: 'Hallo Ada,\n\nthe lamp now costs 49 € (価格: 49ユーロ, цена: 49 евро).\n\n— your agent',
};
const model = scriptedModel({
  turns: (request, { turnIndex }) => {
    if (turnIndex === 0) return { toolCalls: [{ name: 'message_person', input: ALERT }] };
    const last = request.messages.at(-1)?.content.find((b) => b.type === 'tool_result');
    const { status } = JSON.parse(last?.type === 'tool_result' ? last.content : '{}') as { status?: string };
    return { text: `I e-mailed Ada about the price (status: ${status}).` };
  },
});

const dir = mkdtempSync(join(tmpdir(), 'agentry-message-example-'));
const runtime = await AgentRuntime.open({
  storage: sqliteStorage({ path: join(dir, 'agentry.db') }),
  model,
  builtinTools: {
    env: {}, // only what is passed here: nothing from this shell's environment
    messaging: { smtpUrl, from: 'Price watch <alerts@agentry.example>', allow: ['ada@example.com'] },
  },
});
try {
  const status = runtime.toolStatus().find((t) => t.name === 'message_person')!;
  console.log(`message_person  ${status.ready ? 'ready' : 'not ready'}  ${status.detail}\n`);

  const { agent_id } = await runtime.create({ goal: 'Tell Ada (ada@example.com) that the lamp is below 50 €.' });
  const agent = await runtime.waitFor(agent_id);
  // The transcript: the goal, the tool call the model made, and its answer.
  const { messages } = await runtime.get(agent_id);
  const calls = (model.calls.at(-1)?.messages ?? []).flatMap((t) => t.content as ContentBlock[]);
  console.log(`[${messages[0]!.role}] ${messages[0]!.text}`);
  for (const block of calls) {
    if (block.type === 'tool_use') console.log(`[ASSISTANT] → ${block.name} ${JSON.stringify(block.input)}`);
  }
  for (const m of messages.slice(1)) console.log(`[${m.role}] ${m.text}`);

  console.log('\nThe SMTP server received:');
  for (const raw of inbox) {
    const mail = await PostalMime.parse(raw);
    console.log(`  From: ${mail.from && 'address' in mail.from ? `${mail.from.name} <${mail.from.address}>` : '?'}`);
    console.log(`  To: ${(mail.to ?? []).map((a) => ('address' in a ? a.address : a.name)).join(', ')}`);
    console.log(`  Subject: ${mail.subject}`);
    console.log(`  Message-ID: ${mail.messageId}`);
    console.log(`  ${(mail.text ?? '').trimEnd().replaceAll('\n', '\n  ')}`);
  }

  console.log('\nOutbox:');
  for (const m of await runtime.outbox(agent_id)) {
    console.log(`  ${m.status}  ${m.channel}  ${m.to}  ${m.provider_id ?? m.error}`);
  }
  const { agent: final } = await runtime.get(agent_id);
  console.log(
    `\nstatus: ${agent.status} · outbox ${JSON.stringify(final.outbox)} · ${agent.credits_spent} credits spent`,
  );
} finally {
  await runtime.close();
  await new Promise<void>((resolve) => smtp.close(() => resolve()));
  rmSync(dir, { recursive: true, force: true });
}
