import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { PageReadRow } from '../../src/storage/adapter.js';
import {
  CitationChecker,
  loadPageReads,
  normaliseForMatch,
  normaliseUrlForMatch,
  recheckCitation,
  type PageRead,
} from '../../src/tools/citations.js';
import { extractPage } from '../../src/web/page-reader.js';

const sha = (text: string) => createHash('sha256').update(text).digest('hex');

function page(url: string, text: string, more: Partial<PageRead> = {}): PageRead {
  return {
    url,
    final_url: url,
    title: `Title of ${url}`,
    content_sha256: sha(text),
    retrieved_at: '2025-01-01T00:00:00.000Z',
    text,
    ...more,
  };
}

const norm = (s: string) => normaliseForMatch(s).text;

const FOX = 'The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.';

describe('normaliseForMatch', () => {
  it('maps every single-quote variant to one character and every double-quote variant to another', () => {
    expect(norm('‘it’s’ ‚x‛ ′ ‹a› `b´ ＇c')).toBe("'it's' 'x' ' 'a' 'b' 'c");
    expect(norm('“a” „b‟ «c» ″d″ ＂e＂')).toBe('"a" "b" "c" "d" "e"');
    expect(norm('He said “don’t”')).toBe(norm('he said "don\'t"'));
  });

  it('maps en, em and other dashes and minus signs to a hyphen', () => {
    expect(norm('a‐b‑c‒d–e—f―g−h⁃i﹘j﹣k－l⸺m')).toBe('a-b-c-d-e-f-g-h-i-j-k-l-m');
    expect(norm('1990–1995 — a decade')).toBe(norm('1990-1995 - a decade'));
  });

  it('collapses runs of whitespace, NBSP and other Unicode spaces included, and trims', () => {
    expect(norm('  a \u00a0\u00a0 b\n\n\tc\r\nd\u2003e\u202ff\u3000g  ')).toBe('a b c d e f g');
  });

  it('folds case', () => {
    expect(norm('The QUICK Brown ÉTÉ ΣΟΦΟΣ')).toBe('the quick brown été σοφοσ');
    expect(norm('σοφός')).toBe(norm('ΣΟΦΌΣ'));
  });

  it('applies NFKC: ligatures, full-width letters, composed accents', () => {
    expect(norm('ﬁnancial ﬂow')).toBe('financial flow');
    expect(norm('ＡＢＣ１２３')).toBe('abc123');
    expect(norm('cafe\u0301')).toBe(norm('café'));
  });

  it('turns an ellipsis into three dots', () => {
    expect(norm('wait… what')).toBe('wait... what');
  });

  it('removes zero-width and other invisible characters', () => {
    expect(norm('zero\u200bwidth\u200c join\u200der\u2060s \ufeffsoft\u00adhyphen')).toBe(
      'zerowidth joiners softhyphen',
    );
    expect(norm('a \u200b b')).toBe('a b');
  });

  it('maps each normalised character back to the original offset it came from', () => {
    const original = '  The\u00a0\u00a0ﬁne “dog”';
    const { text, map } = normaliseForMatch(original);
    expect(text).toBe('the fine "dog"');
    expect(map).toHaveLength(text.length + 1);
    expect(map[0]).toBe(2); // leading spaces trimmed
    expect(map[3]).toBe(5); // the space stands for the NBSP run
    expect(map[4]).toBe(7); // f of the ligature
    expect(map[5]).toBe(7); // i of the ligature
    expect(map[text.length]).toBe(original.length);
  });
});

describe('excerpt length', () => {
  const text = 'abcdefghijklmnopqrstuvwxyz '.repeat(40);
  const checker = new CitationChecker([page('https://a.example/p', text)]);
  const cite = (excerpt: string) => checker.check({ url: 'https://a.example/p', excerpt });

  it('drops 11 characters and keeps 12', () => {
    expect(cite('abcdefghijk')).toMatchObject({ dropped: { reason: 'excerpt_too_short' } });
    expect(cite('abcdefghijkl')).toHaveProperty('kept');
  });

  it('keeps 500 characters and drops 501', () => {
    const long = norm(text);
    expect(cite(long.slice(0, 500))).toHaveProperty('kept');
    expect(cite(long.slice(0, 501))).toMatchObject({ dropped: { reason: 'excerpt_too_long' } });
  });

  it('measures after normalisation', () => {
    // 11 characters once the whitespace and zero-width characters are gone.
    expect(cite('   abcde \n\n\u200b fghij   ')).toMatchObject({ dropped: { reason: 'excerpt_too_short' } });
    // "…" counts as three: 12, long enough (and then not in the page).
    expect(cite('abcdefghi…')).toMatchObject({ dropped: { reason: 'excerpt_not_found' } });
    expect(cite('')).toMatchObject({ dropped: { reason: 'excerpt_too_short' } });
  });

  it('treats an excerpt that is not a string as too short', () => {
    const result = checker.check({ url: 'https://a.example/p', excerpt: 42 as unknown as string });
    expect(result).toMatchObject({ dropped: { reason: 'excerpt_too_short' } });
  });
});

