/**
 * @module browser/browser-pool
 * One Chromium process per runtime, started on the first browser call, and a fresh context (its own cookies, storage
 * and guard proxy) per browser agent, keyed by the child agent's id. At most `maxContexts` contexts are open at once
 * (the browser lane): a child that asks for one while the lane is full waits its turn. A context is closed when its
 * agent is paused, finishes or is deleted; the browser is closed when no context has been open for `idleMs`, and on
 * shutdown. A browser that crashed is noticed (`disconnected`) and started again on the next call.
 *
 * playwright-core is an optional peer: it is imported on the first launch, and its absence is a `not_configured` error
 * naming the package. The browser is the operator's Chromium (see `chromium-path.ts`); nothing is ever downloaded.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { AgentryError } from '../errors.js';
import type { AllowList } from '../web/address-policy.js';
import { CHROMIUM_INSTALL_HINT, findChromium } from './chromium-path.js';
import type { BlockedRequest, BrowserLookup, NetworkGuard } from './network-rules.js';

/**
 * Flags every launch uses. Headless without a GPU; no background traffic of Chromium's own (component updates, sync,
 * safe-browsing lists, first-run pings), which would leave the guard's view; no QUIC, whose UDP would not pass the
 * HTTP proxy; WebRTC limited to proxied connections, so it cannot send UDP to private addresses either. `--no-sandbox`:
 * the runtime often runs as root or in a container, where Chromium's own sandbox cannot start.
 */
export const CHROMIUM_FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
  '--disable-quic',
  '--force-webrtc-ip-handling-policy=disable_non_proxied_udp',
  '--disable-dev-shm-usage',
];

/** Removing a browser's HOME races with its helper processes still writing there as they exit: retried. */
const RM_HOME = { recursive: true, force: true, maxRetries: 5, retryDelay: 100 } as const;

export const PLAYWRIGHT_INSTALL_HINT =
  'install the optional peer dependency playwright-core (npm install playwright-core)';

/** Options of {@link BrowserPool}. */
export interface BrowserPoolOptions {
  /** The allow list of the guarded fetch: private addresses the pages may reach. */
  allow: AllowList;
  /** Name resolution of the guard proxy. @default dns.promises.lookup */
  lookup?: BrowserLookup;
  /** The browser executable. @default `AGENTRY_CHROMIUM_PATH`, then chromium / chromium-browser / google-chrome on PATH */
  executablePath?: string;
  /** Where `AGENTRY_CHROMIUM_PATH` and `PATH` are read. @default process.env */
  env?: NodeJS.ProcessEnv;
  /** The browser is closed after this long without any open context. @default 30_000 */
  idleMs?: number;
  /** Contexts open at once (the browser lane). @default 4 */
  maxContexts?: number;
  /**
   * How long Chromium may take to start. A cold start on a busy two-core machine (a test suite, a build beside it)
   * was seen past 30 s, Playwright's default; a start that takes longer than this fails the call, naming the browser.
   * @default 60_000
   */
  launchTimeoutMs?: number;
  /** Loads playwright-core (tests pass one that fails). @default `import('playwright-core')` */
  loadPlaywright?: () => Promise<{ chromium: { launch: (options: object) => Promise<Browser> } }>;
}

/** A browser agent's context, its one page and its guard. */
export interface BrowserSession {
  key: string;
  context: BrowserContext;
  page: Page;
  guard: NetworkGuard;
  /** Refusals of the guard since the last {@link takeBlocked} (navigation reports read them). */
  blocked: BlockedRequest[];
  /** The last snapshot taken (its full text): a large page is shown as what changed since it. */
  lastSnapshot?: { url: string; full: string };
}

/** Takes the refusals recorded since the last call. */
export function takeBlocked(session: BrowserSession): BlockedRequest[] {
  return session.blocked.splice(0, session.blocked.length);
}

interface Waiter {
  resolve(): void;
  reject(error: unknown): void;
}

/**
 * The pool. Safe to use from many tool calls at once; `open()` for a key that has a session returns it.
 *
 * @example
 * const pool = new BrowserPool({ allow: parseAllowList(['127.0.0.1/32']) });
 * const session = await pool.open(childAgentId);
 * await session.page.goto('http://127.0.0.1:8080/');
 * await pool.release(childAgentId);
 * await pool.close();
 */
