/**
 * The examples a newcomer runs: the embedded example, the web research example and `npm run demo`, as programs, to
 * COMPLETED.
 * (The HTTP examples are run by test/http/examples.test.ts.)
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const root = join(import.meta.dirname, '..');
const tsx = (file: string) =>
  run(process.execPath, ['--import', 'tsx', file], { cwd: root, env: { ...process.env, ANTHROPIC_API_KEY: '' } });

describe('examples', () => {
  it('examples/embedded.ts runs a scripted agent with a custom tool to COMPLETED and prints its transcript and spend', async () => {
    const { stdout } = await tsx('examples/embedded.ts');
    expect(stdout).toContain('status: COMPLETED');
    expect(stdout).toContain('[USER] How much bigger is Paris than Lyon?');
    expect(stdout).toMatch(/\[ASSISTANT\] Paris \(2,102,650\)/);
    expect(stdout).toMatch(/1\.365 credits spent/);
  });

  it('examples/research.ts runs deep_research and find_all on the local corpus and keeps only checked citations', async () => {
    const { stdout } = await tsx('examples/research.ts');
    expect(stdout).toContain('# Research the Marrow Lighthouse — COMPLETED');
    expect(stdout).toContain(
      'report: The Marrow Lighthouse was first lit in 1889 [1] and its tower is 41 metres tall [2]. It is haunted.',
    );
    expect(stdout).toContain('dropped citations: 1, sources read: 1');
    expect(stdout).toContain('# Find the cooperatives of Veloran — COMPLETED');
    expect(stdout).toMatch(
      /Tessel Kelpworks — "Tessel Kelpworks was founded in"\n {2}Quillon Glass — .*\n {2}Penhallow Weather Bureau — /,
    );
    expect(stdout).toContain('candidates considered: 4, dropped: 0');
  });

  it('examples/web-research.ts searches, reads the top result with read_page and answers quoting it, offline', async () => {
    const { stdout } = await tsx('examples/web-research.ts');
    expect(stdout).toMatch(/web_search +ready +provider searxng/);
    expect(stdout).toMatch(/read_page +ready/);
    expect(stdout).toContain('[USER] How do durable agent runtimes survive a restart?');
    expect(stdout).toMatch(/\[ASSISTANT\] → web_search \{"query":"How do durable agent runtimes survive a restart\?"/);
    expect(stdout).toMatch(/\[ASSISTANT\] → read_page \{"url":"http:\/\/127\.0\.0\.1:\d+\/articles\/durable-agents"/);
    expect(stdout).toMatch(
      /\[ASSISTANT\] According to "Durable agents: checkpoint every step" \(http:\/\/127\.0\.0\.1:\d+\/articles\/durable-agents\): "A durable agent runtime commits every step/,
    );
    expect(stdout).toMatch(/pages read:\n {2}http:\/\/127\.0\.0\.1:\d+\/articles\/durable-agents {2}"Durable agents/);
    expect(stdout).toContain('status: COMPLETED');
    expect(stdout).toContain('1.24 credits spent');
  });

  it('npm run demo (examples/demo.ts) plans, fans out to sub-agents and ends COMPLETED, offline', async () => {
    const { stdout } = await tsx('examples/demo.ts');
    expect(stdout).toContain('scripted stand-in for Claude');
    expect(stdout).toContain('Waiting for 5 of 5 sub-agents');
    expect(stdout).toMatch(/COMPLETED · 5 sub-agents \(5 completed\)/);
    expect(stdout).toContain('1. Paris: 19,949 people per km²');
  });
});
