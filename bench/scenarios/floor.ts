/**
 * floor: the physical reference. A plain loop — no framework — takes the same 2 turns per child against the same
 * scripted model and writes the same rows agentry keeps (agents, messages, turns, tool calls, ledger) to a fresh
 * SQLite file in batched transactions (WAL, synchronous=NORMAL, prepared statements).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import type { ModelRequest } from 'agentry-runtime';
import { scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { childAnswer, childGoal, peakRssMb, report, scenarioArgs } from '../lib/measure.js';

const BATCH = 1_000;
const args = scenarioArgs();
const n = args.n;
const dir = mkdtempSync(join(tmpdir(), 'agentry-floor-'));
const db = new Database(join(dir, 'floor.db'));
db.pragma('journal_mode = WAL');
db.pragma('synchronous = NORMAL');
db.exec(`
  CREATE TABLE agents (agent_id TEXT PRIMARY KEY, parent_id TEXT, goal TEXT, status TEXT, token_count INTEGER, updated_at TEXT);
  CREATE TABLE messages (seq INTEGER PRIMARY KEY, agent_id TEXT, role TEXT, text TEXT, timestamp TEXT);
  CREATE TABLE turns (agent_id TEXT, idx INTEGER, role TEXT, content TEXT, PRIMARY KEY (agent_id, idx));
  CREATE TABLE tool_calls (agent_id TEXT, tool_use_id TEXT, name TEXT, input TEXT, result TEXT, PRIMARY KEY (agent_id, tool_use_id));
  CREATE TABLE ledger (seq INTEGER PRIMARY KEY, agent_id TEXT, tokens_in INTEGER, tokens_out INTEGER, amount INTEGER);
`);
const insertAgent = db.prepare('INSERT INTO agents VALUES (?, ?, ?, ?, ?, ?)');
const insertMessage = db.prepare('INSERT INTO messages (agent_id, role, text, timestamp) VALUES (?, ?, ?, ?)');
const insertTurn = db.prepare('INSERT INTO turns VALUES (?, ?, ?, ?)');
const insertCall = db.prepare('INSERT INTO tool_calls VALUES (?, ?, ?, ?, ?)');
const insertLedger = db.prepare('INSERT INTO ledger (agent_id, tokens_in, tokens_out, amount) VALUES (?, ?, ?, ?)');

const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;
const model = scriptedModel({
  record: false,
  turns: (req, { turnIndex }): ScriptedTurn => {
    const i = Number(/^child (\d+):/.exec(goalOf(req))![1]);
    return turnIndex === 0 ? { toolCalls: [{ name: 'lookup', input: { item: i } }] } : { text: childAnswer(i) };
  },
});
const signal = new AbortController().signal;
const request = (agentId: string, messages: ModelRequest['messages']): ModelRequest => ({
  model: 'svc-1-lite',
  system: 'system',
  messages,
  tools: [],
  maxTokens: 1024,
  agentId,
});

type Row = () => void;
const t0 = performance.now();
const cpu0 = process.cpuUsage();
const parent = randomUUID();
let rows: Row[] = [];
const flush = db.transaction((batch: Row[]) => {
  for (const write of batch) write();
});
let written = 0;
for (let i = 0; i < n; i++) {
  const id = randomUUID();
  const now = new Date().toISOString();
  const goal = childGoal(i);
  const first = [{ role: 'user' as const, content: [{ type: 'text' as const, text: goal }] }];
  const r1 = await model.generate(request(id, first), { signal });
  const use = r1.content.find((b) => b.type === 'tool_use')!;
  const result = childAnswer(i);
  const second = [
    ...first,
    { role: 'assistant' as const, content: r1.content },
    { role: 'user' as const, content: [{ type: 'tool_result' as const, tool_use_id: use.id, content: result }] },
  ];
  const r2 = await model.generate(request(id, second), { signal });
  const answer = (r2.content[0] as { text: string }).text;
  rows.push(
    () => insertAgent.run(id, parent, goal, 'COMPLETED', 240, now),
    () => insertMessage.run(id, 'USER', goal, now),
    () => insertMessage.run(id, 'ASSISTANT', answer, now),
    () => insertTurn.run(id, 0, 'user', JSON.stringify(first[0]!.content)),
    () => insertTurn.run(id, 1, 'assistant', JSON.stringify(r1.content)),
    () => insertTurn.run(id, 2, 'user', JSON.stringify(second[2]!.content)),
    () => insertTurn.run(id, 3, 'assistant', JSON.stringify(r2.content)),
    () => insertCall.run(id, use.id, 'lookup', JSON.stringify(use.input), result),
    () => insertLedger.run(id, 100, 20, -20_000),
    () => insertLedger.run(id, 100, 20, -20_000),
  );
  if ((i + 1) % BATCH === 0) {
    flush(rows);
    written += rows.length;
    rows = [];
  }
}
flush(rows);
written += rows.length;
const wallMs = performance.now() - t0;
const cpu = process.cpuUsage(cpu0);
db.close();
rmSync(dir, { recursive: true, force: true });
report({
  name: 'floor',
  n,
  wall_ms: Math.round(wallMs),
  // user + system over the same window, as fanout reports it: the ratio of the two drifts less with load than walls
  cpu_ms: Math.round((cpu.user + cpu.system) / 1000),
  rows_written: written,
  model_turns: 2 * n,
  peak_rss_mb: peakRssMb(),
});
