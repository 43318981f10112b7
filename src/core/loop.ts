/**
 * @module core/loop
 * One agent step (DESIGN §4): reserve credits -> model turn -> commit; then the tool calls it asked for -> commit.
 *
 * The next thing to do is always derived from the durable turn log, never from memory, which is what makes pause,
 * resume and crash recovery the same code path:
 * - the last turn is the user's (goal or tool results): take a model turn;
 * - the last turn is the assistant's with tool calls: run them (or recover them) and commit their results;
 * - the last turn is the assistant's without tool calls: the agent is done.
 */
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { isAbortError, isoTime } from './clock.js';
import { estimateTokens, fitContext } from './context.js';
import { affordableOutputTokens, modelCost, modelHold, meteredCost, toolReservation } from './credits.js';
import { exactInputTokens, inputBoundsOf } from './input-bound.js';
import { MAX_PLAN_PROGRESS } from './plan.js';
import { toMessage, toStatusForm } from './records.js';
import { microsToCredits } from './schemas.js';
import { activeMs, changeStatus, emitStatus, startAgent, statusChange } from './status-change.js';
import { CONTINUE, STOP, type RunControl, type StepDeps, type StepOutcome } from './step-types.js';
import {
  ModelError,
  totalTokens,
  type ContentBlock,
  type ModelMessage,
  type ModelRequest,
  type ModelResponse,
  type ToolResultBlock,
  type ToolUseBlock,
} from '../models/provider.js';
import type {
  AgentPatch,
  AgentRow,
  MessageRow,
  Settlement,
  StepCommitResult,
  ToolCallRow,
  TurnRow,
} from '../storage/adapter.js';
import {
  renderToolOutput,
  ToolCompletion,
  ToolSuspension,
  type ProgressReport,
  type Tool,
  type ToolContext,
} from '../tools/define-tool.js';
import { SUBMIT_REMINDER, type Toolbox } from './toolbox.js';
import { createToolContext } from './tool-context.js';
import { SUBSCRIPTION_PAUSED } from './subscription-check.js';
import { modelInfoOf, observeChat, type ToolTelemetry } from './telemetry.js';
import { limitName, releaseLeftHolds, reserveCredits, stopForCredits } from './step-credits.js';
import type { CreditHold } from './credit-hold.js';
import { firstEditedMessage, MIN_THINKING_BUDGET } from '../models/thinking.js';

const DEFAULT_CONTEXT_WINDOW = 200_000;

/** Rate-limit answers an agent sits out before it fails: with backoff up to a minute, about an hour. */
const MAX_RATE_LIMIT_RETRIES = 60;

function isRateLimit(err: ModelError): boolean {
  return err.status === 429 || err.status === 529;
}

const UNKNOWN_OUTCOME =
  'The outcome of this call is unknown: the process running it stopped before its result was saved. ' +
  'It was not repeated, because this tool is not safe to run twice. Check its effect before trying again.';

/** Runs the next piece of work of one agent. Never throws for the agent's own failures; storage errors propagate. */
export async function runStep(deps: StepDeps, agentId: string, control: RunControl): Promise<StepOutcome> {
  try {
    return await nextPieceOfWork(deps, agentId, control);
  } finally {
    // Every hold ends with its step: the ordinary paths settle or release theirs; one that threw releases here.
    if (control.holds.size > 0) await releaseLeftHolds(control, 'its step ended without settling it');
  }
}

