/**
 * @module browser/replay
 * A browser agent's run as a plain playwright-core script that does the same again without a model: each action the
 * child took is kept as the Playwright line that repeats it, with the element it acted on written as a locator that
 * does not depend on the run's refs (`getByRole(role, { name, exact: true })`, `.nth(i)` when several match, else a
 * CSS path), the way Playwright MCP's `response.addCode()` keeps them. The script launches the same kind of browser
 * (`AGENTRY_CHROMIUM_PATH` or the path the run used), runs the lines, and prints `{"final_url": …}`.
 *
 * Note that the script talks to the network directly, without the guard proxy: it is for a person re-running a flow
 * they have read, not for agents.
 */
import type { Locator, Page } from 'playwright-core';
import { describeRef } from './snapshot.js';

/** One step of a replay: a line of Playwright code (with `page` in scope). */
export interface ReplayStep {
  code: string;
}

const q = (s: string) => JSON.stringify(s);

/**
 * A locator expression (as code) for the element `ref` of the last snapshot, found again by role and name; when the
 * snapshot gives no name, a CSS path computed in the page.
 */
export async function replayLocator(page: Page, full: string, ref: string, target: Locator): Promise<string> {
  const described = describeRef(full, ref);
  if (described?.name) {
    const expr = `page.getByRole(${q(described.role)}, { name: ${q(described.name)}, exact: true })`;
    const candidates = page.getByRole(described.role as Parameters<Page['getByRole']>[0], {
      name: described.name,
      exact: true,
    });
    const count = await candidates.count().catch(() => 0);
    if (count === 1) return expr;
    const handle = await target.elementHandle({ timeout: 2_000 }).catch(() => null);
    if (handle && count > 1) {
      for (let i = 0; i < count; i++) {
        const same = await candidates
          .nth(i)
          .evaluate((el, t) => el === t, handle)
          .catch(() => false);
        if (same) return `${expr}.nth(${i})`;
      }
    }
  }
  const css = await target
    .evaluate((el: Element) => {
      const parts: string[] = [];
      let node: Element | null = el;
      while (node && node.nodeType === 1 && node !== document.documentElement) {
        const current: Element = node;
        if (current.id && /^[A-Za-z][\w-]*$/.test(current.id)) {
          parts.unshift(`#${current.id}`);
          break;
        }
        const tag = current.tagName.toLowerCase();
        const parent: Element | null = current.parentElement;
        const same = parent ? Array.from(parent.children).filter((c) => c.tagName === current.tagName) : [];
        parts.unshift(same.length > 1 ? `${tag}:nth-of-type(${same.indexOf(current) + 1})` : tag);
        node = parent;
      }
      return parts.join(' > ');
    })
    .catch(() => undefined);
  return css ? `page.locator(${q(css)})` : `page.locator(${q(`aria-ref=${ref}`)})`;
}

/** Code for the actions of `child-tools.ts`, so that the script and the run say the same thing. */
export const replayCode = {
  goto: (url: string) => `await page.goto(${q(url)});`,
  back: () => 'await page.goBack();',
  click: (locator: string) => `await ${locator}.click();`,
  fill: (locator: string, text: string) => `await ${locator}.fill(${q(text)});`,
  submit: (locator: string) => `await ${locator}.press('Enter');`,
  select: (locator: string, values: string[]) => `await ${locator}.selectOption(${JSON.stringify(values)});`,
  press: (key: string) => `await page.keyboard.press(${q(key)});`,
  waitText: (text: string) => `await page.getByText(${q(text)}).first().waitFor();`,
  waitTime: (seconds: number) => `await page.waitForTimeout(${Math.round(seconds * 1000)});`,
};

/**
 * The whole script (an ES module for node, importing playwright-core).
 *
 * @example
 * const script = replayScript([{ code: replayCode.goto('https://example.com/') }], { executablePath: '/usr/bin/chromium' });
 * // node --input-type=module < script   (in a directory where playwright-core resolves)
 */
export function replayScript(
  steps: readonly ReplayStep[],
  options: { executablePath: string; task?: string; flags?: readonly string[] },
): string {
  const header = [
    '// Replay of a spawn_browser_agent run, written by agentry. Runs without a model:',
    '//   npm install playwright-core && node replay.mjs',
    ...(options.task ? [`// Task: ${options.task.replace(/\s+/g, ' ').slice(0, 300)}`] : []),
  ];
  return [
    ...header,
    "import { chromium } from 'playwright-core';",
    '',
    `const executablePath = process.env.AGENTRY_CHROMIUM_PATH || ${q(options.executablePath)};`,
    `const browser = await chromium.launch({ executablePath, headless: true, args: ${JSON.stringify(options.flags ?? [])} });`,
    'try {',
    '  const page = await (await browser.newContext()).newPage();',
    '  page.setDefaultTimeout(15000);',
    ...steps.map((s) => `  ${s.code}`),
    "  await page.waitForLoadState('load');",
    '  console.log(JSON.stringify({ final_url: page.url(), title: await page.title() }));',
    '} finally {',
    '  await browser.close();',
    '}',
    '',
  ].join('\n');
}
