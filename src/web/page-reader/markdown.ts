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

/** Control characters the table rule uses as markers; removed from page text so a page cannot forge them. */
export const MARKER_CHARS = new RegExp(`[${ROW}${CELL}]`, 'g');

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

function createTurndown(): TurndownService {
  const service = new TurndownService({
    headingStyle: 'atx',
    codeBlockStyle: 'fenced',
    bulletListMarker: '-',
    emDelimiter: '_',
    strongDelimiter: '**',
    hr: '---',
  });
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

/** The Markdown of an element's content. One turndown instance serves every call: its rules hold no state. */
export function toMarkdown(root: HTMLElement): string {
  shared ??= createTurndown();
  return shared
    .turndown(root)
    .replace(MARKER_CHARS, '')
    .replace(/\n{3,}/g, '\n\n')
    .trim();
}
