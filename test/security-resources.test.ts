/**
 * SECURITY.md's resource table: one row for every resource a tenant can consume, each with
 * its bound, default and where it is enforced (a file of the repository), and the README links the section.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const RESOURCES = [
  'credits',
  'model calls',
  'agent steps',
  'sub-agents',
  'CPU',
  'memory',
  'disk',
  'sandbox slots',
  'browser sessions',
  'HTTP bodies',
  'connections',
  'rate limits',
  'event streams',
  'API keys',
  'console sessions',
  'search',
  'MCP',
  'outbox / messages',
  'monitors',
  'notifications',
];

function resourceRows(): string[][] {
  const text = readFileSync(join(ROOT, 'SECURITY.md'), 'utf8');
  const start = text.indexOf('\n## Resource bounds\n');
  expect(start).toBeGreaterThan(0);
  const section = text.slice(start + 1).split(/\n## /)[0]!;
  const lines = section.split('\n').filter((l) => l.startsWith('|'));
  expect(lines[0]).toBe('| resource | bound | default | enforced in |');
  return lines.slice(2).map((l) =>
    l
      .slice(1, -1)
      .split(' | ')
      .map((c) => c.trim()),
  );
}

describe('SECURITY.md resource bounds', () => {
  it('has a row for every resource a tenant can consume, each naming files that exist', () => {
    const rows = resourceRows();
    for (const resource of RESOURCES) {
      expect(
        rows.some(([name]) => name!.toLowerCase().startsWith(resource.toLowerCase())),
        `a row for ${resource}`,
      ).toBe(true);
    }
    for (const row of rows) {
      expect(row, row[0]).toHaveLength(4);
      const files = [...row[3]!.matchAll(/`(src\/[^`]+)`/g)].map((m) => m[1]!);
      expect(files.length, `${row[0]}: where it is enforced`).toBeGreaterThan(0);
      for (const file of files) expect(existsSync(join(ROOT, file)), `${row[0]}: ${file}`).toBe(true);
    }
  });

  it('the README links the section', () => {
    // Plain text, not a link: the README is also shown on the registry's page, where relative links break.
    expect(readFileSync(join(ROOT, 'README.md'), 'utf8')).toContain(
      '`SECURITY.md`, with how to report a problem; every resource a tenant can',
    );
    expect(readFileSync(join(ROOT, 'README.md'), 'utf8')).toContain('in its section "Resource bounds"');
  });
});
