/**
 * A local OTLP/HTTP trace receiver for tests: decodes what an exporter sends to `/v1/traces` (http/protobuf or
 * http/json) into one flat list of spans, with their attributes and their resource's.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import protobuf from 'protobufjs';

/**
 * The OTLP trace request, as far as these tests read it (field numbers of opentelemetry/proto trace/v1 and
 * collector/trace/v1; protobuf skips the fields it is not told of).
 */
const OTLP_PROTO = `
syntax = "proto3";
package otlp;
message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; }
message Resource { repeated KeyValue attributes = 1; }
message ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; }
message InstrumentationScope { string name = 1; string version = 2; }
message Span {
  bytes trace_id = 1; bytes span_id = 2; bytes parent_span_id = 4; string name = 5; int32 kind = 6;
  repeated KeyValue attributes = 9;
}
message KeyValue { string key = 1; AnyValue value = 2; }
message AnyValue {
  oneof value {
    string string_value = 1; bool bool_value = 2; int64 int_value = 3; double double_value = 4;
    ArrayValue array_value = 5;
  }
}
message ArrayValue { repeated AnyValue values = 1; }
`;
const ExportRequest = protobuf.parse(OTLP_PROTO).root.lookupType('otlp.ExportTraceServiceRequest');

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  service: unknown;
  /** The attributes of the span's resource (`service.name`, `service.version`, …). */
  resource: Record<string, unknown>;
}

type AnyValueJson = {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: string | number;
  doubleValue?: number;
  arrayValue?: { values?: AnyValueJson[] };
};

function valueOf(v: AnyValueJson | undefined): unknown {
  if (!v) return undefined;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.arrayValue) return (v.arrayValue.values ?? []).map(valueOf);
  return undefined;
}

const attributesOf = (kvs: Array<{ key: string; value?: AnyValueJson }> = []) =>
  Object.fromEntries(kvs.map((kv) => [kv.key, valueOf(kv.value)]));

/** Both encodings to one shape. Protobuf's bytes become hex, as OTLP/JSON writes ids. */
function spansOf(body: Buffer, contentType: string): ReceivedSpan[] {
  const json = contentType.includes('json')
    ? (JSON.parse(body.toString('utf8')) as Record<string, unknown>)
    : (ExportRequest.toObject(ExportRequest.decode(body), { longs: String, bytes: String, defaults: false }) as Record<
        string,
        unknown
      >);
  const hex = (id: unknown) =>
    typeof id !== 'string' || id === ''
      ? ''
      : contentType.includes('json')
        ? id
        : Buffer.from(id, 'base64').toString('hex');
  const out: ReceivedSpan[] = [];
  const resourceSpans = (json.resourceSpans ?? json.resource_spans ?? []) as Array<Record<string, never>>;
  for (const rs of resourceSpans) {
    const resource = rs.resource as { attributes?: Array<{ key: string; value?: AnyValueJson }> } | undefined;
    const resourceAttributes = attributesOf(resource?.attributes);
    const service = resourceAttributes['service.name'];
    for (const ss of (rs.scopeSpans ?? rs.scope_spans ?? []) as Array<Record<string, never>>) {
      for (const s of (ss.spans ?? []) as Array<Record<string, unknown>>) {
        out.push({
          traceId: hex(s.traceId ?? s.trace_id),
          spanId: hex(s.spanId ?? s.span_id),
          parentSpanId: hex(s.parentSpanId ?? s.parent_span_id),
          name: s.name as string,
          kind: Number(s.kind ?? 0),
          attributes: attributesOf(s.attributes as never),
          service,
          resource: resourceAttributes,
        });
      }
    }
  }
  return out;
}

/** A local OTLP/HTTP trace receiver. */
export async function startReceiver(): Promise<{
  url: string;
  spans: ReceivedSpan[];
  contentTypes: string[];
  server: Server;
}> {
  const spans: ReceivedSpan[] = [];
  const contentTypes: string[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const type = req.headers['content-type'] ?? '';
      if (req.method === 'POST' && req.url === '/v1/traces') {
        contentTypes.push(type);
        spans.push(...spansOf(Buffer.concat(chunks), type));
      }
      res.writeHead(200, { 'content-type': type.includes('json') ? 'application/json' : 'application/x-protobuf' });
      res.end(type.includes('json') ? '{}' : undefined);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, spans, contentTypes, server };
}
