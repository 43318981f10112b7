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
export const credits = (n) =>
  new Intl.NumberFormat('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 6 }).format(n);
export const percent = (p) => `${Math.round(p * 100)}%`;

/** An ISO time as the reader's local date and time. */
export function time(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? '—' : d.toLocaleString('en-GB', { dateStyle: 'medium', timeStyle: 'medium' });
}

/** A labelled value for the definition lists of the settings and agent pages. */
export function fact(label, value) {
  return [h('dt', {}, label), h('dd', {}, value)];
}

/** A status as a badge (its class colours it). */
export function statusBadge(status) {
  return h('span', { class: `badge status-${String(status).toLowerCase()}` }, status);
}
