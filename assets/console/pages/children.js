// An agent's sub-agents as a virtualised list: only the rows in view exist in the page (a few dozen elements for
// 10,000 children), fetched a page at a time by position from the server, which also does the searching by goal.
// A child that has children of its own opens them below the list, as another such list: a tree, a level at a time.
import { call, query, root } from '../api.js';
import { count, h, statusBadge } from '../dom.js';

const ROW_HEIGHT = 34;
const PAGE_SIZE = 100;
const OVERSCAN = 6;

export function childrenList(agentId, depth = 0) {
  let total = 0;
  let q = '';
  let generation = 0;
  let searchTimer = null;
  const pages = new Map();
  const loading = new Set();

  const spacer = h('div', { class: 'vlist-spacer' });
  // The children of the child opened below, with its own list (and so on down the tree).
  const nested = h('div', { class: 'nested' });
  let open = null;
  const viewport = h('div', { class: 'vlist', tabindex: 0, role: 'list', 'aria-label': 'Sub-agents' }, spacer);
  const summary = h('p', { class: 'muted', 'aria-live': 'polite' }, 'Loading…');
  const searchId = `search-children-${depth}`;
  const search = h('input', {
    id: searchId,
    type: 'search',
    autocomplete: 'off',
    oninput: () => {
      clearTimeout(searchTimer);
      searchTimer = setTimeout(() => restart(search.value), 200);
    },
  });
  const element = h(
    'div',
    {},
    h('div', { class: 'row' }, h('label', { for: searchId }, 'Search sub-agents'), search),
    summary,
    viewport,
    nested,
  );
  viewport.addEventListener('scroll', () => draw(), { passive: true });

  function restart(text) {
    q = text;
    generation += 1;
    pages.clear();
    loading.clear();
    viewport.scrollTop = 0;
    load(0);
  }

  async function load(page) {
    if (pages.has(page) || loading.has(page)) return;
    loading.add(page);
    const asked = generation;
    try {
      const answer = await call(
        'GET',
        `agents/${agentId}/children${query({ offset: page * PAGE_SIZE, limit: PAGE_SIZE, q })}`,
      );
      if (asked !== generation) return;
      pages.set(page, answer.data);
      total = answer.total;
      summary.textContent = q
        ? `${count(total)} sub-agent${total === 1 ? '' : 's'} match`
        : `${count(total)} sub-agent${total === 1 ? '' : 's'}`;
      spacer.style.height = `${total * ROW_HEIGHT}px`;
      draw();
    } catch (error) {
      if (asked === generation && error.status !== 401) summary.textContent = error.message;
    } finally {
      if (asked === generation) loading.delete(page);
    }
  }

  function draw() {
    const first = Math.max(0, Math.floor(viewport.scrollTop / ROW_HEIGHT) - OVERSCAN);
    const last = Math.min(total, Math.ceil((viewport.scrollTop + viewport.clientHeight) / ROW_HEIGHT) + OVERSCAN);
    const rows = [];
    for (let i = first; i < last; i += 1) {
      const page = Math.floor(i / PAGE_SIZE);
      const child = pages.get(page)?.[i - page * PAGE_SIZE];
      if (!child) {
        load(page);
        continue;
      }
      const row = h(
        'div',
        { class: 'vlist-row', role: 'listitem' },
        // The child's own number (its place among the tasks it was spawned with), not its row: a search shows child 17
        // as #17, not #1.
        h('span', { class: 'index' }, `#${count(child.spawn_index === null ? i + 1 : child.spawn_index + 1)}`),
        statusBadge(child.status),
        h('a', { href: `${root}/agents/${child.agent_id}`, 'data-nav': true }, child.goal),
        child.sub_agent_count > 0
          ? h(
              'button',
              {
                type: 'button',
                class: 'secondary small expand',
                'aria-expanded': open?.id === child.agent_id ? 'true' : 'false',
                onclick: () => expand(child, i),
              },
              `${count(child.sub_agent_count)} below`,
            )
          : null,
      );
      row.style.top = `${i * ROW_HEIGHT}px`;
      rows.push(row);
    }
    spacer.replaceChildren(...rows);
  }

  /** Opens (or closes) the children of a child below the list. */
  function expand(child, i) {
    open?.list.stop();
    if (open?.id === child.agent_id) {
      open = null;
      nested.replaceChildren();
    } else {
      const list = childrenList(child.agent_id, depth + 1);
      open = { id: child.agent_id, list };
      nested.replaceChildren(
        h(
          'div',
          { class: 'nested-level' },
          h(
            'h3',
            {},
            `Sub-agents of #${count(child.spawn_index === null ? i + 1 : child.spawn_index + 1)}: `,
            child.goal,
          ),
          list.element,
        ),
      );
    }
    draw();
  }

  /** Counts and rows may have changed (children finished): fetch what is in view again. */
  function reload() {
    generation += 1;
    pages.clear();
    loading.clear();
    const top = Math.floor(viewport.scrollTop / ROW_HEIGHT);
    load(Math.floor(top / PAGE_SIZE));
  }

  load(0);
  return {
    element,
    reload,
    stop: () => {
      clearTimeout(searchTimer);
      open?.list.stop();
    },
  };
}
