// Sign in with an API key. The key goes once to the server in a header and is forgotten: the session is an HttpOnly
// cookie the page cannot read. The field is cleared once the key worked; a wrong key stays, selected, to be corrected.
import { call } from '../api.js';
import { h } from '../dom.js';

export function signInPage(main, _params, app) {
  const reason = app.reason;
  const notice = app.notice;
  app.reason = null;
  app.notice = null;
  const field = h('input', {
    id: 'api-key',
    name: 'api_key',
    type: 'password',
    autocomplete: 'off',
    spellcheck: 'false',
    required: true,
  });
  const alert = h('p', { role: 'alert', class: 'error' }, reason ?? '');
  // Signing out is not an error: said in the page's ordinary voice.
  const note = h('p', { role: 'status', class: 'notice', hidden: !notice }, notice ?? '');
  const button = h('button', { type: 'submit' }, 'Sign in');
  const form = h(
    'form',
    { class: 'card narrow', onsubmit: submit },
    h('h1', {}, 'Sign in to the agentry console'),
    note,
    alert,
    h('label', { for: 'api-key' }, 'API key'),
    field,
    h('p', { class: 'muted' }, 'Any API key of your account. It is not stored in this browser.'),
    button,
  );
  main.append(form);
  field.focus();

  // Already signed in (a reload of this page): straight to the agents.
  if (!reason && !notice)
    call('GET', 'session').then(
      (me) => ((app.me = me), app.navigate('/agents', { replace: true })),
      () => {},
    );

  async function submit(event) {
    event.preventDefault();
    if (button.disabled) return;
    button.disabled = true;
    const apiKey = field.value.trim();
    note.hidden = true;
    try {
      // In the header the API reads keys from: the server checks it before it reads any body.
      app.me = await call('POST', 'session', {}, { 'x-api-key': apiKey });
      field.value = '';
      app.navigate('/agents', { replace: true });
    } catch (error) {
      alert.textContent = error.message;
      button.disabled = false;
      field.focus();
      field.select();
    }
  }
}
