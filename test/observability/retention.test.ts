/**
 * Retention: finished trees lose their work after an age (or are deleted), in the background or with `agentry gc`;
 * the ledger stays; SQLite gives the space back.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { AgentRuntime, memoryStorage, sqliteStorage, type ModelRequest } from 'agentry-runtime';
import { fakeClock, scriptedModel, type ScriptedTurn } from 'agentry-runtime/testing';
import { parseDuration } from '../../src/core/retention.js';
import { cliEnv, runCli, tempDir } from '../http/helpers.js';
import { eventually } from '../support/runtime.js';

const goalOf = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;

/** "tree" spawns two children; "fail" is refused; anything else answers with a long text. */
function script(req: ModelRequest, { turnIndex }: { turnIndex: number }): ScriptedTurn {
  const goal = goalOf(req);
  if (goal === 'fail') return { error: { message: 'refused', retryable: false, status: 400 } };
  if (goal === 'tree' && turnIndex === 0) {
    return { toolCalls: [{ name: 'spawn_sub_agents', input: { tasks: [{ goal: 'c0' }, { goal: 'c1' }] } }] };
  }
  return { text: `${goal}: ${'x'.repeat(2_000)}` };
}

describe('retention', () => {
  it('parses durations as the CLI takes them', () => {
    expect(parseDuration('0s')).toBe(0);
    expect(parseDuration('36h')).toBe(36 * 3_600_000);
    expect(parseDuration('30d')).toBe(30 * 86_400_000);
    expect(parseDuration(1500)).toBe(1500);
    expect(() => parseDuration('soon')).toThrow(/0s, 90m, 36h, 30d or 2w/);
    expect(() => parseDuration(-1)).toThrow();
  });

  it('forgets finished trees after their age in the background, keeping rows and ledger; running ones stay', async () => {
    const clock = fakeClock();
    const storage = memoryStorage();
    const runtime = await AgentRuntime.open({
      storage,
      clock,
      model: scriptedModel({ turns: script }),
      builtinTools: false,
      retention: { completedAfter: '1h', failedAfter: '2h', intervalMs: 60_000 },
    });
    const tree = (await runtime.create({ goal: 'tree' })).agent_id;
    const failed = (await runtime.create({ goal: 'fail' })).agent_id;
    expect((await runtime.waitFor(tree)).status).toBe('COMPLETED');
    expect((await runtime.waitFor(failed)).status).toBe('FAILED');
    const kids = (await runtime.list({ parentId: tree })).data.map((a) => a.agent_id);
    expect(kids).toHaveLength(2);
    const ledger = await storage.listLedger('local');
    clock.advance(30 * 60_000);
    const young = (await runtime.create({ goal: 'young' })).agent_id;
    await runtime.waitFor(young);

    // 61 minutes after the tree finished: the sweep forgets it (and its children), not the failed one or the young one.
    clock.advance(31 * 60_000);
    await eventually(async () => (await storage.listTurns(tree)).length === 0, 5_000, 'the sweep');
    for (const id of [tree, ...kids]) {
      expect(await storage.listTurns(id)).toEqual([]);
      expect((await runtime.get(id)).messages).toEqual([]);
      expect((await runtime.get(id)).agent.status).toBe('COMPLETED');
    }
    expect(await storage.listTurns(failed)).not.toEqual([]);
    expect(await storage.listTurns(young)).not.toEqual([]);
    // Money is never forgotten: every ledger row from before the sweep is still there.
    expect((await storage.listLedger('local')).slice(0, ledger.length)).toEqual(ledger);

    // Two hours on, the failed one goes too; with deleteTrees a sweep deletes what is left of the old trees.
    clock.advance(60 * 60_000);
    await eventually(async () => (await storage.listTurns(failed)).length === 0, 5_000, 'the second sweep');
    const swept = await runtime.sweep({ completedAfter: 0, deleteTrees: true });
    expect(swept.trees).toBe(2); // the tree and the young one
    expect(swept.agents).toBe(4);
    await expect(runtime.get(tree)).rejects.toMatchObject({ code: 'not_found' });
    await expect(runtime.get(kids[0]!)).rejects.toMatchObject({ code: 'not_found' });
    expect((await runtime.get(failed)).agent.status).toBe('FAILED');
    expect((await storage.listLedger('local')).slice(0, ledger.length)).toEqual(ledger);
    await runtime.close();
  });

  it('deletes an OUT_OF_CREDITS tree (and so its workspaces) once untouched for outOfCreditsAfter, not before', async () => {
    const clock = fakeClock();
    const storage = memoryStorage();
    const runtime = await AgentRuntime.open({
      storage,
      clock,
      model: scriptedModel({ turns: script }),
      builtinTools: false,
    });
    const stuck = (await runtime.create({ goal: 'stuck', maxCredits: 0.000001 })).agent_id;
    expect((await runtime.waitFor(stuck)).status).toBe('OUT_OF_CREDITS');
    const done = (await runtime.create({ goal: 'done' })).agent_id;
    await runtime.waitFor(done);
    clock.advance(30 * 60_000);
    expect(await runtime.sweep({ outOfCreditsAfter: '1h' })).toMatchObject({ trees: 0 });
    expect((await runtime.get(stuck)).agent.status).toBe('OUT_OF_CREDITS');
    clock.advance(31 * 60_000);
    expect(await runtime.sweep({ outOfCreditsAfter: '1h' })).toMatchObject({ trees: 1, agents: 1 });
    await expect(runtime.get(stuck)).rejects.toMatchObject({ code: 'not_found' });
    expect((await runtime.get(done)).agent.status).toBe('COMPLETED'); // no rule for it was given
    await runtime.close();
  });

  it('agentry gc forgets old work on SQLite, keeps the ledger and gives the pages back; --delete-trees deletes', async () => {
    const tmp = tempDir('agentry-gc-');
    try {
      const db = join(tmp.dir, 'agentry.db');
      const runtime = await AgentRuntime.open({
        storage: sqliteStorage({ path: db }),
        model: scriptedModel({ turns: script }),
        builtinTools: false,
        defaultAccount: { id: 'local', credits: 1_000 },
      });
      const ids: string[] = [];
      for (let i = 0; i < 40; i++) ids.push((await runtime.create({ goal: `task ${i}` })).agent_id);
      for (const id of ids) await runtime.waitFor(id);
      await runtime.close();
      const inspect = <T>(read: (d: Database.Database) => T): T => {
        const d = new Database(db, { readonly: true });
        try {
          return read(d);
        } finally {
          d.close();
        }
      };
      const ledgerRows = () => inspect((d) => d.prepare('SELECT count(*) AS n FROM ledger').get() as { n: number }).n;
      const pages = () => inspect((d) => d.pragma('page_count', { simple: true }) as number);
      const before = { ledger: ledgerRows(), pages: pages() };
      expect(inspect((d) => d.pragma('auto_vacuum', { simple: true }))).toBe(2); // INCREMENTAL from the start

      const env = cliEnv();
      const gc = await runCli(['gc', '--db', db, '--older-than', '0s', '--json'], env);
      expect(gc.code, gc.stderr).toBe(0);
      expect(JSON.parse(gc.stdout)).toMatchObject({ trees: 40, agents: 40, converted_to_incremental_vacuum: false });
      expect(inspect((d) => d.prepare('SELECT count(*) AS n FROM turns').get())).toEqual({ n: 0 });
      expect(inspect((d) => d.prepare('SELECT count(*) AS n FROM messages').get())).toEqual({ n: 0 });
      expect(inspect((d) => d.prepare('SELECT count(*) AS n FROM agents').get())).toEqual({ n: 40 });
      expect(ledgerRows()).toBe(before.ledger);
      expect(pages()).toBeLessThan(before.pages);

      const again = await runCli(['gc', '--db', db, '--older-than', '0s'], env);
      expect(again.stdout).toContain('Forgot the work of 0 finished tree(s)');
      const del = await runCli(['gc', '--db', db, '--older-than', '0s', '--delete-trees'], env);
      expect(del.code, del.stderr).toBe(0);
      expect(del.stdout).toContain('Deleted 40 finished tree(s)');
      expect(inspect((d) => d.prepare('SELECT count(*) AS n FROM agents').get())).toEqual({ n: 0 });
      expect(ledgerRows()).toBe(before.ledger);
      const bad = await runCli(['gc', '--db', db, '--older-than', 'soon'], env);
      expect(bad.code).not.toBe(0);
      expect(bad.stderr).toContain('--older-than');
    } finally {
      tmp.remove();
    }
  });

  it('agentry gc converts a database made before auto_vacuum = INCREMENTAL, once', async () => {
    const tmp = tempDir('agentry-gc-old-');
    try {
      const db = join(tmp.dir, 'old.db');
      const old = new Database(db);
      old.exec('CREATE TABLE t (x)'); // a file whose auto_vacuum was fixed at NONE by its first table
      old.close();
      const gc = await runCli(['gc', '--db', db, '--older-than', '30d', '--json'], cliEnv());
      expect(gc.code, gc.stderr).toBe(0);
      expect(JSON.parse(gc.stdout)).toMatchObject({ converted_to_incremental_vacuum: true, trees: 0 });
      const d = new Database(db, { readonly: true });
      expect(d.pragma('auto_vacuum', { simple: true })).toBe(2);
      d.close();
    } finally {
      tmp.remove();
    }
  });
});
