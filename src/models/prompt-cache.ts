/**
 * @module models/prompt-cache
 * Where the Anthropic provider puts its prompt-cache breakpoints, and the gate that lets one call write a shared
 * prefix before its siblings read it.
 *
 * Two breakpoints of the API's four: one on the tools+system prefix (the same for every agent with the same tools and
 * instructions, siblings of a fan-out included), one on the last block of the conversation (the next turn reads
 * everything up to it and writes only what was added since; the API looks up to 20 blocks back from a breakpoint for an
 * earlier entry, and a turn adds two or three). A cache entry is readable only once the response of the call that
 * writes it has started, so when 1,000 siblings start at once every one of them would write the same prefix: the
 * {@link PrefixWriteGate} lets the first call of a prefix through and holds the others until its response is back.
 */
import { createHash } from 'node:crypto';

/** The API's own cap on `cache_control` breakpoints in one request. */
export const MAX_CACHE_BREAKPOINTS = 4;

/** How long an entry lives after its last use (the API's default `ephemeral` TTL). */
export const CACHE_TTL_MS = 5 * 60 * 1000;

/**
 * Minimum cacheable prompt length by model family, in tokens, as Anthropic's prompt-caching page lists it (a shorter
 * prefix is not cached, with no error). Matched by prefix of the upstream id, longest first.
 */
const MIN_CACHEABLE_TOKENS: ReadonlyArray<readonly [string, number]> = [
  ['claude-opus-4-8', 1024],
  ['claude-opus-4-7', 2048],
  ['claude-opus-4-6', 4096],
  ['claude-opus-4-5', 4096],
  ['claude-opus-4-1', 1024],
  ['claude-opus-4', 1024],
  ['claude-sonnet-4', 1024],
  ['claude-sonnet-5', 1024],
  ['claude-haiku-4-5', 4096],
  ['claude-haiku-3', 2048],
  ['claude-opus-5', 512],
  ['claude-fable-5', 512],
  ['claude-mythos-5', 512],
];

/** Assumed for an id the table does not know (the common floor of current models). */
export const DEFAULT_MIN_CACHEABLE_TOKENS = 1024;

/**
 * The shortest prompt prefix, in tokens, that `model` caches.
 *
 * @example
 * minCacheableTokens('claude-haiku-4-5') // -> 4096
 */
export function minCacheableTokens(model: string): number {
  let best: readonly [string, number] | undefined;
  for (const entry of MIN_CACHEABLE_TOKENS) {
    if (model.startsWith(entry[0]) && (best === undefined || entry[0].length > best[0].length)) best = entry;
  }
  return best?.[1] ?? DEFAULT_MIN_CACHEABLE_TOKENS;
}

/** The marker the API reads: a 5-minute entry. */
export const EPHEMERAL = { type: 'ephemeral' } as const;

/** A request body's cacheable parts, as the provider builds them (shapes of the Messages API). */
export interface CacheableParts<Tool, Block> {
  system: string;
  tools: Tool[];
  messages: Array<{ role: 'user' | 'assistant'; content: Block[] }>;
}

/**
 * Places the two breakpoints on a request's parts: the system prompt (as one text block; on the last tool when there is
 * no system prompt) and the conversation's last block. Returns new objects; the inputs are not modified.
 *
 * @example
 * const body = withCacheBreakpoints({ system: 'Be brief.', tools, messages });
 * // body.system -> [{ type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral' } }]
 */
export function withCacheBreakpoints<Tool extends object, Block extends object>(
  parts: CacheableParts<Tool, Block>,
): {
  system: Array<{ type: 'text'; text: string; cache_control: typeof EPHEMERAL }> | undefined;
  tools: Tool[];
  messages: Array<{ role: 'user' | 'assistant'; content: Block[] }>;
} {
  const tools = [...parts.tools];
  const system =
    parts.system === '' ? undefined : [{ type: 'text' as const, text: parts.system, cache_control: EPHEMERAL }];
  if (system === undefined && tools.length > 0) {
    tools[tools.length - 1] = { ...tools[tools.length - 1]!, cache_control: EPHEMERAL };
  }
  const messages = parts.messages.map((m) => ({ ...m, content: [...m.content] }));
  const last = messages[messages.length - 1];
  if (last && last.content.length > 0) {
    const i = last.content.length - 1;
    last.content[i] = { ...last.content[i]!, cache_control: EPHEMERAL };
  }
  return { system, tools, messages };
}

/** The key of a shared prefix: one hash of the upstream model, the tools and the system prompt. */
export function prefixKey(model: string, system: string, tools: readonly object[]): string {
  return createHash('sha256')
    .update(JSON.stringify([model, tools, system]))
    .digest('base64url');
}

