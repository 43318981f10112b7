/**
 * Shared pieces of the browser suites: whether Chromium is here (AGENTRY_CI_STRICT=1 makes its absence a failure,
 * not a skip), a small shop site served on 127.0.0.1, a second server on 127.0.0.2 standing for a private host, and
 * a /proc scan that counts the Chromium processes a pool started.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { findChromium } from '../../src/browser/chromium-path.js';

export const chromium = findChromium();
export const strict = process.env.AGENTRY_CI_STRICT === '1';
/** Run the browser suites: Chromium found, or strict mode (where they must fail without it). */
export const runBrowser = chromium.found || strict;
/** Why the browser suites are skipped, for their names (see test/support/skip.ts); null when they run. */
export const browserSkipReason: string | null = !runBrowser && !chromium.found ? chromium.reason : null;

export interface Site {
  /** http://127.0.0.1:<port> */
  base: string;
  /** http://127.0.0.2:<port>: the "private" host */
  other: string;
  otherPort: number;
  /** Paths requested of the 127.0.0.2 server. */
  otherHits: string[];
  close(): Promise<void>;
}

const page = (title: string, body: string) =>
  `<!doctype html><html><head><title>${title}</title></head><body>${body}</body></html>`;

const ITEMS = [
  { id: 41, name: 'Brass lamp', code: 'BL-1093' },
  { id: 42, name: 'Brass kettle', code: 'ZX-4417' },
  { id: 43, name: 'Copper pan', code: 'CP-2201' },
];

function listen(server: http.Server, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, () => resolve((server.address() as AddressInfo).port));
  });
}

