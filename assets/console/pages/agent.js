// One agent, live: its status, progress and transcript arrive over one event stream (closed when the page closes;
// after a dropped connection it says "disconnected" and catches up with Last-Event-ID, never showing a message
// twice). What the stream does not carry (tool calls, artifacts, monitors, outbox, children) is read again after
// each change, at most once a second.
import { call, root } from '../api.js';
import { count, credits, fact, h, percent, replace, statusBadge, time } from '../dom.js';
import { openEventStream } from '../event-stream.js';
import { childrenList } from './children.js';

const TERMINAL = new Set(['COMPLETED', 'FAILED']);
const DETAIL_EVERY_MS = 1000;

export function agentPage(main, [agentId], app) {
  let agent = null;
  let busy = false;
  let stopped = false;
  let closeStream = null;
  let detailTimer = null;
  let detailAgain = false;
  const seen = new Set();

  const title = h('h1', { class: 'goal' }, 'Agent');
  const connection = h('span', { class: 'connection', role: 'status' }, 'connecting');
  const status = h('span');
  const progress = h('progress', { max: 1, value: 0, 'aria-label': 'Progress' });
  const progressText = h('span');
  const statusMessage = h('p', { class: 'status-message' });
  const facts = h('dl', { class: 'facts' });
  const pause = h('button', { type: 'button', onclick: () => control('pause') }, 'Pause');
  const resume = h('button', { type: 'button', onclick: () => control('resume') }, 'Resume');
  const del = h('button', { type: 'button', class: 'danger', onclick: askDelete }, 'Delete');
  const confirmBox = h('div', { class: 'confirm', hidden: true });
  const controlError = h('p', { role: 'alert', class: 'error' });
  const transcript = h('ol', { class: 'transcript', 'aria-label': 'Transcript' });
  const toolCalls = h('div');
  const artifacts = h('div');
  const monitors = h('div');
  const outbox = h('div');
  // The children's first page is asked for at once, beside the agent itself: for a tree of 10,000 it is the first
  // screen, and waiting for the agent first would add a round trip. Shown once the agent says it has children.
  const children = childrenList(agentId);
  let childrenShown = false;
  const counts = h('p', { class: 'counts' });
  const childrenSection = h(
    'section',
    { class: 'card', hidden: true, 'aria-labelledby': 'sub-agents' },
    h('h2', { id: 'sub-agents' }, 'Sub-agents'),
    counts,
    children.element,
  );

  main.append(
    h('p', {}, h('a', { href: `${root}/agents`, 'data-nav': true }, '← Back to the list')),
    h(
      'section',
      { class: 'card' },
      title,
      h('div', { class: 'row' }, status, progress, progressText, connection),
      statusMessage,
      facts,
      h('div', { class: 'row controls' }, pause, resume, del),
      confirmBox,
      controlError,
    ),
    childrenSection,
    h('section', { class: 'card' }, h('h2', {}, 'Transcript'), transcript),
    h('section', { class: 'card' }, h('h2', {}, 'Tool calls'), toolCalls),
    h('section', { class: 'card' }, h('h2', {}, 'Artifacts'), artifacts),
    h('section', { class: 'card' }, h('h2', {}, 'Monitors'), monitors),
    h('section', { class: 'card' }, h('h2', {}, 'Outbox'), outbox),
  );

  function showAgent(next) {
    agent = { ...agent, ...next };
    title.textContent = agent.goal;
    replace(status, statusBadge(agent.status));
    progress.value = agent.progress;
    progressText.textContent = percent(agent.progress);
    statusMessage.textContent = agent.status_message ?? '';
    replace(
      facts,
      fact('Model', agent.model),
      fact('Tokens', count(agent.token_count ?? 0)),
      fact('Credits spent', credits(agent.credits_spent ?? 0)),
      fact('Messages', count(agent.message_count ?? 0)),
      fact('Created', time(agent.created_at)),
      fact('Updated', time(agent.updated_at)),
      agent.parent_id
        ? fact('Parent', h('a', { href: `${root}/agents/${agent.parent_id}`, 'data-nav': true }, 'parent agent'))
        : null,
    );
    syncControls();
  }

  /** Buttons follow the status, and none works while a request is in flight (a double click sends one). */
  function syncControls() {
    const s = agent?.status;
    pause.disabled = busy || !(s === 'ACTIVE' || s === 'STARTING_UP');
    resume.disabled = busy || !(s === 'PAUSED' || s === 'OUT_OF_CREDITS');
    del.disabled = busy || !agent;
  }

  function addMessage(message) {
    if (seen.has(message.message_id)) return;
    seen.add(message.message_id);
    transcript.append(
      h(
        'li',
        { class: `message ${message.role === 'USER' ? 'user' : 'assistant'}` },
        h('div', { class: 'meta' }, message.role === 'USER' ? 'Goal' : 'Agent', ' · ', time(message.timestamp)),
        // Agent text is shown as text (white-space: pre-wrap), never parsed as HTML or Markdown.
        h('div', { class: 'text' }, message.text),
      ),
    );
  }

  function showDetail(detail) {
    showAgent(detail.agent);
    detail.messages.forEach(addMessage);
    replace(
      toolCalls,
      detail.tool_calls.length
        ? detail.tool_calls.map((c) =>
            h(
              'details',
              { class: `tool-call${c.is_error ? ' failed' : ''}` },
              h(
                'summary',
                {},
                h('code', {}, c.name),
                ' · ',
                c.status,
                c.credits === null ? '' : ` · ${credits(c.credits)} credits`,
              ),
              h('div', { class: 'meta' }, 'Input'),
              h('pre', {}, pretty(c.input)),
              h('div', { class: 'meta' }, 'Result'),
              h('pre', {}, c.result === null ? '(not finished)' : pretty(c.result)),
            ),
          )
        : h('p', { class: 'muted' }, 'No tool calls.'),
    );
    const list = detail.agent.artifacts ?? [];
    replace(
      artifacts,
      list.length
        ? h(
            'ul',
            {},
            list.map((a) =>
              h(
                'li',
                {},
                h('a', { href: `${root}/api/agents/${agentId}/artifacts/${a.artifact_id}`, download: '' }, a.name),
                ` · ${a.mime_type} · ${count(a.size)} bytes`,
              ),
            ),
          )
        : h('p', { class: 'muted' }, 'No artifacts.'),
    );
    const watched = detail.agent.monitors ?? [];
    replace(
      monitors,
      watched.length
        ? h(
            'ul',
            {},
            watched.map((m) => h('li', {}, h('code', {}, m.url), ` · ${m.status} · ${count(m.changes ?? 0)} changes`)),
          )
        : h('p', { class: 'muted' }, 'No monitors.'),
    );
    replace(
      outbox,
      detail.outbox.length
        ? h(
            'ul',
            {},
            detail.outbox.map((m) =>
              h('li', {}, `${m.channel} to `, h('code', {}, m.to), ` · ${m.status}`, m.error ? ` · ${m.error}` : ''),
            ),
          )
        : h('p', { class: 'muted' }, 'Nothing sent.'),
    );
    const subs = detail.agent.sub_agents;
    if (subs && subs.total > 0) {
      if (childrenShown) children.reload();
      childrenShown = true;
      childrenSection.hidden = false;
      replace(
        counts,
        Object.entries(subs.by_status).map(([s, n]) => h('span', { class: 'count' }, statusBadge(s), ' ', count(n))),
      );
    }
  }

  async function loadDetail() {
    try {
      const detail = await call('GET', `agents/${agentId}`);
      if (!stopped) showDetail(detail);
      return detail;
    } catch (error) {
      if (stopped) return null;
      if (error.status === 404) gone('This agent does not exist, or was deleted.');
      else if (error.status !== 401) controlError.textContent = error.message;
      return null;
    }
  }

  /** Reads the detail again soon: at most once a second however many events arrive. */
  function detailSoon() {
    if (detailTimer) {
      detailAgain = true;
      return;
    }
    detailTimer = setTimeout(async () => {
      await loadDetail();
      detailTimer = null;
      if (detailAgain && !stopped) {
        detailAgain = false;
        detailSoon();
      }
    }, DETAIL_EVERY_MS);
  }

  function gone(text) {
    stop();
    replace(
      main,
      h('h1', {}, 'Agent not found'),
      h('p', {}, text),
      h('p', {}, h('a', { href: `${root}/agents`, 'data-nav': true }, 'Back to the list')),
    );
  }

  function onEvent({ event, data }) {
    const payload = JSON.parse(data);
    if (event === 'message') addMessage(payload);
    else if (event === 'status' || event === 'progress') {
      showAgent(payload);
      if (event === 'status' && TERMINAL.has(payload.status)) {
        closeStream?.();
        connection.textContent = 'finished';
        loadDetail();
        return;
      }
      detailSoon();
    } else if (event === 'deleted') gone('This agent was deleted.');
  }

  async function control(action) {
    if (busy) return;
    busy = true;
    syncControls();
    controlError.textContent = '';
    try {
      const answer = await call('POST', `agents/${agentId}/${action}`);
      showAgent(answer.agent);
      if (action === 'resume' && !closeStream) connect();
    } catch (error) {
      controlError.textContent = error.message;
    } finally {
      busy = false;
      syncControls();
    }
  }

  function askDelete() {
    if (busy) return;
    const n = agent?.sub_agent_count ?? 0;
    replace(
      confirmBox,
      h(
        'p',
        {},
        n
          ? `Delete this agent and its ${count(n)} sub-agents? This cannot be undone.`
          : 'Delete this agent? This cannot be undone.',
      ),
      h('button', { type: 'button', class: 'danger', onclick: reallyDelete }, 'Confirm deletion'),
      ' ',
      h('button', { type: 'button', class: 'secondary', onclick: () => (confirmBox.hidden = true) }, 'Cancel'),
    );
    confirmBox.hidden = false;
  }

  async function reallyDelete(event) {
    if (busy) return;
    busy = true;
    event.currentTarget.disabled = true;
    syncControls();
    try {
      await call('DELETE', `agents/${agentId}`);
      stop();
      app.navigate('/agents');
    } catch (error) {
      busy = false;
      syncControls();
      controlError.textContent = error.message;
    }
  }

  function connect() {
    closeStream = openEventStream(`${root}/api/agents/${agentId}/events`, {
      onEvent,
      onState: (state) => {
        connection.textContent = state;
        connection.className = `connection ${state}`;
        // Back after a drop: what the stream does not carry may have changed meanwhile.
        if (state === 'live') detailSoon();
      },
      onRefused: (error) => {
        closeStream = null;
        if (error.status === 401) app.signedOut(error.message);
        else gone(error.message);
      },
    });
  }

  function stop() {
    stopped = true;
    closeStream?.();
    closeStream = null;
    clearTimeout(detailTimer);
    children.stop();
  }

  loadDetail().then((detail) => {
    if (!detail || stopped) return;
    if (TERMINAL.has(detail.agent.status)) connection.textContent = 'finished';
    else connect();
  });
  return stop;
}

/** JSON text shown indented when it parses, as it is otherwise. */
function pretty(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return String(text);
  }
}
