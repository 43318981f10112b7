/**
 * @module core/background
 * What the runtime lends tools for work an agent has done between its calls (a monitor's checks): charging at a tool's
 * price, a short billed model call, an ASSISTANT message, and a status message while the agent waits. Each goes
 * through the same gate, ledger, storage and events as the agent loop's own, so a balance that cannot pay stops the
 * agent as OUT_OF_CREDITS the way a step would.
 */
import { randomUUID } from 'node:crypto';
import { AgentryError } from '../errors.js';
import type { ModelProvider, ModelRequest } from '../models/provider.js';
import { totalTokens } from '../models/provider.js';
import type { AgentRow, MessageRow, StorageAdapter } from '../storage/adapter.js';
import type { PlatformServices } from '../tools/platform.js';
import { isoTime, monotonicMs, type Clock } from '../base/clock.js';
import type { CreditGate } from './credit-gate.js';
import type { CreditHold, HoldCharge } from './credit-hold.js';
import { modelCost, modelReservation, toolPrice, type PriceTable } from './credits.js';
import type { RuntimeEvents } from './events.js';
import { changeStatus } from './status-change.js';
import { toMessage, toStatusForm } from './records.js';
import { microsToCredits } from './schemas.js';

export interface BackgroundDeps {
  storage: StorageAdapter;
  credits: CreditGate;
  model: ModelProvider;
  prices: PriceTable;
  clock: Clock;
  events: RuntimeEvents;
  inModelLane<T>(fn: () => Promise<T>): Promise<T>;
  /**
   * Whether an agent's account may run it (core/subscription-check.ts), asked before every billed model turn: a
   * turn asked for from outside a step (an MCP server's sampling, a coding agent's bridge, a monitor) must not go on
   * after the subscription is deactivated. Absent: always.
   */
  subscriptions?: { isActive(accountId: string): Promise<boolean> };
}

export type BackgroundServices = Pick<
  PlatformServices,
  'chargeTool' | 'askModel' | 'generate' | 'appendMessage' | 'setStatusMessage'
>;

