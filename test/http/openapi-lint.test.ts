/**
 * The served OpenAPI document passes Redocly's `recommended` ruleset: no errors, and no warnings beyond the
 * allowlist below (so a missing `operationId` or `license`, which `recommended` only warns about, still fails here).
 * The locally installed CLI runs as a child process, offline: telemetry and the update check are switched off.
 */
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentRuntime, memoryStorage } from 'agentry-runtime';
import { createFetchHandler } from 'agentry-runtime/http';
import { scriptedModel } from 'agentry-runtime/testing';
import { ROOT, tempDir } from './helpers.js';

interface LintProblem {
  ruleId: string;
  severity: 'error' | 'warn';
  message: string;
  location: { pointer: string }[];
}
interface LintReport {
  totals: { errors: number; warnings: number; ignored: number };
  problems: LintProblem[];
}

/** Warnings we accept, with the reason. Anything else is a failure. */
const ALLOWED_WARNINGS: { ruleId: string; pointer: string; why: string }[] = [
  {
    ruleId: 'operation-4xx-response',
    pointer: '#/paths/~1api~1openapi.json/get/responses',
    why: 'the document route needs no key, reads no input and never answers 4xx; inventing one would be untrue',
  },
];

const cliPackage = JSON.parse(readFileSync(join(ROOT, 'node_modules/@redocly/cli/package.json'), 'utf8')) as {
  bin: Record<string, string>;
};
const REDOCLY = join(ROOT, 'node_modules/@redocly/cli', cliPackage.bin.redocly!);

/** Runs `redocly lint --format=json`; resolves with the report whatever the exit code (1 when there are errors). */
function redoclyLint(cwd: string, file: string, config: string): Promise<{ report: LintReport; stderr: string }> {
  const env = {
    ...process.env,
    // Documented opt-out of usage data (https://redocly.com/docs/cli/usage-data/); the machine may be offline.
    REDOCLY_TELEMETRY: 'off',
    // Skips the npm registry lookup for a newer CLI version.
    REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true',
  };
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      [REDOCLY, 'lint', file, `--config=${config}`, '--format=json'],
      { cwd, env, timeout: 120_000, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        try {
          resolve({ report: JSON.parse(stdout) as LintReport, stderr });
        } catch {
          reject(new Error(`redocly lint gave no JSON report (${error?.message ?? 'exit 0'})\n${stdout}\n${stderr}`));
        }
      },
    );
  });
}

const describeProblem = (p: LintProblem) =>
  `${p.severity} ${p.ruleId} at ${p.location.map((l) => l.pointer).join(', ')}: ${p.message}`;

let runtime: AgentRuntime;
let dir: ReturnType<typeof tempDir>;

beforeAll(async () => {
  runtime = await AgentRuntime.open({ storage: memoryStorage(), model: scriptedModel({ turns: [{ text: 'Done.' }] }) });
  dir = tempDir('agentry-openapi-lint-');
});
afterAll(async () => {
  await runtime.close();
  dir.remove();
});

describe('GET /api/openapi.json', () => {
  it('passes redocly lint with the recommended ruleset', { timeout: 150_000 }, async () => {
    const response = await createFetchHandler(runtime)(new Request('http://localhost/api/openapi.json'));
    expect(response.status).toBe(200);
    const doc = (await response.json()) as {
      components: { schemas: { CreateAgentBody: { properties: { model: { enum?: string[] } } } } };
    };
    // The documented enum is exactly what this (default-priced) runtime accepts.
    expect(doc.components.schemas.CreateAgentBody.properties.model.enum).toEqual(runtime.models);

    const file = join(dir.dir, 'openapi.json');
    const config = join(dir.dir, 'redocly.yaml');
    writeFileSync(file, JSON.stringify(doc, null, 2));
    writeFileSync(config, 'extends:\n  - recommended\ntelemetry: off\n');
    const { report, stderr } = await redoclyLint(dir.dir, file, config);

    const unexpected = report.problems.filter(
      (p) =>
        p.severity === 'error' ||
        !ALLOWED_WARNINGS.some((a) => a.ruleId === p.ruleId && p.location.some((l) => l.pointer === a.pointer)),
    );
    expect(unexpected.map(describeProblem), stderr).toEqual([]);
    expect(report.totals.errors).toBe(0);
  });
});
