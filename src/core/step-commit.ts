/**
 * @module core/step-commit
 * The last phase of a step: what it did goes to storage in one transaction, and only then is it told. A model turn
 * commits its answer, its public message, its settlement and the tool calls it asked for together; tool results that
 * wait to commit with the next model turn (`PendingResults`) go with it, or are saved here on their own when that
 * turn will not carry them; a submitted result commits with the agent's completion. After every commit the holds it
 * settled end, so their credits go to waiting reservations, and listeners hear of messages, progress and status.
 */
import { randomUUID } from 'node:crypto';
import { isoTime } from '../base/clock.js';
import type { CreditHold } from './credit-hold.js';
import { modelCost, type ModelPrice } from './credits.js';
import type { TimedResponse } from './model-call.js';
import { inputBoundsOf } from './input-bound.js';
import { MAX_PLAN_PROGRESS } from './plan.js';
import { toMessage, toStatusForm } from './records.js';
import { microsToCredits } from './schemas.js';
import { emitStatus, statusChange } from './status-change.js';
import { CONTINUE, STOP, type RunControl, type StepDeps, type StepOutcome } from './step-types.js';
import { describeToolCalls } from './tool-call.js';
import { SUBMIT_REMINDER, type Toolbox } from './toolbox.js';
import { turnFromBlocks } from './turn-log.js';
import { totalTokens, type ToolUseBlock } from '../models/provider.js';
import type {
  AgentPatch,
  AgentRow,
  MessageRow,
  Settlement,
  StepCommitResult,
  ToolCallRow,
  TurnRow,
} from '../storage/adapter.js';
import type { ProgressReport } from '../tools/define-tool.js';

/** Tool results of one turn, held until they are committed (see core/tool-calls.ts). */
export interface PendingResults {
  turn: TurnRow;
  toolCalls: ToolCallRow[];
  settlements: Settlement[];
  /** The holds `settlements` settle: ended once the commit that carries them is applied. */
  holds: CreditHold[];
  reported: ProgressReport;
}

/** After a commit: go on while the agent is ACTIVE, handing the committed row to the next step. */
export function continueWith(control: RunControl, committed: AgentRow): StepOutcome {
  if (committed.status !== 'ACTIVE') return STOP;
  control.committedRow = committed;
  return CONTINUE;
}

/**
 * Commits a model turn in one transaction: the assistant turn (and a reminder to submit, for a child that answered
 * without its result), its public message, its settlement, the tool calls it asked for, and the carried results of
 * the previous calls. A turn that asks for nothing completes the agent in the same commit.
 */
export async function commitModelTurn(
  deps: StepDeps,
  agent: AgentRow,
  box: Toolbox,
  control: RunControl,
  turns: TurnRow[],
  /** The model's answer, and the provider's latency, which its ledger row keeps. */
  { response, latencyMs }: TimedResponse,
  price: ModelPrice,
  hold: CreditHold,
  /** Results of the previous turn's tool calls that commit with this turn. */
  pending: PendingResults | undefined,
): Promise<StepOutcome> {
  const now = isoTime(deps.clock.now());
  const content = response.content;
  const toolUses = content.filter((b): b is ToolUseBlock => b.type === 'tool_use');
  const text = content
    .filter((b) => b.type === 'text')
    .map((b) => (b as { text: string }).text)
    .join('\n\n')
    .trim();
  const tokens = totalTokens(response.usage);
  const idx = turns.length;
  const messages: MessageRow[] = text
    ? [{ message_id: randomUUID(), agent_id: agent.agent_id, role: 'ASSISTANT', text, timestamp: now }]
    : [];
  const toolCalls: ToolCallRow[] = toolUses.map((u) => ({
    agent_id: agent.agent_id,
    tool_use_id: u.id,
    turn_idx: idx,
    name: u.name,
    input: JSON.stringify(u.input ?? {}),
    status: 'pending',
    idempotent: box.get(u.name)?.idempotent ?? true,
    result: null,
    is_error: false,
    updated_at: now,
  }));
  const settlement = hold.settlement({
    kind: 'model',
    item: agent.model,
    tokensIn: tokens.input,
    tokensOut: tokens.output,
    tokensCacheWrite: response.usage.cacheCreationInputTokens ?? 0,
    tokensCacheRead: response.usage.cacheReadInputTokens ?? 0,
    cost: modelCost(price, response.usage),
    at: now,
    latencyMs,
  });
  // A child with a result schema is done only when it submits its result: a plain answer gets it a reminder.
  const remind = toolUses.length === 0 && box.needsResult;
  const done = toolUses.length === 0 && !remind;
  const settlements = [...(pending?.settlements ?? []), settlement];
  const assistantTurn = turnFromBlocks(agent.agent_id, idx, 'assistant', content, now);
  const reminderTurn: TurnRow[] = remind
    ? [turnFromBlocks(agent.agent_id, idx + 1, 'user', [{ type: 'text', text: SUBMIT_REMINDER }], now)]
    : [];
  const result = await deps.storage.commitStep({
    agent_id: agent.agent_id,
    turns: [...(pending ? [pending.turn] : []), assistantTurn, ...reminderTurn],
    messages,
    tool_calls: [...(pending?.toolCalls ?? []), ...toolCalls],
    settlements,
    patch: {
      ...(pending ? reportedPatch(pending.reported) : {}),
      token_count_delta: tokens.input + tokens.output,
      step_count_delta: 1,
      ...(done ? {} : { status_message: remind ? 'Thinking' : describeToolCalls(box, toolUses) }),
      updated_at: now,
    },
    status: done
      ? statusChange(agent, 'complete', deps.clock.now(), { progress: 1, status_message: 'Completed' })
      : undefined,
  });
  afterCommit(deps, agent, result, messages, settlements, [...(pending?.holds ?? []), hold]);
  if (done) inputBoundsOf(deps.model).forget(agent.agent_id);
  if (!result.agent) return STOP;
  if (done) return STOP;
  if (remind) return continueWith(control, result.agent);
  control.savedToolCalls = { turnIdx: idx, rows: toolCalls, uses: toolUses, turns: [...turns, assistantTurn] };
  return continueWith(control, result.agent);
}

