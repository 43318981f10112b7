/**
 * @module observability/otel-sdk
 * `agentry serve`'s trace export: when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` or
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, an OpenTelemetry SDK tracer provider is registered globally with an
 * OTLP/HTTP exporter (`OTEL_EXPORTER_OTLP_PROTOCOL` / `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`: `http/protobuf`, the
 * default, or `http/json`) behind a batch processor, `service.name` from `OTEL_SERVICE_NAME` (default
 * `agentry`) and `service.version` agentry's version. The exporters read the rest of their standard variables themselves (headers, timeout, compression).
 *
 * The SDK packages are optional peers, loaded only when an endpoint is set.
 */
import { AgentryError } from '../errors.js';
import { packageVersion } from '../version.js';

/** A registered SDK: flush and stop it before the process exits. */
export interface TraceExport {
  readonly protocol: 'http/protobuf' | 'http/json';
  /** The ids of the span active here, for log lines; null outside any span. */
  activeSpan(): { trace_id: string; span_id: string } | null;
  shutdown(): Promise<void>;
}

const SDK_PACKAGES =
  '@opentelemetry/api @opentelemetry/sdk-trace @opentelemetry/resources @opentelemetry/context-async-hooks ' +
  '@opentelemetry/exporter-trace-otlp-proto @opentelemetry/exporter-trace-otlp-http';

/** Whether the environment asks for trace export. */
export function traceExportRequested(env: NodeJS.ProcessEnv = process.env): boolean {
  if (env.OTEL_SDK_DISABLED === 'true' || env.OTEL_TRACES_EXPORTER === 'none') return false;
  return Boolean(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || env.OTEL_EXPORTER_OTLP_ENDPOINT);
}

/**
 * Registers the SDK from the environment, or returns null when no OTLP endpoint is set. Throws `not_configured` for
 * a protocol this build does not export with (grpc) or missing SDK packages.
 */
export async function startTraceExportFromEnv(env: NodeJS.ProcessEnv = process.env): Promise<TraceExport | null> {
  if (!traceExportRequested(env)) return null;
  const protocol = (
    env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ??
    env.OTEL_EXPORTER_OTLP_PROTOCOL ??
    'http/protobuf'
  ).trim();
  if (protocol !== 'http/protobuf' && protocol !== 'http/json') {
    throw new AgentryError(
      'not_configured',
      `OTEL_EXPORTER_OTLP_PROTOCOL=${protocol} is not supported by agentry serve; use http/protobuf or http/json`,
    );
  }
  let modules;
  try {
    modules = await Promise.all([
      import('@opentelemetry/api'),
      import('@opentelemetry/sdk-trace'),
      import('@opentelemetry/resources'),
      import('@opentelemetry/context-async-hooks'),
      protocol === 'http/json'
        ? import('@opentelemetry/exporter-trace-otlp-http')
        : import('@opentelemetry/exporter-trace-otlp-proto'),
    ]);
  } catch (error) {
    throw new AgentryError(
      'not_configured',
      `Exporting traces needs the OpenTelemetry SDK: npm install ${SDK_PACKAGES} (${String(error)})`,
      { cause: error },
    );
  }
  const [api, sdk, resources, contextHooks, exporterModule] = modules;
  const exporter = new exporterModule.OTLPTraceExporter();
  const provider = new sdk.TracerProvider({
    resource: resources.resourceFromAttributes({
      'service.name': env.OTEL_SERVICE_NAME?.trim() || 'agentry',
      'service.version': packageVersion(),
    }),
    spanProcessors: [new sdk.BatchSpanProcessor({ exporter: exporter as never })],
  });
  // Log lines carry the ids of the active span; spans started inside a model or tool call nest under it.
  api.context.setGlobalContextManager(new contextHooks.AsyncLocalStorageContextManager().enable());
  api.trace.setGlobalTracerProvider(provider);
  return {
    protocol,
    activeSpan() {
      const span = api.trace.getActiveSpan();
      if (!span) return null;
      const sc = span.spanContext();
      return { trace_id: sc.traceId, span_id: sc.spanId };
    },
    async shutdown() {
      await provider.shutdown();
    },
  };
}
