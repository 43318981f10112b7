// The settings area: subscription, API keys (a new key's full text shown this once, with a copy button; the list
// shows only the last 4 characters) and credits (balance, spend by model and by tool, the ledger a page at a time:
// the newest 100 rows, then older pages by the server's `older` position, never the whole ledger at once).
import { call, root } from '../api.js';
import { agentIdLink, count, credits, fact, h, replace, time } from '../dom.js';

export function settingsPage(main, _params, app) {
  let stopped = false;
  const subscription = h('dl', { class: 'facts' });
  const balance = h('dl', { class: 'facts' });
  const byModel = h('div');
  const byTool = h('div');
  const recent = h('div');
  const ledgerPager = h('div', { class: 'row' });
  const recentHeading = h('h3', {}, 'Latest ledger entries');
  const keysBody = h('tbody');
  const keysError = h('p', { role: 'alert', class: 'error' });
  const created = h('div', { class: 'new-key', hidden: true, role: 'region', 'aria-label': 'New key' });
  const name = h('input', { id: 'key-name', name: 'name', maxlength: 200, autocomplete: 'off' });
  const create = h('button', { type: 'submit' }, 'Create key');

  main.append(
    h('h1', {}, 'Settings'),
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'subscription' },
      h('h2', { id: 'subscription' }, 'Subscription'),
      subscription,
    ),
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'keys' },
      h('h2', { id: 'keys' }, 'API keys'),
      h('form', { class: 'row', onsubmit: createKey }, h('label', { for: 'key-name' }, 'Key name'), name, create),
      keysError,
      created,
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
              ['Name', 'Key', 'Created', 'Last used', ''].map((t) => h('th', { scope: 'col' }, t)),
            ),
          ),
          keysBody,
        ),
      ),
    ),
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'credits' },
      h('h2', { id: 'credits' }, 'Credits'),
      balance,
      h('h3', {}, 'Spend by model'),
      byModel,
      h('h3', {}, 'Spend by tool'),
      byTool,
      recentHeading,
      recent,
      ledgerPager,
    ),
  );

  /** Loads the credits, with the ledger page of entries older than `before` (the newest page without it). */
  async function loadCredits(before) {
    const c = await call('GET', before === undefined ? 'credits' : `credits?before=${encodeURIComponent(before)}`);
    if (stopped) return;
    replace(
      subscription,
      fact('Status', c.subscription_active ? 'Active' : 'Inactive'),
      fact('Account', app.me?.account.name ?? ''),
    );
    replace(
      balance,
      fact('Balance', credits(c.balance)),
      fact('Held by running calls', credits(c.reserved)),
      fact('Available', credits(c.available)),
    );
    const spendTable = (rows, label) =>
      rows.length
        ? table(
            [label, 'Calls', 'Tokens in', 'Tokens out', 'Credits'],
            rows.map((r) => [
              h('code', {}, r.item),
              count(r.count),
              count(r.tokens_in),
              count(r.tokens_out),
              credits(r.credits),
            ]),
          )
        : h('p', { class: 'muted' }, 'Nothing spent yet.');
    replace(byModel, spendTable(c.by_model, 'Model'));
    replace(byTool, spendTable(c.by_tool, 'Tool'));
    replace(
      recent,
      c.recent.length
        ? table(
            ['When', 'Kind', 'Model or tool', 'Agent', 'Credits'],
            c.recent.map((r) => [
              time(r.created_at),
              r.kind,
              r.item ?? '—',
              // In full, as a link: ids are UUIDv7, whose first characters are a timestamp that most rows share.
              r.agent_id ? agentIdLink(root, r.agent_id) : '—',
              credits(r.credits),
            ]),
          )
        : h('p', { class: 'muted' }, 'No entries.'),
    );
    recentHeading.textContent = before === undefined ? 'Latest ledger entries' : 'Older ledger entries';
    replace(
      ledgerPager,
      before === undefined
        ? null
        : h('button', { type: 'button', class: 'secondary', onclick: () => pageLedger(undefined) }, 'Latest entries'),
      c.older === null
        ? null
        : h('button', { type: 'button', class: 'secondary', onclick: () => pageLedger(c.older) }, 'Older entries'),
    );
  }

  function pageLedger(before) {
    loadCredits(before).catch((error) => {
      if (!stopped && error.status !== 401) keysError.textContent = error.message;
    });
  }

  async function loadKeys() {
    const { data, signed_in_with } = await call('GET', 'keys');
    if (stopped) return;
    replace(
      keysBody,
      data.map((key) => {
        const confirmCell = h('div', { class: 'confirm-inline' });
        const del = h(
          'button',
          { type: 'button', class: 'danger', onclick: () => askDelete(key, confirmCell, del) },
          'Delete',
        );
        return h(
          'tr',
          { 'data-key-id': key.key_id },
          h(
            'td',
            {},
            key.name,
            key.key_id === signed_in_with ? h('span', { class: 'muted' }, ' (this session)') : null,
          ),
          h('td', {}, h('code', {}, key.masked)),
          h('td', {}, time(key.created_at)),
          h('td', {}, key.last_used_at ? time(key.last_used_at) : 'never'),
          h('td', {}, del, confirmCell),
        );
      }),
    );
  }

  function askDelete(key, cell, del) {
    replace(
      cell,
      h('span', {}, `Delete ${key.name} (${key.masked})? Anything using it stops working.`),
      ' ',
      h(
        'button',
        { type: 'button', class: 'danger', onclick: (e) => deleteKey(key, e.currentTarget, del) },
        'Confirm deletion',
      ),
      ' ',
      h('button', { type: 'button', class: 'secondary', onclick: () => cell.replaceChildren() }, 'Cancel'),
    );
  }

  async function deleteKey(key, button, del) {
    if (button.disabled) return;
    button.disabled = true;
    del.disabled = true;
    try {
      await call('DELETE', `keys/${encodeURIComponent(key.key_id)}`);
      await loadKeys();
    } catch (error) {
      if (error.status !== 401) keysError.textContent = error.message;
      button.disabled = false;
      del.disabled = false;
    }
  }

  async function createKey(event) {
    event.preventDefault();
    if (create.disabled) return;
    create.disabled = true;
    keysError.textContent = '';
    try {
      const key = await call('POST', 'keys', name.value.trim() ? { name: name.value.trim() } : {});
      name.value = '';
      const text = h('code', { class: 'full-key' }, key.key);
      const copied = h('span', { class: 'muted', 'aria-live': 'polite' });
      replace(
        created,
        h('p', {}, `New key ${key.name}. Copy it now: it is not shown again.`),
        h(
          'div',
          { class: 'row' },
          text,
          h('button', { type: 'button', onclick: () => copy(key.key, copied) }, 'Copy'),
          copied,
        ),
      );
      created.hidden = false;
      await loadKeys();
    } catch (error) {
      keysError.textContent = error.message;
    } finally {
      create.disabled = false;
    }
  }

  async function copy(text, status) {
    try {
      await navigator.clipboard.writeText(text);
      status.textContent = 'Copied.';
    } catch {
      status.textContent = 'Copy failed: select the key and copy it.';
    }
  }

  Promise.all([loadCredits(), loadKeys()]).catch((error) => {
    if (!stopped && error.status !== 401) keysError.textContent = error.message;
  });
  return () => {
    stopped = true;
  };
}

function table(headings, rows) {
  return h('div', { class: 'table-wrap' }, tableOf(headings, rows));
}

function tableOf(headings, rows) {
  return h(
    'table',
    {},
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        headings.map((t) => h('th', { scope: 'col' }, t)),
      ),
    ),
    h(
      'tbody',
      {},
      rows.map((cells) =>
        h(
          'tr',
          {},
          cells.map((c) => h('td', {}, c)),
        ),
      ),
    ),
  );
}
