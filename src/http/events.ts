/**
 * @module http/events
 * GET /api/agents/{id}/events: Server-Sent Events for one agent. Every connection starts with the transcript's
 * `message` events and a `status` event (the agent now), then live `status`, `progress` and `message` events. Message
 * events carry `id: <position in the transcript>` (1-based) and nothing else does, so a client that reconnects with
 * `Last-Event-ID` gets exactly the messages it missed. The stream ends after a COMPLETED or FAILED status, or with a
 * `deleted` event, or with a `closed` event: `{"reason":"access"}` when its key was deleted or the subscription lapsed
 * (do not reconnect), `{"reason":"lifetime"}` when it reached its lifetime (reconnect with `Last-Event-ID`; a `retry:`
 * line says after how long). A reader that falls too far behind is dropped without an event, and resumes the same
 * way. Limits: event-streams.ts. Any process on the database serves the stream of any agent, wherever it steps
 * (`AgentRuntime.follow`); positions are the transcript's, so `Last-Event-ID` resumes on another process too.
 */
import type { AgentRuntime } from '../core/agent-runtime.js';
import type { StreamEnd, StreamEndReason, StreamTicket } from './event-streams.js';
import type { Agent, Message } from '../core/schemas.js';
import { isTerminal } from '../base/status.js';

/** A comment line every so often keeps proxies from closing an idle stream. */
const HEARTBEAT_MS = 15_000;
/** The reconnect delay a stream tells the client when it ends at its lifetime. */
const RECONNECT_MS = 1000;
/** A reader that takes nothing for this long while the stream has something to send is dropped. */
const STALL_MS = 20_000;

/** Roughly the bytes an event will take on the wire: enough to tell a reader that keeps up from one that does not. */
function sizeOf(event: Pending): number {
  return event.kind === 'message' ? event.message.text.length + 300 : 1000;
}

type Pending =
  { kind: 'status' | 'progress'; agent: Agent } | { kind: 'message'; message: Message } | { kind: 'deleted' };

/**
 * The event stream of an agent the caller owns. Resolves once the agent is found (rejects with `not_found`
 * otherwise), so a missing agent is an ordinary JSON error rather than an empty stream.
 */