async function nextPieceOfWork(deps: StepDeps, agentId: string, control: RunControl): Promise<StepOutcome> {
  // Read every step, or taken from the commit that just ended the last one: another process (the CLI next to
  // `agentry serve`) may have paused it.
  const committed = control.takeCommittedRow();
  // A driver's first step needs the agent's log too: read both at once (one round trip on a remote database). Its
  // failure is awaited below, or dropped with the step.
  const turnsRead = committed ? undefined : deps.storage.listTurns(agentId);
  turnsRead?.catch(() => undefined);
  let agent = committed ?? (await deps.storage.getAgent(agentId));
  if (!agent) return STOP;
  if (agent.status !== 'ACTIVE' && agent.status !== 'STARTING_UP') return STOP;
  if (deps.subscriptions && !(await deps.subscriptions.isActive(agent.account_id))) {
    await changeStatus(deps, agent, 'pause', { status_message: SUBSCRIPTION_PAUSED });
    return STOP;
  }
  if (!control.trace && deps.telemetry) {
    control.trace = deps.telemetry.agentRun(agent, {
      ...modelInfoOf(deps.model, agent.model),
      recovered: deps.telemetry.wasRecovered?.(agentId) ?? false,
    });
  }
  // Children with a spec of their own work with the tools of their spec only: they start no MCP server.
  if (agent.spec === null && deps.prepareTools) {
    const preparing = deps.prepareTools();
    if (preparing) await preparing;
  }
  const now = deps.clock.now();

  const box = deps.toolboxes.of(agent);
  if (agent.step_count >= box.maxSteps) {
    await changeStatus(deps, agent, 'fail', {
      status_message: `Failed: step limit reached (${box.maxSteps} model turns)`,
    });
    return STOP;
  }
  if (activeMs(agent, now) > deps.limits.maxWallClockMs) {
    await changeStatus(deps, agent, 'fail', {
      status_message: `Failed: wall-clock limit reached (${Math.round(deps.limits.maxWallClockMs / 1000)} s active)`,
    });
    return STOP;
  }

  // Right after this driver saved a model turn with tool calls, those calls are the next thing to do: they were
  // just committed, so the log need not be read back for them.
  const saved = control.savedToolCalls;
  if (saved && agent.status === 'ACTIVE') {
    return runToolCalls(deps, agent, saved.turnIdx, saved.uses, control);
  }
  const turns = await (turnsRead ?? deps.storage.listTurns(agentId));
  const last = turns.at(-1);
  if (last?.role !== 'assistant') return runModelTurn(deps, agent, turns, control);

  if (agent.status === 'STARTING_UP') {
    agent = await startAgent(deps, agent);
    if (!agent) return STOP;
  }
  const toolUses = parseBlocks(last.content).filter((b): b is ToolUseBlock => b.type === 'tool_use');
  if (toolUses.length === 0) {
    // The final answer was saved while a pause was in flight; finishing needs no model call.
    await changeStatus(deps, agent, 'complete', { progress: 1, status_message: 'Completed' });
    return STOP;
  }
  return runToolCalls(deps, agent, last.idx, toolUses, control);
}

