/**
 * @module web/page-reader/cleanup
 * What a page's markup carries that is not its content, removed before anything reads it, and where the content is
 * when Readability's pick cannot be trusted. Written against real manuals (Sphinx, DocBook) as much as news pages:
 * permalink anchors (`¶` after every heading), navigation tables (`Prev | Up | Next`), and the language of a code
 * block written on a wrapper around the `<pre>` rather than on it.
 */

/** Page chrome the fallback drops: what a reader's eye skips. `header`/`footer` are handled apart (see below). */
const CHROME_SELECTOR = [
  'script',
  'style',
  'noscript',
  'template',
  'iframe',
  'svg',
  'nav',
  'aside',
  'form',
  '[role="navigation"]',
  '[role="banner"]',
  '[role="contentinfo"]',
  '[role="complementary"]',
  '[role="search"]',
  '[hidden]',
  '[aria-hidden="true"]',
].join(', ');

/**
 * Navigation written without `<nav>`: DocBook's `Prev | Up | Home | Next` header and footer (a table whose summary
 * says so, inside `div.navheader` / `div.navfooter`), and Sphinx's sidebar and related-pages bar.
 */
const NAVIGATION_SELECTOR = [
  'table[summary*="navigation" i]',
  '.navheader',
  '.navfooter',
  '.sphinxsidebar',
  '.breadcrumbs',
  '.breadcrumb',
].join(', ');

/** Text of an anchor that only links to its own heading: pilcrow, section sign, hash, link symbol. */
const PERMALINK_TEXT = /^(?:¶|§|#|🔗)?$/u;

/** Sectioning content: a `<header>` or `<footer>` inside one belongs to it (an article's title), not to the page. */
const SECTIONING = 'article, aside, main, nav, section, [role="main"], [role="article"]';

/**
 * Removes permalink anchors: Sphinx's `<a class="headerlink" title="Permalink to this heading">¶</a>` and the like
 * (a link to a fragment of the page itself whose text is only a symbol), which otherwise end every heading and
 * signature in the Markdown as `[¶](…#x "Permalink to this heading")`: 5–11 % of a Sphinx page's text.
 */
export function removePermalinks(document: Document, pageUrl: string): void {
  const page = pageUrl.replace(/#.*$/, '');
  for (const a of Array.from(document.querySelectorAll('a[href]'))) {
    const text = (a.textContent ?? '').trim();
    const title = a.getAttribute('title') ?? '';
    const href = a.getAttribute('href') ?? '';
    const ownFragment = href.startsWith('#') || (href.includes('#') && href.replace(/#.*$/, '') === page);
    if (a.classList.contains('headerlink') || (ownFragment && PERMALINK_TEXT.test(text) && !a.querySelector('img'))) {
      a.remove();
    } else if (ownFragment && /^permalink\b/i.test(title) && text.length <= 2) {
      a.remove();
    }
  }
}

/** Class names that name a code block's language: `language-js`, `lang-js`, `highlight-python3`, `highlight-source-js`. */
const LANGUAGE_CLASS = /(?:^|\s)(?:language-|lang-|highlight-source-|highlight-)([\w+#.-]+)/;

/** Sphinx's and Pygments' lexer names, as Markdown fences usually name them. */
const LANGUAGE_ALIASES: Record<string, string> = { python3: 'python', py3: 'python', py: 'python', none: 'text' };

/** The language a class attribute names, or '' (Sphinx's `highlight-default` names none). */
export function languageOfClass(classes: string): string {
  const name = LANGUAGE_CLASS.exec(classes)?.[1]?.toLowerCase() ?? '';
  if (name === 'default') return '';
  return LANGUAGE_ALIASES[name] ?? name;
}

/** Ancestors of a `<pre>` searched for its language: Sphinx puts it on the grandparent. */
const LANGUAGE_ANCESTORS = 3;

/**
 * Writes the language of each code block onto its `<pre>` as `language-<name>`, from the `<pre>`, its `<code>` or
 * one of its nearest ancestors. Readability drops wrapper `<div>`s, so this runs before it.
 */
export function labelCodeBlocks(document: Document): void {
  for (const pre of Array.from(document.querySelectorAll('pre'))) {
    const own = `${pre.getAttribute('class') ?? ''} ${pre.querySelector('code')?.getAttribute('class') ?? ''}`;
    if (/(?:^|\s)(?:language-|lang-)/.test(own)) continue;
    let language = languageOfClass(own);
    for (let el = pre.parentElement, i = 0; !language && el && i < LANGUAGE_ANCESTORS; el = el.parentElement, i++) {
      language = languageOfClass(el.getAttribute('class') ?? '');
    }
    if (language) pre.setAttribute('class', `${pre.getAttribute('class') ?? ''} language-${language}`.trim());
  }
}

/**
 * Removes page chrome inside `root`: navigation, sidebars, forms, hidden elements, navigation tables, and the
 * page's own header and footer (a `<header>`/`<footer>` not inside an article or section, which is the article's).
 */
export function removeChrome(root: Element): void {
  for (const el of Array.from(root.querySelectorAll(`${CHROME_SELECTOR}, ${NAVIGATION_SELECTOR}`))) el.remove();
  for (const el of Array.from(root.querySelectorAll('header, footer, .footer'))) {
    if (!el.parentElement?.closest(SECTIONING)) el.remove();
  }
}

/** A landmark holding less text than this is not taken for the page's main content. */
const MIN_LANDMARK_CHARS = 200;

/**
 * Where a page says its main content is: the `<main>` (or `role="main"` element) with the most text, if it holds
 * at least 200 characters; else the `<body>`. Chrome is removed from it (in place: use a fresh parse).
 */
export function mainRegion(document: Document): Element {
  removeChrome(document.body);
  let best: Element | undefined;
  let bestLength = MIN_LANDMARK_CHARS - 1;
  for (const el of Array.from(document.body.querySelectorAll('main, [role="main"]'))) {
    const length = (el.textContent ?? '').replace(/\s+/g, ' ').length;
    if (length > bestLength) {
      best = el;
      bestLength = length;
    }
  }
  return best ?? document.body;
}
