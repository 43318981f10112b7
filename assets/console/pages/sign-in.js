// Sign in with an API key. The key goes once to the server in a POST body and is forgotten: the session is an
// HttpOnly cookie the page cannot read, and the field is cleared whatever the answer.
import { call } from '../api.js';
import { h } from '../dom.js';

export function signInPage(main, _params, app) {
  const reason = app.reason;
  app.reason = null;
  const field = h('input', {
    id: 'api-key',
    name: 'api_key',
    type: 'password',
    autocomplete: 'off',
    spellcheck: 'false',
    required: true,
  });
  const alert = h('p', { role: 'alert', class: 'error' }, reason ?? '');
  const button = h('button', { type: 'submit' }, 'Sign in');
  const form = h(
    'form',
    { class: 'card narrow', onsubmit: submit },
    h('h1', {}, 'Sign in to the agentry console'),
    alert,
    h('label', { for: 'api-key' }, 'API key'),
    field,
    h('p', { class: 'muted' }, 'Any API key of your account. It is not stored in this browser.'),
    button,
  );
  main.append(form);
  field.focus();

  // Already signed in (a reload of this page): straight to the agents.
  if (!reason)
    call('GET', 'session').then(
      (me) => ((app.me = me), app.navigate('/agents', { replace: true })),
      () => {},
    );

  async function submit(event) {
    event.preventDefault();
    if (button.disabled) return;
    button.disabled = true;
    const apiKey = field.value.trim();
    field.value = '';
    try {
      // In the header the API reads keys from: the server checks it before it reads any body.
      app.me = await call('POST', 'session', {}, { 'x-api-key': apiKey });
      app.navigate('/agents', { replace: true });
    } catch (error) {
      alert.textContent = error.message;
      button.disabled = false;
      field.focus();
    }
  }
}
