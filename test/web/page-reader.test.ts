import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentryError } from '../../src/errors.js';
import {
  DEFAULT_MAX_CHARS,
  MAX_LINKS,
  MAX_TEXT_CHARS,
  PageReadError,
  extractPage,
  readPage,
  type PageContent,
} from '../../src/web/page-reader.js';
import { markupDepth } from '../../src/web/page-reader/dom.js';
import { loadPdfJs } from '../../src/web/page-reader/pdf.js';

const fixture = (name: string): Buffer => readFileSync(new URL(`../fixtures/pages/${name}`, import.meta.url));
const encode = (text: string) => new TextEncoder().encode(text);

/** extractPage on a stored fixture, as if served from https://site.example/dir/<name>. */
function extractFixture(name: string, contentType = 'text/html', url = `https://site.example/dir/${name}`) {
  return extractPage({ url, finalUrl: url, contentType, body: fixture(name) });
}

/** How a call failed; fails the test if it did not. */
async function failure(promise: Promise<unknown>): Promise<PageReadError> {
  try {
    await promise;
  } catch (err) {
    expect(err).toBeInstanceOf(PageReadError);
    return err as PageReadError;
  }
  throw new Error('expected the call to fail');
}

/**
 * A valid PDF with one page per string, written by hand: objects, then an xref table whose offsets are counted
 * from the bytes before it. Helvetica is one of the 14 standard fonts, so no font is embedded.
 */
function makePdf(pages: string[], title?: string): Uint8Array {
  const escape = (s: string) => s.replace(/[\\()]/g, (c) => `\\${c}`);
  const objects = [
    '<< /Type /Catalog /Pages 2 0 R >>',
    `<< /Type /Pages /Kids [${pages.map((_, i) => `${4 + i * 2} 0 R`).join(' ')}] /Count ${pages.length} >>`,
    '<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>',
  ];
  for (const [i, text] of pages.entries()) {
    const stream = `BT /F1 18 Tf 72 720 Td (${escape(text)}) Tj ET`;
    objects.push(
      `<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents ${5 + i * 2} 0 R >>`,
      `<< /Length ${stream.length} >>\nstream\n${stream}\nendstream`,
    );
  }
  if (title) objects.push(`<< /Title (${escape(title)}) >>`);
  let pdf = '%PDF-1.4\n';
  const offsets: number[] = [];
  for (const [i, body] of objects.entries()) {
    offsets.push(pdf.length);
    pdf += `${i + 1} 0 obj\n${body}\nendobj\n`;
  }
  const xref = pdf.length;
  pdf += `xref\n0 ${objects.length + 1}\n0000000000 65535 f \n`;
  for (const offset of offsets) pdf += `${String(offset).padStart(10, '0')} 00000 n \n`;
  const info = title ? ` /Info ${objects.length} 0 R` : '';
  pdf += `trailer\n<< /Size ${objects.length + 1} /Root 1 0 R${info} >>\nstartxref\n${xref}\n%%EOF\n`;
  return encode(pdf);
}

/** An article long enough to be cut: numbered paragraphs, each about 300 characters. */
function longArticle(paragraphs: number): string {
  const body = Array.from(
    { length: paragraphs },
    (_, i) =>
      `<p>Paragraph ${i + 1}. The survey team walked the eastern shore again and counted nesting birds, noting the ` +
      'weather, the water level and the time of each sighting in the log book, then compared the numbers with ' +
      'those of the same week in the three previous years to see whether the colony was growing or shrinking.</p>',
  ).join('\n');
  return `<!DOCTYPE html><html><head><title>Shore survey</title></head><body><article><h1>Shore survey</h1>${body}</article></body></html>`;
}

