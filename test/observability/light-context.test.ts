/**
 * The tracer's light contexts read and derive like the OpenTelemetry API's own: a value set is read back, a parent's
 * values show through, a deletion reads as absent, nothing changes a context once made, and the API's span helpers
 * work on them.
 */
import { createContextKey, ROOT_CONTEXT, trace, TraceFlags } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { LIGHT_ROOT, lighten } from '../../src/observability/light-context.js';
import { contextOfTraceparent } from '../../src/observability/otel.js';

const A = createContextKey('agentry test A');
const B = createContextKey('agentry test B');

describe('light contexts', () => {
  it('read and derive like the API contexts', () => {
    for (const root of [ROOT_CONTEXT, LIGHT_ROOT]) {
      const a = root.setValue(A, 1);
      const ab = a.setValue(B, 2);
      const a2 = ab.setValue(A, 3);
      expect([a.getValue(A), a.getValue(B)]).toEqual([1, undefined]);
      expect([ab.getValue(A), ab.getValue(B)]).toEqual([1, 2]);
      expect([a2.getValue(A), a2.getValue(B)]).toEqual([3, 2]);
      const deleted = a2.deleteValue(B);
      expect([deleted.getValue(A), deleted.getValue(B)]).toEqual([3, undefined]);
      // Every context keeps what it was made with.
      expect([ab.getValue(A), ab.getValue(B), root.getValue(A)]).toEqual([1, 2, undefined]);
    }
  });

  it('start from an empty root', () => {
    expect([LIGHT_ROOT.getValue(A), LIGHT_ROOT.deleteValue(A).getValue(A)]).toEqual([undefined, undefined]);
    expect(trace.getSpan(LIGHT_ROOT)).toBeUndefined();
  });

  it('show the values of the context they lighten', () => {
    const base = ROOT_CONTEXT.setValue(A, 'from the application');
    const light = lighten(base).setValue(B, 'ours');
    expect([light.getValue(A), light.getValue(B)]).toEqual(['from the application', 'ours']);
    expect(base.getValue(B)).toBeUndefined();
    expect(lighten(light)).toBe(light);
  });

  it('carry spans for the API helpers, and a stored traceparent as a remote parent', () => {
    const parent = contextOfTraceparent('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01');
    expect(trace.getSpanContext(parent)).toEqual({
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      spanId: '00f067aa0ba902b7',
      traceFlags: TraceFlags.SAMPLED,
      isRemote: true,
    });
    const span = trace.wrapSpanContext({ traceId: 'a'.repeat(32), spanId: 'b'.repeat(16), traceFlags: 1 });
    const child = trace.setSpan(parent, span);
    expect(trace.getSpan(child)).toBe(span);
    expect(trace.getSpanContext(parent)?.spanId).toBe('00f067aa0ba902b7');
    expect(trace.getSpan(trace.deleteSpan(child))).toBeUndefined();
    expect(trace.getSpan(contextOfTraceparent('garbage'))).toBeUndefined();
  });
});
