/**
 * @module testing/fake-anthropic-cache
 * Prompt caching as the Messages API does it, for the fake server: `cache_control` breakpoints (at most four, or the
 * top-level one on the last block), a hit at a breakpoint or up to 20 blocks before it, a minimum cacheable length, an
 * entry readable only once the response of the call that wrote it has started, and a 5-minute TTL refreshed by each
 * read, on a clock the test controls. It reports `input_tokens`, `cache_creation_input_tokens` and
 * `cache_read_input_tokens` as the API bills them, and records every write so a test can count them.
 *
 * Tokens are counted as the fake counts them elsewhere: 4 characters of JSON a token.
 *
 * @example
 * const cache = fakePromptCache({ now: clock.now });
 * const fake = await startFakeAnthropic({ promptCache: cache });
 * // … cache.writes.filter((w) => w.region === 'prefix').length
 */
import { createHash } from 'node:crypto';

/** How many blocks before a breakpoint the API looks for an earlier entry. */
export const CACHE_LOOKBACK_BLOCKS = 20;
/** At most this many `cache_control` markers in one request (a 400 beyond). */
export const MAX_FAKE_BREAKPOINTS = 4;

/** One cache entry written. */
export interface FakeCacheWrite {
  model: string;
  /** Where its breakpoint was: in the tools and system prompt, or in the messages. */
  region: 'prefix' | 'messages';
  /** The prefix's tokens. */
  tokens: number;
  /** The prefix's hash (equal for equal prefixes). */
  key: string;
  at: number;
}

/** What one request is billed, and how to publish its writes once its response starts. */
export interface FakeCacheLookup {
  usage: { input_tokens: number; cache_creation_input_tokens: number; cache_read_input_tokens: number };
  /** Publishes the entries this request writes; call when its response is sent. */
  commit(): void;
}

export interface FakePromptCacheOptions {
  /** Milliseconds; the TTL runs on it. @default Date.now */
  now?: () => number;
  /** @default 5 minutes */
  ttlMs?: number;
  /**
   * Minimum cacheable tokens for a model.
   * @default 1024 for every model (the floor of most current models)
   */
  minTokens?: (model: string) => number;
}

export interface FakePromptCache {
  /** Every entry written, in order. */
  readonly writes: FakeCacheWrite[];
  /**
   * Bills a request: throws a message for a 400 (too many breakpoints). `commit()` publishes its writes.
   */
  lookup(body: {
    model: string;
    system?: unknown;
    tools?: unknown[];
    messages: unknown[];
    cache_control?: unknown;
  }): FakeCacheLookup;
  /** Drops every entry. */
  clear(): void;
}

interface Position {
  /** Tokens of the prompt up to and including this block. */
  tokens: number;
  key: string;
  breakpoint: boolean;
  region: 'prefix' | 'messages';
}

/**
 * A fresh simulated cache (entries are per fake server; the API's are per organisation).
 *
 * @example
 * const cache = fakePromptCache({ now: () => clock.now(), minTokens: () => 1024 });
 */
export function fakePromptCache(options: FakePromptCacheOptions = {}): FakePromptCache {
  const now = options.now ?? Date.now;
  const ttlMs = options.ttlMs ?? 5 * 60 * 1000;
  const minTokens = options.minTokens ?? (() => 1024);
  /** key -> expiry (ms). */
  const entries = new Map<string, number>();
  const writes: FakeCacheWrite[] = [];

  return {
    writes,
    clear() {
      entries.clear();
    },
    lookup(body) {
      const positions = positionsOf(body);
      const total = positions.length === 0 ? 1 : Math.max(1, positions[positions.length - 1]!.tokens);
      const breakpoints = positions.flatMap((p, i) => (p.breakpoint ? [i] : []));
      if (breakpoints.length > MAX_FAKE_BREAKPOINTS) {
        throw new Error(
          `A maximum of ${MAX_FAKE_BREAKPOINTS} blocks with cache_control may be provided. Found ${breakpoints.length}.`,
        );
      }
      const at = now();
      const alive = (key: string): boolean => {
        const expiry = entries.get(key);
        if (expiry === undefined) return false;
        if (expiry <= at) {
          entries.delete(key);
          return false;
        }
        return true;
      };
      // The longest hit at any breakpoint or up to 20 blocks before one.
      let hit = -1;
      for (const b of breakpoints) {
        for (let j = b; j >= Math.max(0, b - CACHE_LOOKBACK_BLOCKS); j--) {
          if (j <= hit) break;
          if (alive(positions[j]!.key)) {
            hit = j;
            break;
          }
        }
      }
      const read = hit >= 0 ? positions[hit]!.tokens : 0;
      const min = minTokens(body.model);
      const writable = breakpoints.filter((b) => b > hit && positions[b]!.tokens >= min);
      const lastWrite = writable.length > 0 ? writable[writable.length - 1]! : -1;
      const created = lastWrite >= 0 ? positions[lastWrite]!.tokens - read : 0;
      const usage = {
        cache_read_input_tokens: read,
        cache_creation_input_tokens: created,
        input_tokens: Math.max(0, total - read - created),
      };
      return {
        usage,
        commit() {
          const t = now();
          if (hit >= 0) entries.set(positions[hit]!.key, t + ttlMs);
          for (const b of writable) {
            const p = positions[b]!;
            entries.set(p.key, t + ttlMs);
            writes.push({ model: body.model, region: p.region, tokens: p.tokens, key: p.key, at: t });
          }
        },
      };
    },
  };
}

/** The request's blocks in the order the API caches them: tools, system, messages; each with its running size. */
function positionsOf(body: {
  model: string;
  system?: unknown;
  tools?: unknown[];
  messages: unknown[];
  cache_control?: unknown;
}): Position[] {
  const positions: Position[] = [];
  let chars = 0;
  let hash = createHash('sha256').update(body.model).digest('base64url');
  const add = (block: unknown, region: Position['region'], extraChars = 0): void => {
    const { marked, plain } = strip(block);
    const text = JSON.stringify(plain);
    chars += text.length + extraChars;
    hash = createHash('sha256').update(hash).update(text).digest('base64url');
    positions.push({ tokens: Math.floor(chars / 4), key: hash, breakpoint: marked, region });
  };
  for (const tool of body.tools ?? []) add(tool, 'prefix');
  if (typeof body.system === 'string') {
    if (body.system !== '') add({ type: 'text', text: body.system }, 'prefix');
  } else if (Array.isArray(body.system)) {
    for (const block of body.system) add(block, 'prefix');
  }
  for (const message of body.messages) {
    const m = message as { role?: unknown; content?: unknown };
    const blocks =
      typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : Array.isArray(m.content) ? m.content : [];
    blocks.forEach((block: unknown, i) => add(i === 0 ? { role: m.role, ...(block as object) } : block, 'messages', 8));
  }
  // Automatic caching: a top-level cache_control is a breakpoint on the last block.
  if (body.cache_control != null && positions.length > 0) positions[positions.length - 1]!.breakpoint = true;
  return positions;
}

function strip(block: unknown): { marked: boolean; plain: unknown } {
  if (block === null || typeof block !== 'object' || !('cache_control' in block))
    return { marked: false, plain: block };
  const { cache_control: marker, ...plain } = block as Record<string, unknown>;
  return { marked: marker != null, plain };
}
