/**
 * @module sandbox/sandbox-slots
 * How many sandboxes run at once, and who gets the next one. Every sandbox of the coding tools (`Bash`, the five file
 * tools, the acceptance command, Claude Code, the runtime's own reads and writes of a workspace) takes one of the same
 * `slots`, so their total memory is at most `slots × memoryBytes`. Slots are shared fairly between accounts: one
 * account holds at most `perAccount` of them (by default fewer than all, so another account always finds one free
 * once any command of the first ends, or at once when the first holds its share), and a freed slot goes to the
 * waiting account holding the fewest, the longest-waiting call first among equals. A command is never preempted:
 * fairness is in who starts next, and `perAccount` keeps one account's long commands from filling every slot.
 */
import { z } from 'zod';
import { AgentryError } from '../errors.js';
import type { Sandbox, SandboxResult, SandboxRunOptions } from './sandbox.js';

/** Sandboxes at once by default: two at the default limits take at most ~2 GiB of RAM. */
export const DEFAULT_SANDBOX_SLOTS = 2;

/** Options of {@link withSandboxSlots}. */
export interface SandboxSlotOptions {
  /** Sandboxes running at once, across every account and tool. @default 2 */
  slots?: number;
  /**
   * Sandboxes one account may run at once. @default max(1, floor(slots / 2)): with the default 2 slots, one each, so
   * a second account's command starts as soon as it asks while the first holds its one.
   */
  perAccount?: number;
}

const SlotOptionsSchema = z
  .object({
    slots: z.number().int().min(1).max(10_000).optional(),
    perAccount: z.number().int().min(1).max(10_000).optional(),
  })
  .strict();

interface Waiter {
  seq: number;
  grant: () => void;
}

/** A counting semaphore whose waiters are queued per account and served fairly between accounts. */
export class FairSlots {
  private active = 0;
  private seq = 0;
  private readonly held = new Map<string, number>();
  private readonly waiting = new Map<string, Waiter[]>();
  /** The most slots held at once since creation (for tests and metrics). */
  peak = 0;

  constructor(
    readonly slots: number,
    readonly perAccount: number,
  ) {}

  /**
   * Waits for a slot for `account` and resolves with its release (call it exactly once). Rejects with the signal's
   * reason when aborted while waiting; the place in the queue is then given up.
   */
  acquire(account: string, signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(abortError(signal));
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        seq: this.seq++,
        grant: () => {
          signal?.removeEventListener('abort', onAbort);
          let released = false;
          resolve(() => {
            if (released) return;
            released = true;
            this.release(account);
          });
        },
      };
      const onAbort = () => {
        const queue = this.waiting.get(account);
        const at = queue?.indexOf(waiter) ?? -1;
        if (queue && at >= 0) {
          queue.splice(at, 1);
          if (queue.length === 0) this.waiting.delete(account);
          reject(abortError(signal!));
        }
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      const queue = this.waiting.get(account);
      if (queue) queue.push(waiter);
      else this.waiting.set(account, [waiter]);
      this.dispatch();
    });
  }

  /** Slots held now, calls waiting, and slots held by each account. */
  load(): { active: number; waiting: number; byAccount: Record<string, number> } {
    let waiting = 0;
    for (const queue of this.waiting.values()) waiting += queue.length;
    return { active: this.active, waiting, byAccount: Object.fromEntries(this.held) };
  }

  private release(account: string): void {
    this.active--;
    const n = (this.held.get(account) ?? 1) - 1;
    if (n > 0) this.held.set(account, n);
    else this.held.delete(account);
    this.dispatch();
  }

  /** Hands free slots to the waiting accounts below their share: fewest held first, then the longest waiting. */
  private dispatch(): void {
    while (this.active < this.slots) {
      let best: { account: string; held: number; seq: number } | undefined;
      for (const [account, queue] of this.waiting) {
        const held = this.held.get(account) ?? 0;
        if (held >= this.perAccount) continue;
        const seq = queue[0]!.seq;
        if (!best || held < best.held || (held === best.held && seq < best.seq)) best = { account, held, seq };
      }
      if (!best) return;
      const queue = this.waiting.get(best.account)!;
      const waiter = queue.shift()!;
      if (queue.length === 0) this.waiting.delete(best.account);
      this.active++;
      this.peak = Math.max(this.peak, this.active);
      this.held.set(best.account, best.held + 1);
      waiter.grant();
    }
  }
}

function abortError(signal: AbortSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new Error('aborted');
}

/** A sandbox whose runs take {@link FairSlots}. */
export type SlottedSandbox = Sandbox & { readonly slots: FairSlots };

/** Whether a sandbox already takes slots (so that it is not wrapped twice). */
export function isSlotted(sandbox: Sandbox): sandbox is SlottedSandbox {
  return (sandbox as Partial<SlottedSandbox>).slots instanceof FairSlots;
}

/** What a run aborted while it waited for a slot resolves with: nothing ran. */
function notStarted(): SandboxResult {
  return {
    exitCode: null,
    signal: 'SIGKILL',
    stdout: '',
    stderr: '',
    stdoutTruncated: false,
    stderrTruncated: false,
    timedOut: false,
    durationMs: 0,
    cpuMs: 0,
  };
}

/**
 * Wraps a sandbox so that each `run()` and `spawn()` first takes a slot for `options.account` (the empty string
 * when absent) and gives it back when the sandbox has exited. A run aborted while it waits resolves at once with
 * `signal: 'SIGKILL'` and nothing run.
 *
 * @example
 * const sandbox = withSandboxSlots(bubblewrapSandbox(), { slots: 4, perAccount: 2 });
 * await sandbox.run({ shell: 'make', workspace, timeoutMs: 60_000, maxOutputBytes: 65536 }, { account: 'acme' });
 */
export function withSandboxSlots(sandbox: Sandbox, options: SandboxSlotOptions = {}): SlottedSandbox {
  const parsed = SlotOptionsSchema.safeParse(options);
  if (!parsed.success) {
    throw new AgentryError('invalid_request', `Invalid sandbox slot options: ${z.prettifyError(parsed.error)}`);
  }
  const slotCount = parsed.data.slots ?? DEFAULT_SANDBOX_SLOTS;
  const perAccount = Math.min(slotCount, parsed.data.perAccount ?? Math.max(1, Math.floor(slotCount / 2)));
  const slots = new FairSlots(slotCount, perAccount);
  const take = (runOptions: SandboxRunOptions) => slots.acquire(runOptions.account ?? '', runOptions.signal);
  const slotted: SlottedSandbox = {
    name: sandbox.name,
    slots,
    probe: () => sandbox.probe(),
    async run(command, runOptions = {}) {
      let release: () => void;
      try {
        release = await take(runOptions);
      } catch (error) {
        if (runOptions.signal?.aborted) return notStarted();
        throw error;
      }
      try {
        return await sandbox.run(command, runOptions);
      } finally {
        release();
      }
    },
  };
  if (sandbox.spawn) {
    const spawn = sandbox.spawn.bind(sandbox);
    return Object.assign(slotted, {
      async spawn(...[command, runOptions = {}]: Parameters<NonNullable<Sandbox['spawn']>>) {
        const release = await take(runOptions);
        try {
          const started = await spawn(command, runOptions);
          started.exited.then(release, release);
          return started;
        } catch (error) {
          release();
          throw error;
        }
      },
    });
  }
  return slotted;
}