describe('CitationChecker', () => {
  it('keeps an excerpt that spans markup in the HTML, since page text has the markup removed', async () => {
    const read = await extractPage({
      url: 'https://a.example/quick',
      finalUrl: 'https://a.example/quick',
      contentType: 'text/html; charset=utf-8',
      body: new TextEncoder().encode('<html><body><p>The <b>quick</b> brown</p></body></html>'),
    });
    expect(read.text).toBe('The quick brown');
    const checker = new CitationChecker([page(read.url, read.text, { final_url: read.final_url })]);
    const result = checker.check({ url: 'https://a.example/quick', excerpt: 'the quick brown' });
    expect(result).toMatchObject({ kept: { excerpt: 'The quick brown', span: { start: 0, end: 15 } } });
  });

  it('keeps a citation with the read, its hash and a span that maps back to the stored text exactly', () => {
    const text = 'Intro.  He said\u00a0“It’s ﬁne — really…”  and left.';
    const read = page('https://news.example/story', text, {
      title: 'The story',
      retrieved_at: '2025-03-04T05:06:07.000Z',
    });
    const result = new CitationChecker([read]).check({
      n: 3,
      title: 'what the child called it',
      url: 'https://news.example/story',
      excerpt: 'he said "it\'s fine - really..."',
    });
    if (!('kept' in result)) throw new Error(`dropped: ${result.dropped.detail}`);
    const { kept } = result;
    expect(kept).toEqual({
      n: 3,
      url: 'https://news.example/story',
      title: 'The story',
      excerpt: 'He said\u00a0“It’s ﬁne — really…”',
      retrieved_at: '2025-03-04T05:06:07.000Z',
      content_sha256: sha(text),
      span: { start: 8, end: text.indexOf('  and') },
    });
    expect(text.slice(kept.span.start, kept.span.end)).toBe(kept.excerpt);
    expect(norm(text.slice(kept.span.start, kept.span.end))).toBe(norm('he said "it\'s fine - really..."'));
  });

  it('maps a span that starts or ends inside a ligature to the whole ligature', () => {
    const text = 'The ﬁnancial report was ﬁled late.';
    const result = new CitationChecker([page('https://a.example/f', text)]).check({
      url: 'https://a.example/f',
      excerpt: 'inancial report was f',
    });
    if (!('kept' in result)) throw new Error(result.dropped.detail);
    expect(result.kept.excerpt).toBe('ﬁnancial report was ﬁ');
    expect(recheckCitation(text, result.kept)).toBe(true);
  });

  it('takes the first occurrence of an excerpt', () => {
    const text = 'Again and again and again and again.';
    const result = new CitationChecker([page('https://a.example/r', text)]).check({
      url: 'https://a.example/r',
      excerpt: 'and again and',
    });
    expect(result).toMatchObject({ kept: { span: { start: 6, end: 19 } } });
  });

  it('drops a citation of a URL no child read', () => {
    const checker = new CitationChecker([page('https://a.example/p', FOX)]);
    const result = checker.check({ url: 'https://b.example/p', excerpt: 'the quick brown fox' });
    expect(result).toMatchObject({ dropped: { reason: 'url_not_read' } });
    if ('dropped' in result) expect(result.dropped.detail).toContain('https://b.example/p');
    expect(new CitationChecker([]).check({ url: 'https://a.example/p', excerpt: 'the quick brown fox' })).toMatchObject(
      { dropped: { reason: 'url_not_read' } },
    );
  });

  it('drops an invented excerpt', () => {
    const checker = new CitationChecker([page('https://a.example/p', FOX)]);
    expect(checker.check({ url: 'https://a.example/p', excerpt: 'the quick brown cat jumps' })).toMatchObject({
      dropped: { reason: 'excerpt_not_found' },
    });
  });

  it('drops a URL that is not an absolute http(s) URL', () => {
    const checker = new CitationChecker([page('https://a.example/p', FOX)]);
    for (const url of ['not a url', 'a.example/p', 'ftp://a.example/p', 'javascript:alert(1)', '']) {
      expect(checker.check({ url, excerpt: 'the quick brown fox' })).toMatchObject({
        dropped: { reason: 'invalid_url' },
      });
    }
    expect(checker.check({ url: 7 as unknown as string, excerpt: 'the quick brown fox' })).toMatchObject({
      dropped: { reason: 'invalid_url' },
    });
  });

  it('matches URLs up to fragment, trailing slash, default port, host case and scheme', () => {
    const checker = new CitationChecker([page('https://docs.example.com/guide/', FOX)]);
    for (const url of [
      'https://docs.example.com/guide/',
      'https://docs.example.com/guide',
      'https://docs.example.com/guide#install',
      'https://DOCS.Example.COM/guide/',
      'HTTPS://docs.example.com:443/guide',
      'http://docs.example.com/guide',
      '  https://docs.example.com/guide  ',
    ]) {
      expect(checker.check({ url, excerpt: 'the quick brown fox' }), url).toMatchObject({
        kept: { url: 'https://docs.example.com/guide/' },
      });
    }
    for (const url of [
      'https://docs.example.com/Guide',
      'https://docs.example.com/guide?v=2',
      'https://docs.example.com:8443/guide',
      'https://example.com/guide',
    ]) {
      expect(checker.check({ url, excerpt: 'the quick brown fox' }), url).toMatchObject({
        dropped: { reason: 'url_not_read' },
      });
    }
  });

  it('matches the final URL of a redirect, and says which URL was read', () => {
    const read = page('https://short.example/x', FOX, { final_url: 'https://www.example.org/articles/42' });
    const checker = new CitationChecker([read]);
    expect(
      checker.check({ url: 'https://www.example.org/articles/42/#para', excerpt: 'pack my box with five' }),
    ).toMatchObject({ kept: { url: 'https://www.example.org/articles/42' } });
    expect(checker.check({ url: 'https://short.example/x', excerpt: 'pack my box with five' })).toMatchObject({
      kept: { url: 'https://short.example/x' },
    });
  });

  it('drops an excerpt beyond the stored text of a page cut at its cap', () => {
    const full = `${'Opening words of a long page. '.repeat(10)}The conclusion nobody reached.`;
    const stored = full.slice(0, 300); // what the reader kept
    const checker = new CitationChecker([page('https://a.example/long', stored)]);
    expect(checker.check({ url: 'https://a.example/long', excerpt: 'the conclusion nobody reached' })).toMatchObject({
      dropped: { reason: 'excerpt_not_found' },
    });
    // Straddling the cut is not found either; before it is.
    expect(
      checker.check({ url: 'https://a.example/long', excerpt: full.slice(stored.length - 10, stored.length + 10) }),
    ).toMatchObject({ dropped: { reason: 'excerpt_not_found' } });
    expect(checker.check({ url: 'https://a.example/long', excerpt: 'opening words of a long page' })).toHaveProperty(
      'kept',
    );
  });

  it('tries every read of a URL, newest first', () => {
    const older = page('https://a.example/live', 'Old version: the price is 10 dollars today.', {
      retrieved_at: '2025-01-01T10:00:00.000Z',
    });
    const newer = page('https://a.example/live', 'New version: the price is 12 dollars today.', {
      retrieved_at: '2025-01-01T11:00:00.000Z',
    });
    const checker = new CitationChecker([newer, older]);
    expect(checker.check({ url: 'https://a.example/live', excerpt: 'the price is 10 dollars' })).toMatchObject({
      kept: { content_sha256: older.content_sha256, retrieved_at: older.retrieved_at },
    });
    expect(checker.check({ url: 'https://a.example/live', excerpt: 'the price is 12 dollars' })).toMatchObject({
      kept: { content_sha256: newer.content_sha256 },
    });
    const both = 'dollars today.';
    expect(new CitationChecker([older, newer]).check({ url: 'https://a.example/live', excerpt: both })).toMatchObject({
      kept: { content_sha256: newer.content_sha256 },
    });
    expect(checker.check({ url: 'https://a.example/live', excerpt: 'the price is 11 dollars' })).toMatchObject({
      dropped: { reason: 'excerpt_not_found', detail: expect.stringContaining('read 2 times') },
    });
  });

  it('checks many citations at once, in order, keeping extra fields', () => {
    const checker = new CitationChecker([page('https://a.example/p', FOX), page('https://b.example/q', 'Short.')]);
    const { kept, dropped } = checker.checkAll([
      { n: 1, url: 'https://a.example/p', excerpt: 'jumps over the lazy dog' },
      { n: 2, url: 'https://b.example/q', excerpt: 'nothing like this is there' },
      { n: 3, url: 'https://c.example/', excerpt: 'the quick brown fox' },
      { n: 4, url: 'https://a.example/p#x', excerpt: 'five dozen liquor jugs' },
    ]);
    expect(kept.map((c) => c.n)).toEqual([1, 4]);
    expect(dropped.map((d) => [d.citation.n, d.reason])).toEqual([
      [2, 'excerpt_not_found'],
      [3, 'url_not_read'],
    ]);
  });
});

