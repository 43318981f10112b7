/**
 * monitor with `render: true`: a page whose price only its script writes is watched through the browser,
 * so the change is seen; the same page watched as served HTML shows nothing but the placeholder, and no change.
 * Needs Chromium; with AGENTRY_CI_STRICT=1 a missing browser fails the suite instead of skipping it.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { browserSkipReason, chromium, runBrowser, strict } from '../browser/support.js';
import { eventually, openTestRuntime } from '../support/runtime.js';
import { MONITOR_ENV, monitorTools, watcherScript } from './monitor-support.js';
import { skippable } from '../support/skip.js';

let price = 59;
let server: http.Server;
let url = '';

beforeAll(async () => {
  server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(`<!doctype html><html><head><title>Lamp</title></head><body><main><h1>Lamp</h1>
      <p class="price">loading…</p>
      <script>document.querySelector('.price').textContent = 'Price: $' + (${price}).toFixed(2);</script>
    </main></body></html>`);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/product`;
});
afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

describe('monitor render: true', () => {
  // Stands in for what the test below needs; a failure under AGENTRY_CI_STRICT=1 when it is missing.
  it.runIf(strict)('Chromium is installed (needed by the render test below)', () => {
    expect(chromium.found, chromium.found ? '' : chromium.reason).toBe(true);
  });

  it.runIf(runBrowser)(
    skippable('sees a price that only the page script writes; the served HTML shows no change', browserSkipReason),
    async () => {
      // The browser is looked up on this PATH (or AGENTRY_CHROMIUM_PATH), read from the tools' environment.
      const t = await openTestRuntime(watcherScript(), {
        builtinTools: { ...monitorTools, env: { ...MONITOR_ENV, PATH: process.env.PATH ?? '' } },
      });
      try {
        const rendered = await t.runtime.create({
          goal: JSON.stringify({ url, selector: '.price', render: true, interval_s: 60 }),
        });
        const served = await t.runtime.create({ goal: JSON.stringify({ url, selector: '.price', interval_s: 60 }) });
        const monitorOf = async (id: string) => (await t.runtime.monitors(id))[0];
        await eventually(
          async () =>
            (await monitorOf(rendered.agent_id)) !== undefined && (await monitorOf(served.agent_id)) !== undefined,
          // The rendered monitor's first check starts Chromium, which may take up to the pool's 60 s launch timeout
          // on a busy two-core machine.
          90_000,
          'both monitors created',
        );
        expect((await monitorOf(rendered.agent_id))!.render).toBe(true);
        const before = (await t.storage.getMonitor((await monitorOf(rendered.agent_id))!.monitor_id))!;
        expect(before.content).toBe('Price: $59.00');
        expect((await t.storage.getMonitor((await monitorOf(served.agent_id))!.monitor_id))!.content).toBe('loading…');

        price = 45;
        t.clock.advance(60_000);
        const checkedAt = new Date(t.clock.now()).toISOString();
        await eventually(
          async () =>
            (await monitorOf(rendered.agent_id))!.last_checked_at === checkedAt &&
            (await monitorOf(served.agent_id))!.last_checked_at === checkedAt,
          30_000,
          'the checks after the price change',
        );
        expect((await monitorOf(rendered.agent_id))!.changes).toBe(1);
        expect((await monitorOf(served.agent_id))!.changes).toBe(0);
        await eventually(
          async () => (await t.runtime.get(rendered.agent_id)).messages.some((m) => m.text.includes('$45.00')),
          10_000,
          'the change reported to the agent',
        );
      } finally {
        await t.runtime.close();
      }
    },
    150_000,
  );
});
