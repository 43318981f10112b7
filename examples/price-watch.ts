/**
 * "Watch this page and e-mail me when the price drops below 50", end to end and offline: the agent creates a monitor
 * with a condition, waits without holding a run slot, is woken when a change meets the condition, and e-mails the
 * person through a real SMTP exchange (nodemailer to an in-process `smtp-server`); the outbox records the message.
 * The stand-ins that keep it offline: a local product page whose price the example changes, a local mail server, a
 * scripted model in place of Claude, and a fake clock (`clock.advance(60_000)` is a minute passing), so an hour of
 * watching takes a second.
 *
 *   npx tsx examples/price-watch.ts
 *
 * For real, drop the stand-ins and configure the mail transport (or pass `builtinTools.messaging`):
 *
 *   SMTP_URL=smtps://user:pass@smtp.example.com:465 AGENTRY_EMAIL_FROM='Price watch <alerts@example.com>' \
 *   AGENTRY_MESSAGE_ALLOW=me@example.com ANTHROPIC_API_KEY=sk-ant-… \
 *   node bin/agentry.js run "Watch https://shop.example/lamp and e-mail me (me@example.com) when the price drops below 50"
 */
import type { AddressInfo } from 'node:net';
import PostalMime from 'postal-mime';
import { SMTPServer } from 'smtp-server';
import { AgentRuntime, memoryStorage, type ModelRequest, type ToolResultBlock } from 'agentry-runtime';
import { fakeClock, scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { startPricePage } from '../test/fixtures/price-page.js';

// The shop's page and the mail server, on loopback.
const page = await startPricePage({ product: 'Desk Lamp', price: 59 });
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
const clock = fakeClock(Date.parse('2026-03-02T09:00:00.000Z'));

const lastResult = (req: ModelRequest) =>
  JSON.parse((req.messages.at(-1)!.content as ToolResultBlock[])[0]!.content) as Record<string, unknown>;

/** The agent: create a monitor, wait, e-mail when woken by a change that matters, then say what it did. */
function agentTurn(req: ModelRequest, turnIndex: number): ScriptedTurn {
  switch (turnIndex) {
    case 0:
      return {
        toolCalls: [
          {
            name: 'monitor',
            input: {
              action: 'create',
              url: page.url,
              selector: '.price',
              condition: 'price below 50',
              interval_s: 300,
              until: new Date(clock.now() + 24 * 3_600_000).toISOString(),
            },
          },
        ],
      };
    case 1:
      return { toolCalls: [{ name: 'monitor', input: { action: 'wait' } }] };
    case 2: {
      const change = lastResult(req);
      if (change.timed_out) return { text: 'The price did not drop below 50 within a day.' };
      return {
        toolCalls: [
          {
            name: 'message_person',
            input: {
              channel: 'email',
              to: 'ada@example.com',
              subject: 'The Desk Lamp is below 50',
              body: `Hello Ada,\n\nthe price changed: ${String(change.diff_summary)}\n${String(change.url)}\n\n— your agent`,
            },
          },
        ],
      };
    }
    default:
      return { text: `The price dropped below 50; I e-mailed Ada (status: ${String(lastResult(req).status)}).` };
  }
}

/** The monitor's condition check: a short model call with the change and no tools. */
function conditionTurn(req: ModelRequest): ScriptedTurn {
  const prompt = (req.messages[0]!.content[0] as { text: string }).text;
  const added = /Lines added:\n([\s\S]*?)\n\n/.exec(prompt)?.[1] ?? '';
  const price = Number(/\$(\d+(?:\.\d+)?)/.exec(added)?.[1] ?? NaN);
  return { text: price < 50 ? 'YES: the price is below 50.' : 'NO: still 50 or more.' };
}

const runtime = await AgentRuntime.open({
  storage: memoryStorage(),
  clock,
  model: scriptedModel({
    turns: (req, { turnIndex }) => (req.tools.length === 0 ? conditionTurn(req) : agentTurn(req, turnIndex)),
  }),
  builtinTools: {
    only: ['monitor', 'message_person'],
    env: {}, // only what is passed here: nothing from this shell's environment
    fetch: { allow: ['127.0.0.1/32'] }, // the local shop; public sites need nothing
    messaging: { smtpUrl, from: 'Price watch <alerts@agentry.example>', allow: ['ada@example.com'] },
  },
});
try {
  const { agent_id } = await runtime.create({
    goal: `Watch ${page.url} and e-mail me (ada@example.com) when the price drops below 50.`,
  });
  while (!(await runtime.get(agent_id)).agent.status_message.startsWith('Watching')) {
    await new Promise((r) => setImmediate(r));
  }
  console.log(`status: ${(await runtime.get(agent_id)).agent.status_message}`);

  /** Lets minutes pass on the fake clock, and waits until the monitor's check at that time is done. */
  const minutesPass = async (minutes: number) => {
    clock.advance(minutes * 60_000);
    const at = new Date(clock.now()).toISOString();
    while ((await runtime.monitors(agent_id))[0]?.last_checked_at !== at) await new Promise((r) => setImmediate(r));
  };
  page.set({ price: 54, updatedAt: '09:04' }); // a change, but not one that matters
  await minutesPass(5);
  console.log(`09:05 check: no e-mail (${inbox.length} sent), the price is still 50 or more`);
  page.set({ price: 45, updatedAt: '09:09' }); // a sale
  await minutesPass(5);
  const agent = await runtime.waitFor(agent_id);

  const { messages } = await runtime.get(agent_id);
  for (const m of messages) console.log(`[${m.role}] ${m.text}`);
  const mail = await PostalMime.parse(inbox[0]!);
  console.log(`e-mail received: from ${mail.from?.address} to ${mail.to?.map((t) => t.address).join(', ')}`);
  console.log(`  subject: ${mail.subject}`);
  for (const line of (mail.text ?? '').trim().split('\n')) console.log(`  | ${line}`);
  for (const entry of await runtime.outbox(agent_id))
    console.log(`outbox: ${entry.channel} to ${entry.to}: ${entry.status}`);
  console.log(`status: ${agent.status}, ${agent.credits_spent} credits spent`);
} finally {
  await runtime.close();
  await page.close();
  await new Promise<void>((resolve) => smtp.close(() => resolve()));
}
