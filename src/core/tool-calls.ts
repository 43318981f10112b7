/**
 * @module core/tool-calls
 * The tool-call phase of a step: the calls the last model turn asked for, run together, and their results committed.
 * One credit hold covers every priced call of the turn, so either all of them can run or none starts. When every call
 * may run again, the results go on into the next model turn and commit with it (one transaction instead of two); a
 * call that must never run twice, progress the caller should see, a call waiting for sub-agents, or a submitted
 * result commits at once.
 */
import { isoTime } from '../base/clock.js';
import type { CreditHold } from './credit-hold.js';
import { meteredCost, toolReservation } from './credits.js';
import { runModelTurn } from './model-turn.js';
import {
  afterCommit,
  commitToolResults,
  completeWithResult,
  continueWith,
  reportedPatch,
  type PendingResults,
} from './step-commit.js';
import { limitName, reserveCredits, stopForCredits } from './step-credits.js';
import { withinLimits } from './step-limits.js';
import { STOP, type RunControl, type StepDeps, type StepOutcome } from './step-types.js';
import type { ToolTelemetry } from './telemetry.js';
import { runOneTool, type ToolOutcome } from './tool-call.js';
import { turnFromBlocks } from './turn-log.js';
import type { ToolResultBlock, ToolUseBlock } from '../models/provider.js';
import type { AgentRow, Settlement, ToolCallRow } from '../storage/adapter.js';
import type { ProgressReport, Tool } from '../tools/define-tool.js';

/** The result the model gets for a call that must never run twice and whose process died while it ran. */
const UNKNOWN_OUTCOME =
  'The outcome of this call is unknown: the process running it stopped before its result was saved. ' +
  'It was not repeated, because this tool is not safe to run twice. Check its effect before trying again.';

/**
 * Runs the tool calls a saved model turn asked for and commits their results: calls that finished before are not run
 * again, a call that must never run twice and was started by a process that died is reported as of unknown outcome,
 * the others run at once, under one credit hold for all the priced ones.
 */
export async function runToolCalls(
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
  // The hold ends while its calls run only when the agent was deleted (the gate ended its holds, storage dropped them):
  // there is no agent left to commit the results to.
  if (hold && !hold.isOpen) return STOP;
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
    turn: turnFromBlocks(agent.agent_id, turnIdx + 1, 'user', resultBlocks, at),
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