/** A rough token estimate of the shared prefix (4 characters a token), to skip the gate where nothing is cached. */
export function estimatePrefixTokens(system: string, tools: readonly object[]): number {
  return Math.ceil((system.length + JSON.stringify(tools).length) / 4);
}

interface PrefixState {
  /** Until when (ms) the entry is known to exist. */
  warmUntil: number;
  /** The call writing it now, if any; waiters wait on it. */
  writing: Promise<void> | undefined;
}

/** Options of {@link PrefixWriteGate}. */
export interface PrefixWriteGateOptions {
  /** @default Date.now */
  now?: () => number;
  /**
   * How long a written prefix counts as warm without being used. A little under the API's 5 minutes, so a stale guess
   * costs at most one extra write, never a stampede.
   * @default 4 minutes
   */
  warmMs?: number;
  /** Most prefixes remembered (oldest dropped first): bounds memory when tools and instructions vary per agent. */
  maxPrefixes?: number;
  /**
   * The longest a call waits for another's write, in milliseconds; then it goes anyway (and may write the prefix
   * itself). Bounds what one slow call (a long answer, or another account's) can cost everyone else of its prefix.
   * @default 15_000
   */
  maxWaitMs?: number;
}

/**
 * Lets the first call of a prefix through and holds its siblings until that call's response is back, so they read the
 * entry it wrote instead of each writing their own. A prefix that is warm (written within the last few minutes) passes
 * at once. A writer that fails hands the turn to the next caller.
 *
 * @example
 * const gate = new PrefixWriteGate();
 * const release = await gate.enter(key, signal);
 * try { await call(); release(true); } catch (e) { release(false); throw e; }
 */
export class PrefixWriteGate {
  private readonly states = new Map<string, PrefixState>();
  private readonly now: () => number;
  private readonly warmMs: number;
  private readonly maxPrefixes: number;
  private readonly maxWaitMs: number;

  constructor(options: PrefixWriteGateOptions = {}) {
    this.maxWaitMs = options.maxWaitMs ?? 15_000;
    this.now = options.now ?? Date.now;
    this.warmMs = options.warmMs ?? CACHE_TTL_MS - 60_000;
    this.maxPrefixes = options.maxPrefixes ?? 10_000;
  }

  /**
   * Waits until a call with this prefix may go. Returns the function to call when the call has its answer (`true`) or
   * failed (`false`). Rejects only when `signal` aborts while waiting.
   */
  async enter(key: string, signal: AbortSignal): Promise<(ok: boolean) => void> {
    const deadline = this.now() + this.maxWaitMs;
    for (;;) {
      const state = this.states.get(key);
      if (state !== undefined && state.warmUntil > this.now()) {
        state.warmUntil = this.now() + this.warmMs; // a read refreshes the entry's TTL
        return () => {};
      }
      if (state?.writing !== undefined) {
        const left = deadline - this.now();
        if (left <= 0) return () => {}; // waited long enough: go without the entry
        if ((await abortable(state.writing, signal, left)) === 'timeout') return () => {};
        continue;
      }
      let done!: () => void;
      const writing = new Promise<void>((resolve) => (done = resolve));
      const mine: PrefixState = state ?? { warmUntil: 0, writing: undefined };
      mine.writing = writing;
      this.remember(key, mine);
      return (ok) => {
        if (ok) mine.warmUntil = this.now() + this.warmMs;
        mine.writing = undefined;
        done();
      };
    }
  }

  private remember(key: string, state: PrefixState): void {
    this.states.delete(key);
    this.states.set(key, state);
    while (this.states.size > this.maxPrefixes) {
      const oldest = this.states.keys().next().value;
      if (oldest === undefined) break;
      const dropped = this.states.get(oldest);
      // A prefix being written stays: its waiters need the state to learn when it is done.
      if (dropped?.writing !== undefined) break;
      this.states.delete(oldest);
    }
  }
}

/** Waits for `wait`, at most `ms` (then `'timeout'`); rejects if `signal` aborts first. */
function abortable(wait: Promise<void>, signal: AbortSignal, ms: number): Promise<'done' | 'timeout'> {
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise((resolve, reject) => {
    const finish = (how: 'done' | 'timeout'): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      resolve(how);
    };
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal.reason as Error);
    };
    const timer = setTimeout(() => finish('timeout'), ms);
    signal.addEventListener('abort', onAbort, { once: true });
    void wait.then(() => finish('done'));
  });
}

/** Whether prompt caching is on, from the option, else `AGENTRY_PROMPT_CACHE` (`off`, `false`, `0` turn it off). */
export function promptCacheEnabled(
  option: boolean | undefined,
  env: Readonly<Record<string, string | undefined>>,
): boolean {
  if (option !== undefined) return option;
  const value = env.AGENTRY_PROMPT_CACHE?.trim().toLowerCase();
  return !(value === 'off' || value === 'false' || value === '0' || value === 'no');
}