describe('extractPage: HTML articles', () => {
  it('keeps the story of a news page and none of its navigation, sidebar or footer', async () => {
    const page = await extractFixture('news-article.html');
    expect(page.title).toBe('City council approves new cycling network');
    expect(page.content_type).toBe('text/html');
    expect(page.truncated).toBe(false);
    expect(page.content).toContain('voted 9 to 2 on Tuesday night');
    expect(page.content).toContain('## Opposition from traders');
    expect(page.content).toContain('> This is the most important decision');
    for (const noise of ['Subscribe', 'Log in', 'Weather', 'Most read', 'ADVERTISEMENT', 'Zephyr', 'rights reserved']) {
      expect(page.content).not.toContain(noise);
      expect(page.text).not.toContain(noise);
    }
    expect(page.links).toEqual([
      { text: "council's consultation site", url: 'https://council.example.org/cycling-plan' },
      { text: 'drop-in sessions', url: 'https://site.example/events/cycling-drop-in' },
    ]);
  });

  it('gives the plain text of the whole article, whitespace collapsed and blocks kept apart', async () => {
    const page = await extractFixture('news-article.html');
    expect(page.text).toContain(
      'Construction of the first segment, along Harbour Road, is due to begin in the autumn. The plan, drawn up',
    );
    expect(page.text).not.toMatch(/\s{2}|\n|<|\]\(/);
  });

  it('turns a docs page into headings, lists and fenced code with its language', async () => {
    const url = 'https://ferrite.example/docs/guide/streams';
    const page = await extractPage({ url, finalUrl: url, contentType: 'text/html', body: fixture('docs-page.html') });
    expect(page.content).toContain('## Creating a stream');
    expect(page.content).toContain('### Options');
    expect(page.content).toContain(
      "```typescript\nimport { open } from 'ferrite';\n\nconst stream = await open('./data/events.ndjson', { highWaterMark: 64 * 1024 });",
    );
    expect(page.content).toContain(
      '```shell\nferrite pipe ./in.ndjson --transform upper --out ./out.ndjson\necho "done"\n```',
    );
    expect(page.content).toContain('- `highWaterMark`: bytes buffered before back-pressure applies.');
    expect(page.content).toContain('1. Open a writable stream with `ferrite.create()`.\n2. Pipe');
    expect(page.content).not.toContain('Installation');
    expect(page.content).not.toContain('Edit this page');
    expect(page.links).toEqual([
      { text: 'pipe reference', url: 'https://ferrite.example/docs/reference/streams#pipe' },
    ]);
  });

  it('writes tables as GFM pipe tables, with a caption, escaped pipes and a header for header-less tables', async () => {
    const page = await extractFixture('table-page.html');
    expect(page.content).toContain(
      [
        'Lakes by surface area',
        '',
        '| Lake | Area (km²) | Countries | Max depth (m) |',
        '| --- | --- | --- | --- |',
        '| Ladoga | 17,700 | Russia | 230 |',
        '| Onega | 9,720 | Russia | 127 |',
        '| Vänern | 5,650 | Sweden | 106 |',
        '| Peipus | 3,555 | Estonia \\| Russia | 15 |',
      ].join('\n'),
    );
    expect(page.content).toContain('| Ladoga | 837 km³ |\n| --- | --- |\n| Onega | 285 km³ |');
    expect(page.text).toContain('Vänern 5,650 Sweden 106');
  });

  it('gives the cells of a one-column layout table back as paragraphs', async () => {
    const cell = (n: number) =>
      `<td><p>${`Column text number ${n} of the old layout page. `.repeat(8)}</p><p>Second paragraph ${n}.</p></td>`;
    const html = `<html><head><title>Old site</title></head><body><table><tr>${cell(1)}</tr><tr>${cell(2)}</tr></table></body></html>`;
    const url = 'https://old.example/';
    const page = await extractPage({ url, finalUrl: url, contentType: 'text/html', body: encode(html) });
    expect(page.content).not.toContain('|');
    expect(page.content).toMatch(/layout page\.\n\nSecond paragraph 1\.\n\nColumn text number 2/);
  });

  it('writes lists with `-` and numbers, nests them, and keeps images only with fetchable URLs', async () => {
    const page = await extractFixture('recipe.html');
    expect(page.title).toBe('Lentil soup with lemon and cumin');
    expect(page.content).toContain('## Ingredients\n\n- 250 g red lentils, rinsed\n- 1 onion and 2 carrots, diced');
    expect(page.content).toContain(
      '3. Simmer for 25 minutes, stirring now and then.\n   - Add water if it gets too thick.',
    );
    // the lazy-loaded image's real source replaces its data: placeholder; a data: image without one is dropped
    expect(page.content).toContain('![A bowl of lentil soup](https://site.example/img/lentil-soup.jpg)');
    expect(page.content).not.toContain('data:');
    expect(page.content).not.toContain('All recipes');
  });

  it('leaves out scripts, styles, noscript and event handlers', async () => {
    const page = await extractFixture('scripts-styles.html');
    expect(page.content).toContain('A sourdough starter is a stable culture');
    expect(page.content).toContain('Keep a mature starter in the refrigerator');
    for (const leaked of [
      'SECRET_SCRIPT_MARKER',
      'secret-css-marker',
      'inline-style-marker',
      'INJECTED_BY_SCRIPT',
      'NOSCRIPT_MARKER',
      'dataLayer',
      'onclick',
      'schema.org',
    ]) {
      expect(page.content).not.toContain(leaked);
      expect(page.text).not.toContain(leaked);
    }
  });

  it('falls back to the body without header and footer when Readability finds no article', async () => {
    const page = await extractFixture('no-article.html');
    expect(page.title).toBe('Harbourlight Tools');
    for (const card of ['Ship faster.', 'Deploy previews', 'Edge caching', 'Team roles', 'Audit log']) {
      expect(page.content).toContain(card);
    }
    expect(page.content).not.toContain('Sign in');
    expect(page.content).not.toContain('Legal');
    expect(page.links).toEqual([{ text: 'Start free', url: 'https://site.example/signup' }]);
  });

  it('escapes Markdown syntax only where it would start a line, and drops permalink anchors', async () => {
    const html =
      '<title>Escapes</title><article><h2>4. Results<a class="headerlink" href="#r" title="Permalink to this heading">¶</a></h2>' +
      '<p>- not a list item, and 1. not a numbered one</p><p>Call <code>f(</code><span>indent</span><span>=</span>4) ' +
      'with <span>--verbose</span> or <span>-32768</span>; a <a href="#r">§</a> symbol link goes too.</p>' +
      '<table><tr><th>type</th><th>range</th></tr><tr><td>smallint</td><td>-32768 to +32767</td></tr></table>' +
      `<p>${'Text long enough for Readability to take this as an article. '.repeat(6)}</p></article>`;
    const url = 'https://site.example/escapes';
    const page = await extractPage({ url, finalUrl: url, contentType: 'text/html', body: encode(html) });
    expect(page.content).toContain('## 4. Results\n');
    expect(page.content).toContain('\\- not a list item, and 1. not a numbered one');
    expect(page.content).toContain('`f(`indent=4) with --verbose or -32768; a symbol link goes too.');
    expect(page.content).toContain('| smallint | -32768 to +32767 |');
    expect(page.content).not.toMatch(/¶|§|Permalink/);
  });

  it('reads markup without html, head or body tags', async () => {
    const page = await extractFixture('fragment.html');
    expect(page.title).toBe('Release notes 4.2');
    expect(page.content).toContain('Version 4.2 adds offline mode');
    expect(page.content).toContain('missing notification sound');
  });

  it('refuses a JavaScript app shell as empty, saying why', async () => {
    const err = await failure(extractFixture('spa-shell.html'));
    expect(err.reason).toBe('empty');
    expect(err.code).toBe('invalid_request');
    expect(err.message).toMatch(/no readable text.*JavaScript/);
  });
});

