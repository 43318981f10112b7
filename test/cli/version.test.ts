import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, runCli } from '../http/helpers.js';

describe('agentry --version', () => {
  it("prints the package's version and exits 0, as -v and version too; --help mentions it", async () => {
    const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    for (const flag of ['--version', '-v', 'version']) {
      const r = await runCli([flag]);
      expect(r).toMatchObject({ code: 0, stdout: `${version}\n` });
    }
    expect((await runCli(['--help'])).stdout).toContain('agentry --version');
  });
});