describe('normaliseUrlForMatch', () => {
  it('gives one key for the spellings of one page', () => {
    expect(normaliseUrlForMatch('HTTPS://Example.com:443/a/#top')).toBe('example.com/a');
    expect(normaliseUrlForMatch('http://example.com:80/a')).toBe('example.com/a');
    expect(normaliseUrlForMatch('https://example.com/')).toBe('example.com');
    expect(normaliseUrlForMatch('https://example.com')).toBe('example.com');
    expect(normaliseUrlForMatch('https://example.com/a%2fb?q=%c3%a9')).toBe('example.com/a%2Fb?q=%C3%A9');
    expect(normaliseUrlForMatch('https://bücher.example/x')).toBe('xn--bcher-kva.example/x');
  });

  it('keeps the query, path case and a non-default port', () => {
    expect(normaliseUrlForMatch('https://example.com/A?b=1&a=2')).toBe('example.com/A?b=1&a=2');
    expect(normaliseUrlForMatch('https://example.com:8080/a')).toBe('example.com:8080/a');
  });

  it('refuses what is not an absolute http(s) URL', () => {
    for (const url of ['example.com/a', '/a', 'mailto:x@example.com', 'file:///etc/passwd', 'http://']) {
      expect(normaliseUrlForMatch(url), url).toBeNull();
    }
  });
});

