/**
 * The README as the registry shows it, and the name it is published under. The registry's page has no repository to
 * resolve a relative link or image against (package.json names none: there is no public URL to name), so the README
 * links only to its own headings; files of the repository are named in plain text. The package is `agentry-runtime`
 * (`agentry` on the registry is an unrelated package): every install line, `npx` line and MCP client config says so,
 * and inside the repository the command runs as `node bin/agentry.js`, never through `npx`, which would fetch or
 * build a package instead.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const README = readFileSync(join(REPO, 'README.md'), 'utf8');
const manifest = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as {
  name: string;
  bin: Record<string, string>;
  files: string[];
  scripts: Record<string, string>;
  license: string;
};

/** Markdown links and images outside code: `[text](target)`, `![alt](target)`. */
function linkTargets(markdown: string): string[] {
  const text = markdown.replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '');
  return [...text.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map(([, target]) => target!);
}

describe('the package as published', () => {
  it('is named agentry-runtime, with the command agentry', () => {
    expect(manifest.name).toBe('agentry-runtime');
    expect(manifest.bin).toEqual({ agentry: './bin/agentry.js' });
  });

  it('builds at pack time (prepack), not at install time (no prepare); npm test builds dist/ first', () => {
    expect(manifest.scripts.prepare).toBeUndefined();
    expect(manifest.scripts.prepack).toMatch(/build/);
    expect(manifest.scripts.pretest).toMatch(/build/);
  });

  it('ships the MIT LICENSE its manifest names', () => {
    expect(manifest.license).toBe('MIT');
    expect(manifest.files).toContain('LICENSE');
    const license = readFileSync(join(REPO, 'LICENSE'), 'utf8');
    expect(license).toMatch(/^MIT License\n\nCopyright \(c\) 2026 the agentry authors\n/);
  });
});

describe("the README on the registry's page", () => {
  it('has no relative link or image (they would break there)', () => {
    const relative = linkTargets(README).filter((t) => !t.startsWith('#') && !/^https:\/\//.test(t));
    expect(relative).toEqual([]);
  });

  it('installs, imports and runs agentry-runtime, never the registry package named agentry', () => {
    expect(README).toMatch(/^npm install agentry-runtime zod\b/m);
    expect(README).not.toMatch(/npm install agentry(?!-runtime)\b/);
    expect(README).not.toMatch(/npx (?:-y )?agentry(?!-runtime)\b/);
    expect(README).not.toMatch(/from ['"]agentry(?:\/|['"])/);
    expect(README).toContain('"args": ["-y", "agentry-runtime", "mcp"');
  });

  it('runs the CLI inside the repository as node bin/agentry.js', () => {
    const top = README.slice(0, README.indexOf('## Embed it'));
    const commands = [...top.matchAll(/^```sh\n([\s\S]*?)```$/gm)].flatMap(([, block]) => block!.split('\n'));
    expect(commands.some((line) => line.includes('node bin/agentry.js serve --demo'))).toBe(true);
    expect(commands.filter((line) => /\bnpx\b/.test(line))).toEqual([]);
    expect(existsSync(join(REPO, 'bin/agentry.js'))).toBe(true);
  });
});