async function runModelTurn(
  deps: StepDeps,
  startingRow: AgentRow,
  turns: TurnRow[],
  control: RunControl,
  /** Results of the previous turn's tool calls, not yet saved: they commit with this turn, or alone if it fails. */
  pending?: PendingResults,
): Promise<StepOutcome> {
  let agent = startingRow;
  // Saved on their own when this turn will not carry them, which is mostly because the agent stops (paused, failed,
  // out of credits) or waits: then they leave the status message alone, as a pause may have set it meanwhile.
  const savePending = async (statusMessage?: string): Promise<void> => {
    if (!pending) return;
    const saving = pending;
    pending = undefined;
    await commitToolResults(deps, agent, saving, statusMessage);
  };
  // Checked here too, not only as the step begins: tool results that may run again go on into this turn in one step.
  if (deps.subscriptions && !(await deps.subscriptions.isActive(agent.account_id))) {
    await savePending();
    await changeStatus(deps, agent, 'pause', { status_message: SUBSCRIPTION_PAUSED });
    return STOP;
  }
  const price = deps.prices.models[agent.model];
  if (!price) {
    await savePending();
    await changeStatus(deps, agent, 'fail', {
      status_message: `Failed: no price is configured for model ${agent.model}`,
    });
    return STOP;
  }
  const box = deps.toolboxes.of(agent);
  const tools = box.specs;
  // Turns are stored as the JSON of their content: their sizes come free, without serialising again.
  let chars = 0;
  const turnBytes: number[] = [];
  for (const t of turns) {
    chars += t.content.length;
    turnBytes.push(Buffer.byteLength(t.content));
  }
  const all = turns.map(toModelMessage);
  const sent = fitContext(
    all,
    deps.model.contextWindow?.(agent.model) ?? DEFAULT_CONTEXT_WINDOW,
    fixedPromptTokens(box.system, tools),
    chars,
  );
  // Thinking counts inside max_tokens and is billed as output: the call's output (and so its hold) grows by it.
  const thinkingTokens = deps.model.thinkingTokens?.(agent.model) ?? 0;
  const request: ModelRequest = {
    model: agent.model,
    system: box.system,
    messages: sent,
    tools,
    maxTokens: deps.limits.maxOutputTokens + thinkingTokens,
    agentId: agent.agent_id,
    ...(sent === all ? {} : { editedFrom: firstEditedMessage(all, sent) }),
  };
  // The worst case with the configured max_tokens; when the balance cannot cover it, max_tokens is lowered to what
  // it can, down to the floor, so that an agent with little left still gets a short answer. The input is bounded by
  // what the provider already counted of it (core/input-bound.ts), and counted exactly before the agent gives up.
  const bounds = inputBoundsOf(deps.model);
  const bound = bounds.bound({
    agentId: agent.agent_id,
    model: agent.model,
    system: box.system,
    tools,
    messageBytes: sent === all ? turnBytes : sent.map((m) => Buffer.byteLength(JSON.stringify(m.content))),
    elided: sent !== all,
  });
  let inputBound = bound.tokens;
  /** Whether the provider was asked for an exact count (once a turn), and whether `inputBound` is that count. */
  let counted = false;
  let exact = false;
  // A call that may write the prompt cache can be billed its whole input at the cache-write price (DESIGN §5).
  const cacheable = () => deps.model.promptCache !== false && request.promptCache !== false;
  const worstCase = () => modelHold(price, inputBound, request.maxTokens, cacheable());
  let hold: CreditHold;
  for (;;) {
    // An agent that waits holds nothing: the previous calls' hold, which would settle with this turn, settles now.
    const reservation = await reserveCredits(deps, agent, worstCase(), 'model call', control, savePending);
    if (reservation === 'aborted') {
      await savePending();
      return STOP; // paused or deleted while waiting for credits
    }
    if (reservation.granted) {
      hold = reservation.hold;
      break;
    }
    if (pending?.settlements.length) {
      // The previous calls' own hold is still open (it settles with this turn): settle it first, then ask again.
      await savePending();
      continue;
    }
    // A thinking call lowered to the floor keeps room for the least thinking budget the API takes.
    const floor = Math.min(
      deps.limits.minOutputTokens + Math.min(thinkingTokens, MIN_THINKING_BUDGET),
      deps.limits.maxOutputTokens + thinkingTokens,
    );
    let affordable = affordableOutputTokens(price, inputBound, reservation.payable, cacheable());
    if (affordable < floor && cacheable()) {
      // Too tight to hold even a short answer at the cache-write price: this one call goes without cache_control, so
      // its exact price is the plain input price, and the agent stops only when even that cannot be paid.
      request.promptCache = false;
      continue;
    }
    if (affordable < floor && !counted && deps.model.countTokens) {
      // Even the bound does not fit: the provider counts the request exactly before the agent gives up.
      counted = true;
      const count = await exactInputTokens(deps.model, request, control.model.signal);
      if (control.model.signal.aborted) {
        await savePending();
        return STOP;
      }
      if (count !== undefined) {
        inputBound = count;
        exact = true;
        affordable = affordableOutputTokens(price, inputBound, reservation.payable, cacheable());
        if (affordable >= floor) {
          request.maxTokens = Math.min(request.maxTokens, affordable);
          continue;
        }
      }
    }
    if (affordable < floor || affordable >= request.maxTokens) {
      await savePending();
      request.maxTokens = Math.min(request.maxTokens, floor);
      await stopForCredits(deps, agent, {
        needed: worstCase(),
        left: reservation.payable,
        limit: limitName(reservation.refusal),
        what: `${exact ? 'exactly' : 'at most'} ${inputBound.toLocaleString('en-US')} input tokens and ${request.maxTokens.toLocaleString('en-US')} output tokens`,
        exact,
      });
      return STOP;
    }
    request.maxTokens = affordable;
  }
  if (agent.status === 'STARTING_UP') {
    // Only now, with its first credits held, does a spawned agent become ACTIVE: one that cannot pay stops as
    // OUT_OF_CREDITS straight from STARTING_UP.
    const started = await startAgent(deps, agent);
    if (!started) {
      await hold.release('the agent did not start');
      return STOP;
    }
    agent = started;
  }

  let response: ModelResponse;
  try {
    if (control.model.signal.aborted) throw abortedError();
    // Observed from the lane's slot on: a wait for the slot is not the call's duration.
    response = await deps.inModelLane(async () => {
      // With several workers, the call starts only if this one still holds the agent and nobody paused it meanwhile.
      if (deps.mayProceed && !(await deps.mayProceed(agent.agent_id))) throw abortedError();
      return observeChat(
        control.trace,
        request,
        { ...modelInfoOf(deps.model, request.model), reservedMicros: worstCase() },
        (answer) => modelCost(price, answer.usage),
        () => deps.model.generate(request, { signal: control.model.signal }),
      );
    });
  } catch (err) {
    await hold.release('the model call did not answer');
    const stopped = control.model.signal.aborted || isAbortError(err);
    await savePending(stopped ? undefined : 'Thinking');
    if (stopped) return STOP; // paused, deleted or shutting down: redo later
    if (
      err instanceof ModelError &&
      err.retryable &&
      isRateLimit(err) &&
      control.rateLimited < MAX_RATE_LIMIT_RETRIES
    ) {
      // The provider is saturated, not this agent broken: the whole model lane waits, and the agent tries again
      // behind it without spending its own retries.
      control.rateLimited++;
      deps.backOffModels(err.retryAfterMs ?? Math.min(60_000, 1_000 * 2 ** Math.min(6, control.rateLimited - 1)));
      return { kind: 'retry', afterMs: 0 };
    }
    if (err instanceof ModelError && err.retryable && control.modelFailures < deps.limits.maxModelRetries) {
      control.modelFailures++;
      const backoff = err.retryAfterMs ?? Math.min(30_000, 500 * 2 ** (control.modelFailures - 1));
      return { kind: 'retry', afterMs: backoff };
    }
    const reason = err instanceof Error ? err.message : String(err);
    if (err instanceof ModelError) {
      deps.logger?.warn(
        {
          agent_id: agent.agent_id,
          model: agent.model,
          provider: deps.model.providerName ?? '_OTHER',
          status: err.status ?? null,
          retryable: err.retryable,
          err,
        },
        'model provider failed',
      );
    } else {
      deps.logger?.error({ agent_id: agent.agent_id, model: agent.model, err }, 'model call failed');
    }
    await changeStatus(deps, agent, 'fail', { status_message: `Failed: ${reason}` });
    return STOP;
  }
  control.modelFailures = 0;
  control.rateLimited = 0;
  bounds.learn(bound, response.usage);

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
  });
  // A child with a result schema is done only when it submits its result: a plain answer gets it a reminder.
  const remind = toolUses.length === 0 && box.needsResult;
  const done = toolUses.length === 0 && !remind;
  const settlements = [...(pending?.settlements ?? []), settlement];
  const assistantTurn: TurnRow = {
    agent_id: agent.agent_id,
    idx,
    role: 'assistant',
    content: JSON.stringify(content),
    created_at: now,
  };
  const reminderTurn: TurnRow[] = remind
    ? [
        {
          agent_id: agent.agent_id,
          idx: idx + 1,
          role: 'user',
          content: JSON.stringify([{ type: 'text', text: SUBMIT_REMINDER }]),
          created_at: now,
        },
      ]
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
  if (done) bounds.forget(agent.agent_id);
  if (!result.agent) return STOP;
  if (done) return STOP;
  if (remind) return continueWith(control, result.agent);
  control.savedToolCalls = { turnIdx: idx, rows: toolCalls, uses: toolUses, turns: [...turns, assistantTurn] };
  return continueWith(control, result.agent);
}

