// The dashboard: a "New agent" form and the account's agents (status filter, search in goals, pages), kept current
// by asking again every few seconds while the page is open.
import { call, query, root } from '../api.js';
import { count, credits, h, percent, replace, statusBadge, time } from '../dom.js';

const PAGE_SIZE = 20;
const REFRESH_MS = 2000;
const STATUSES = ['ACTIVE', 'STARTING_UP', 'PAUSED', 'COMPLETED', 'FAILED', 'OUT_OF_CREDITS'];

export function agentsPage(main, _params, app) {
  const state = { offset: 0, status: '', q: '' };
  let stopped = false;
  let inFlight = false;
  let searchTimer = null;

  // New agent
  const goal = h('textarea', { id: 'goal', name: 'goal', rows: 3, required: true, maxlength: 100000 });
  const model = h('select', { id: 'model', name: 'model' });
  const maxCredits = h('input', {
    id: 'max-credits',
    name: 'max_credits',
    type: 'number',
    min: '0.000001',
    step: 'any',
    inputmode: 'decimal',
    placeholder: 'no cap',
  });
  const start = h('button', { type: 'submit' }, 'Start agent');
  const formError = h('p', { role: 'alert', class: 'error' });
  const form = h(
    'form',
    { class: 'card', onsubmit: create, 'aria-labelledby': 'new-agent' },
    h('h2', { id: 'new-agent' }, 'New agent'),
    formError,
    h('label', { for: 'goal' }, 'Goal'),
    goal,
    h(
      'div',
      { class: 'row' },
      h('label', { for: 'model' }, 'Model'),
      model,
      h('label', { for: 'max-credits' }, 'Max credits'),
      maxCredits,
      start,
    ),
  );
  call('GET', 'models').then(
    ({ models }) =>
      replace(
        model,
        models.map((m) => h('option', { value: m }, m)),
      ),
    () => {},
  );

  // The list
  const statusFilter = h(
    'select',
    { id: 'status-filter', onchange: () => ((state.status = statusFilter.value), (state.offset = 0), refresh()) },
    h('option', { value: '' }, 'All'),
    STATUSES.map((s) => h('option', { value: s }, s)),
  );
  const search = h('input', {
    id: 'search-agents',
    type: 'search',
    autocomplete: 'off',
    oninput: () => {
      clearTimeout(searchTimer);
      searchTimer = setTimeout(() => ((state.q = search.value), (state.offset = 0), refresh()), 250);
    },
  });
  const body = h('tbody');
  const summary = h('span', { class: 'muted', 'aria-live': 'polite' });
  const previous = h('button', { type: 'button', class: 'secondary', onclick: () => page(-1) }, 'Previous');
  const next = h('button', { type: 'button', class: 'secondary', onclick: () => page(1) }, 'Next');
  const listError = h('p', { role: 'alert', class: 'error' });

  main.append(
    h('h1', {}, 'Agents'),
    form,
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'agents-list' },
      h('h2', { id: 'agents-list' }, 'Your agents'),
      h(
        'div',
        { class: 'row filters' },
        h('label', { for: 'status-filter' }, 'Status'),
        statusFilter,
        h('label', { for: 'search-agents' }, 'Search agents'),
        search,
      ),
      listError,
      h(
        'div',
        { class: 'table-wrap' },
        h(
          'table',
          {},
          h(
            'thead',
            {},
            h(
              'tr',
              {},
              ['Goal', 'Status', 'Progress', 'Tokens', 'Credits', 'Sub-agents', 'Created'].map((t) =>
                h('th', { scope: 'col' }, t),
              ),
            ),
          ),
          body,
        ),
      ),
      h('div', { class: 'row pager' }, previous, summary, next),
    ),
  );

  async function refresh() {
    if (stopped || inFlight) return;
    inFlight = true;
    try {
      const page = await call(
        'GET',
        `agents${query({ offset: state.offset, limit: PAGE_SIZE, status: state.status, q: state.q })}`,
      );
      if (stopped) return;
      listError.textContent = '';
      replace(
        body,
        page.data.length ? page.data.map(row) : h('tr', {}, h('td', { colspan: 7, class: 'muted' }, 'No agents yet.')),
      );
      const last = Math.min(page.offset + page.data.length, page.total);
      summary.textContent = page.total ? `${count(page.offset + 1)}–${count(last)} of ${count(page.total)}` : '';
      previous.disabled = page.offset === 0;
      next.disabled = last >= page.total;
    } catch (error) {
      if (!stopped && error.status !== 401) listError.textContent = error.message;
    } finally {
      inFlight = false;
    }
  }

  function row(agent) {
    const tree = agent.tree;
    return h(
      'tr',
      {},
      h('td', { class: 'goal' }, h('a', { href: `${root}/agents/${agent.agent_id}`, 'data-nav': true }, agent.goal)),
      h('td', {}, statusBadge(agent.status)),
      h(
        'td',
        {},
        h('progress', { max: 1, value: agent.progress, 'aria-label': 'Progress' }),
        ' ',
        percent(agent.progress),
      ),
      // A root's cost is its whole tree's: its own tokens alone would hide what its sub-agents spent.
      h('td', { class: 'num' }, count(tree ? tree.tokens : agent.token_count)),
      h('td', { class: 'num' }, credits(tree ? tree.credits_spent : agent.credits_spent)),
      h('td', { class: 'num' }, tree ? count(tree.agents - 1) : '—'),
      h('td', {}, time(agent.created_at)),
    );
  }

  function page(direction) {
    state.offset = Math.max(0, state.offset + direction * PAGE_SIZE);
    refresh();
  }

  async function create(event) {
    event.preventDefault();
    if (start.disabled) return;
    start.disabled = true;
    formError.textContent = '';
    try {
      const created = await call('POST', 'agents', {
        goal: goal.value,
        ...(model.value ? { model: model.value } : {}),
        // The whole tree's cap; empty means none.
        ...(maxCredits.value ? { max_credits: Number(maxCredits.value) } : {}),
      });
      app.navigate(`/agents/${created.agent_id}`);
    } catch (error) {
      formError.textContent = error.message;
      start.disabled = false;
    }
  }

  refresh();
  const timer = setInterval(refresh, REFRESH_MS);
  return () => {
    stopped = true;
    clearInterval(timer);
    clearTimeout(searchTimer);
  };
}