/** A child's valid `submit_result`: the step's results, the result as its answer, and COMPLETED, in one commit. */
export async function completeWithResult(
  deps: StepDeps,
  agent: AgentRow,
  pending: PendingResults,
  resultValue: unknown,
): Promise<StepOutcome> {
  const at = pending.turn.created_at;
  const message: MessageRow = {
    message_id: randomUUID(),
    agent_id: agent.agent_id,
    role: 'ASSISTANT',
    text: JSON.stringify(resultValue),
    timestamp: at,
  };
  const result = await deps.storage.commitStep({
    agent_id: agent.agent_id,
    turns: [pending.turn],
    messages: [message],
    tool_calls: pending.toolCalls,
    settlements: pending.settlements,
    patch: { ...reportedPatch(pending.reported), updated_at: at },
    status: statusChange(agent, 'complete', deps.clock.now(), { progress: 1, status_message: 'Completed' }),
  });
  afterCommit(deps, agent, result, [message], pending.settlements, pending.holds);
  inputBoundsOf(deps.model).forget(agent.agent_id);
  return STOP;
}

/** Saves tool results on their own (the next model turn will not carry them). */
export async function commitToolResults(
  deps: StepDeps,
  agent: AgentRow,
  pending: PendingResults,
  /** Left as it is when undefined. */
  statusMessage: string | undefined,
): Promise<StepCommitResult> {
  const result = await deps.storage.commitStep({
    agent_id: agent.agent_id,
    turns: [pending.turn],
    tool_calls: pending.toolCalls,
    settlements: pending.settlements,
    patch: {
      ...(statusMessage !== undefined ? { status_message: statusMessage } : {}),
      ...reportedPatch(pending.reported),
      updated_at: pending.turn.created_at,
    },
  });
  afterCommit(deps, agent, result, [], pending.settlements, pending.holds);
  return result;
}

/** The agent fields a step's tool calls asked to change through `reportProgress`. */
export function reportedPatch(reported: ProgressReport): Pick<AgentPatch, 'progress' | 'status_message' | 'plan'> {
  return {
    ...(reported.message !== undefined ? { status_message: reported.message } : {}),
    ...(reported.progress !== undefined
      ? { progress: Math.min(MAX_PLAN_PROGRESS, Math.max(0, reported.progress)) }
      : {}),
    ...(reported.plan !== undefined ? { plan: JSON.stringify(reported.plan) } : {}),
  };
}

/**
 * After a commit: the holds it settled end (their credits go to waiting reservations), and listeners hear what
 * changed.
 */
export function afterCommit(
  deps: StepDeps,
  before: AgentRow,
  result: StepCommitResult,
  messages: MessageRow[],
  settlements: Settlement[],
  holds: readonly CreditHold[],
): void {
  const { events } = deps;
  for (const hold of holds) hold.settled();
  if (events.listenerCount('credits.charged') > 0) {
    settlements.forEach((s, i) => {
      events.emit('credits.charged', {
        account_id: s.ledger.account_id,
        agent_id: before.agent_id,
        kind: s.ledger.kind as 'model' | 'tool',
        item: s.ledger.item ?? '',
        credits: microsToCredits(result.charged[i] ?? 0),
        tokens_in: s.ledger.tokens_in,
        tokens_out: s.ledger.tokens_out,
      });
    });
  }
  const after = result.agent;
  if (!after) return;
  if (events.listenerCount('agent.message') > 0) {
    for (const m of messages) events.emit('agent.message', { agent_id: after.agent_id, message: toMessage(m) });
  }
  if (after.progress !== before.progress || after.status_message !== before.status_message) {
    if (events.listenerCount('agent.progress') > 0) events.emit('agent.progress', { agent: toStatusForm(after) });
  }
  if (result.statusChanged) emitStatus(events, after, before.status);
}