export async function agentEventStream(
  runtime: AgentRuntime,
  agentId: string,
  accountId: string,
  lastEventId: string | null,
  signal: AbortSignal,
  /** The stream's place among the open streams (event-streams.ts); released when it ends. */
  ticket: StreamTicket,
  /** Unsent bytes past which the reader is dropped. */
  slowReaderBytes: number,
  /** Told once, when the stream ends, why (for the access log). */
  onEnd: (reason: StreamEndReason) => void = () => {},
): Promise<Response> {
  let ended = false;
  const ending = (reason: StreamEndReason) => {
    if (ended) return;
    ended = true;
    onEnd(reason);
  };
  // Subscribe before reading, so nothing between the read and the first live event is lost.
  const pending: Pending[] = [];
  let wake: (() => void) | null = null;
  /** About how many bytes the events waiting in `pending` will take (their JSON, roughly). */
  let pendingBytes = 0;
  let tooSlow: (() => void) | null = null;
  const push = (event: Pending) => {
    pending.push(event);
    pendingBytes += sizeOf(event);
    // Live events pile up while the reader does not take what was sent: past the limit it is dropped.
    if (pendingBytes > slowReaderBytes) tooSlow?.();
    wake?.();
  };
  const unsubscribe = [
    runtime.on('agent.status', ({ agent }) => agent.agent_id === agentId && push({ kind: 'status', agent })),
    runtime.on('agent.progress', ({ agent }) => agent.agent_id === agentId && push({ kind: 'progress', agent })),
    runtime.on('agent.message', (e) => e.agent_id === agentId && push({ kind: 'message', message: e.message })),
    runtime.on('agent.deleted', (e) => e.agent_id === agentId && push({ kind: 'deleted' })),
  ];
  let unfollow = () => {};
  const stop = () => {
    unsubscribe.forEach((off) => off());
    unfollow();
  };

  let snapshot: Awaited<ReturnType<AgentRuntime['get']>>;
  try {
    // The agent may step in another process: its changes are relayed to this one's events while the stream is open.
    unfollow = await runtime.follow(agentId);
    snapshot = await runtime.get(agentId, { accountId });
  } catch (error) {
    stop();
    ticket.release();
    throw error;
  }

  const encoder = new TextEncoder();
  const resumeAfter = /^\d{1,9}$/.test(lastEventId?.trim() ?? '') ? Number(lastEventId) : 0;
  const sentMessages = new Set<string>();
  let position = 0;
  let closed = false;
  let heartbeat: ReturnType<typeof setInterval> | undefined;

  const limit = slowReaderBytes;
  /** Set while the stream waits for the reader to take what was sent. */
  let room: (() => void) | null = null;
  const body = new ReadableStream<Uint8Array>(
    {
      start: (controller) => {
        const send = (text: string) => {
          if (!closed) controller.enqueue(encoder.encode(text));
        };
        // A reader too slow is dropped, with what was queued for it, rather than buffered for: it reconnects and
        // resumes with Last-Event-ID.
        const drop = () => {
          if (closed) return;
          ending('slow_reader');
          closed = true;
          clearInterval(heartbeat);
          clearTimeout(stall);
          stop();
          ticket.release();
          controller.error(new Error('the reader fell too far behind'));
          wake?.();
          room?.();
        };
        tooSlow = drop;
        let stall: ReturnType<typeof setTimeout> | undefined;
        /** Resolves once the queue has room (the reader took what was sent); a reader that takes nothing is dropped. */
        const hasRoom = async (): Promise<void> => {
          if ((controller.desiredSize ?? 1) > 0) return;
          await new Promise<void>((resolve) => {
            room = resolve;
            stall = setTimeout(drop, STALL_MS);
          });
          clearTimeout(stall);
          room = null;
        };
        const sendMessage = (message: Message) => {
          if (sentMessages.has(message.message_id)) return;
          sentMessages.add(message.message_id);
          position += 1;
          if (position > resumeAfter) send(`id: ${position}\nevent: message\ndata: ${JSON.stringify(message)}\n\n`);
        };
        const finish = (reason: StreamEndReason) => {
          if (closed) return;
          ending(reason);
          closed = true;
          clearInterval(heartbeat);
          clearTimeout(stall);
          stop();
          ticket.release();
          controller.close();
          wake?.();
          room?.();
        };
        ticket.onEnd = (why: StreamEnd) => {
          if (why === 'lifetime') send(`retry: ${RECONNECT_MS}\n\n`);
          send(`event: closed\ndata: ${JSON.stringify({ reason: why })}\n\n`);
          finish(why);
        };
        const sendStatusAndMaybeFinish = async (kind: 'status' | 'progress', agent: Agent) => {
          if (kind === 'status' && isTerminal(agent.status)) {
            // The final message may be reported after the status; read the transcript so it is not missed.
            try {
              const latest = await runtime.get(agentId, { accountId });
              latest.messages.forEach(sendMessage);
            } catch {
              // deleted meanwhile: the status is still the last thing known
            }
            send(`event: status\ndata: ${JSON.stringify(agent)}\n\n`);
            finish('finished');
            return;
          }
          send(`event: ${kind}\ndata: ${JSON.stringify(agent)}\n\n`);
        };

        send('retry: 2000\n\n');
        heartbeat = setInterval(() => send(': keep-alive\n\n'), HEARTBEAT_MS);
        heartbeat.unref?.();
        signal.addEventListener('abort', () => finish('client_closed'), { once: true });

        void (async () => {
          // One message at a time, as the reader takes them: a long transcript is not queued all at once.
          // Taken off the snapshot as they go, so a reader that stalls midway holds only what it has not had.
          const unsent: Array<Message | undefined> = snapshot.messages;
          for (let i = 0; i < unsent.length; i++) {
            await hasRoom();
            if (closed) return;
            const message = unsent[i]!;
            unsent[i] = undefined;
            sendMessage(message);
          }
          await sendStatusAndMaybeFinish('status', snapshot.agent);
          while (!closed) {
            const event = pending.shift();
            if (!event) {
              await new Promise<void>((resolve) => (wake = resolve));
              wake = null;
              continue;
            }
            pendingBytes -= sizeOf(event);
            await hasRoom();
            if (closed) return;
            if (event.kind === 'message') sendMessage(event.message);
            else if (event.kind === 'deleted') {
              send(`event: deleted\ndata: ${JSON.stringify({ agent_id: agentId, deleted: true })}\n\n`);
              finish('deleted');
            } else await sendStatusAndMaybeFinish(event.kind, event.agent);
          }
        })();
      },
      pull: () => room?.(),
      cancel: () => {
        ending('client_closed');
        closed = true;
        clearInterval(heartbeat);
        stop();
        ticket.release();
        wake?.();
        room?.();
      },
    },
    // A byte count, so that desiredSize says how far the reader is behind.
    { highWaterMark: limit, size: (chunk) => chunk.byteLength },
  );

  return new Response(body, {
    status: 200,
    headers: {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      'x-accel-buffering': 'no',
    },
  });
}