/** The shop on 127.0.0.1 and the private host on 127.0.0.2. */
export async function startSite(): Promise<Site> {
  const otherHits: string[] = [];
  let otherBase = '';
  const shop = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const html = (status: number, body: string) => {
      res.writeHead(status, { 'content-type': 'text/html; charset=utf-8' });
      res.end(body);
    };
    if (url.pathname === '/') {
      return html(
        200,
        page(
          'Shop',
          `<main><h1>Shop</h1><form action="/search"><label>Search <input name="q"></label>
           <select name="sort" aria-label="Sort"><option value="name">Name</option><option value="price">Price</option></select>
           <button type="submit">Search</button></form></main>`,
        ),
      );
    }
    if (url.pathname === '/search') {
      const q = (url.searchParams.get('q') ?? '').toLowerCase();
      const hits = ITEMS.filter((i) => i.name.toLowerCase().includes(q));
      const sort = url.searchParams.get('sort') ?? 'name';
      return html(
        200,
        page(
          `Results for ${q}`,
          `<main><h1>Results (${sort})</h1><ul>${hits.map((i) => `<li><a href="/item/${i.id}">${i.name}</a></li>`).join('')}</ul></main>`,
        ),
      );
    }
    const item = /^\/item\/(\d+)$/.exec(url.pathname);
    if (item) {
      // The code is not in the HTML: the page's script fetches it and writes it in, so only a browser sees it.
      return html(
        200,
        page(
          'Item',
          `<main><h1 id="name">Loading…</h1><p id="code"></p></main><script>
           fetch('/api/item/${item[1]}').then(r => r.json()).then(i => {
             document.getElementById('name').textContent = i.name;
             document.getElementById('code').textContent = 'Product code: ' + i.code;
           });</script>`,
        ),
      );
    }
    const api = /^\/api\/item\/(\d+)$/.exec(url.pathname);
    if (api) {
      const found = ITEMS.find((i) => i.id === Number(api[1]));
      res.writeHead(found ? 200 : 404, { 'content-type': 'application/json' });
      return res.end(JSON.stringify(found ?? null));
    }
    if (url.pathname === '/stuck') {
      return html(200, page('Stuck', `<main><h1>Nothing happens</h1><button onclick="void 0">Next</button></main>`));
    }
    // Network rules: a page that pulls from the private host in each way a page can.
    if (url.pathname === '/image') {
      return html(
        200,
        page(
          'Image',
          `<img src="${otherBase}/pixel.gif" onload="document.title='img loaded'" onerror="document.title='img failed'">`,
        ),
      );
    }
    if (url.pathname === '/fetch') {
      return html(
        200,
        page(
          'Fetch',
          `<script>fetch('${otherBase}/data').then(r => r.text()).then(t => { document.title = 'fetch ' + t; },
             e => { document.title = 'fetch failed'; });</script>`,
        ),
      );
    }
    if (url.pathname === '/websocket') {
      return html(
        200,
        page(
          'WebSocket',
          `<script>const ws = new WebSocket('${otherBase.replace('http', 'ws')}/socket');
             ws.onmessage = (e) => { document.title = 'ws ' + e.data; };
             ws.onerror = () => { document.title = 'ws failed'; };</script>`,
        ),
      );
    }
    if (url.pathname === '/to-shop-name') {
      // The same shop under another name (tests map shop.test to 127.0.0.1): allowed by the address rules, but
      // outside allowed_domains of ['127.0.0.1'].
      res.writeHead(302, { location: `http://shop.test:${new URL(`http://${req.headers.host}`).port}/` });
      return res.end();
    }
    if (url.pathname === '/redirect') {
      res.writeHead(302, { location: `${otherBase}/secret` });
      return res.end();
    }
    html(404, page('Not found', '<p>Not found</p>'));
  });
  const other = http.createServer((req, res) => {
    otherHits.push(req.url ?? '');
    res.setHeader('access-control-allow-origin', '*');
    if (req.url === '/pixel.gif') {
      res.writeHead(200, { 'content-type': 'image/gif' });
      return res.end(Buffer.from('R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7', 'base64'));
    }
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end(req.url === '/data' ? 'secret-data' : page('Secret', '<h1>Private host</h1>'));
  });
  // A WebSocket endpoint in a few lines (RFC 6455 handshake, then one text frame): no library needed for a hello.
  const upgraded = new Set<Duplex>();
  other.on('upgrade', (req, socket) => {
    otherHits.push(req.url ?? '');
    upgraded.add(socket);
    const accept = createHash('sha1')
      .update(`${req.headers['sec-websocket-key']}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`)
      .digest('base64');
    socket.write(
      `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`,
    );
    const text = Buffer.from('hello');
    socket.write(Buffer.concat([Buffer.from([0x81, text.length]), text]));
    socket.on('error', () => {});
  });
  const port = await listen(shop, '127.0.0.1');
  const otherPort = await listen(other, '127.0.0.2');
  otherBase = `http://127.0.0.2:${otherPort}`;
  return {
    base: `http://127.0.0.1:${port}`,
    other: otherBase,
    otherPort,
    otherHits,
    async close() {
      shop.closeAllConnections();
      other.closeAllConnections();
      for (const socket of upgraded) socket.destroy(); // upgraded sockets leave the server's books
      await Promise.all([
        new Promise((r) => shop.close(() => r(undefined))),
        new Promise((r) => other.close(() => r(undefined))),
      ]);
    },
  };
}

/** What marks the processes of one pool's browser: its temp HOME, and the profile dir Playwright gave it. */
export interface BrowserMarkers {
  home: string;
  profileDirs: string[];
}

function cmdlineOf(pid: string): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'latin1').replace(/\0/g, ' ');
  } catch {
    return '';
  }
}

/**
 * The markers of a running pool's browser (read while it runs): the main process carries HOME=<home> in its
 * environment; its zygote-forked children (renderers, GPU, utilities) do not, but all carry its --user-data-dir.
 */
export function browserMarkers(home: string): BrowserMarkers {
  const profileDirs = new Set<string>();
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      if (!readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0').includes(`HOME=${home}`)) continue;
    } catch {
      continue;
    }
    const dir = /--user-data-dir=(\S+)/.exec(cmdlineOf(pid))?.[1];
    if (dir) profileDirs.add(dir);
  }
  return { home, profileDirs: [...profileDirs] };
}

/** Processes of the browser the markers describe, alive now (or left behind). */
export function browserProcesses(markers: BrowserMarkers): number[] {
  const pids: number[] = [];
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    const cmd = cmdlineOf(pid);
    let ours = markers.profileDirs.some((dir) => cmd.includes(`--user-data-dir=${dir}`));
    if (!ours) {
      try {
        ours = readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0').includes(`HOME=${markers.home}`);
      } catch {
        // gone, or not ours
      }
    }
    if (ours) pids.push(Number(pid));
  }
  return pids;
}