async function runToolCalls(
  deps: StepDeps,
  agent: AgentRow,
  turnIdx: number,
  toolUses: ToolUseBlock[],
  control: RunControl,
): Promise<StepOutcome> {
  // Paused, deleted or shutting down in this process since the step began: no call starts (they run on resume).
  if (control.model.signal.aborted) return STOP;
  const savedByThisDriver = control.savedToolCalls?.turnIdx === turnIdx ? control.savedToolCalls : undefined;
  const saved = savedByThisDriver?.rows;
  control.savedToolCalls = undefined;
  const records = new Map(
    (saved ?? (await deps.storage.listToolCalls(agent.agent_id, turnIdx))).map((r) => [r.tool_use_id, r]),
  );
  const box = deps.toolboxes.of(agent);
  const now = () => isoTime(deps.clock.now());
  const results = new Map<string, ToolOutcome>();
  const toRun: Array<{ use: ToolUseBlock; tool: Tool | undefined; record: ToolCallRow }> = [];

  for (const use of toolUses) {
    const record: ToolCallRow = records.get(use.id) ?? {
      agent_id: agent.agent_id,
      tool_use_id: use.id,
      turn_idx: turnIdx,
      name: use.name,
      input: JSON.stringify(use.input ?? {}),
      status: 'pending',
      idempotent: box.get(use.name)?.idempotent ?? true,
      result: null,
      is_error: false,
      updated_at: now(),
    };
    if (record.status === 'finished') {
      results.set(use.id, { content: record.result ?? '', isError: record.is_error });
    } else if (record.status === 'started' && !record.idempotent) {
      results.set(use.id, { content: UNKNOWN_OUTCOME, isError: true });
    } else {
      toRun.push({ use, tool: box.get(use.name), record });
    }
  }

  // One hold covers every priced call of the turn, so either all of them can run or none starts. A price set only in
  // the price table counts too.
  const prices = new Map(toRun.map((c) => [c.use.id, c.tool ? toolReservation(deps.prices, c.tool, c.use.input) : 0]));
  const priced = toRun.filter((c) => prices.get(c.use.id)! > 0);
  const total = [...prices.values()].reduce((a, b) => a + b, 0);
  /** Units metered tools reported (`ctx.meter`), by call. */
  const metered = new Map<string, number>();
  let hold: CreditHold | undefined;
  if (total > 0) {
    const reservation = await reserveCredits(deps, agent, total, 'tool calls', control);
    if (reservation === 'aborted') return STOP; // paused or deleted while waiting: the calls run on resume
    if (!reservation.granted) {
      await stopForCredits(deps, agent, {
        needed: total,
        left: reservation.payable,
        limit: limitName(reservation.refusal),
        what: toRun.length === 1 ? `the price of ${toRun[0]!.use.name}` : 'the prices of its tool calls',
        exact: true,
      });
      return STOP;
    }
    hold = reservation.hold;
  }

  // Calls that must never run twice are recorded as started before they run, and only while the agent is ACTIVE: a
  // pause (of this process or another) that lands first keeps them from starting, and they run after the resume.
  const unsafe = toRun.filter((c) => !c.record.idempotent);
  if (unsafe.length > 0) {
    const started = unsafe.map((c): ToolCallRow => ({ ...c.record, status: 'started', updated_at: now() }));
    if (!(await deps.storage.putToolCalls(started, 'ACTIVE'))) {
      await hold?.release('its calls did not start: the agent is not active');
      return STOP;
    }
  }

  let reported: ProgressReport = {};
  await Promise.all(
    toRun.map(async ({ use, tool }) => {
      const observed: { span?: ToolTelemetry } = {};
      const outcome = await runOneTool(
        deps,
        tool,
        use,
        agent,
        control,
        (u) => {
          reported = { ...reported, ...u };
        },
        (units) => {
          if (Number.isFinite(units) && units > 0) metered.set(use.id, (metered.get(use.id) ?? 0) + units);
        },
        observed,
      );
      results.set(use.id, outcome);
      if (observed.span) {
        const price = prices.get(use.id) ?? 0;
        const unfinishedCall = outcome.suspended !== undefined || (control.toolsAborted && outcome.threw === true);
        const charged =
          unfinishedCall || price === 0
            ? 0
            : tool?.meter
              ? meteredCost(deps.prices, tool, metered.get(use.id) ?? 0, price)
              : price;
        observed.span.end({
          isError: outcome.isError,
          ...(outcome.suspended !== undefined ? { suspended: true } : {}),
          chargedMicros: charged,
          result: outcome.content,
        });
      }
    }),
  );

  // Calls waiting for their sub-agents have no result yet: the others' results are saved (they never run again),
  // the waiting ones stay unfinished, and the coordinator wakes the agent when the children are done.
  const waiting = new Set(toolUses.filter((u) => results.get(u.id)?.suspended !== undefined).map((u) => u.id));
  // Shut down hard or deleted: results cut short by the abort are not results. Those calls stay unfinished and
  // recovery decides (idempotent ones run again, the others are reported as unknown); calls that returned keep their
  // results, so a call that took effect is never reported as unknown.
  const interrupted = new Set(
    control.toolsAborted ? toRun.filter((c) => results.get(c.use.id)!.threw).map((c) => c.use.id) : [],
  );
  const unfinished = new Set([...waiting, ...interrupted]);
  const at = now();
  const finished: ToolCallRow[] = toolUses
    .filter((use) => !unfinished.has(use.id))
    .map((use) => {
      const r = results.get(use.id)!;
      const base = records.get(use.id) ?? toRun.find((c) => c.use.id === use.id)!.record;
      return { ...base, status: 'finished', result: r.content, is_error: r.isError, updated_at: at };
    });
  const settlements: Settlement[] = priced
    .filter((c) => !unfinished.has(c.use.id))
    .map((c) =>
      hold!.settlement({
        kind: 'tool',
        item: c.tool!.name,
        cost: c.tool!.meter
          ? meteredCost(deps.prices, c.tool!, metered.get(c.use.id) ?? 0, prices.get(c.use.id)!)
          : prices.get(c.use.id)!,
        at,
      }),
    );

  // The hold ends with the commit that carries its settlements, or is released when no call it covered finished.
  const holds = hold && settlements.length > 0 ? [hold] : [];

  if (unfinished.size > 0) {
    // A call that must never run twice was marked started; one that suspended did not finish, and runs again when its
    // children are done: it is pending again, so that re-run is not taken for a crash.
    const suspendedAgain = toRun
      .filter((c) => waiting.has(c.use.id) && !c.record.idempotent)
      .map((c): ToolCallRow => ({ ...c.record, status: 'pending', updated_at: at }));
    const result = await deps.storage.commitStep({
      agent_id: agent.agent_id,
      tool_calls: [...finished, ...suspendedAgain],
      settlements,
      patch: {
        ...reportedPatch(reported),
        ...(waiting.size > 0 ? { status_message: results.get([...waiting][0]!)!.suspended! } : {}),
        updated_at: at,
      },
    });
    // A hold no settlement consumed is released: the waiting calls reserve again when they re-run.
    if (holds.length === 0) await hold?.release('no call it covered finished');
    afterCommit(deps, agent, result, [], settlements, holds);
    if (result.agent) {
      for (const id of waiting) {
        const r = results.get(id)!;
        // A call that waits for a time or a wake-up has no children to count: its timer (if any) or a wake-up ends it.
        if (r.wakeAt === undefined) deps.subAgents.waitFor(agent.agent_id, r.waitsFor ?? id);
        else if (r.wakeAt !== null) await deps.wakeAt?.(agent.agent_id, r.wakeAt);
      }
    }
    return STOP;
  }

  const resultBlocks: ToolResultBlock[] = toolUses.map((use) => {
    const r = results.get(use.id)!;
    return { type: 'tool_result', tool_use_id: use.id, content: r.content, ...(r.isError ? { is_error: true } : {}) };
  });
  const pending: PendingResults = {
    turn: {
      agent_id: agent.agent_id,
      idx: turnIdx + 1,
      role: 'user',
      content: JSON.stringify(resultBlocks),
      created_at: at,
    },
    toolCalls: finished,
    settlements,
    holds,
    reported,
  };

  // When every call that ran may run again, its results need not be on disk before the next model turn: they commit
  // with it, one transaction instead of two. A crash in between reruns them; a pause, a failure or running out of
  // credits before that turn commits saves them on their own. A call that must never run twice is saved at once.
  // Calls that report progress (update_plan) are saved at once too, so the caller sees it while the model thinks.
  const rerunnable = toRun.every((c) => c.record.idempotent);
  const quiet = reported.message === undefined && reported.progress === undefined && reported.plan === undefined;
  // A submitted result finishes the agent: its calls' results and the answer commit with the COMPLETED status.
  const completion = toolUses.map((u) => results.get(u.id)?.completion).find((c) => c !== undefined);
  if (completion) return completeWithResult(deps, agent, pending, completion.result);
  if (
    rerunnable &&
    quiet &&
    agent.status === 'ACTIVE' &&
    !control.model.signal.aborted &&
    withinLimits(deps, agent, box)
  ) {
    // The log as this driver left it when it saved the turn with these calls; anything else reads it back.
    const turns = savedByThisDriver?.turns ?? (await deps.storage.listTurns(agent.agent_id));
    if (turns.length === turnIdx + 1) {
      return runModelTurn(deps, agent, [...turns, pending.turn], control, pending);
    }
  }
  const result = await commitToolResults(deps, agent, pending, 'Thinking');
  if (!result.agent) return STOP;
  return continueWith(control, result.agent);
}

