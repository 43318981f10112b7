import { AgentRuntime, memoryStorage, type RuntimeOptions, type StorageAdapter } from 'agentry-runtime';
import { fakeClock, scriptedModel, type FakeClock, type ScriptedModelOptions } from 'agentry-runtime/testing';

export interface TestRuntime {
  runtime: AgentRuntime;
  storage: StorageAdapter;
  clock: FakeClock;
  model: ReturnType<typeof scriptedModel>;
}

/** A runtime on memory storage, a fake clock and a scripted model. */
export async function openTestRuntime(
  script: ScriptedModelOptions['turns'],
  options: Omit<RuntimeOptions, 'model' | 'clock'> = {},
): Promise<TestRuntime> {
  const clock = fakeClock();
  const storage = options.storage ?? memoryStorage();
  const model = scriptedModel({ turns: script });
  const runtime = await AgentRuntime.open({ ...options, storage, clock, model });
  return { runtime, storage, clock, model };
}

/** Polls `check` until it returns true or the deadline passes (no fixed sleeps). */
export async function eventually(
  check: () => boolean | Promise<boolean>,
  timeoutMs = 5_000,
  what: string | (() => string) = 'condition',
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${typeof what === 'function' ? what() : what}`);
    await new Promise((r) => setImmediate(r));
  }
}

/** A promise with its resolve exposed. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}
