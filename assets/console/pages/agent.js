// One agent, live: its status, progress and transcript arrive over one event stream (closed when the page closes;
// after a dropped connection it says "disconnected" and catches up with Last-Event-ID, never showing a message
// twice). What the stream does not carry (tool calls, artifacts, monitors, outbox, children) is read again after
// each change, at most once a second.
import { call, root } from '../api.js';
import {
  agentIdLink,
  copyButton,
  count,
  credits,
  duration,
  fact,
  h,
  percent,
  replace,
  statusBadge,
  time,
} from '../dom.js';
import { openEventStream } from '../event-stream.js';
import { childrenList } from './children.js';

const TERMINAL = new Set(['COMPLETED', 'FAILED']);
const DETAIL_EVERY_MS = 1000;
/** How often a running tree's counts and totals are asked for: the page is never more than this (plus one answer) behind. */
const SUMMARY_EVERY_MS = 1000;
/** Statuses in which an agent may still change (its tree's counts are polled while any of the tree is in one). */
const SETTLED = new Set(['COMPLETED', 'FAILED', 'PAUSED', 'OUT_OF_CREDITS']);

export function agentPage(main, [agentId], app) {
  let agent = null;
  let busy = false;
  let stopped = false;
  let closeStream = null;
  let detailTimer = null;
  let detailAgain = false;
  let summaryTimer = null;
  const seen = new Set();

  const title = h('h1', { class: 'goal' }, 'Agent');
  const connection = h('span', { class: 'connection', role: 'status' }, 'connecting');
  const status = h('span');
  const progress = h('progress', { max: 1, value: 0, 'aria-label': 'Progress' });
  const progressText = h('span');
  const statusMessage = h('p', { class: 'status-message' });
  const facts = h('dl', { class: 'facts' });
  const treeFacts = h('dl', { class: 'facts', 'aria-label': 'Whole tree' });
  const creditHint = h('p', { class: 'hint', role: 'status' });
  const pause = h('button', { type: 'button', onclick: () => control('pause') }, 'Pause');
  const resume = h('button', { type: 'button', onclick: () => control('resume') }, 'Resume');
  const del = h('button', { type: 'button', class: 'danger', onclick: askDelete }, 'Delete');
  const confirmBox = h('div', { class: 'confirm', hidden: true });
  const controlError = h('p', { role: 'alert', class: 'error' });
  // The timeline: messages arrive live from the stream; model calls, tool calls and status changes from each read of
  // the detail. All are kept in time order in one list.
  const transcript = h('ol', { class: 'transcript timeline', 'aria-label': 'Timeline' });
  const artifacts = h('div');
  const monitors = h('div');
  const outbox = h('div');
  // Cards with nothing to show stay hidden: an agent without tools, artifacts, monitors or messages sent is not three
  // empty boxes.
  const card = (title, body) => h('section', { class: 'card', hidden: true }, h('h2', {}, title), body);
  const timelineNote = h('p', { class: 'muted small-print' });
  const artifactsCard = card('Artifacts', artifacts);
  const monitorsCard = card('Monitors', monitors);
  const outboxCard = card('Outbox', outbox);
  const back = h('a', { href: `${root}/agents`, 'data-nav': true }, '← Back to the list');
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
    h('p', {}, back),
    h(
      'section',
      { class: 'card' },
      title,
      h('div', { class: 'row' }, status, progress, progressText, connection),
      statusMessage,
      facts,
      treeFacts,
      creditHint,
      h('div', { class: 'row controls' }, pause, resume, del),
      confirmBox,
      controlError,
    ),
    childrenSection,
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'timeline' },
      h('h2', { id: 'timeline' }, 'Timeline'),
      transcript,
      timelineNote,
    ),
    artifactsCard,
    monitorsCard,
    outboxCard,
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
      fact(
        'Agent id',
        h('span', { class: 'id' }, h('code', {}, agent.agent_id), ' ', copyButton(agent.agent_id, 'Copy agent id')),
      ),
      fact('Model', agent.model),
      fact('Tokens', count(agent.token_count ?? 0)),
      fact('Credits spent', credits(agent.credits_spent ?? 0)),
      fact('Messages', count(agent.message_count ?? 0)),
      fact('Created', time(agent.created_at)),
      fact('Updated', time(agent.updated_at)),
      agent.parent_id ? fact('Parent', agentIdLink(root, agent.parent_id)) : null,
    );
    if (agent.parent_id) {
      back.setAttribute('href', `${root}/agents/${agent.parent_id}`);
      back.textContent = '← Back to the parent';
    }
    showTree(agent);
    syncControls();
  }

  /** The whole tree's sums (this agent and all below it), when it has children. */
  function showTree(a) {
    const tree = a.tree;
    treeFacts.hidden = !tree;
    if (!tree) return;
    const running = Object.entries(tree.by_status).some(([s, n]) => n > 0 && !SETTLED.has(s));
    const end = running ? Date.now() : new Date(tree.last_updated_at).getTime();
    replace(
      treeFacts,
      fact('Tree agents', count(tree.agents)),
      fact('Tree tokens', count(tree.tokens)),
      fact('Tree credits spent', h('span', { class: 'tree-credits' }, credits(tree.credits_spent))),
      fact('Tree wall time', duration(end - new Date(tree.first_created_at).getTime())),
    );
  }

  /** Counts of the children by status, as the server last said. */
  function showCounts(a) {
    const subs = a.sub_agents;
    if (!subs || subs.total === 0) return;
    replace(
      counts,
      Object.entries(subs.by_status).map(([s, n]) =>
        h('span', { class: 'count', 'data-status': s }, statusBadge(s), ' ', h('span', { class: 'n' }, count(n))),
      ),
    );
  }

  /**
   * While any agent of the tree may still change, its counts and sums are asked for every second (a parent waiting
   * for its children emits nothing while they run, so its own events cannot keep them current).
   */
  function summarySoon() {
    if (stopped || summaryTimer) return;
    summaryTimer = setTimeout(async () => {
      try {
        const answer = await call('GET', `agents/${agentId}/summary`);
        if (stopped) return;
        const a = answer.agent;
        agent = { ...agent, ...a };
        showTree(a);
        showCounts(a);
        summaryTimer = null;
        const tree = a.tree;
        const moving = tree
          ? Object.entries(tree.by_status).some(([s, n]) => n > 0 && !SETTLED.has(s))
          : !SETTLED.has(a.status);
        // The credit gate counts the calls of this tree whose reservations wait behind other calls' holds (in the
        // server's process): a tree that is slow for that reason says so, with the balance and what is held.
        const c = answer.credits;
        const n = c?.waiting?.calls ?? 0;
        creditHint.textContent =
          n > 0
            ? `${count(n)} ${n === 1 ? 'call' : 'calls'} waiting for credits: balance ${credits(c.balance)}, ` +
              `held ${credits(c.reserved)}. They go on as running calls settle their holds, or after a top-up.`
            : '';
        if (moving) summarySoon();
      } catch {
        summaryTimer = null;
      }
    }, SUMMARY_EVERY_MS);
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
    inTimeOrder(
      h(
        'li',
        { class: `message tl tl-message ${message.role === 'USER' ? 'user' : 'assistant'}` },
        h('div', { class: 'meta' }, message.role === 'USER' ? 'Goal' : 'Agent', ' · ', time(message.timestamp)),
        // Agent text is shown as text (white-space: pre-wrap), never parsed as HTML or Markdown.
        h('div', { class: 'text' }, message.text),
      ),
      message.timestamp,
      1,
    );
  }

  /**
   * Puts an entry into the timeline after every entry that is earlier (or as early and of a kind that comes first: a
   * model call before the message it produced, that message before the tool calls it asked for).
   */
  function inTimeOrder(li, at, rank) {
    li.dataset.at = at;
    li.dataset.rank = String(rank);
    let next = transcript.lastElementChild;
    while (next && (next.dataset.at > at || (next.dataset.at === at && Number(next.dataset.rank) > rank))) {
      next = next.previousElementSibling;
    }
    transcript.insertBefore(li, next ? next.nextSibling : transcript.firstChild);
  }

  function showDetail(detail) {
    showAgent(detail.agent);
    detail.messages.forEach(addMessage);
    for (const old of transcript.querySelectorAll(':scope > li:not(.tl-message)')) old.remove();
    for (const entry of detail.timeline ?? []) {
      if (entry.kind !== 'message') inTimeOrder(timelineRow(entry), entry.at, RANK[entry.kind]);
    }
    timelineNote.textContent =
      'Model call latency: from the request sent to the provider to its answer complete. ' +
      'Status changes: pauses, resumes, credit waits and stops for credits, the latest 100.';
    const list = detail.agent.artifacts ?? [];
    artifactsCard.hidden = list.length === 0;
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
    monitorsCard.hidden = watched.length === 0;
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
    outboxCard.hidden = detail.outbox.length === 0;
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
      showCounts(detail.agent);
      summarySoon();
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
      if (action === 'resume' && agent.sub_agent_count > 0) summarySoon();
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
    clearTimeout(summaryTimer);
    children.stop();
  }

  loadDetail().then((detail) => {
    if (!detail || stopped) return;
    if (TERMINAL.has(detail.agent.status)) connection.textContent = 'finished';
    else connect();
  });
  return stop;
}

