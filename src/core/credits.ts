/**
 * @module core/credits
 * Prices and the arithmetic of reservations. Money is integer micro-credits; 1 credit = $0.01.
 * A model price of N credits per million tokens is exactly N micro-credits per token.
 */
import { z } from 'zod';
import type { ModelRequest, ModelUsage } from '../models/provider.js';
import type { AgentRow, Settlement } from '../storage/adapter.js';
import type { Tool } from '../tools/define-tool.js';
import { creditsToMicros } from './schemas.js';

export interface ModelPrice {
  /** Credits per million input tokens that are neither read from nor written to the prompt cache. */
  inputPerMillion: number;
  /** Credits per million output tokens (thinking tokens are output). */
  outputPerMillion: number;
  /**
   * Credits per million tokens written to the prompt cache (`cache_creation_input_tokens`).
   * @default 1.25 × inputPerMillion, as Anthropic bills a 5-minute cache write
   */
  cacheWritePerMillion?: number;
  /**
   * Credits per million tokens read from the prompt cache (`cache_read_input_tokens`).
   * @default 0.1 × inputPerMillion, as Anthropic bills a cache hit
   */
  cacheReadPerMillion?: number;
}

/** The cache-write price when a table does not give one: this times the input price. */
export const CACHE_WRITE_MULTIPLIER = 1.25;
/** The cache-read price when a table does not give one: this times the input price. */
export const CACHE_READ_MULTIPLIER = 0.1;

/** A model's cache-write price, credits per million tokens. */
export function cacheWritePrice(price: ModelPrice): number {
  return price.cacheWritePerMillion ?? price.inputPerMillion * CACHE_WRITE_MULTIPLIER;
}

/** A model's cache-read price, credits per million tokens. */
export function cacheReadPrice(price: ModelPrice): number {
  return price.cacheReadPerMillion ?? price.inputPerMillion * CACHE_READ_MULTIPLIER;
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
          .object({
            inputPerMillion: z.number().min(0).finite(),
            outputPerMillion: z.number().min(0).finite(),
            cacheWritePerMillion: z.number().min(0).finite().optional(),
            cacheReadPerMillion: z.number().min(0).finite().optional(),
          })
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

/**
 * The real cost of a model call, micro-credits: uncached input, cache writes, cache reads and output each at its own
 * price, rounded up once.
 *
 * @example
 * modelCost(DEFAULT_PRICES.models['svc-1-ultra']!, { inputTokens: 10, cacheCreationInputTokens: 100, cacheReadInputTokens: 1_000, outputTokens: 5 })
 * // -> 10 × 500 + 100 × 625 + 1,000 × 50 + 5 × 2,500 = 130,000
 */
export function modelCost(price: ModelPrice, usage: ModelUsage): number {
  return Math.ceil(
    usage.inputTokens * microsPerToken(price.inputPerMillion) +
      (usage.cacheCreationInputTokens ?? 0) * microsPerToken(cacheWritePrice(price)) +
      (usage.cacheReadInputTokens ?? 0) * microsPerToken(cacheReadPrice(price)) +
      usage.outputTokens * microsPerToken(price.outputPerMillion),
  );
}

/**
 * The most a call with `inputTokens` of input and `outputTokens` of output can cost, micro-credits. A call that may
 * write the prompt cache (`cached`) can be billed every input token at the cache-write price (no hit, all written);
 * one sent without `cache_control` is billed at the plain input price.
 */
export function modelHold(price: ModelPrice, inputTokens: number, outputTokens: number, cached: boolean): number {
  const inputPrice = cached ? Math.max(price.inputPerMillion, cacheWritePrice(price)) : price.inputPerMillion;
  return Math.ceil(inputTokens * microsPerToken(inputPrice) + outputTokens * microsPerToken(price.outputPerMillion));
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
  return modelHold(price, inputTokenBound(request, messageBytes), request.maxTokens, request.promptCache !== false);
}

/**
 * The most output tokens whose worst case, together with `inputTokens` of input, costs at most `payable`
 * micro-credits; `Infinity` when output is free. Lets an agent with little left still get a short answer.
 */
export function affordableOutputTokens(price: ModelPrice, inputTokens: number, payable: number, cached = true): number {
  if (price.outputPerMillion <= 0) return modelHold(price, inputTokens, 0, cached) <= payable ? Infinity : 0;
  const inputPrice = cached ? Math.max(price.inputPerMillion, cacheWritePrice(price)) : price.inputPerMillion;
  let tokens = Math.floor((payable - inputTokens * microsPerToken(inputPrice)) / price.outputPerMillion);
  // modelHold rounds the sum up: step down until it fits.
  while (tokens > 0 && modelHold(price, inputTokens, tokens, cached) > payable) tokens--;
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
  charge: {
    kind: 'model' | 'tool';
    item: string;
    cost: number;
    at: string;
    tokensIn?: number;
    tokensOut?: number;
    /** Of `tokensIn`, written to and read from the prompt cache. */
    tokensCacheWrite?: number;
    tokensCacheRead?: number;
    /** A model call's latency, ms (`LedgerRow.latency_ms`). */
    latencyMs?: number;
  },
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
      ...(charge.tokensCacheWrite ? { tokens_cache_write: charge.tokensCacheWrite } : {}),
      ...(charge.tokensCacheRead ? { tokens_cache_read: charge.tokensCacheRead } : {}),
      ...(charge.latencyMs === undefined ? {} : { latency_ms: charge.latencyMs }),
      cost: charge.cost,
      created_at: charge.at,
    },
  };
}