export class BrowserPool {
  private browser: Promise<Browser> | undefined;
  private readonly sessions = new Map<string, Promise<BrowserSession>>();
  private readonly waiting: Waiter[] = [];
  private held = 0;
  private idleTimer: NodeJS.Timeout | undefined;
  private closed = false;
  /** HOMEs of browsers that died: removed again on close (their helpers may write after the first removal). */
  private readonly crashedHomes = new Set<string>();
  /** The launched browser's HOME (a temp dir): tests find the browser's processes by it. */
  home: string | undefined;
  /** Counters for tests and the bench. */
  readonly stats = { launches: 0, contextsOpened: 0, peakContexts: 0 };

  constructor(private readonly options: BrowserPoolOptions) {}

  private get maxContexts(): number {
    return this.options.maxContexts ?? 4;
  }

  /** Ready or not, and why (for `agentry tools`), without starting anything. */
  readiness(): { ready: boolean; detail: string } {
    const where = findChromium(this.location());
    if (!where.found) return { ready: false, detail: `no browser: ${where.reason}` };
    return {
      ready: true,
      detail: `Chromium at ${where.path} (from ${where.source}) driven by playwright-core, ${this.maxContexts} contexts at once`,
    };
  }

  private location(): { executablePath?: string; env?: NodeJS.ProcessEnv } {
    return {
      ...(this.options.executablePath !== undefined ? { executablePath: this.options.executablePath } : {}),
      ...(this.options.env !== undefined ? { env: this.options.env } : {}),
    };
  }

  /** The session of `key` if one is open (no waiting, no launch). */
  async current(key: string): Promise<BrowserSession | undefined> {
    return this.sessions.get(key)?.catch(() => undefined);
  }

  /**
   * The session of `key`, opened if needed: waits for a free context slot (aborted by `signal`), launches the browser
   * if it is not running, and gives the context a guard proxy of its own.
   */
  async open(key: string, signal?: AbortSignal): Promise<BrowserSession> {
    if (this.closed) throw new AgentryError('invalid_state', 'The browser pool is closed');
    const existing = this.sessions.get(key);
    if (existing) return existing;
    const made = this.openSession(key, signal);
    this.sessions.set(key, made);
    made.catch(() => {
      if (this.sessions.get(key) === made) this.sessions.delete(key);
    });
    return made;
  }

  private async openSession(key: string, signal?: AbortSignal): Promise<BrowserSession> {
    await this.acquire(signal);
    let guard: NetworkGuard | undefined;
    try {
      const browser = await this.launched();
      // Loaded with the first context (node:http and the proxy), not when agentry is imported.
      const { startNetworkGuard } = await import('./network-rules.js');
      // The session's list of refusals is filled once the session exists; nothing is refused before its first page.
      let record: (blocked: BlockedRequest) => void = () => {};
      guard = await startNetworkGuard({
        allow: this.options.allow,
        ...(this.options.lookup ? { lookup: this.options.lookup } : {}),
        onBlocked: (blocked) => record(blocked),
      });
      // `bypass: ''` keeps Playwright's `<-loopback>`: loopback requests go through the guard too.
      const context = await browser.newContext({
        proxy: { server: guard.server, bypass: '' },
        serviceWorkers: 'block',
        acceptDownloads: false,
        viewport: { width: 1280, height: 800 },
      });
      this.stats.contextsOpened++;
      const page = await context.newPage();
      const session: BrowserSession = { key, context, page, guard, blocked: [] };
      // A link with target=_blank opens a new page: the agent goes on in it, as a person would.
      context.on('page', (opened) => {
        session.page = opened;
      });
      record = (blocked) => {
        session.blocked.push(blocked);
        if (session.blocked.length > 100) session.blocked.shift();
      };
      context.once('close', () => {
        if (this.sessions.get(key) !== undefined) void this.release(key);
      });
      if (signal?.aborted) {
        await context.close().catch(() => {});
        throw signal.reason;
      }
      return session;
    } catch (error) {
      await guard?.close();
      this.releaseSlot();
      throw error;
    }
  }

  /** Closes the session of `key` (pause, finish, delete) and frees its slot. Harmless when there is none. */
  async release(key: string): Promise<void> {
    const made = this.sessions.get(key);
    if (!made) return;
    this.sessions.delete(key);
    const session = await made.catch(() => undefined);
    if (!session) return; // its open failed and freed the slot itself
    await session.context.close().catch(() => {});
    await session.guard.close();
    this.releaseSlot();
  }

  /** True when `key` has an open (or opening) session. */
  has(key: string): boolean {
    return this.sessions.has(key);
  }

  /** Keys with an open (or opening) session. */
  keys(): string[] {
    return [...this.sessions.keys()];
  }