describe('extractPage: links', () => {
  it('resolves relative links against the final URL and keeps only distinct outbound http(s) ones', async () => {
    const page = await extractFixture('relative-links.html');
    expect(page.links).toEqual([
      { text: 'How tidal turbines work', url: 'https://site.example/dir/physics.html' },
      { text: 'The MeyGen project', url: 'https://site.example/projects/meygen' },
      { text: 'Marine life studies', url: 'https://site.example/studies/marine-life?page=2' },
      { text: 'Tidal atlas', url: 'https://cdn.example.net/tidal-atlas.pdf' },
      { text: 'Tide tables', url: 'https://other.example.org/tides' },
    ]);
    expect(page.content).toContain('[The MeyGen project](https://site.example/projects/meygen)');
    expect(page.content).not.toContain('javascript:');
  });

  it('resolves against <base href> when the page has one, images included', async () => {
    const page = await extractFixture('base-href.html');
    expect(page.links).toEqual([
      { text: 'our guide to soil mixes', url: 'https://static.example.com/guides/v2/soil-mixes.html' },
      { text: 'watering basics', url: 'https://static.example.com/care/watering' },
    ]);
    expect(page.content).toContain('![Hands repotting a fern](https://static.example.com/guides/v2/img/repotting.jpg)');
  });

  it('resolves a relative <base href> against the final URL', async () => {
    const html =
      '<html><head><base href="/archive/2019/"><title>Old post</title></head><body><article>' +
      `<p>${'An old post about the harbour, kept for the record. '.repeat(6)}<a href="notes">Notes</a></p>` +
      '</article></body></html>';
    const url = 'https://blog.example/posts/1';
    const page = await extractPage({ url, finalUrl: url, contentType: 'text/html', body: encode(html) });
    expect(page.links).toEqual([{ text: 'Notes', url: 'https://blog.example/archive/2019/notes' }]);
  });

  it(`lists at most ${MAX_LINKS} links`, async () => {
    const items = Array.from({ length: 150 }, (_, i) => `<li><a href="/item/${i}">Item number ${i}</a></li>`).join('');
    const html = `<html><head><title>Index</title></head><body><main><h1>Index</h1><ul>${items}</ul></main></body></html>`;
    const url = 'https://site.example/index';
    const page = await extractPage({ url, finalUrl: url, contentType: 'text/html', body: encode(html) });
    expect(page.links).toHaveLength(MAX_LINKS);
    expect(page.links[0]).toEqual({ text: 'Item number 0', url: 'https://site.example/item/0' });
  });
});

