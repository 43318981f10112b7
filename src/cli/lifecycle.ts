/**
 * @module cli/lifecycle
 * What the long-running commands (`serve`, `worker`) share: the model they drive agents with, and how they stop.
 */
import type { Logger } from 'pino';
import { anthropicProvider, hasAnthropicCredentials, type ModelProvider } from '../index.js';
import { demoModel } from './demo-model.js';

/** The scripted stand-in with `--demo` (said on stderr: stdout is the JSON log's), else Anthropic (with a warning when it has no key). */
export function commandModel(demo: boolean): ModelProvider {
  if (demo) {
    console.error(
      'Demo mode: a scripted stand-in plays the model (no key, no network). Agents complete with a canned answer ' +
        'after a few seconds; run without --demo, with ANTHROPIC_API_KEY set, for real work.',
    );
    return demoModel();
  }
  if (!hasAnthropicCredentials()) {
    console.error(
      'warning: ANTHROPIC_API_KEY is not set, so agents will fail at their first step. Set it (or ANTHROPIC_BASE_URL ' +
        'for a server that speaks the Messages API) and restart.',
    );
  }
  return anthropicProvider();
}

/**
 * Resolves with the exit code once SIGINT or SIGTERM has run `shutdown`: 0 when it went well, 1 when it failed. A
 * second signal exits at once (130). The process exits after the log's buffered lines are out.
 */
export function untilSignal(logger: Logger, shutdown: () => Promise<void>): Promise<number> {
  return new Promise<number>((resolve) => {
    // A worker has no listening socket, and the runtime's timers do not hold the process open: this does, until the
    // signal (without it Node would end a worker with nothing to do at once, exit code 13).
    const keepAlive = setInterval(() => {}, 1 << 30);
    let stopping = false;
    const stop = (signal: NodeJS.Signals) => {
      if (stopping) {
        console.error(`agentry: ${signal} again, exiting without waiting`);
        process.exit(130);
      }
      stopping = true;
      console.error(`agentry: ${signal}, shutting down`);
      logger.info({ signal }, 'shutting down');
      shutdown().then(
        () => exitAfterLog(0),
        (error: unknown) => {
          logger.error({ err: error }, 'shutdown failed');
          console.error('agentry: shutdown failed:', error);
          exitAfterLog(1);
        },
      );
    };
    // The log is written asynchronously (a request must not wait for stdout): what is buffered goes out first.
    const exitAfterLog = (code: number) => {
      clearInterval(keepAlive);
      resolve(code);
      logger.flush(() => process.exit(code));
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
}
