/**
 * @module core/credits
 * Prices and the arithmetic of reservations (DESIGN §5). Money is integer micro-credits; 1 credit = $0.01.
 * A model price of N credits per million tokens is exactly N micro-credits per token.
 */
import { z } from 'zod';
import { totalTokens, type ModelRequest, type ModelUsage } from '../models/provider.js';
import type { AgentRow, Settlement } from '../storage/adapter.js';
import type { Tool } from '../tools/define-tool.js';
import { creditsToMicros } from './schemas.js';

export interface ModelPrice {
  /** Credits per million input tokens (cache reads and writes count as input). */
  inputPerMillion: number;
  /** Credits per million output tokens. */
  outputPerMillion: number;
}

export interface PriceTable {
  models: Record<string, ModelPrice>;
  /** Credits per call, by tool name; a tool's own `price` is used when it is not listed here. */
  tools: Record<string, number>;
}

export const DEFAULT_PRICES: PriceTable = {
  models: {
    'svc-1-lite': { inputPerMillion: 100, outputPerMillion: 500 },
    'svc-1-ultra': { inputPerMillion: 500, outputPerMillion: 2_500 },
  },
  tools: {},
};

export const PriceTableSchema = z
  .object({
    models: z
      .record(
        z.string(),
        z
          .object({ inputPerMillion: z.number().min(0).finite(), outputPerMillion: z.number().min(0).finite() })
          .strict(),
      )
      .optional(),
    tools: z.record(z.string(), z.number().min(0).finite()).optional(),
  })
  .strict();

export function mergePrices(overrides: z.infer<typeof PriceTableSchema> | undefined): PriceTable {
  return {
    models: { ...DEFAULT_PRICES.models, ...overrides?.models },
    tools: { ...DEFAULT_PRICES.tools, ...overrides?.tools },
  };
}

/** Micro-credits per token of a model price (rounded up so fractional prices never undercharge). */
function microsPerToken(creditsPerMillion: number): number {
  return creditsPerMillion; // credits per 1e6 tokens == micro-credits per token
}

/** The real cost of a model call, micro-credits. */
export function modelCost(price: ModelPrice, usage: ModelUsage): number {
  const t = totalTokens(usage);
  return Math.ceil(t.input * microsPerToken(price.inputPerMillion) + t.output * microsPerToken(price.outputPerMillion));
}

/**
 * An upper bound on the input tokens of a request. A token always covers at least one byte of UTF-8, so the byte
 * length of everything sent is a bound no tokenizer can exceed; a small per-message allowance covers the framing.
 */
export function inputTokenBound(
  request: Pick<ModelRequest, 'system' | 'messages' | 'tools'>,
  messageBytes?: number,
): number {
  let bytes = Buffer.byteLength(request.system) + 16 + toolBytes(request.tools);
  if (messageBytes !== undefined) return bytes + messageBytes + 8 * request.messages.length;
  for (const m of request.messages) bytes += Buffer.byteLength(JSON.stringify(m.content)) + 8;
  return bytes;
}

/** Tool definitions are the same for every call of a runtime: their size is counted once per list. */
const toolBytesCache = new WeakMap<object, number>();
function toolBytes(tools: ModelRequest['tools']): number {
  let n = toolBytesCache.get(tools);
  if (n === undefined) {
    n = tools.reduce((sum, t) => sum + Buffer.byteLength(JSON.stringify(t)) + 8, 0);
    toolBytesCache.set(tools, n);
  }
  return n;
}

/**
 * Worst-case cost of a model call: the input bound plus `maxTokens` of output. `messageBytes`, when the caller knows
 * it, is the UTF-8 size of the messages' content as JSON (saves serialising them again).
 */
export function modelReservation(price: ModelPrice, request: ModelRequest, messageBytes?: number): number {
  return modelCost(price, { inputTokens: inputTokenBound(request, messageBytes), outputTokens: request.maxTokens });
}

/**
 * The most output tokens whose worst case, together with `inputTokens` of input, costs at most `payable`
 * micro-credits; `Infinity` when output is free. Lets an agent with little left still get a short answer.
 */
export function affordableOutputTokens(price: ModelPrice, inputTokens: number, payable: number): number {
  if (price.outputPerMillion <= 0) return modelCost(price, { inputTokens, outputTokens: 0 }) <= payable ? Infinity : 0;
  let tokens = Math.floor((payable - inputTokens * microsPerToken(price.inputPerMillion)) / price.outputPerMillion);
  // modelCost rounds the sum up: step down until it fits.
  while (tokens > 0 && modelCost(price, { inputTokens, outputTokens: tokens }) > payable) tokens--;
  return Math.max(0, tokens);
}

/** Price of one call of a tool, micro-credits. */
export function toolPrice(prices: PriceTable, name: string, ownPriceCredits: number): number {
  return creditsToMicros(prices.tools[name] ?? ownPriceCredits);
}

/**
 * What a call reserves, micro-credits: its price, or for a metered tool the price of the most units the input lets
 * it use. An input the tool will refuse reserves nothing.
 */
export function toolReservation(prices: PriceTable, tool: Tool, input: unknown): number {
  const price = toolPrice(prices, tool.name, tool.price);
  if (!tool.meter || price === 0) return price;
  const parsed = tool.input.safeParse(input);
  if (!parsed.success) return 0;
  const units = tool.meter.maxUnits(parsed.data);
  return Number.isFinite(units) && units > 0 ? Math.ceil(price * units) : 0;
}

/** What a metered call costs for the units it reported, micro-credits: never more than it reserved. */
export function meteredCost(prices: PriceTable, tool: Tool, units: number, reserved: number): number {
  return Math.min(reserved, Math.ceil(toolPrice(prices, tool.name, tool.price) * units));
}

/** What settles a hold: the ledger row of one model or tool call of an agent, at its real cost (micro-credits). */
export function settlementOf(
  agent: Pick<AgentRow, 'account_id' | 'agent_id' | 'root_id'>,
  reservationId: string,
  charge: { kind: 'model' | 'tool'; item: string; cost: number; at: string; tokensIn?: number; tokensOut?: number },
): Settlement {
  return {
    reservation_id: reservationId,
    root_id: agent.root_id,
    ledger: {
      account_id: agent.account_id,
      agent_id: agent.agent_id,
      kind: charge.kind,
      item: charge.item,
      tokens_in: charge.tokensIn ?? 0,
      tokens_out: charge.tokensOut ?? 0,
      cost: charge.cost,
      created_at: charge.at,
    },
  };
}
