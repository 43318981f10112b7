/**
 * message: what message_person costs around the SMTP exchange itself. `--n` agents (1,000) each e-mail one allowed
 * person through an in-process SMTP server (smtp-server on 127.0.0.1) with the real runtime on a SQLite file: each
 * message is checked, recorded `queued` (a durable write) before nodemailer sends it, and recorded `sent` after. The
 * baseline sends the same `--n` messages with nodemailer alone, at the same concurrency (`--lane`, the tools lane).
 * Checks that every message arrived once and every outbox entry says `sent`.
 *
 *   node .build/scenarios/message.js --n 1000 --lane 64
 *   npx tsx bench/scenarios/message.ts --n 200 --lane 64      (from the root, on the sources)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import nodemailer from 'nodemailer';
import { SMTPServer } from 'smtp-server';
import { AgentRuntime, sqliteStorage, type ModelRequest } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { peakRssMb, report } from '../lib/measure.js';

const { values } = parseArgs({
  options: { n: { type: 'string', default: '1000' }, lane: { type: 'string', default: '64' } },
  strict: false,
});
const n = Number(values.n);
const lane = Number(values.lane);

let received = 0;
const smtp = new SMTPServer({
  secure: false,
  authOptional: true,
  disabledCommands: ['STARTTLS'],
  logger: false,
  onData(stream, _session, callback) {
    stream.resume();
    stream.on('end', () => {
      received++;
      callback();
    });
  },
});
await new Promise<void>((resolve) => smtp.listen(0, '127.0.0.1', () => resolve()));
const smtpUrl = `smtp://127.0.0.1:${(smtp.server.address() as AddressInfo).port}`;

const body = (i: number) => `Item ${i} now costs ${(i % 50) + 1} € — 値下がり — цена снизилась.`;

// --- baseline: nodemailer alone, `lane` messages at a time (after a warm-up of both ends of the SMTP exchange)
const mailer = nodemailer.createTransport({ url: smtpUrl });
async function sendAll(count: number): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: Math.min(lane, count) }, async () => {
      while (next < count) {
        const i = next++;
        await mailer.sendMail({
          from: 'alerts@bench.test',
          to: 'ada@example.com',
          subject: `Item ${i}`,
          text: body(i),
        });
      }
    }),
  );
  return performance.now() - started;
}
await sendAll(Math.min(200, n));
received = 0;
const baselineMs = await sendAll(n);
mailer.close();
if (received !== n) throw new Error(`baseline: ${received} of ${n} messages arrived`);
received = 0;

// --- agentry: one agent per message
const dir = mkdtempSync(join(tmpdir(), 'agentry-bench-message-'));
const indexOf = (req: ModelRequest) => Number((req.messages[0]!.content[0] as { text: string }).text.split(' ')[1]);
const model = scriptedModel({
  record: false,
  turns: (req, { turnIndex }): ScriptedTurn => {
    const i = indexOf(req);
    if (turnIndex > 0) return { text: `sent ${i}` };
    const input = { channel: 'email', to: 'ada@example.com', subject: `Item ${i}`, body: body(i) };
    return { toolCalls: [{ name: 'message_person', input }] };
  },
});
const runtime = await AgentRuntime.open({
  storage: sqliteStorage({ path: join(dir, 'bench.db') }),
  model,
  builtinTools: {
    env: {},
    only: ['message_person'],
    messaging: {
      smtpUrl,
      from: 'alerts@bench.test',
      allow: ['ada@example.com'],
      rateLimits: { perAgent: { max: 10, windowS: 3_600 }, perAccount: { max: n + 1, windowS: 86_400 } },
    },
  },
  concurrency: { tools: lane },
  defaultAccount: { id: 'local', credits: 10 * n },
});
const start = performance.now();
const ids: string[] = [];
for (let i = 0; i < n; i++) ids.push((await runtime.create({ goal: `message ${i}` })).agent_id);
for (const id of ids) {
  const agent = await runtime.waitFor(id);
  if (agent.status !== 'COMPLETED') throw new Error(`agent ${id} ended ${agent.status}: ${agent.status_message}`);
}
const wallMs = performance.now() - start;
let sent = 0;
for (const id of ids) sent += (await runtime.outbox(id)).filter((m) => m.status === 'sent').length;
await runtime.close();
await new Promise<void>((resolve) => smtp.close(() => resolve()));
rmSync(dir, { recursive: true, force: true });
if (received !== n || sent !== n) throw new Error(`agentry: ${received} arrived, ${sent} outbox entries sent, of ${n}`);

report({
  name: 'message',
  n,
  wall_ms: Math.round(wallMs),
  messages_per_s: Math.round((n / wallMs) * 1000),
  baseline_wall_ms: Math.round(baselineMs),
  baseline_messages_per_s: Math.round((n / baselineMs) * 1000),
  // What the runtime adds per message, amortised over the run (model turns, checks, two outbox writes, commits).
  overhead_us_per_message: Math.round(((wallMs - baselineMs) / n) * 1000),
  peak_rss_mb: peakRssMb(),
});
