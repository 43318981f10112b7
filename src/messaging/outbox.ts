/**
 * @module messaging/outbox
 * What `message_person` does with a message, in order: check it (transport configured, recipient valid and allowed,
 * subject and body), record the attempt in the outbox as `queued` — on disk, with the opt-out and rate-limit checks
 * in the same write — and only then hand it to the transport, then record how it ended. After a crash, attempts
 * still `queued` may have left: {@link Messenger.attach} marks them `unknown`, and nothing sends them again (the
 * runtime tells the model that the call's outcome is unknown, since the tool is not idempotent).
 */
import { createHash, randomUUID } from 'node:crypto';
import { isoTime, type Clock } from '../base/clock.js';
import { AgentryError } from '../errors.js';
import type { OutboxRefusal, OutboxRow, StorageAdapter } from '../storage/adapter.js';
import { MessageSendError, type MessageChannel, type MessageTransport, type SentMessage } from './message-transport.js';
import { checkBody, checkSubject, normaliseRecipient, refused, type RecipientAllowList } from './recipients.js';

/** Rate limits and size caps of `message_person`. */
export interface MessagingLimits {
  /** Attempts one agent may make in a sliding window. @default 10 per hour */
  perAgent: { max: number; windowS: number };
  /** Attempts all the agents of one account may make together in a sliding window. @default 100 per day */
  perAccount: { max: number; windowS: number };
  /** Characters of a body at most. @default e-mail 20,000; SMS 1,600 (Twilio's own limit) */
  maxBodyChars: { email: number; sms: number };
}

export const DEFAULT_MESSAGING_LIMITS: MessagingLimits = {
  perAgent: { max: 10, windowS: 3_600 },
  perAccount: { max: 100, windowS: 86_400 },
  maxBodyChars: { email: 20_000, sms: 1_600 },
};

/** The `error` of an attempt found `queued` when the runtime opened. */
export const UNKNOWN_AFTER_CRASH =
  'The process stopped after this message was recorded and before the provider answered: it may have been sent. ' +
  'It is never sent again automatically.';

/** What `message_person` answers the model. */
export interface MessageResult {
  message_id: string;
  status: 'sent';
  provider_id?: string;
}

export interface MessengerOptions {
  /** At most one transport per channel. */
  transports: ReadonlyMap<MessageChannel, MessageTransport>;
  /** What to set for a channel that has no transport. */
  missing: Record<MessageChannel, string>;
  allow: RecipientAllowList;
  limits: MessagingLimits;
}

/** One call's message as the model gave it. */
export interface MessageRequest {
  channel: MessageChannel;
  to: string;
  subject?: string | undefined;
  body: string;
}

const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest('hex');

function window(seconds: number): string {
  if (seconds % 86_400 === 0) return seconds === 86_400 ? 'day' : `${seconds / 86_400} days`;
  if (seconds % 3_600 === 0) return seconds === 3_600 ? 'hour' : `${seconds / 3_600} hours`;
  return `${seconds} seconds`;
}

/**
 * What the outbox needs of the runtime, given by `attach`. The tool platform's `PlatformServices` has all of it;
 * messaging names only what it uses, so that it stays below the tools layer.
 */
export interface OutboxServices {
  storage: StorageAdapter;
  clock: Clock;
  /** False for an admin runtime beside a live one: attempts in flight there are not ours to repair. */
  drivesAgents: boolean;
}

/** The sending side of `message_person`: one per runtime, given the runtime's storage and clock by `attach`. */
export class Messenger {
  private services: OutboxServices | undefined;

  constructor(private readonly options: MessengerOptions) {}

  /**
   * Keeps the runtime's services. A runtime that drives agents first marks attempts a crash left `queued` as
   * `unknown`; an admin runtime beside a live one (`scheduler: 'manual'`) must not touch attempts in flight there.
   */
  async attach(services: OutboxServices): Promise<OutboxRow[]> {
    this.services = services;
    if (!services.drivesAgents) return [];
    return services.storage.markQueuedOutboxUnknown(UNKNOWN_AFTER_CRASH);
  }

