/**
 * @module tools/builtin/message-person
 * `message_person` (README.md#e-mail-and-sms-message_person): e-mail or SMS to a person on the operator's allowlist, at
 * most once. The work is the {@link Messenger}'s (messaging/outbox.ts); this file is the tool the model sees. Not
 * idempotent: after a crash a started call is never run again, and its outbox entry says `unknown`.
 */
import { z } from 'zod';
import type { Messenger } from '../../messaging/outbox.js';
import { defineTool, type Tool } from '../define-tool.js';

export const MESSAGE_PERSON_TOOL_NAME = 'message_person';

const MessagePersonInput = z.object({
  channel: z.enum(['email', 'sms']).describe('email or sms'),
  to: z
    .string()
    .min(1)
    .max(320)
    .describe('A bare e-mail address (name@example.com) or a phone number in international form (+49 30 1234567)'),
  subject: z
    .string()
    .max(1_000)
    .optional()
    .describe('The e-mail subject, one line (required for email; not used for sms)'),
  body: z.string().min(1).max(100_000).describe('Plain text'),
});

export interface MessagePersonToolOptions {
  messenger: Messenger;
  /** Credits per call (an SMS costs about a cent). @default 1 */
  price?: number;
}

/**
 * The message_person tool.
 *
 * @example
 * const { messenger } = messagingFromConfig({ allow: ['ada@example.com'] }, process.env, undefined);
 * const tool = messagePersonTool({ messenger });
 */
export function messagePersonTool(options: MessagePersonToolOptions): Tool<z.input<typeof MessagePersonInput>> {
  const { messenger } = options;
  return defineTool({
    name: MESSAGE_PERSON_TOOL_NAME,
    description:
      'Send a short e-mail or SMS to a person. Only recipients the operator allowed can be written to, and a ' +
      'message is sent at most once: if the result says the outcome is unknown, do not send it again, tell the user. ' +
      'Returns {message_id, status, provider_id}.',
    input: MessagePersonInput,
    price: options.price ?? 1,
    // Never re-run after a crash: a second run could message the person twice.
    idempotent: false,
    // Quoted: `to` is not checked yet here, and a status message is no place for control characters.
    describe: ({ channel, to }) => `Sending ${channel === 'sms' ? 'an SMS' : 'an e-mail'} to ${JSON.stringify(to)}`,
    async run(input, ctx) {
      const m = MessagePersonInput.parse(input);
      const result = await messenger.send(m, {
        agentId: ctx.agent.agent_id,
        toolUseId: ctx.toolCallId,
        signal: ctx.signal,
      });
      return { ...result };
    },
  });
}