describe('extractPage: character sets', () => {
  it('decodes an ISO-8859-1 page by the charset of the Content-Type header', async () => {
    const bytes = fixture('latin1.html.bytes');
    // the fixture really is Latin-1: é is the single byte 0xE9, which is not valid UTF-8 on its own
    expect(bytes.includes(0xe9)).toBe(true);
    expect(bytes.toString('utf8')).toContain('\ufffd');
    const page = await extractFixture('latin1.html.bytes', 'text/html; charset=ISO-8859-1');
    expect(page.title).toBe('Café Müller in Wuppertal');
    expect(page.content).toContain('Das Café Müller liegt seit 1952 an der Ecke Friedrich-Ebert-Straße');
    expect(page.text).toContain('Frühstück à la carte');
  });

  it('decodes a windows-1252 page declared only in <meta http-equiv>, smart quotes and € included', async () => {
    const page = await extractFixture('windows-1252-meta.html.bytes', 'text/html');
    expect(page.title).toBe('Pricing – Northwind Editor');
    expect(page.content).toContain('“Northwind Editor” costs €49 per seat per year — or €4.50 per month');
    expect(page.content).toContain('for the version you buy… updates');
    expect(page.content).toContain('We don’t charge');
  });

  it('decodes Shift_JIS declared in <meta charset>', async () => {
    const page = await extractFixture('shift-jis.html.bytes', 'text/html');
    expect(page.title).toBe('東京の桜の名所');
    expect(page.text).toContain('上野恩賜公園には約千本の桜があり');
    expect(page.text).toContain('千鳥ヶ淵ではボートに乗って');
  });

  it('reads UTF-8 with a byte order mark, which wins over a wrong header', async () => {
    for (const contentType of ['text/html', 'text/html; charset=iso-8859-1']) {
      const page = await extractFixture('utf8-bom.html', contentType);
      expect(page.title).toBe('Crème brûlée – a short history');
      expect(page.content).toContain('François Massialot');
      expect(page.content).toContain('the “crack” of the spoon');
      expect(page.content).not.toContain('\ufeff');
    }
  });

  it('keeps Japanese and Greek text intact', async () => {
    const japanese = await extractFixture('japanese.html');
    expect(japanese.title).toBe('富士山の登山シーズン');
    expect(japanese.text).toContain('最も人気のある吉田ルートは山小屋が多く、初心者にも向いています。');
    const greek = await extractFixture('greek.html');
    expect(greek.title).toBe('Η Ακρόπολη των Αθηνών');
    expect(greek.content).toContain('με πιο γνωστό τον Παρθενώνα');
  });
});

describe('extractPage: titles', () => {
  it('takes the first <h1> when there is no <title>', async () => {
    expect((await extractFixture('title-from-h1.html')).title).toBe('Winter maintenance for road bikes');
  });

  it('takes the last path segment, then the host, when the page names no title', async () => {
    expect((await extractFixture('untitled.html')).title).toBe('untitled.html');
    const url = 'https://library.example/';
    const page = await extractPage({ url, finalUrl: url, contentType: 'text/html', body: fixture('untitled.html') });
    expect(page.title).toBe('library.example');
  });
});