/** Of entries at the same moment, which comes first. */
const RANK = { model_call: 0, message: 1, tool_call: 2, status: 3 };

/** One entry of the timeline as a list item; its kind is its class (and its marker's colour). */
function timelineRow(e) {
  const when = h('span', { class: 'tl-time' }, time(e.at));
  if (e.kind === 'message') {
    return h(
      'li',
      { class: `tl tl-message ${e.role === 'USER' ? 'user' : 'assistant'}` },
      h('div', { class: 'meta' }, e.role === 'USER' ? 'Goal' : 'Agent', ' · ', when),
      h('div', { class: 'text' }, e.text),
    );
  }
  if (e.kind === 'model_call') {
    return h(
      'li',
      {
        class: 'tl tl-model',
        'data-tokens': e.tokens_in + e.tokens_out,
        'data-credits': e.credits,
      },
      h('div', { class: 'meta' }, 'Model call · ', when),
      h(
        'div',
        {},
        h('code', {}, e.model),
        ` · ${e.latency_ms === null ? 'latency not recorded' : duration(e.latency_ms)} · in ${count(e.tokens_in)}`,
        e.tokens_cache_read || e.tokens_cache_write
          ? ` (cache read ${count(e.tokens_cache_read)}, cache write ${count(e.tokens_cache_write)})`
          : '',
        ` · out ${count(e.tokens_out)} · ${credits(e.credits)} credits`,
      ),
    );
  }
  if (e.kind === 'tool_call') {
    const outcome = e.status !== 'finished' ? e.status : e.is_error ? 'failed' : 'ok';
    return h(
      'li',
      { class: 'tl tl-tool', 'data-credits': e.credits ?? 0 },
      h(
        'details',
        { class: `tool-call${e.is_error ? ' failed' : ''}` },
        h(
          'summary',
          {},
          h('code', {}, e.name),
          ` · ${outcome}`,
          e.duration_ms === null ? '' : ` · ${duration(e.duration_ms)}`,
          e.credits === null ? '' : ` · ${credits(e.credits)} credits`,
          ' · ',
          when,
        ),
        h('div', { class: 'meta' }, 'Input'),
        h('pre', {}, pretty(e.input)),
        h('div', { class: 'meta' }, 'Result'),
        h('pre', {}, e.result === null ? '(not finished)' : pretty(e.result)),
      ),
      e.spawned
        ? h(
            'button',
            {
              type: 'button',
              class: 'secondary small',
              onclick: () => document.getElementById('sub-agents')?.scrollIntoView(),
            },
            `${count(e.spawned)} sub-agents: see the tree`,
          )
        : null,
    );
  }
  return h(
    'li',
    { class: `tl tl-status status-change-${String(e.status).toLowerCase()}` },
    h('div', { class: 'meta' }, 'Status · ', when),
    // A wait for credits keeps the status: only its message is news.
    h(
      'div',
      {},
      statusBadge(e.status),
      e.previous === e.status ? '' : ` from ${e.previous}`,
      e.message ? ` · ${e.message}` : '',
    ),
  );
}

/** JSON text shown indented when it parses, as it is otherwise. */
function pretty(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return String(text);
  }
}