  private async acquire(signal?: AbortSignal): Promise<void> {
    this.clearIdle();
    if (this.held < this.maxContexts && this.waiting.length === 0) {
      this.held++;
      this.stats.peakContexts = Math.max(this.stats.peakContexts, this.held);
      return;
    }
    signal?.throwIfAborted();
    await new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        resolve: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
        reject,
      };
      const onAbort = () => {
        const i = this.waiting.indexOf(waiter);
        if (i >= 0) this.waiting.splice(i, 1);
        reject(signal!.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(waiter);
    });
  }

  private releaseSlot(): void {
    const next = this.waiting.shift();
    if (next) {
      next.resolve(); // the slot passes on
      return;
    }
    this.held--;
    if (this.held === 0) this.scheduleIdle();
  }

  private scheduleIdle(): void {
    this.clearIdle();
    if (!this.browser) return;
    this.idleTimer = setTimeout(() => void this.closeBrowser(), this.options.idleMs ?? 30_000);
    this.idleTimer.unref();
  }

  private clearIdle(): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
  }

  private async closeBrowser(): Promise<void> {
    // Taken before any await: a launch that starts meanwhile has a browser and a HOME of its own.
    const browser = this.browser;
    const home = this.home;
    this.browser = undefined;
    this.home = undefined;
    const b = await browser?.catch(() => undefined);
    await b?.close().catch(() => {});
    if (home) {
      await rm(home, RM_HOME).catch(() => {});
      // Helpers that outlive the browser by a moment (crash reporter) may create it again: once more, later.
      setTimeout(() => void rm(home, RM_HOME).catch(() => {}), 2_000).unref();
    }
  }

  /** The running browser, launched (again) when there is none or it crashed. */
  private launched(): Promise<Browser> {
    this.browser ??= this.launch().catch((error: unknown) => {
      this.browser = undefined;
      throw error;
    });
    return this.browser;
  }

  private async launch(): Promise<Browser> {
    const where = findChromium(this.location());
    if (!where.found) throw new AgentryError('not_configured', `spawn_browser_agent needs a browser: ${where.reason}`);
    let playwright: Awaited<ReturnType<NonNullable<BrowserPoolOptions['loadPlaywright']>>>;
    try {
      playwright = await (this.options.loadPlaywright ?? (() => import('playwright-core')))();
    } catch (cause) {
      throw new AgentryError(
        'not_configured',
        `spawn_browser_agent needs playwright-core: ${PLAYWRIGHT_INSTALL_HINT}`,
        {
          cause,
        },
      );
    }
    // A HOME of its own: Chromium writes caches and crash dumps there, never into the operator's home. Playwright's
    // launch() gives it a fresh empty --user-data-dir (a temp profile it removes on close).
    const home = await mkdtemp(join(tmpdir(), 'agentry-browser-'));
    const env = this.options.env ?? process.env;
    let browser: Browser;
    try {
      browser = await playwright.chromium.launch({
        executablePath: where.path,
        headless: true,
        args: CHROMIUM_FLAGS,
        // Only what Chromium needs: no API keys of the runtime's environment reach the browser.
        env: { PATH: env['PATH'] ?? '/usr/bin:/bin', HOME: home, LANG: 'C.UTF-8', TMPDIR: home },
        handleSIGINT: false,
        handleSIGTERM: false,
        handleSIGHUP: false,
        timeout: this.options.launchTimeoutMs ?? 60_000,
      });
    } catch (cause) {
      await rm(home, RM_HOME).catch(() => {});
      throw new AgentryError(
        'not_configured',
        `Chromium at ${where.path} did not start: ${(cause as Error).message.split('\n')[0]} (${CHROMIUM_INSTALL_HINT})`,
        { cause },
      );
    }
    this.home = home;
    this.stats.launches++;
    browser.once('disconnected', () => {
      // A crash (or our own close): the next call launches a new one; sessions of the dead browser are gone.
      void this.browser?.then((b) => {
        if (b === browser) this.browser = undefined;
      });
      for (const key of [...this.sessions.keys()]) void this.release(key);
      void rm(home, RM_HOME).catch(() => {});
      // After a crash, the dying helper processes (crash reporter, zygote) may still write into HOME for a moment.
      this.crashedHomes.add(home);
      setTimeout(() => void rm(home, RM_HOME).catch(() => {}), 5_000).unref();
    });
    return browser;
  }

  /** Closes every context and the browser; later `open()` calls fail. */
  async close(): Promise<void> {
    this.closed = true;
    this.clearIdle();
    for (const w of this.waiting.splice(0)) w.reject(new AgentryError('invalid_state', 'The browser pool is closed'));
    await Promise.all([...this.sessions.keys()].map((key) => this.release(key)));
    await this.closeBrowser();
    await Promise.all([...this.crashedHomes].map((home) => rm(home, RM_HOME).catch(() => {})));
  }
}
