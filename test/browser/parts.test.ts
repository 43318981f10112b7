/**
 * The browser agent's pure parts, without a browser: the loop detector, the snapshot's size cap helpers, allowed
 * domains, the replay script's shape; and the tool without Chromium (not ready, its calls fail naming what to install).
 */
import { describe, expect, it } from 'vitest';
import type { ModelRequest, ToolResultBlock } from 'agentry-runtime';
import { replayCode, replayScript } from '../../src/browser/replay.js';
import { changedLines, describeRef, mainRegion, pageDigest } from '../../src/browser/snapshot.js';
import { domainAllowed } from '../../src/tools/builtin/browser-agent/child-tools.js';
import { BROWSER_AGENT_TOOL_NAME } from '../../src/tools/builtin/browser-agent/index.js';
import { actionKey, emptyLoopState, observeAction } from '../../src/tools/builtin/browser-agent/loop-detector.js';
import { openTestRuntime } from '../support/runtime.js';

const SNAPSHOT = [
  '- banner [ref=e1]:',
  '  - link "Home" [ref=e2]',
  '- main [ref=e3]:',
  '  - heading "Shop" [level=1] [ref=e4]',
  '  - textbox "Search \\"all\\"" [ref=e5]',
  '  - button "Go" [ref=e6]',
  '- contentinfo [ref=e7]:',
  '  - text: footer',
].join('\n');

describe('loop detector', () => {
  it('ends after the same action three times on an unchanged page', () => {
    let s = emptyLoopState();
    const click = actionKey('browser_click', { ref: 'e5' });
    let r = observeAction(s, actionKey('browser_navigate', { url: 'u' }), '', 'p1');
    expect(r.loop).toBeUndefined();
    for (let i = 1; i <= 3; i++) {
      r = observeAction(r.state, click, 'p1', 'p1');
      expect(Boolean(r.loop)).toBe(i === 3);
    }
    expect(r.loop).toBe('the same action (browser_click [["ref","e5"]]) 3 times on a page that did not change');
    // the same action that changes the page each time is not a loop
    s = emptyLoopState();
    for (let i = 0; i < 10; i++) s = observeAction(s, click, `p${i}`, `p${i + 1}`).state;
    expect(s).toMatchObject({ repeats: 0, still: 0 });
  });

  it('ends after N different actions without the page changing', () => {
    let r = observeAction(emptyLoopState(), 'a0', '', 'p');
    for (let i = 1; i < 4; i++) r = observeAction(r.state, `a${i}`, 'p', 'p', { maxStill: 4 });
    expect(r.loop).toBeUndefined();
    r = observeAction(r.state, 'a4', 'p', 'p', { maxStill: 4 });
    expect(r.loop).toBe('4 actions in a row without the page changing');
  });

  it('keys actions by tool and input, whatever the order of the keys', () => {
    expect(actionKey('t', { a: 1, b: 2 })).toBe(actionKey('t', { b: 2, a: 1 }));
    expect(actionKey('t', { a: 1 })).not.toBe(actionKey('u', { a: 1 }));
  });
});

describe('snapshot helpers', () => {
  it('cuts out the main region, lists what changed, and reads a ref back', async () => {
    expect(mainRegion(SNAPSHOT)).toBe(SNAPSHOT.split('\n').slice(2, 6).join('\n'));
    expect(mainRegion('- heading "x" [ref=e1]')).toBeUndefined();
    const next = SNAPSHOT.replace('button "Go"', 'button "Stop"');
    expect(await changedLines(SNAPSHOT, next)).toBe('…\n  - button "Stop" [ref=e6]\n…');
    expect(describeRef(SNAPSHOT, 'e5')).toEqual({ role: 'textbox', name: 'Search "all"' });
    expect(describeRef(SNAPSHOT, 'e3')).toEqual({ role: 'main' });
    expect(describeRef(SNAPSHOT, 'e99')).toBeUndefined();
  });

  it('does not count a moved focus as a change of the page', () => {
    expect(pageDigest('u', '- button "Go" [active] [ref=e6]')).toBe(pageDigest('u', '- button "Go" [ref=e6]'));
    expect(pageDigest('u', 'a')).not.toBe(pageDigest('v', 'a'));
  });
});

describe('allowed domains', () => {
  it('allows a listed domain and its subdomains, nothing else; no list allows all', () => {
    expect(domainAllowed('example.com', ['example.com'])).toBe(true);
    expect(domainAllowed('shop.example.com', ['example.com'])).toBe(true);
    expect(domainAllowed('badexample.com', ['example.com'])).toBe(false);
    expect(domainAllowed('example.com.evil.test', ['example.com'])).toBe(false);
    expect(domainAllowed('anything.test', undefined)).toBe(true);
  });
});

describe('replay script', () => {
  it('is a plain playwright-core module with the recorded lines', () => {
    const script = replayScript(
      [{ code: replayCode.goto('http://x.test/') }, { code: replayCode.fill('page.getByLabel("Q")', 'a "b"') }],
      { executablePath: '/usr/bin/chromium', task: 'Find\nthings', flags: ['--headless'] },
    );
    expect(script).toContain("import { chromium } from 'playwright-core';");
    expect(script).toContain('// Task: Find things');
    expect(script).toContain('process.env.AGENTRY_CHROMIUM_PATH || "/usr/bin/chromium"');
    expect(script).toContain('  await page.goto("http://x.test/");\n  await page.getByLabel("Q").fill("a \\"b\\"");');
  });
});

describe('spawn_browser_agent without Chromium', () => {
  it('is offered but not ready, and its call fails naming what to install', async () => {
    let result: ToolResultBlock | undefined;
    const t = await openTestRuntime(
      (req: ModelRequest, { turnIndex }) => {
        if (turnIndex === 0) return { toolCalls: [{ name: BROWSER_AGENT_TOOL_NAME, input: { task: 'look' } }] };
        result = (req.messages.at(-1)!.content as ToolResultBlock[])[0];
        return { text: 'ok' };
      },
      {
        builtinTools: { only: [BROWSER_AGENT_TOOL_NAME], browser: { executablePath: '/nonexistent/chromium' } },
      },
    );
    const status = t.runtime.toolStatus().find((s) => s.name === BROWSER_AGENT_TOOL_NAME);
    expect(status).toMatchObject({ ready: false, offered: true });
    expect(status!.detail).toMatch(
      /builtinTools\.browser\.executablePath is \/nonexistent\/chromium.*apt-get install chromium/,
    );
    const { agent_id } = await t.runtime.create({ goal: 'Look' });
    await t.runtime.waitFor(agent_id);
    expect(result).toMatchObject({ is_error: true });
    expect(result!.content).toMatch(/spawn_browser_agent: no browser: .*AGENTRY_CHROMIUM_PATH/);
    await t.runtime.close();
  });
});