describe('extractPage: length limits', () => {
  it(`cuts content at ${DEFAULT_MAX_CHARS} characters by default and marks it truncated, keeping the whole text`, async () => {
    const url = 'https://site.example/survey';
    const page = await extractPage({ url, finalUrl: url, contentType: 'text/html', body: encode(longArticle(200)) });
    expect(page.truncated).toBe(true);
    expect(page.content.length).toBeLessThanOrEqual(DEFAULT_MAX_CHARS);
    expect(page.content.length).toBeGreaterThan(DEFAULT_MAX_CHARS * 0.8);
    expect(page.content).toMatch(/shrinking\.$/);
    expect(page.text).toContain('Paragraph 200. The survey team');
  });

  it('honours a smaller maxChars, and a page that fits is not truncated', async () => {
    const url = 'https://site.example/survey';
    const body = encode(longArticle(20));
    const short = await extractPage({ url, finalUrl: url, contentType: 'text/html', body, maxChars: 1_000 });
    expect(short.truncated).toBe(true);
    expect(short.content.length).toBeLessThanOrEqual(1_000);
    const whole = await extractPage({ url, finalUrl: url, contentType: 'text/html', body, maxChars: 100_000 });
    expect(whole.truncated).toBe(false);
    expect(whole.content).toContain('Paragraph 20.');
  });

  it('converts only the start of a very long page, but takes text and links from all of it', async () => {
    const url = 'https://site.example/survey';
    const html = longArticle(1_000).replace('</article>', '<p>The end: <a href="/archive">archive</a>.</p></article>');
    const page = await extractPage({
      url,
      finalUrl: url,
      contentType: 'text/html',
      body: encode(html),
      maxChars: 2_000,
    });
    expect(page.truncated).toBe(true);
    expect(page.content.length).toBeLessThanOrEqual(2_000);
    expect(page.content.length).toBeGreaterThan(1_600);
    // Readability drops a first heading that repeats the title; the reader puts it back
    expect(page.content).toMatch(/^# Shore survey\n\nParagraph 1\. The survey team/);
    expect(page.text).toContain('Paragraph 1000. The survey team');
    expect(page.links).toEqual([{ text: 'archive', url: 'https://site.example/archive' }]);
  });

  it('reads a page nested thousands of levels deep quickly, from its text', async () => {
    const depth = 5_000;
    const html = `<title>Deep</title>${'<div>'.repeat(depth)}<p>${'Deep inside the page. '.repeat(20)}</p>${'</div>'.repeat(depth)}`;
    const started = performance.now();
    const url = 'https://site.example/deep';
    const page = await extractPage({ url, finalUrl: url, contentType: 'text/html', body: encode(html) });
    expect(performance.now() - started).toBeLessThan(3_000);
    expect(page.title).toBe('Deep');
    expect(page.content).toContain('Deep inside the page. Deep inside the page.');
  });

  it('refuses markup nested deeper than any real page before parsing it', async () => {
    const depth = 50_000;
    const html = `<title>Trap</title>${'<div>'.repeat(depth)}<p>bottom</p>${'</div>'.repeat(depth)}`;
    const started = performance.now();
    const url = 'https://site.example/trap';
    const err = await failure(extractPage({ url, finalUrl: url, contentType: 'text/html', body: encode(html) }));
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(err.reason).toBe('unreadable');
    expect(err.message).toContain('more than 10000 deep');
  });

  it('estimates the nesting of real pages low, unclosed <p> and <li> and scripts included', () => {
    for (const name of ['news-article.html', 'docs-page.html', 'recipe.html', 'scripts-styles.html']) {
      expect(markupDepth(fixture(name).toString('utf8'))).toBeLessThan(15);
    }
    expect(markupDepth('<ul><li>a<li>b<li>c</ul><p>x<p>y<script>"<div><div><div>"</script><br><img src=x>')).toBe(1);
  });

  it('refuses a maxChars that is not a positive integer', async () => {
    const err = await failure(
      extractPage({
        url: 'https://a.example/',
        finalUrl: 'https://a.example/',
        contentType: 'text/html',
        body: encode('<p>x</p>'),
        maxChars: 0,
      }),
    );
    expect(err.reason).toBe('invalid_request');
    expect(err.message).toBe('Expected `maxChars` to be a positive integer, got `0`');
  });

  it(`caps the plain text at ${MAX_TEXT_CHARS} characters`, async () => {
    const line = 'The quick brown fox jumps over the lazy dog near the river bank.\n';
    const body = encode(line.repeat(Math.ceil((MAX_TEXT_CHARS * 1.1) / line.length)));
    const page = await extractPage({
      url: 'https://a.example/log.txt',
      finalUrl: 'https://a.example/log.txt',
      contentType: 'text/plain',
      body,
    });
    expect(page.text.length).toBe(MAX_TEXT_CHARS);
    expect(page.truncated).toBe(true);
  });
});

describe('extractPage: other formats', () => {
  it('pretty-prints JSON and titles it by the URL', async () => {
    // served minified, as APIs do
    const data: unknown = JSON.parse(fixture('station-readings.json').toString('utf8'));
    const url = 'https://weather.example/api/stations/riverside-north.json';
    const page = await extractPage({
      url,
      finalUrl: url,
      contentType: 'application/json; charset=utf-8',
      body: encode(JSON.stringify(data)),
    });
    expect(page.content_type).toBe('application/json');
    expect(page.title).toBe('riverside-north.json');
    expect(page.content).toBe(JSON.stringify(data, null, 2));
    expect(page.content).toContain('\n  "station": "Riverside North",\n  "readings": [\n    {\n      "time"');
    expect(page.text).toContain('"temperature": "°C"');
    expect(page.links).toEqual([]);
  });

  it('reads +json types as JSON and passes invalid JSON through', async () => {
    const problem = await extractPage({
      url: 'https://a.example/e',
      finalUrl: 'https://a.example/e',
      contentType: 'application/problem+json',
      body: encode('{"title":"Gone"}'),
    });
    expect(problem.content).toBe('{\n  "title": "Gone"\n}');
    const broken = await extractPage({
      url: 'https://a.example/b',
      finalUrl: 'https://a.example/b',
      contentType: 'application/json',
      body: encode('{"half":'),
    });
    expect(broken.content).toBe('{"half":');
  });

  it('passes plain text through, titled by the URL', async () => {
    const page = await extractFixture('notes.txt', 'text/plain');
    expect(page.content_type).toBe('text/plain');
    expect(page.title).toBe('notes.txt');
    expect(page.content).toBe(fixture('notes.txt').toString('utf8').trim());
    expect(page.text).toBe(fixture('notes.txt').toString('utf8').replace(/\s+/g, ' ').trim());
  });

  it('passes Markdown through, titled by its first heading, with a text free of markup', async () => {
    const page = await extractFixture('readme.md', 'text/markdown; charset=utf-8');
    expect(page.title).toBe('Quill: a tiny static site generator');
    expect(page.content).toContain('```sh\nnpm install -g quill-ssg\n```');
    expect(page.text).toContain('Quill turns a folder of Markdown files into a static website.');
    expect(page.text).toContain('See the full manual for themes.');
    expect(page.text).not.toMatch(/\*\*|```|\]\(|^#/);
  });

  it('passes an RSS feed through as text', async () => {
    const page = await extractFixture('feed.xml', 'application/rss+xml');
    expect(page.content).toContain('<title>City council approves new cycling network</title>');
  });

  it('reads the text of a PDF, page by page, with the title from its document information', async () => {
    const body = makePdf(['Hello PDF world', 'Second page (with parentheses)'], 'A tiny test document');
    const page = await extractPage({
      url: 'https://a.example/t.pdf',
      finalUrl: 'https://a.example/t.pdf',
      contentType: 'application/pdf',
      body,
    });
    expect(page.content_type).toBe('application/pdf');
    expect(page.title).toBe('A tiny test document');
    expect(page.content).toBe('Hello PDF world\n\nSecond page (with parentheses)');
    expect(page.text).toBe('Hello PDF world Second page (with parentheses)');
    expect(page.links).toEqual([]);
  });

  it('titles an untitled PDF by its first line, and reads a PDF served as octet-stream', async () => {
    const body = makePdf(['Quarterly report', 'Revenue grew.']);
    const page = await extractPage({
      url: 'https://a.example/dl?id=7',
      finalUrl: 'https://a.example/dl?id=7',
      contentType: 'application/octet-stream',
      body,
    });
    expect(page.content_type).toBe('application/pdf');
    expect(page.title).toBe('Quarterly report');
  });

  it('refuses a damaged PDF as unreadable', async () => {
    const err = await failure(
      extractPage({
        url: 'https://a.example/x.pdf',
        finalUrl: 'https://a.example/x.pdf',
        contentType: 'application/pdf',
        body: encode('%PDF-1.4\nnot really a pdf'),
      }),
    );
    expect(err.reason).toBe('unreadable');
  });

  it('names pdfjs-dist when it cannot be loaded', async () => {
    const err = await failure(loadPdfJs('pdfjs-dist-not-installed/legacy/build/pdf.mjs'));
    expect(err.reason).toBe('pdf_unavailable');
    expect(err.message).toContain('npm install pdfjs-dist');
  });

  it('refuses images, audio and undeclared binary data', async () => {
    const png = Uint8Array.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13]);
    const image = await failure(
      extractPage({
        url: 'https://a.example/p.png',
        finalUrl: 'https://a.example/p.png',
        contentType: 'image/png',
        body: png,
      }),
    );
    expect(image.reason).toBe('unsupported_type');
    expect(image.message).toContain('of type image/png');
    for (const contentType of ['audio/mpeg', 'application/zip', 'application/octet-stream', null]) {
      const err = await failure(
        extractPage({ url: 'https://a.example/f', finalUrl: 'https://a.example/f', contentType, body: png }),
      );
      expect(err.reason).toBe('unsupported_type');
    }
  });

  it('sniffs HTML and text when the server declares no type', async () => {
    const html = await extractPage({
      url: 'https://a.example/',
      finalUrl: 'https://a.example/',
      contentType: null,
      body: fixture('news-article.html'),
    });
    expect(html.content_type).toBe('text/html');
    expect(html.content).toContain('## Opposition from traders');
    const text = await extractPage({
      url: 'https://a.example/n',
      finalUrl: 'https://a.example/n',
      contentType: null,
      body: fixture('notes.txt'),
    });
    expect(text.content_type).toBe('text/plain');
  });

  it('refuses an empty body', async () => {
    const err = await failure(
      extractPage({
        url: 'https://a.example/',
        finalUrl: 'https://a.example/',
        contentType: 'text/html',
        body: new Uint8Array(),
      }),
    );
    expect(err.reason).toBe('empty');
  });
});

describe('readPage over a loopback HTTP server', () => {
  let server: Server;
  let base: string;
  /** Bytes the /huge route wrote before the client went away. */
  let hugeWritten = 0;
  let hugeClosed: Promise<void>;
  const HUGE_BYTES = 32 * 1024 * 1024;

  function route(req: IncomingMessage, res: ServerResponse): void {
    const path = req.url ?? '/';
    const send = (status: number, type: string, body: Uint8Array | string, headers: Record<string, string> = {}) => {
      res.writeHead(status, { 'content-type': type, ...headers });
      res.end(body);
    };
    if (path === '/article') return send(200, 'text/html; charset=utf-8', fixture('news-article.html'));
    if (path === '/latin1') return send(200, 'text/html; charset=iso-8859-1', fixture('latin1.html.bytes'));
    if (path === '/notes.txt') return send(200, 'text/plain', fixture('notes.txt'));
    if (path === '/report.pdf') return send(200, 'application/pdf', makePdf(['Hello PDF world'], 'Report'));
    if (path === '/image.png') return send(200, 'image/png', new Uint8Array(2048));
    if (path === '/missing') return send(404, 'text/html', '<h1>Not here</h1>');
    if (path === '/broken') return send(503, 'text/plain', 'down for maintenance');
    if (path === '/hop/1') return send(302, 'text/plain', '', { location: '/hop/2' });
    if (path === '/hop/2') return send(301, 'text/plain', '', { location: `${base}/hop/3` });
    if (path === '/hop/3') return send(307, 'text/plain', '', { location: '/landing/final?x=1' });
    if (path === '/landing/final?x=1') return send(200, 'text/html', fixture('relative-links.html'));
    if (path === '/huge') {
      hugeClosed = new Promise((resolve) => res.on('close', resolve));
      res.writeHead(200, { 'content-type': 'text/html' });
      const chunk = Buffer.from(`<p>${'filler text in a very long page. '.repeat(2000)}</p>\n`);
      res.write('<!DOCTYPE html><html><head><title>Huge</title></head><body><article>');
      const pump = () => {
        while (hugeWritten < HUGE_BYTES && !res.destroyed) {
          hugeWritten += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        if (!res.destroyed) res.end('</article></body></html>');
      };
      return pump();
    }
    if (path === '/slow') return; // never answers
    send(404, 'text/plain', 'no route');
  }

  beforeAll(async () => {
    server = createServer(route);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it('reads an article', async () => {
    const page = await readPage(fetch, `${base}/article`);
    expect(page.url).toBe(`${base}/article`);
    expect(page.final_url).toBe(`${base}/article`);
    expect(page.title).toBe('City council approves new cycling network');
    expect(page.links[1]).toEqual({ text: 'drop-in sessions', url: `${base}/events/cycling-drop-in` });
  });

  it('follows a redirect chain; final_url is the last hop and links resolve against it', async () => {
    const page = await readPage(fetch, `${base}/hop/1`);
    expect(page.url).toBe(`${base}/hop/1`);
    expect(page.final_url).toBe(`${base}/landing/final?x=1`);
    expect(page.links[0]).toEqual({ text: 'How tidal turbines work', url: `${base}/landing/physics.html` });
  });

  it('refuses a 404 and a 503, naming the status', async () => {
    const missing = await failure(readPage(fetch, `${base}/missing`));
    expect(missing.reason).toBe('status');
    expect(missing.httpStatus).toBe(404);
    expect(missing.message).toBe(`${base}/missing answered HTTP 404 Not Found`);
    const broken = await failure(readPage(fetch, `${base}/broken`));
    expect(broken.httpStatus).toBe(503);
    expect(broken.message).toContain('HTTP 503');
  });

  it('refuses an image by its Content-Type', async () => {
    const err = await failure(readPage(fetch, `${base}/image.png`));
    expect(err.reason).toBe('unsupported_type');
    expect(err.message).toContain('image/png');
  });

  it('decodes by the charset the server sends', async () => {
    const page = await readPage(fetch, `${base}/latin1`);
    expect(page.title).toBe('Café Müller in Wuppertal');
  });

  it('reads plain text and PDF', async () => {
    expect((await readPage(fetch, `${base}/notes.txt`)).content).toContain('Saw two red kites');
    const pdf = await readPage(fetch, `${base}/report.pdf`);
    expect(pdf.title).toBe('Report');
    expect(pdf.content).toBe('Hello PDF world');
  });

  it('stops reading at maxBytes, cancels the download and marks the page truncated', async () => {
    const page = await readPage(fetch, `${base}/huge`, { maxBytes: 256 * 1024 });
    expect(page.truncated).toBe(true);
    expect(page.title).toBe('Huge');
    expect(page.text.length).toBeLessThan(256 * 1024);
    await hugeClosed;
    expect(hugeWritten).toBeLessThan(HUGE_BYTES);
  });

  it('is cancelled by its signal', async () => {
    const controller = new AbortController();
    const pending = readPage(fetch, `${base}/slow`, { signal: controller.signal });
    setTimeout(() => controller.abort(), 50);
    await expect(pending).rejects.toMatchObject({ name: 'AbortError' });
  });

  it('wraps a connection failure, naming the URL', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(closed.address() as AddressInfo).port}/`;
    await new Promise((resolve) => closed.close(resolve));
    const err = await failure(readPage(fetch, url));
    expect(err.reason).toBe('network');
    expect(err.message).toContain(`Could not fetch ${url}`);
  });

  it('refuses a URL that is not http(s) without fetching it', async () => {
    let called = false;
    const spy = async () => {
      called = true;
      return new Response('');
    };
    const err = await failure(readPage(spy, 'file:///etc/passwd'));
    expect(err.reason).toBe('invalid_request');
    expect(called).toBe(false);
  });

  it("passes the fetch function's own refusals through unchanged", async () => {
    const refusal = new AgentryError('invalid_request', 'address 10.0.0.1 is private');
    const guarded = async (): Promise<Response> => {
      throw refusal;
    };
    await expect(readPage(guarded, 'http://intranet.example/')).rejects.toBe(refusal);
  });

  it('uses the asked URL as final_url when the response carries none', async () => {
    const page: PageContent = await readPage(
      async () =>
        new Response('<title>T</title><p>Short but present.</p>', { headers: { 'content-type': 'text/html' } }),
      'https://a.example/x',
    );
    expect(page.final_url).toBe('https://a.example/x');
  });
});