export function backgroundServices(deps: BackgroundDeps): BackgroundServices {
  const { storage, credits, clock, events } = deps;

  /**
   * Holds `amount` for the agent and answers the hold; on a refusal answers null, after stopping the agent as
   * OUT_OF_CREDITS (what the loop does) unless `stopWhenRefused` is false (a call in flight reports it instead).
   */
  const hold = async (
    agent: AgentRow,
    amount: number,
    what: string,
    stopWhenRefused = true,
  ): Promise<CreditHold | null> => {
    const reservation = await credits.hold({
      account_id: agent.account_id,
      agent_id: agent.agent_id,
      root_id: agent.root_id,
      amount,
      purpose: `background: ${what}`,
    });
    if (reservation.granted) return reservation.hold;
    if (!stopWhenRefused) return null;
    const limit = reservation.refusal === 'tree_cap' ? 'the credit cap of this agent' : 'the account balance';
    await changeStatus(
      deps,
      agent,
      'exhaust_credits',
      { status_message: `Out of credits: ${what} needs ${microsToCredits(amount)} credits, more than ${limit} allows` },
      { mark: true },
    );
    return null;
  };

  /** Settles a hold on its own (a failed settlement releases it) and tells `credits.charged` listeners. */
  const settle = async (agent: AgentRow, held: CreditHold, charge: HoldCharge): Promise<void> => {
    const charged = await held.settle(charge);
    if (events.listenerCount('credits.charged') > 0) {
      events.emit('credits.charged', {
        account_id: agent.account_id,
        agent_id: agent.agent_id,
        kind: charge.kind,
        item: charge.item,
        credits: microsToCredits(charged),
        tokens_in: charge.tokensIn ?? 0,
        tokens_out: charge.tokensOut ?? 0,
      });
    }
  };

  const generate: BackgroundServices['generate'] = async (agentId, turn, options = {}) => {
    const agent = await storage.getAgent(agentId);
    if (!agent) throw new AgentryError('not_found', `Agent ${agentId} not found`);
    if (deps.subscriptions && !(await deps.subscriptions.isActive(agent.account_id))) {
      throw new AgentryError(
        'subscription_inactive',
        'The subscription of this account is not active: the model call was not made',
      );
    }
    const price = deps.prices.models[agent.model];
    if (!price) throw new AgentryError('not_configured', `no price is configured for model ${agent.model}`);
    const request: ModelRequest = { model: agent.model, ...turn, agentId };
    // As in the loop: a thinking model's max_tokens (and hold) covers its thinking besides the answer asked for.
    request.maxTokens += deps.model.thinkingTokens?.(agent.model) ?? 0;
    // The same strict bound as the loop's: a call can never cost more than it held.
    const worstCase = modelReservation(price, request);
    const stopWhenRefused = options.signal === undefined;
    const held = await hold(agent, worstCase, 'a model call', stopWhenRefused);
    if (held === null) {
      throw new AgentryError(
        'insufficient_credits',
        `The agent is out of credits: a model call needs up to ${microsToCredits(worstCase)} credits and was not made`,
      );
    }
    let response;
    let latencyMs = 0;
    try {
      // The latency is the provider's alone, from inside the lane (as a step's model call measures it).
      response = await deps.inModelLane(async () => {
        const sent = monotonicMs(clock);
        const answer = await deps.model.generate(request, { signal: options.signal ?? new AbortController().signal });
        latencyMs = Math.max(0, Math.round(monotonicMs(clock) - sent));
        return answer;
      });
    } catch (err) {
      await held.release('the model call did not answer');
      throw err;
    }
    const tokens = totalTokens(response.usage);
    await settle(agent, held, {
      kind: 'model',
      item: agent.model,
      tokensIn: tokens.input,
      tokensOut: tokens.output,
      cost: Math.min(worstCase, modelCost(price, response.usage)),
      at: isoTime(clock.now()),
      latencyMs,
    });
    return response;
  };

  return {
    async chargeTool(agentId, toolName, ownPrice, units = 1) {
      const agent = await storage.getAgent(agentId);
      if (!agent) return false;
      const amount = Math.ceil(toolPrice(deps.prices, toolName, ownPrice) * units);
      if (amount === 0) return true;
      const held = await hold(agent, amount, `a ${toolName} check`);
      if (held === null) return false;
      await settle(agent, held, { kind: 'tool', item: toolName, cost: amount, at: isoTime(clock.now()) });
      return true;
    },

    async askModel(agentId, { system, prompt, maxTokens = 256 }) {
      const response = await generate(agentId, {
        system,
        messages: [{ role: 'user', content: [{ type: 'text', text: prompt }] }],
        tools: [],
        maxTokens,
      });
      return response.content
        .filter((b) => b.type === 'text')
        .map((b) => (b as { text: string }).text)
        .join('\n')
        .trim();
    },

    generate,

    async appendMessage(agentId, text) {
      const at = isoTime(clock.now());
      const message: MessageRow = {
        message_id: randomUUID(),
        agent_id: agentId,
        role: 'ASSISTANT',
        text,
        timestamp: at,
      };
      const result = await storage.commitStep({ agent_id: agentId, messages: [message], patch: { updated_at: at } });
      if (!result.agent) return false;
      if (events.listenerCount('agent.message') > 0) {
        events.emit('agent.message', { agent_id: agentId, message: toMessage(message) });
      }
      return true;
    },

    async setStatusMessage(agentId, message, ifStartsWith) {
      const agent = await storage.getAgent(agentId);
      const prefixes = typeof ifStartsWith === 'string' ? [ifStartsWith] : ifStartsWith;
      if (!agent || agent.status !== 'ACTIVE' || !prefixes.some((p) => agent.status_message.startsWith(p))) return;
      if (agent.status_message === message) return;
      // A compare-and-set on the status: a pause that lands first keeps saying "Paused".
      const updated = await storage.changeStatus(
        agentId,
        { from: ['ACTIVE'], to: 'ACTIVE', patch: { status_message: message } },
        isoTime(clock.now()),
      );
      if (updated && events.listenerCount('agent.progress') > 0) {
        events.emit('agent.progress', { agent: toStatusForm(updated) });
      }
    },
  };
}
