/**
 * @module core/runtime-arguments
 * The zod schemas of `AgentRuntime` method arguments that are not request bodies (those are in core/schemas.ts):
 * ids, the account scope, `waitFor` options and `Idempotency-Key` records. Checked at every call.
 */
import { z } from 'zod';
import { AgentStatusSchema } from './schemas.js';

export const WaitForOptionsSchema = z
  .object({
    until: z.array(AgentStatusSchema).min(1).optional(),
    signal: z.custom<AbortSignal>((v) => v instanceof AbortSignal, 'must be an AbortSignal').optional(),
    accountId: z.string().optional(),
  })
  .strict();

export const ScopeId = z.string().min(1).max(200);
export const ScopeSchema = z.object({ accountId: ScopeId.optional() }).strict();
export const IdempotencyKey = z.string().min(1).max(255);
export const IdempotencyRecordSchema = z
  .object({
    account_id: ScopeId,
    key: IdempotencyKey,
    request_hash: z.string(),
    response: z.string(),
    status: z.number().int(),
    created_at: z.string(),
  })
  .strict();
export const AgentIdSchema = z.string().min(1).max(200);
