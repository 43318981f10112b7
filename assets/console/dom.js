// The console's only way to make DOM: elements, attributes and text nodes, never HTML from strings. Everything an
// agent, a model or a web page wrote reaches the page as text, so it cannot become markup or script.

/** Properties set as DOM properties rather than attributes. */
const PROPERTIES = new Set(['value', 'checked', 'disabled', 'selected', 'hidden']);

/**
 * `h('a', { href: '/x', class: 'y', onclick: fn }, 'text', child)`. `href` must be a path of this origin (the console
 * builds every link itself); anything else throws, so no `javascript:` or foreign URL (nor `//host` or `/\host`,
 * which browsers read as another host) can ever be a link here.
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) el.addEventListener(name.slice(2), value);
    else if (name === 'class') el.className = value;
    else if (PROPERTIES.has(name)) el[name] = value;
    else {
      if ((name === 'href' || name === 'src' || name === 'action') && !/^\/(?![/\\])/.test(String(value))) {
        throw new Error(`refusing a ${name} that is not a path of this origin`);
      }
      el.setAttribute(name, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

/** Appends children: nodes as they are, strings and numbers as text, arrays flattened, null/false skipped. */
export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Replaces an element's children. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

const numbers = new Intl.NumberFormat('en-US');
export const count = (n) => numbers.format(n);
// Credits always with four decimals, whatever their size, so that columns of them line up and compare at a glance.
const fourDecimals = new Intl.NumberFormat('en-US', { minimumFractionDigits: 4, maximumFractionDigits: 4 });
export const credits = (n) => fourDecimals.format(n);
export const percent = (p) => `${Math.round(p * 100)}%`;

/** An ISO time as the reader's local date and time. */
export function absoluteTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? '—' : d.toLocaleString('en-GB', { dateStyle: 'medium', timeStyle: 'medium' });
}

/** A length of time: "850 ms", "12.4 s", "3 min 5 s", "2 h 4 min". */
export function duration(ms) {
  if (!Number.isFinite(ms) || ms < 0) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** "just now", "5 s ago", "3 min ago", "2 h ago", "4 days ago". */
export function relativeTime(iso, now = Date.now()) {
  const t = new Date(iso).getTime();
  if (!iso || Number.isNaN(t)) return '—';
  const s = Math.round((now - t) / 1000);
  if (s < 2) return 'just now';
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  const days = Math.floor(s / 86400);
  return `${days} day${days === 1 ? '' : 's'} ago`;
}

/** A time shown relative to now, the absolute time on hover (and for screen readers, in `datetime`). */
export function time(iso) {
  if (!iso) return '—';
  return h('time', { datetime: iso, title: absoluteTime(iso) }, relativeTime(iso));
}

/** A button that copies `text` to the clipboard and says so. */
export function copyButton(text, label = 'Copy') {
  const button = h('button', {
    type: 'button',
    class: 'secondary small',
    'aria-label': `${label}`,
    onclick: async () => {
      try {
        await navigator.clipboard.writeText(text);
        button.textContent = 'Copied';
      } catch {
        button.textContent = 'Copy failed';
      }
      setTimeout(() => (button.textContent = 'Copy'), 1500);
    },
  });
  button.textContent = 'Copy';
  return button;
}

/** An agent id in full (UUIDv7 ids share their first characters: a prefix says nothing), as a link, with a copy button. */
export function agentIdLink(root, id) {
  return h(
    'span',
    { class: 'id' },
    h('a', { href: `${root}/agents/${id}`, 'data-nav': true }, h('code', {}, id)),
    ' ',
    copyButton(id, `Copy agent id ${id}`),
  );
}

/** A labelled value for the definition lists of the settings and agent pages. */
export function fact(label, value) {
  return [h('dt', {}, label), h('dd', {}, value)];
}

/** A status as a badge (its class colours it). */
export function statusBadge(status) {
  return h('span', { class: `badge status-${String(status).toLowerCase()}` }, status);
}
