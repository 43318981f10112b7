/**
 * @module mcp/task-call
 * A call of a tool that requires task-based execution (`execution.taskSupport: "required"`, MCP's tasks): the call
 * creates a task, which is polled until it ends, and its result is fetched. The task's status messages are passed on
 * as progress; a status that changes starts the call's timeout again; a call cancelled (pause, delete, timeout)
 * cancels the task.
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { CreateTaskResultSchema, CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import type { CallToolResult, Task } from '@modelcontextprotocol/sdk/types.js';

/** Task polls: at least this far apart whatever the server suggests, and at most this far (a status is news). */
const MIN_TASK_POLL_MS = 100;
const MAX_TASK_POLL_MS = 5_000;

/** The SDK's schemas the flow needs (its types module, loaded on first use). */
interface TaskSchemas {
  CreateTaskResultSchema: typeof CreateTaskResultSchema;
  CallToolResultSchema: typeof CallToolResultSchema;
}

export interface TaskCallOptions {
  signal?: AbortSignal | undefined;
  /** Longest time without news (a new status) before the task is cancelled. */
  timeoutMs: number;
  onProgress?: ((progress: { message?: string }) => void) | undefined;
  /** Makes the error a failed or stuck task is reported with (it names the server). */
  fail(what: string): Error;
}

/**
 * `tools/call` with a task, then `tasks/get` every poll interval until the task ends, then `tasks/result` (which waits
 * for the end, and carries the server's requests when the task needs input).
 */
export async function callToolAsTask(
  client: Client,
  types: TaskSchemas,
  name: string,
  args: Record<string, unknown>,
  options: TaskCallOptions,
): Promise<CallToolResult> {
  const { timeoutMs, signal } = options;
  const requestOptions = { ...(signal ? { signal } : {}), timeout: timeoutMs };
  const created = await client.request(
    { method: 'tools/call', params: { name, arguments: args } },
    types.CreateTaskResultSchema,
    { ...requestOptions, task: { ttl: timeoutMs } },
  );
  let task: Task = created.task;
  const taskId = task.taskId;
  const cancel = () => void client.experimental.tasks.cancelTask(taskId).catch(() => undefined);
  signal?.addEventListener('abort', cancel, { once: true });
  try {
    let seen = '';
    let changedAt = Date.now();
    for (;;) {
      const now = `${task.status}\0${task.statusMessage ?? ''}`;
      if (now !== seen) {
        seen = now;
        changedAt = Date.now();
        if (task.statusMessage) options.onProgress?.({ message: task.statusMessage });
      }
      if (task.status === 'completed' || task.status === 'input_required') {
        // tasks/result waits until the task ends, and carries the server's requests (sampling, elicitation).
        return (await client.experimental.tasks.getTaskResult(
          taskId,
          types.CallToolResultSchema,
          requestOptions,
        )) as CallToolResult;
      }
      if (task.status === 'failed' || task.status === 'cancelled') {
        throw options.fail(
          `ran ${name} as a task that ${task.status === 'failed' ? 'failed' : 'was cancelled'}` +
            (task.statusMessage ? `: ${task.statusMessage}` : ''),
        );
      }
      if (Date.now() - changedAt > timeoutMs) {
        cancel();
        throw options.fail(`did not move the task of ${name} on within ${timeoutMs} ms; the task was cancelled`);
      }
      const interval = Math.min(MAX_TASK_POLL_MS, Math.max(MIN_TASK_POLL_MS, task.pollInterval ?? 1000));
      await abortableDelay(interval, signal);
      task = await client.experimental.tasks.getTask(taskId, requestOptions);
    }
  } finally {
    signal?.removeEventListener('abort', cancel);
  }
}

/** Waits `ms`, or rejects with the signal's reason when it aborts first. */
function abortableDelay(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason instanceof Error ? signal!.reason : new Error('aborted'));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
