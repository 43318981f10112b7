/**
 * @module web/page-reader/markdown
 * HTML to Markdown for models: turndown with ATX headings, fenced code, `-` bullets, and two rules it lacks. Tables
 * become GFM pipe tables (turndown alone flattens them to one cell per paragraph, which loses which value belongs to
 * which column). Every `<pre>` becomes a fenced block, whether or not a `<code>` is its first child.
 */
import TurndownService from 'turndown';

/** Marks a cell and a row in the Markdown of a table's children, so the table rule can split them back. */
const CELL = '\u001f';
const ROW = '\u001e';
/** Marks text that does not start a Markdown line (see {@link markMidLineText}). */
const MID_LINE = '\u001d';

/** Control characters used as markers here; removed from page text so a page cannot forge them. */
export const MARKER_CHARS = new RegExp(`[${ROW}${CELL}${MID_LINE}]`, 'g');

/** Characters turndown escapes only at the start of a text, lest they start a list, heading, quote or rule. */
const LINE_START_SYNTAX = /^[-+=#>~\d]/;

/** Elements whose content starts a Markdown line (what `plainText` treats as blocks, less inline-only ones). */
const LINE_BLOCKS = new Set(
  (
    'address article aside blockquote body dd details dialog div dl dt fieldset figcaption figure footer form h1 h2 ' +
    'h3 h4 h5 h6 header li main nav ol p section summary table td th ul caption'
  ).split(' '),
);

/** Does `node` come after other visible text in its block, on the same line? */
function followsText(node: Node): boolean {
  for (let at: Node | null = node; at; at = at.parentNode) {
    if (at.nodeType === 1 && LINE_BLOCKS.has(at.nodeName.toLowerCase())) return false;
    for (let prev = at.previousSibling; prev; prev = prev.previousSibling) {
      if (prev.nodeName.toLowerCase() === 'br') return false;
      if (/\S/.test(prev.textContent ?? '')) return true;
    }
  }
  return false;
}

/** The block a text belongs to never puts it at the start of a line: a heading (after `#`) or a table cell. */
function neverLineStart(node: Node): boolean {
  const block = node.parentElement?.closest('h1, h2, h3, h4, h5, h6, td, th, p, li, dd, dt, div, blockquote');
  if (!block) return false;
  const name = block.localName;
  if (/^h[1-6]$/.test(name)) return true;
  // A cell of a multi-column row is written inside `| … |`; a one-column table is given back as paragraphs.
  return (name === 'td' || name === 'th') && (block.parentElement?.children.length ?? 0) > 1;
}

/**
 * turndown escapes `-`, `+`, `=`, `#`, `>`, `~~~` and `1.` at the start of every text node, as if each began a
 * line: `indent=4` in a Sphinx signature became `indent\=4`, `-32768` in a table cell `\-32768`. This marks the
 * text nodes that do not start a line (after other text in their block, in a heading, in a table cell) so the
 * escape leaves them alone; the mark is removed from the Markdown. Mutates the text nodes under `root`.
 */
function markMidLineText(root: Node): void {
  let node: Node | null = root.firstChild;
  while (node) {
    if (node.nodeType === 3) {
      const value = node.nodeValue ?? '';
      const lead = /^\s*/.exec(value)![0];
      if (LINE_START_SYNTAX.test(value.slice(lead.length)) && (neverLineStart(node) || followsText(node))) {
        node.nodeValue = `${lead}${MID_LINE}${value.slice(lead.length)}`;
      }
    }
    const name = node.nodeName.toLowerCase();
    // code is never escaped, and its text is taken as it is
    if (node.nodeType === 1 && name !== 'pre' && name !== 'code' && node.firstChild) {
      node = node.firstChild;
      continue;
    }
    while (node && node !== root && !node.nextSibling) node = node.parentNode;
    node = node && node !== root ? node.nextSibling : null;
  }
}

/** A cell's Markdown on one line: a pipe table has no multi-line cells. */
function cellText(content: string): string {
  return content
    .replace(/\s*\n+\s*/g, ' ')
    .replace(/\|/g, '\\|')
    .trim();
}

/** `| a | b |` rows from the marked-up content of a table, padded to the widest row; the first row is the header. */
function pipeTable(content: string): string {
  const [before = '', ...rowParts] = content.split(ROW);
  const raw = rowParts.map((row) => row.split(CELL).slice(1));
  const width = Math.max(0, ...raw.map((r) => r.length));
  const caption = before.trim();
  if (width <= 1) {
    // A one-column table is layout, not data: give its cells back as they are, paragraphs and all.
    return `\n\n${[caption, ...raw.map((r) => (r[0] ?? '').trim())].filter(Boolean).join('\n\n')}\n\n`;
  }
  const line = (cells: string[]) => `| ${Array.from({ length: width }, (_, i) => cells[i] ?? '').join(' | ')} |`;
  const [header = [], ...body] = raw.map((r) => r.map(cellText));
  const table = [line(header), `|${' --- |'.repeat(width)}`, ...body.map(line)].join('\n');
  return `\n\n${caption ? `${caption}\n\n` : ''}${table}\n\n`;
}

/** The language of a code block, from the class names highlighters use (`language-js`, `lang-js`, `highlight-source-js`). */
function codeLanguage(pre: HTMLElement): string {
  const code = pre.querySelector('code');
  // GitHub puts `highlight-source-js` on a <div> around the <pre>.
  const wrapper = pre.parentElement?.getAttribute('class') ?? '';
  const classes = `${pre.getAttribute('class') ?? ''} ${code?.getAttribute('class') ?? ''} ${wrapper}`;
  const match = /(?:^|\s)(?:language-|lang-|highlight-source-)([\w+#.-]+)/.exec(classes);
  return match?.[1] ?? pre.getAttribute('data-lang') ?? '';
}

/** Elements whose content is never text a reader sees. */
export const INVISIBLE_ELEMENTS = new Set([
  'script',
  'style',
  'noscript',
  'template',
  'iframe',
  'object',
  'embed',
  'canvas',
  'svg',
]);

/**
 * turndown's escapes, with the line-start ones made as narrow as Markdown is: `-` starts a list only before a space
 * (or a rule or setext underline when the line is all dashes), `=` matters only as a whole line of them. turndown
 * escaped `--sort-keys` and `-32768` too.
 */
const ESCAPES: Array<[RegExp, string]> = [
  [/\\/g, '\\\\'],
  [/\*/g, '\\*'],
  [/^-(?=-*(?:\s|$))/, '\\-'],
  [/^\+ /, '\\+ '],
  [/^(=+)(?=\s*$)/, '\\$1'],
  [/^(#{1,6}) /, '\\$1 '],
  [/`/g, '\\`'],
  [/^~~~/, '\\~~~'],
  [/\[/g, '\\['],
  [/\]/g, '\\]'],
  [/^>/, '\\>'],
  [/_/g, '\\_'],
  [/^(\d+)\. /, '$1\\. '],
];

function escapeMarkdown(text: string): string {
  return ESCAPES.reduce((escaped, [pattern, replacement]) => escaped.replace(pattern, replacement), text);
}

function createTurndown(): TurndownService {
  const service = new TurndownService({
    headingStyle: 'atx',
    codeBlockStyle: 'fenced',
    bulletListMarker: '-',
    emDelimiter: '_',
    strongDelimiter: '**',
    hr: '---',
  });
  service.escape = escapeMarkdown;
  service.remove((node) => INVISIBLE_ELEMENTS.has(node.nodeName.toLowerCase()));
  service.addRule('preAsFence', {
    filter: 'pre',
    replacement: (_content, node) => {
      // As in a browser, a newline right after <pre> is not part of the text.
      const code = (node.textContent ?? '').replace(/^\r?\n/, '').replace(/\n$/, '');
      // A fence one longer than any backtick run inside, so code that itself holds ``` stays closed.
      const longest = Math.max(2, ...(code.match(/`{3,}/g) ?? []).map((run) => run.length));
      const fence = '`'.repeat(longest + 1);
      return `\n\n${fence}${codeLanguage(node)}\n${code}\n${fence}\n\n`;
    },
  });
  service.addRule('compactListItem', {
    // turndown's own rule writes `-   item`; `- item` is what people and models write, and costs fewer tokens.
    filter: 'li',
    replacement: (content, node) => {
      const parent = node.parentNode as HTMLElement | null;
      let prefix = '- ';
      if (parent?.nodeName.toUpperCase() === 'OL') {
        const start = Number(parent.getAttribute('start') ?? '1');
        prefix = `${(Number.isFinite(start) ? start : 1) + Array.prototype.indexOf.call(parent.children, node)}. `;
      }
      const paragraph = /\n$/.test(content);
      const body = content.replace(/^\n+|\n+$/g, '') + (paragraph ? '\n' : '');
      return `${prefix}${body.replace(/\n/g, `\n${' '.repeat(prefix.length)}`)}${node.nextSibling ? '\n' : ''}`;
    },
  });
  // Rows and cells are marked only inside a table: Readability may keep the rows of a layout table without it.
  const inTable = (node: HTMLElement, names: string[]) =>
    names.includes(node.nodeName.toLowerCase()) && node.parentElement?.closest('table') != null;
  service.addRule('tableCell', {
    filter: (node) => inTable(node, ['th', 'td']),
    replacement: (content) => `${CELL}${content}`,
  });
  service.addRule('tableRow', {
    filter: (node) => inTable(node, ['tr']),
    replacement: (content) => `${ROW}${content}`,
  });
  service.addRule('table', {
    filter: 'table',
    replacement: (content) => pipeTable(content),
  });
  service.addRule('tableCaption', {
    filter: 'caption',
    replacement: (content) => `${cellText(content)}\n\n`,
  });
  service.addRule('httpImagesOnly', {
    // Images stay as `![alt](url)` only with a fetchable URL; a `data:` image can be megabytes of base64.
    filter: 'img',
    replacement: (_content, node) => {
      const src = node.getAttribute('src') ?? '';
      const alt = (node.getAttribute('alt') ?? '').replace(/\s+/g, ' ').trim();
      if (!/^https?:\/\//i.test(src)) return alt;
      return `![${alt.replace(/[[\]]/g, '\\$&')}](${src.replace(/[()\s]/g, encodeURIComponent)})`;
    },
  });
  return service;
}

let shared: TurndownService | undefined;

/**
 * The Markdown of an element's content. One turndown instance serves every call: its rules hold no state. Marks
 * the text nodes under `root` on the way (see {@link markMidLineText}): read the text before.
 */
export function toMarkdown(root: HTMLElement): string {
  shared ??= createTurndown();
  markMidLineText(root);
  return shared
    .turndown(root)
    .replace(MARKER_CHARS, '')
    .replace(/\n{3,}/g, '\n\n')
    .trim();
}
