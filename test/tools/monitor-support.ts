/**
 * Shared by the monitor tests: a scripted model that plays an agent which creates the monitor written (as JSON) in its
 * goal, waits, waits again after each change, and answers once a wait times out; and which answers the monitor's
 * condition calls by reading the price in the added lines ("price below N").
 */
import type { ModelRequest, ToolResultBlock } from 'agentry-runtime';
import type { ScriptedTurn } from 'agentry-runtime/testing';

export const MONITOR_ENV = { AGENTRY_MONITOR_MIN_INTERVAL_S: '1' };

/** builtinTools options for a runtime whose agents watch the local price page. */
export const monitorTools = { only: ['monitor'], fetch: { allow: ['127.0.0.1/32'] }, env: MONITOR_ENV };

const firstText = (req: ModelRequest) => (req.messages[0]!.content[0] as { text: string }).text;

export function lastToolResult(req: ModelRequest): Record<string, unknown> | null {
  const last = req.messages.at(-1);
  if (last?.role !== 'user') return null;
  const block = (last.content as ToolResultBlock[]).find((b) => b.type === 'tool_result');
  if (!block) return null;
  try {
    return JSON.parse(block.content) as Record<string, unknown>;
  } catch {
    return { error: block.content };
  }
}

/** Condition calls of the monitor: the model is asked with no tools. */
export const isConditionCall = (req: ModelRequest) => req.tools.length === 0;

function answerCondition(req: ModelRequest): ScriptedTurn {
  const prompt = (req.messages[0]!.content[0] as { text: string }).text;
  const below = /price below (\d+)/i.exec(prompt);
  const added = /Lines added:\n([\s\S]*?)\n\n/.exec(prompt)?.[1] ?? '';
  const price = /\$(\d+(?:\.\d+)?)/.exec(added);
  const yes = below && price ? Number(price[1]) < Number(below[1]) : false;
  return { text: yes ? 'YES: the price is below the threshold.' : 'NO: the condition is not met.' };
}

/** The watcher's script: create (input from the goal), then wait until a wait times out. */
export function watcherScript(seen: Array<Record<string, unknown>> = []) {
  return (req: ModelRequest, { turnIndex }: { turnIndex: number }): ScriptedTurn => {
    if (isConditionCall(req)) return answerCondition(req);
    if (turnIndex === 0) {
      return { toolCalls: [{ name: 'monitor', input: { action: 'create', ...JSON.parse(firstText(req)) } }] };
    }
    const result = lastToolResult(req);
    if (result) seen.push(result);
    if (result?.timed_out) return { text: 'Stopped watching: the time is up.' };
    return { toolCalls: [{ name: 'monitor', input: { action: 'wait' } }] };
  };
}