  /** Checks, records, sends and records the outcome of one message. Throws with a message for the model. */
  async send(
    request: MessageRequest,
    call: { agentId: string; toolUseId: string; signal: AbortSignal },
  ): Promise<MessageResult> {
    const services = this.services;
    if (!services) throw new AgentryError('internal_error', 'message_person runs only inside an agent runtime');
    const { channel } = request;
    const transport = this.options.transports.get(channel);
    if (!transport) throw new AgentryError('not_configured', this.options.missing[channel]);
    if (this.options.allow.empty) {
      throw new AgentryError(
        'not_configured',
        'message_person may not write to anyone yet: the recipient allowlist is empty. The operator sets ' +
          'AGENTRY_MESSAGE_ALLOW (comma-separated addresses, @domains and +number prefixes) or ' +
          'builtinTools.messaging.allow',
      );
    }
    const to = await normaliseRecipient(channel, request.to);
    const subject = checkSubject(channel, request.subject);
    checkBody(channel, request.body, this.options.limits.maxBodyChars[channel]);
    if (!this.options.allow.allows(channel, to)) {
      throw refused(
        `${to} is not on the recipient allowlist; only the operator can add recipients (AGENTRY_MESSAGE_ALLOW)`,
      );
    }
    const { storage, clock } = services;
    const agent = await storage.getAgent(call.agentId);
    if (!agent) throw new AgentryError('not_found', `Agent ${call.agentId} was not found`);
    const bodyHash = sha256(request.body);
    // The same message to the same person whose first attempt may have left (a crash): never again on its own.
    const earlier = (await storage.listOutbox(agent.agent_id)).find(
      (r) => r.status === 'unknown' && r.channel === channel && r.to === to && r.body_hash === bodyHash,
    );
    if (earlier) {
      throw refused(
        `the same message to ${to} (message ${earlier.message_id}, ${earlier.created_at}) may already have been ` +
          'sent before the runtime stopped; it is not sent twice. Tell the user it may have arrived.',
      );
    }
    const now = clock.now();
    const { perAgent, perAccount } = this.options.limits;
    const row: OutboxRow = {
      message_id: randomUUID(),
      agent_id: agent.agent_id,
      account_id: agent.account_id,
      tool_use_id: call.toolUseId,
      channel,
      to,
      subject: subject ?? null,
      body_hash: bodyHash,
      status: 'queued',
      provider_id: null,
      error: null,
      created_at: isoTime(now),
      sent_at: null,
    };
    const refusal = await storage.queueOutbox(row, {
      agent: { max: perAgent.max, since: isoTime(now - perAgent.windowS * 1000) },
      account: { max: perAccount.max, since: isoTime(now - perAccount.windowS * 1000) },
    });
    if (refusal) throw this.refusalError(refusal, to);
    // Recorded (on disk): from here on, a crash leaves an attempt that is never sent again.
    let sent: SentMessage;
    try {
      sent = await transport.send(
        { message_id: row.message_id, channel, to, ...(subject ? { subject } : {}), body: request.body },
        { signal: call.signal },
      );
    } catch (err) {
      throw await this.recordFailure(err, row);
    }
    await storage.finishOutbox(row.message_id, {
      status: 'sent',
      provider_id: sent.provider_id,
      error: null,
      sent_at: isoTime(clock.now()),
    });
    return {
      message_id: row.message_id,
      status: 'sent',
      ...(sent.provider_id ? { provider_id: sent.provider_id } : {}),
    };
  }

  /**
   * Ends an attempt whose transport threw: `failed` when it surely did not leave, `unknown` otherwise (an error that is
   * not a {@link MessageSendError} included), an opt-out remembered. Returns the error for the model.
   */
  private async recordFailure(err: unknown, row: OutboxRow): Promise<MessageSendError> {
    const { storage, clock } = this.services!;
    const failure = MessageSendError.isMessageSendError(err)
      ? err
      : new MessageSendError('outcome_unknown', `sending failed unexpectedly (${String(err)}); it may have been sent`, {
          cause: err,
        });
    const at = isoTime(clock.now());
    await storage.finishOutbox(row.message_id, {
      status: failure.notSent ? 'failed' : 'unknown',
      provider_id: null,
      error: failure.message,
      sent_at: null,
    });
    if (failure.failure === 'opted_out') {
      await storage.putOptOut({
        account_id: row.account_id,
        channel: row.channel,
        recipient: row.to,
        reason: failure.message,
        at,
      });
    }
    const prefix = failure.notSent
      ? `Not sent (message ${row.message_id}, outbox status failed)`
      : `Outcome unknown (message ${row.message_id}, outbox status unknown; it is not sent again)`;
    return new MessageSendError(failure.failure, `${prefix}: ${failure.message}`, {
      cause: err,
      ...(failure.providerCode !== undefined ? { providerCode: failure.providerCode } : {}),
    });
  }

  private refusalError(refusal: OutboxRefusal, to: string): AgentryError {
    const { perAgent, perAccount } = this.options.limits;
    switch (refusal.reason) {
      case 'opted_out':
        return refused(
          `${to} opted out of messages from this account on ${refusal.opt_out.at} (${refusal.opt_out.reason}); ` +
            'they are not written to again',
        );
      case 'agent_rate':
        return new AgentryError(
          'rate_limited',
          `Not sent: this agent has sent ${refusal.count} messages in the last ${window(perAgent.windowS)}, the ` +
            `most it may (${perAgent.max} per ${window(perAgent.windowS)}). Try again later or tell the user.`,
        );
      case 'account_rate':
        return new AgentryError(
          'rate_limited',
          `Not sent: this account's agents have sent ${refusal.count} messages in the last ` +
            `${window(perAccount.windowS)}, the most they may (${perAccount.max} per ${window(perAccount.windowS)}).`,
        );
      case 'exists':
        return refused(
          `this tool call already made its one attempt (message ${refusal.existing.message_id}, ` +
            `${refusal.existing.status})`,
        );
    }
  }

  async close(): Promise<void> {
    await Promise.all([...this.options.transports.values()].map((t) => t.close?.()));
  }
}