describe('recheckCitation', () => {
  const text = 'Before. The committee approved the “budget” on 3 March — unanimously. After.';
  const read = page('https://gov.example/minutes', text);
  const result = new CitationChecker([read]).check({
    url: 'https://gov.example/minutes',
    excerpt: 'the committee approved the "budget" on 3 march - unanimously',
  });
  if (!('kept' in result)) throw new Error('expected the citation to be kept');
  const { kept } = result;

  it('confirms a kept citation against the stored text', () => {
    expect(recheckCitation(text, kept)).toBe(true);
    // The child's own wording (case, quote and dash style) re-checks too; a single quote is not a double one.
    const wording = (excerpt: string) => recheckCitation(text, { ...kept, excerpt });
    expect(wording('THE COMMITTEE APPROVED THE "BUDGET" ON 3 MARCH – UNANIMOUSLY')).toBe(true);
    expect(wording('the committee approved the ‘budget’ on 3 march - unanimously')).toBe(false);
  });

  it('fails when the stored text changed', () => {
    expect(recheckCitation(text.replace('approved', 'rejected'), kept)).toBe(false);
    expect(recheckCitation(`Inserted. ${text}`, kept)).toBe(false);
    expect(recheckCitation(text.slice(0, kept.span.end - 5), kept)).toBe(false);
  });

  it('fails for a span that does not cover the excerpt exactly', () => {
    expect(recheckCitation(text, { ...kept, span: { start: kept.span.start - 1, end: kept.span.end } })).toBe(false);
    expect(recheckCitation(text, { ...kept, span: { start: kept.span.start, end: kept.span.end + 2 } })).toBe(false);
    expect(recheckCitation(text, { ...kept, span: { start: 0, end: text.length } })).toBe(false);
    expect(recheckCitation(text, { ...kept, span: { start: -1, end: 10 } })).toBe(false);
    expect(recheckCitation(text, { ...kept, span: { start: 5, end: 5 } })).toBe(false);
    expect(recheckCitation(text, { ...kept, span: { start: 0.5, end: 20 } })).toBe(false);
  });
});

describe('loadPageReads', () => {
  it('loads the reads of the given agents with their texts, leaving out a read whose text is gone', async () => {
    const row = (agent_id: string, url: string, text: string): PageReadRow => ({
      agent_id,
      tool_use_id: `tu_${agent_id}`,
      url,
      final_url: url,
      title: url,
      content_sha256: sha(text),
      retrieved_at: '2025-01-01T00:00:00.000Z',
    });
    const rows = [
      row('c1', 'https://a.example/', FOX),
      row('c2', 'https://b.example/', 'gone'),
      row('c3', 'https://a.example/again', FOX),
    ];
    const texts = new Map([[sha(FOX), FOX]]);
    const asked: string[] = [];
    const storage = {
      listPageReads: async (ids: readonly string[]) => rows.filter((r) => ids.includes(r.agent_id)),
      getPageText: async (hash: string) => {
        asked.push(hash);
        return texts.get(hash) ?? null;
      },
    };
    const pages = await loadPageReads(storage, ['c1', 'c2', 'c3']);
    expect(pages.map((p) => p.url)).toEqual(['https://a.example/', 'https://a.example/again']);
    expect(pages[0]).toEqual({
      url: 'https://a.example/',
      final_url: 'https://a.example/',
      title: 'https://a.example/',
      content_sha256: sha(FOX),
      retrieved_at: '2025-01-01T00:00:00.000Z',
      text: FOX,
    });
    expect(asked).toEqual([sha(FOX), sha('gone')]); // each text fetched once
    expect(await loadPageReads(storage, ['c2'])).toEqual([]);
  });
});
