/**
 * @module observability/light-context
 * An OpenTelemetry `Context` that costs one small object per value. The API's own contexts copy a `Map` and make
 * three closures on every `setValue` (some 700 bytes); the tracer sets a span into a context four or five times for
 * every sub-agent (its remote parent, its `invoke_agent` span, each chat and tool call), which a 10,000-child fan-out
 * pays for in garbage collection. Contexts are immutable, so one value over its parent says the same as a copy.
 */
import type { Context } from '@opentelemetry/api';

/**
 * A context of one value (or a deletion: `undefined`, which reads as absent, as in the API's own) over `parent`; with
 * no parent and no key, the empty root.
 */
class LightContext implements Context {
  constructor(
    private readonly parent: Context | undefined,
    private readonly key: symbol | undefined,
    private readonly value: unknown,
  ) {}

  getValue(key: symbol): unknown {
    return key === this.key ? this.value : this.parent?.getValue(key);
  }

  setValue(key: symbol, value: unknown): Context {
    return new LightContext(this, key, value);
  }

  deleteValue(key: symbol): Context {
    return new LightContext(this, key, undefined);
  }
}

/** The empty context (as the API's `ROOT_CONTEXT`) whose derived contexts are light. */
export const LIGHT_ROOT: Context = new LightContext(undefined, undefined, undefined);

/**
 * `base`, so that the contexts derived from it (`trace.setSpan(lighten(base), span)`) are light. Reads fall through
 * to `base`, whatever implements it (an embedding application's active context).
 *
 * @example
 * const runContext = trace.setSpan(lighten(context.active()), span);
 */
export function lighten(base: Context): Context {
  return base instanceof LightContext ? base : new LightContext(base, undefined, undefined);
}
