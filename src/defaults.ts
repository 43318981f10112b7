/**
 * @module defaults
 * The defaults of `AgentRuntime.open()`, chosen here at the package's entry point rather than in the core (which
 * imports no backend): the storage named by `$AGENTRY_DB` (a SQLite path, or a `postgres://` URL) else
 * `./agentry.db`; the Anthropic provider configured from the environment; tracing through `@opentelemetry/api` when
 * it is installed. Each backend loads only when a runtime needs it, so an application that passes its own storage
 * and model never loads SQLite, PostgreSQL or the Anthropic SDK.
 */
import type { RuntimeDefaults, TracingSettings } from './core/runtime-defaults.js';
import type { Telemetry } from './core/telemetry.js';
import type { ModelProvider } from './models/provider.js';
import type * as OtelModuleNs from './observability/otel.js';
import type { StorageAdapter } from './storage/adapter.js';

/** Whether this process has already been told that no model is configured: once is enough. */
let warnedNoModel = false;

/** What `src/index.ts` provides to the core. */
export const packageDefaults: RuntimeDefaults = {
  storage: openDefaultStorage,
  model: openDefaultModel,
  tracing: openDefaultTracing,
};

async function openDefaultStorage(): Promise<StorageAdapter> {
  const target = process.env.AGENTRY_DB ?? './agentry.db';
  if (/^postgres(ql)?:\/\//.test(target)) {
    const { postgresStorage } = await import('./storage/postgres/index.js');
    return postgresStorage({ connectionString: target });
  }
  const { sqliteStorage } = await import('./storage/sqlite/index.js');
  return sqliteStorage({ path: target });
}

async function openDefaultModel({ warnWithoutKey }: { warnWithoutKey: boolean }): Promise<ModelProvider> {
  const { anthropicProvider, hasAnthropicCredentials } = await import('./models/anthropic.js');
  if (warnWithoutKey && !hasAnthropicCredentials() && !warnedNoModel) {
    // The runtime still opens (reads, admin and a later key all work), but every agent would fail at its first step.
    warnedNoModel = true;
    process.emitWarning(
      'agentry: no model is configured. ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL) is not set and AgentRuntime.open() ' +
        'got no `model`, so every agent will fail at its first step. Set the key, or pass `model` ' +
        '(`scriptedModel` from agentry-runtime/testing runs offline).',
      { code: 'AGENTRY_NO_MODEL' },
    );
  }
  return anthropicProvider();
}

/** Tracing through @opentelemetry/api when it is installed; without it, none. */
async function openDefaultTracing(settings: TracingSettings): Promise<Telemetry | null> {
  let otel: typeof OtelModuleNs;
  try {
    otel = await import('./observability/otel.js');
  } catch {
    return null; // @opentelemetry/api is an optional peer
  }
  return new otel.OtelTracing({
    ...(settings.captureMessageContent !== undefined ? { captureMessageContent: settings.captureMessageContent } : {}),
    ...(settings.tracerProvider !== undefined ? { tracerProvider: settings.tracerProvider as never } : {}),
  });
}
