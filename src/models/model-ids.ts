/**
 * @module models/model-ids
 * Checks the provider's upstream model ids against the server's own list (`GET /v1/models`) once, before the first
 * agent runs on them. A retired, renamed or not-enabled id would otherwise fail every agent of that model with the
 * API's raw 404 text; this names the id and the variable that changes it. A server without the route (a proxy, a
 * local model server) skips the check with one warning.
 */

/** The environment variable that overrides each default public model's upstream id. */
export const MODEL_ENV_VARS: Readonly<Record<string, string>> = {
  'svc-1-lite': 'AGENTRY_MODEL_LITE',
  'svc-1-ultra': 'AGENTRY_MODEL_ULTRA',
};

/** What {@link ModelIdCheck.run} found. */
export type ModelIdReport =
  | { kind: 'checked'; listed: ReadonlySet<string> }
  /** The server has no `GET /v1/models`, or it failed: ids are not checked (`reason` says why). */
  | { kind: 'skipped'; reason: string };

/** One result per public model: its upstream id, and whether the server lists it (`undefined`: not checked). */
export interface ResolvedModelId {
  model: string;
  upstream: string;
  listed: boolean | undefined;
}

/** How a failed listing is told apart: the route is missing (skip for good) or something passing (retry later). */
export type ListFailure = { kind: 'no-route' } | { kind: 'failed'; message: string };

/** Options of {@link ModelIdCheck}. */
export interface ModelIdCheckOptions {
  /** Every id the server lists, all pages; throws a {@link ListFailure}-classified error via `classify`. */
  list: (signal: AbortSignal) => Promise<string[]>;
  /** Maps a listing error to a {@link ListFailure}; an error it does not know is `failed`. */
  classify: (error: unknown) => ListFailure;
  /** Told once when the check is skipped. @default console.warn */
  warn?: (message: string) => void;
  /** @default Date.now */
  now?: () => number;
  /** How long a failed listing (not a missing route) is remembered before it is tried again. @default 60_000 */
  retryAfterMs?: number;
}

/**
 * The message an agent fails with when its upstream id is not listed.
 *
 * @example
 * unlistedModelMessage('svc-1-ultra', 'claude-opus-9') // -> 'The model id "claude-opus-9" behind svc-1-ultra …'
 */
export function unlistedModelMessage(model: string, upstream: string): string {
  const variable = MODEL_ENV_VARS[model];
  const fix =
    variable === undefined
      ? 'pass another id in anthropicProvider({ models })'
      : `set ${variable} (or pass anthropicProvider({ models }))`;
  return (
    `The model id ${JSON.stringify(upstream)} behind ${model} is not listed by the Anthropic API (GET /v1/models) ` +
    `for this key: it may be retired, renamed or not enabled. To use another, ${fix}; the variables are ` +
    `AGENTRY_MODEL_LITE and AGENTRY_MODEL_ULTRA.`
  );
}

/**
 * Lists the server's models once and answers whether an id is among them. Concurrent callers share one listing; a
 * missing route is remembered for good (one warning), a passing failure for `retryAfterMs`.
 *
 * @example
 * const check = new ModelIdCheck({ list: (signal) => listAll(signal), classify });
 * const listed = await check.isListed('claude-haiku-5-5', signal); // true, false, or undefined when skipped
 */
export class ModelIdCheck {
  private report: Promise<ModelIdReport> | undefined;
  private failedAt = 0;
  private warned = false;
  private readonly options: ModelIdCheckOptions;

  constructor(options: ModelIdCheckOptions) {
    this.options = options;
  }

  /** The server's list (once), or why it was skipped. */
  run(signal: AbortSignal = new AbortController().signal): Promise<ModelIdReport> {
    const now = this.options.now ?? Date.now;
    if (
      this.report !== undefined &&
      this.failedAt > 0 &&
      now() - this.failedAt >= (this.options.retryAfterMs ?? 60_000)
    ) {
      this.report = undefined;
      this.failedAt = 0;
    }
    // The listing itself is not tied to one caller's signal: others share it.
    return (this.report ??= this.options.list(new AbortController().signal).then(
      (ids): ModelIdReport => ({ kind: 'checked', listed: new Set(ids) }),
      (error: unknown): ModelIdReport => {
        const failure = this.options.classify(error);
        if (failure.kind === 'no-route') {
          this.warnOnce('the server has no GET /v1/models; upstream model ids are not checked');
          return { kind: 'skipped', reason: 'the server has no GET /v1/models' };
        }
        this.failedAt = now();
        this.warnOnce(`listing models failed (${failure.message}); upstream model ids are not checked yet`);
        return { kind: 'skipped', reason: failure.message };
      },
    )).then((report) => {
      if (signal.aborted) throw signal.reason;
      return report;
    });
  }

  /** Whether the server lists `upstream`; `undefined` when the check was skipped. */
  async isListed(upstream: string, signal?: AbortSignal): Promise<boolean | undefined> {
    const report = await this.run(signal);
    return report.kind === 'checked' ? report.listed.has(upstream) : undefined;
  }

  private warnOnce(message: string): void {
    if (this.warned) return;
    this.warned = true;
    (this.options.warn ?? ((m: string) => console.warn(m)))(`agentry: ${message}`);
  }
}
