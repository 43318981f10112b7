// Calls to the console's JSON API (same origin, the session cookie rides along; the API key is never kept here).

const meta = document.querySelector('meta[name="agentry-base"]');
/** The path the console is served under, e.g. `/console` or `/v1/console`. */
export const root = `${meta ? meta.getAttribute('content') : ''}/console`;

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let onSignedOut = () => {};
/** Who to tell when a call answers 401: the session ended (signed out, key deleted, lapsed, expired). */
export function whenSignedOut(listener) {
  onSignedOut = listener;
}

/** The error of a non-2xx response, from its `{error: {code, message}}` body. */
export async function errorOf(response) {
  const body = await response.json().catch(() => null);
  const e = body && body.error;
  return new ApiError(response.status, e ? e.code : 'http_error', e ? e.message : `HTTP ${response.status}`);
}

/** `call('GET', 'agents?offset=0')`, `call('POST', 'keys', { name })`. Throws {@link ApiError}. */
export async function call(method, path, body, headers = {}) {
  const init = {
    method,
    credentials: 'same-origin',
    cache: 'no-store',
    headers: { ...headers, accept: 'application/json' },
  };
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const response = await fetch(`${root}/api/${path}`, init);
  if (!response.ok) {
    const error = await errorOf(response);
    if (response.status === 401 && !path.startsWith('session')) onSignedOut(error);
    throw error;
  }
  return response.json();
}

/** A query string of the defined values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const text = q.toString();
  return text ? `?${text}` : '';
}