/** After a commit: go on while the agent is ACTIVE, handing the committed row to the next step. */
function continueWith(control: RunControl, committed: AgentRow): StepOutcome {
  if (committed.status !== 'ACTIVE') return STOP;
  control.committedRow = committed;
  return CONTINUE;
}

/** Tool results of one turn, held until they are committed (see runToolCalls). */
interface PendingResults {
  turn: TurnRow;
  toolCalls: ToolCallRow[];
  settlements: Settlement[];
  /** The holds `settlements` settle: they end once the commit that carries them is applied. */
  holds: CreditHold[];
  reported: ProgressReport;
}

/** A child's valid `submit_result`: the step's results, the result as its answer, and COMPLETED, in one commit. */
async function completeWithResult(
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

async function commitToolResults(
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

/** Whether the agent may take another model turn (the same limits runStep checks). */
function withinLimits(deps: StepDeps, agent: AgentRow, box: Toolbox): boolean {
  return agent.step_count < box.maxSteps && activeMs(agent, deps.clock.now()) <= deps.limits.maxWallClockMs;
}

/** The agent fields a step's tool calls asked to change through `reportProgress`. */
function reportedPatch(reported: ProgressReport): Pick<AgentPatch, 'progress' | 'status_message' | 'plan'> {
  return {
    ...(reported.message !== undefined ? { status_message: reported.message } : {}),
    ...(reported.progress !== undefined
      ? { progress: Math.min(MAX_PLAN_PROGRESS, Math.max(0, reported.progress)) }
      : {}),
    ...(reported.plan !== undefined ? { plan: JSON.stringify(reported.plan) } : {}),
  };
}

interface ToolOutcome {
  content: string;
  isError: boolean;
  /** Set when the call suspended to wait for its sub-agents: it has no result yet. */
  suspended?: string;
  /** The spawn group it waits for, when not the call's own. */
  waitsFor?: string | undefined;
  /** Set when it waits for a time or a wake-up instead of sub-agents: when to wake it at the latest, or null. */
  wakeAt?: number | null;
  /** Set when the call finished its agent with a result (submit_result). */
  completion?: ToolCompletion;
  /** Set when the tool threw rather than returned. */
  threw?: boolean;
}

async function runOneTool(
  deps: StepDeps,
  tool: Tool | undefined,
  use: ToolUseBlock,
  row: AgentRow,
  control: RunControl,
  report: ToolContext['reportProgress'],
  meter: ToolContext['meter'],
  /** Gets the call's telemetry, started once the call has its lane slot (or at once when it cannot run). */
  observed: { span?: ToolTelemetry } = {},
): Promise<ToolOutcome> {
  const observe = (reservedMicros: number) => {
    observed.span = control.trace?.tool(use, {
      registered: tool !== undefined,
      type: use.name.startsWith('mcp__') ? 'extension' : 'function',
      reservedMicros,
    });
    return observed.span;
  };
  if (!tool) {
    observe(0);
    return { content: `Error: there is no tool named ${JSON.stringify(use.name)}.`, isError: true };
  }
  const parsed = tool.input.safeParse(use.input);
  if (!parsed.success) {
    observe(0);
    return { content: `Error: invalid input for ${tool.name}: ${z.prettifyError(parsed.error)}`, isError: true };
  }
  try {
    const output = await deps.inToolLane(tool.lane, async () => {
      const span = observe(toolReservation(deps.prices, tool, use.input));
      const ctx = createToolContext(deps, row, use, control, report, meter, span?.traceparent ?? null);
      return span ? span.within(async () => tool.run(parsed.data, ctx)) : tool.run(parsed.data, ctx);
    });
    if (output instanceof ToolSuspension) {
      return {
        content: '',
        isError: false,
        suspended: output.statusMessage,
        waitsFor: output.spawnId,
        ...(output.wakeAt !== undefined ? { wakeAt: output.wakeAt } : {}),
      };
    }
    if (output instanceof ToolCompletion) return { content: 'Result submitted.', isError: false, completion: output };
    return { content: clip(renderToolOutput(output), deps.limits.maxToolResultChars), isError: false };
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    return { content: clip(`Error: ${message}`, deps.limits.maxToolResultChars), isError: true, threw: true };
  }
}

function describeToolCalls(box: Toolbox, uses: ToolUseBlock[]): string {
  const first = uses[0]!;
  const tool = box.get(first.name);
  let text = `Calling ${first.name}`;
  if (tool?.describe) {
    const parsed = tool.input.safeParse(first.input);
    if (parsed.success) {
      try {
        text = tool.describe(parsed.data);
      } catch {
        // a describe() that throws only loses its wording
      }
    }
  }
  return uses.length > 1 ? `${text} (+${uses.length - 1} more)` : text;
}

/** After a commit: the holds it settled end (their credits go to waiting reservations), and listeners hear of it. */
function afterCommit(
  deps: StepDeps,
  before: AgentRow,
  result: StepCommitResult,
  messages: MessageRow[],
  settlements: Settlement[],
  holds: readonly CreditHold[],
): void {
  const { events } = deps;
  for (const h of holds) h.settled();
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

/** Tokens of the system prompt and tool definitions: the same for every step, so counted once. */
const fixedTokensCache = new WeakMap<object, number>();
function fixedPromptTokens(system: string, tools: ModelRequest['tools']): number {
  let n = fixedTokensCache.get(tools);
  if (n === undefined) {
    n = estimateTokens(JSON.stringify(tools));
    fixedTokensCache.set(tools, n);
  }
  return n + estimateTokens(system);
}

function toModelMessage(turn: TurnRow): ModelMessage {
  return { role: turn.role, content: parseBlocks(turn.content) };
}

function parseBlocks(content: string): ContentBlock[] {
  return JSON.parse(content) as ContentBlock[];
}

function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}\n[... ${text.length - max} more characters cut]`;
}

function abortedError(): Error {
  const err = new Error('aborted');
  err.name = 'AbortError';
  return err;
}
