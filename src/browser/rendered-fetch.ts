/**
 * @module browser/rendered-fetch
 * A fetch-shaped reader of a page as the browser renders it: the HTML after its scripts ran, as a `Response`. The
 * monitor tool checks a page with `render: true` through it, so a price a script writes in is watched like any text.
 * Each read opens a context of its own in the runtime's browser pool (the same address rules as every page: its
 * requests go through the context's checking proxy) and closes it when done.
 */
import { randomUUID } from 'node:crypto';
import type { BrowserPool } from './browser-pool.js';

/** Longest a rendered read may take, navigation and scripts included. */
const RENDER_TIMEOUT_MS = 30_000;

/**
 * Returns a function that answers `url` with the rendered HTML (`text/html`), or the page's HTTP status when it is not
 * 2xx. Request headers (conditional requests) do not apply: a browser read always renders the page.
 *
 * @example
 * const render = renderedFetch(pool);
 * const html = await (await render('https://shop.example/lamp', {})).text();
 */
export function renderedFetch(
  pool: BrowserPool,
): (url: string, init: { signal?: AbortSignal | null | undefined }) => Promise<Response> {
  return async (url, init) => {
    const key = `render:${randomUUID()}`;
    const session = await pool.open(key, init.signal ?? undefined);
    try {
      const response = await session.page.goto(url, { waitUntil: 'networkidle', timeout: RENDER_TIMEOUT_MS });
      if (!response) throw new Error(`the browser got no response for ${url}`);
      if (!response.ok()) return new Response(null, { status: response.status() });
      const html = await session.page.content();
      return new Response(html, { headers: { 'content-type': 'text/html; charset=utf-8' } });
    } finally {
      await pool.release(key);
    }
  };
}
