/**
 * The repository explains itself: every link in the README and docs/ points at a file of the repository (and, with a
 * `#fragment`, at a heading that exists there), never outside it — no `../shared/…`, no web page.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const DOCS = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
  ...['SECURITY.md', 'bench/README.md'].filter((f) => existsSync(join(ROOT, f))),
];

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens. */
function slug(heading: string): string {
  return heading
    .toLowerCase()
    .replace(/[`*_]/g, '')
    .replace(/[^\p{L}\p{N} -]/gu, '')
    .replace(/ /g, '-');
}

function anchors(file: string): Set<string> {
  const text = readFileSync(file, 'utf8').replace(/^```[\s\S]*?^```/gm, '');
  return new Set([...text.matchAll(/^#{1,6} (.+)$/gm)].map(([, h]) => slug(h!.trim())));
}

/** Markdown links outside code blocks and inline code: `[text](target)`. */
function links(file: string): string[] {
  const text = readFileSync(file, 'utf8')
    .replace(/^```[\s\S]*?^```/gm, '')
    .replace(/`[^`\n]*`/g, '');
  return [...text.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map(([, target]) => target!);
}

describe('links in the README and docs/', () => {
  it.each(DOCS)('%s links only to files and headings of the repository', (doc) => {
    const file = join(ROOT, doc);
    for (const target of links(file)) {
      expect(target, `${doc}: ${target} leaves the repository`).not.toMatch(/^[a-z][a-z+.-]*:/i);
      const [path = '', fragment] = target.split('#');
      const resolved = path ? resolve(dirname(file), path) : file;
      expect(relative(ROOT, resolved).startsWith('..'), `${doc}: ${target} points outside the repository`).toBe(false);
      expect(existsSync(resolved), `${doc}: ${target} does not exist`).toBe(true);
      if (fragment && statSync(resolved).isFile() && resolved.endsWith('.md')) {
        expect(anchors(resolved).has(fragment), `${doc}: no heading #${fragment} in ${path || doc}`).toBe(true);
      }
    }
  });
});
