/**
 * @module core/runtime-defaults
 * What `AgentRuntime.open()` uses for the parts it is not given: the storage, the model provider and the tracer. The
 * core chooses none of them itself (it imports no backend); the package's entry point (`src/index.ts`) provides them
 * once, from `src/defaults.ts`, as it provides the built-in tools. Used on its own, without the entry point, the core
 * has no defaults and asks for `storage` and `model` by name.
 */
import { AgentryError } from '../errors.js';
import type { ModelProvider } from '../models/provider.js';
import type { StorageAdapter } from '../storage/adapter.js';
import type { Telemetry } from './telemetry.js';

/** The `tracing` option, when it is not `false`. */
export interface TracingSettings {
  captureMessageContent?: boolean | undefined;
  tracerProvider?: object | undefined;
}

/** Factories of what a runtime opened without `storage`, `model` or `tracing: false` uses. */
export interface RuntimeDefaults {
  /** The storage when `storage` is not given. */
  storage(): Promise<StorageAdapter>;
  /**
   * The model provider when `model` is not given. `warnWithoutKey`: the runtime steps agents, so a provider that
   * cannot reach a model should say so once.
   */
  model(options: { warnWithoutKey: boolean }): Promise<ModelProvider>;
  /** The tracer, unless `tracing: false`; null when tracing is not available (an optional peer is missing). */
  tracing(settings: TracingSettings): Promise<Telemetry | null>;
}

let provided: RuntimeDefaults | undefined;

/**
 * Called once by the package's entry point.
 *
 * @example
 * provideRuntimeDefaults({ storage: async () => memoryStorage(), model: async () => myModel, tracing: async () => null });
 */
export function provideRuntimeDefaults(defaults: RuntimeDefaults): void {
  provided = defaults;
}

/** The storage a runtime uses when none is given. */
export async function defaultStorage(): Promise<StorageAdapter> {
  if (!provided) throw missing('storage');
  return provided.storage();
}

/** The model provider a runtime uses when none is given. */
export async function defaultModel(options: { warnWithoutKey: boolean }): Promise<ModelProvider> {
  if (!provided) throw missing('model');
  return provided.model(options);
}

/** The tracer a runtime adds unless `tracing: false`: none when the entry point provided no defaults. */
export async function defaultTracing(settings: TracingSettings): Promise<Telemetry | null> {
  return provided ? provided.tracing(settings) : null;
}

function missing(option: 'storage' | 'model'): AgentryError {
  return new AgentryError(
    'invalid_request',
    `runtime options: \`${option}\` is required when the core is used without the package's entry point ` +
      "(import AgentRuntime from 'agentry-runtime' for the defaults)",
  );
}
