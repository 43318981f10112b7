/**
 * @module web/page-reader/dom
 * Walks over a parsed page that must not recurse (a hostile page can nest elements tens of thousands deep): its
 * plain text, its shape, and cutting it down to its leading part.
 */
import { INVISIBLE_ELEMENTS } from './markdown.js';

/** Elements that end a run of text, so words on either side of them are not glued together in `text`. */
const BLOCKS = new Set(
  (
    'address article aside blockquote br dd details dialog div dl dt fieldset figcaption figure footer form h1 h2 ' +
    'h3 h4 h5 h6 header hr li main nav ol p pre section summary table tbody td tfoot th thead tr ul caption'
  ).split(' '),
);

const collapse = (s: string) => s.replace(/\s+/g, ' ').trim();

/** Plain text of `root` with every run of whitespace one space, cut at `max` characters. Walks without recursion. */
export function plainText(root: Node, max: number): string {
  const parts: string[] = [];
  let length = 0;
  let node: Node | null = root.firstChild;
  while (node && length <= max) {
    let descend = false;
    if (node.nodeType === 3) {
      const data = node.nodeValue ?? '';
      parts.push(data);
      length += data.length;
    } else if (node.nodeType === 1) {
      const name = node.nodeName.toLowerCase();
      if (BLOCKS.has(name)) parts.push(' ');
      descend = !INVISIBLE_ELEMENTS.has(name) && node.firstChild !== null;
    }
    if (descend) {
      node = node.firstChild;
      continue;
    }
    while (node && node !== root && !node.nextSibling) {
      node = node.parentNode;
      if (node && BLOCKS.has(node.nodeName.toLowerCase())) parts.push(' ');
    }
    node = node && node !== root ? node.nextSibling : null;
  }
  return collapse(parts.join('')).slice(0, max);
}

/** How many elements `root` holds and how deeply they nest. Walks without recursion: depth is what is measured. */
export function documentShape(root: Element): { elements: number; depth: number } {
  let elements = 0;
  let depth = 0;
  let level = 0;
  let node: Element | null = root;
  while (node) {
    elements++;
    if (level > depth) depth = level;
    if (node.firstElementChild) {
      node = node.firstElementChild;
      level++;
      continue;
    }
    while (node && node !== root && !node.nextElementSibling) {
      node = node.parentElement;
      level--;
    }
    node = node && node !== root ? node.nextElementSibling : null;
  }
  return { elements, depth };
}

/**
 * Cuts `root`, in place, down to the leading nodes whose raw text fits in `budget` characters, descending into the
 * node that crosses it; returns whether anything was removed. Converting a 5 MB page to Markdown to keep its first
 * 20,000 characters took seconds and over a gigabyte; the caller takes the text and links from the whole first.
 */
export function keepLeading(root: Element, budget: number): boolean {
  let removed = false;
  let remaining = budget;
  for (let el: Node = root; ;) {
    let crossing: ChildNode | null = null;
    // An only child crosses the budget its parent crossed, without measuring it again: chains stay linear.
    if (el.firstChild && !el.firstChild.nextSibling && el !== root) crossing = el.firstChild;
    for (let child = crossing ? null : el.firstChild; child; child = child.nextSibling) {
      const size = (child.textContent ?? '').length;
      if (size > remaining) {
        crossing = child;
        break;
      }
      remaining -= size;
    }
    if (!crossing) return removed;
    while (crossing.nextSibling) {
      crossing.nextSibling.remove();
      removed = true;
    }
    if (crossing.nodeType !== 1) return removed;
    el = crossing;
  }
}

/** Elements that never nest (void) or whose end tag may be left out (a browser closes them on its own). */
const NOT_NESTING = new Set(
  (
    'area base br col embed hr img input link meta param source track wbr ' +
    'p li dt dd tr td th option optgroup thead tbody tfoot colgroup caption rb rt rp html head body'
  ).split(' '),
);

/**
 * How deeply the tags of `html` nest, estimated from the markup alone, before it is parsed: linkedom's parser takes
 * time growing with the square of the depth (40,000 nested <div>s: over a second; a 5 MB page of them: minutes).
 */
export function markupDepth(html: string): number {
  const markup = html.replace(/<(script|style|textarea)\b[\s\S]*?<\/\1\s*>|<!--[\s\S]*?-->/gi, '');
  let depth = 0;
  let deepest = 0;
  for (const [tag, close, name] of markup.matchAll(/<(\/?)([a-zA-Z][\w:-]*)[^>]*>/g)) {
    if (NOT_NESTING.has(name!.toLowerCase()) || tag.endsWith('/>')) continue;
    if (close) depth = Math.max(0, depth - 1);
    else if (++depth > deepest) deepest = depth;
  }
  return deepest;
}
