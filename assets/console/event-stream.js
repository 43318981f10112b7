// Server-Sent Events over fetch, so that the console decides how to reconnect: after a dropped connection it says so,
// then asks again with Last-Event-ID (the id of the last message it got), and the server sends only what it missed.
import { errorOf } from './api.js';

const RETRY_MIN_MS = 250;
const RETRY_MAX_MS = 2000;

/**
 * Opens the stream at `url`. `onEvent({event, data, id})` gets each event; `onState('live' | 'disconnected')` each
 * change of the connection; `onRefused(error)` a final 401/404. Returns `close()`, which ends it for good.
 */
export function openEventStream(url, { onEvent, onState, onRefused }) {
  let lastEventId = null;
  let closed = false;
  let controller = null;

  async function run() {
    let retry = RETRY_MIN_MS;
    while (!closed) {
      controller = new AbortController();
      try {
        const headers = { accept: 'text/event-stream' };
        if (lastEventId !== null) headers['last-event-id'] = lastEventId;
        const response = await fetch(url, {
          headers,
          signal: controller.signal,
          cache: 'no-store',
          credentials: 'same-origin',
        });
        if (response.status === 401 || response.status === 403 || response.status === 404) {
          closed = true;
          onRefused(await errorOf(response));
          return;
        }
        if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
        onState('live');
        retry = RETRY_MIN_MS;
        await readEvents(response.body, (event) => {
          if (event.id !== undefined) lastEventId = event.id;
          if (!closed) onEvent(event);
        });
      } catch {
        // a dropped or refused connection: said below, then tried again
      }
      if (closed) return;
      onState('disconnected');
      await new Promise((resolve) => setTimeout(resolve, retry));
      retry = Math.min(retry * 2, RETRY_MAX_MS);
    }
  }

  run();
  return () => {
    closed = true;
    if (controller) controller.abort();
  };
}

/** Reads an event stream body to its end, calling `dispatch` per event (text/event-stream parsing rules). */
async function readEvents(body, dispatch) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let event = { event: 'message', data: [], id: undefined };
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    buffer += value;
    const lines = buffer.split(/\r\n|\r|\n/);
    buffer = lines.pop();
    for (const line of lines) {
      if (line === '') {
        if (event.data.length > 0) dispatch({ event: event.event, data: event.data.join('\n'), id: event.id });
        event = { event: 'message', data: [], id: undefined };
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon === -1 ? line : line.slice(0, colon);
      let value = colon === -1 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') event.event = value;
      else if (field === 'data') event.data.push(value);
      else if (field === 'id') event.id = value;
    }
  }
}
