// The console's shell: who is signed in, the header, and a small router over history.pushState. Each page is a
// function `(main, params, app) => cleanup`; the router runs the cleanup before the next page (closing its stream).
import { call, root, whenSignedOut } from './api.js';
import { h, replace } from './dom.js';
import { agentPage } from './pages/agent.js';
import { agentsPage } from './pages/agents.js';
import { settingsPage } from './pages/settings.js';
import { signInPage } from './pages/sign-in.js';

const ROUTES = [
  [/^\/sign-in$/, signInPage, { public: true }],
  [/^\/?$/, agentsPage, {}],
  [/^\/agents$/, agentsPage, {}],
  [/^\/agents\/([0-9a-fA-F-]{36})$/, agentPage, {}],
  [/^\/settings$/, settingsPage, {}],
];

const app = {
  /** The signed-in account (`{account, sign_out}`), or null. */
  me: null,
  /** Why the last session ended, shown on the sign-in page once (as an error). */
  reason: null,
  /** A word for the sign-in page that is not an error ("You signed out."). */
  notice: null,
  navigate(path, { replace: replaceState = false } = {}) {
    history[replaceState ? 'replaceState' : 'pushState'](null, '', root + path);
    render();
  },
  signedOut(reason) {
    app.me = null;
    app.reason = reason;
    app.navigate('/sign-in', { replace: true });
  },
};

let cleanup = null;
let rendering = 0;

async function render() {
  const run = ++rendering;
  if (cleanup) cleanup();
  cleanup = null;
  const path = location.pathname.slice(root.length) || '/';
  const found = ROUTES.map(([pattern, page, options]) => [pattern.exec(path), page, options]).find(([m]) => m);
  const main = document.getElementById('main');
  if (!found) {
    renderHeader();
    replace(main, h('h1', {}, 'Not found'), h('p', {}, 'There is no such page in the console.'));
    return;
  }
  const [match, page, options] = found;
  if (!options.public && app.me === null) {
    try {
      app.me = await call('GET', 'session');
    } catch (error) {
      if (run !== rendering) return;
      app.signedOut(error.status === 401 ? error.message : `The console could not reach the server: ${error.message}`);
      return;
    }
    if (run !== rendering) return;
  }
  renderHeader(options.public);
  main.replaceChildren();
  cleanup = page(main, match.slice(1), app) || null;
  main.focus({ preventScroll: true });
}

function renderHeader(isPublic = false) {
  const top = document.getElementById('top');
  const brand = h('span', { class: 'brand' }, 'agentry');
  if (isPublic || app.me === null) return replace(top, brand);
  const link = (path, text) => {
    const here =
      location.pathname === root + path || (path === '/agents' && location.pathname.startsWith(`${root}/agents/`));
    return h('a', { href: root + path, 'data-nav': true, 'aria-current': here ? 'page' : null }, text);
  };
  replace(
    top,
    brand,
    h('nav', { 'aria-label': 'Console' }, link('/agents', 'Agents'), link('/settings', 'Settings')),
    h('span', { class: 'who' }, app.me.account.name),
    app.me.sign_out ? h('button', { type: 'button', class: 'secondary', onclick: signOut }, 'Sign out') : null,
  );
}

async function signOut(event) {
  event.currentTarget.disabled = true;
  try {
    await call('DELETE', 'session');
  } finally {
    app.me = null;
    app.notice = 'You signed out.';
    app.navigate('/sign-in', { replace: true });
  }
}

// Links the console made itself (data-nav) change the page without reloading it.
document.addEventListener('click', (event) => {
  const a = event.target instanceof Element ? event.target.closest('a[data-nav]') : null;
  if (!a || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
  event.preventDefault();
  app.navigate(a.getAttribute('href').slice(root.length));
});
window.addEventListener('popstate', render);
whenSignedOut((error) => app.signedOut(error.message));

if (new URLSearchParams(location.search).get('reason') === 'subscription') {
  app.reason = 'The subscription of this account is not active.';
}
render();
