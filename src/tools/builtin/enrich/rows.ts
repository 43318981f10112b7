/**
 * @module tools/builtin/enrich/rows
 * From what one child submitted to the row the caller gets. Pure: the pages read are already in the
 * {@link CitationChecker}. Every candidate value a child reported for a field (its `value` and each of its
 * `other_values`) is coerced to the field's type and its citations checked; a candidate survives only with a valid
 * value and at least one checked citation. Survivors that say the same thing (`41` and `"41 metres"`) merge; two or
 * more different survivors are a conflict.
 *
 * A conflict leaves the field's `value` `null` with the reason "sources disagree", and the row's `conflicts` lists each
 * value with its checked citations. The runtime does not pick a winner: how many pages repeat a value says nothing
 * about which one is right (the child's preference is kept in the order of `values`: its own `value` first), and a
 * caller who wants one can take it from `conflicts` knowing there was a choice.
 */
import { z } from 'zod';
import type { CitationChecker } from '../../citations.js';
import { coerceValue, sameValueKey, type FieldType, type FieldValue } from './coerce.js';

export interface EnrichField {
  name: string;
  description: string;
  type: FieldType;
}

export interface EnrichEntity {
  name: string;
  url?: string | undefined;
}

/** A citation the runtime checked: re-checkable offline with `runtime.pageSnapshot(content_sha256)` and the span. */
export interface EnrichCitation {
  url: string;
  excerpt: string;
  retrieved_at: string;
  content_sha256: string;
  span: { start: number; end: number };
}

export interface EnrichFieldResult {
  /** The value in the field's type, or null: not found, no checked citation, invalid for its type, or disputed. */
  value: FieldValue | null;
  citations: EnrichCitation[];
  /** The child's own confidence (0..1) in the value kept; 0 when the value is null. */
  confidence: number;
  /** Why the value is null. */
  reason?: string;
}

export interface EnrichConflict {
  field: string;
  /** Each value with the checked citations that state it; the child's preferred value first. */
  values: Array<{ value: FieldValue; citations: EnrichCitation[] }>;
}

export interface EnrichRow {
  entity: EnrichEntity;
  fields: Record<string, EnrichFieldResult>;
  conflicts?: EnrichConflict[];
}

const ChildCitation = z.object({ url: z.string().max(2_000), excerpt: z.string().max(2_000) });
const ChildValue = z.union([z.string().max(5_000), z.number(), z.boolean(), z.null()]);
const Confidence = z.number().min(0).max(1);

/** One field's answer as a child submits it. */
export const ChildAnswer = z.object({
  value: ChildValue.describe('The value in the type asked, or null when no page you read states it'),
  citations: z.array(ChildCitation).max(10).describe('Pages you read that state the value: {url, excerpt}'),
  confidence: Confidence.describe('0 to 1: how sure you are that the value is right'),
  other_values: z
    .array(z.object({ value: ChildValue, citations: z.array(ChildCitation).max(10), confidence: Confidence }))
    .max(5)
    .optional()
    .describe('Other values that pages you read state, when sources disagree'),
  note: z.string().max(500).optional().describe('One short sentence, e.g. why the value is null'),
});
type ChildAnswer = z.infer<typeof ChildAnswer>;

/** A submission's outer shape; each field's answer is checked on its own, so one bad answer spoils only itself. */
const Submitted = z.object({ fields: z.record(z.string(), z.unknown()) });

/** The `submit_result` schema of a call's children: one answer per field, keyed by the field's name. */
export function childResultSchema(fields: readonly EnrichField[]): z.ZodObject {
  return z.object({ fields: z.object(Object.fromEntries(fields.map((f) => [f.name, ChildAnswer]))) });
}

interface Candidate {
  value: FieldValue;
  citations: EnrichCitation[];
  confidence: number;
}

/**
 * The row of one entity from its child's submission (`undefined` when the child did not submit one).
 *
 * @example
 * const { row, dropped } = assembleRow(entity, fields, wave.data[i], new CitationChecker(await ctx.pagesRead()));
 */
export function assembleRow(
  entity: EnrichEntity,
  fields: readonly EnrichField[],
  data: unknown,
  checker: CitationChecker,
): { row: EnrichRow; dropped: number } {
  const submitted = Submitted.safeParse(data);
  const row: EnrichRow = {
    entity: entity.url ? { name: entity.name, url: entity.url } : { name: entity.name },
    fields: {},
  };
  let dropped = 0;
  for (const field of fields) {
    if (!submitted.success) {
      row.fields[field.name] = nullField('the research child for this entity did not submit a result');
      continue;
    }
    const raw = submitted.data.fields[field.name];
    if (raw === undefined) {
      row.fields[field.name] = nullField('the research child did not report this field');
      continue;
    }
    const answer = ChildAnswer.safeParse(raw);
    if (!answer.success) {
      row.fields[field.name] = nullField('the research child reported this field in a malformed answer');
      continue;
    }
    const result = checkField(field, answer.data, checker);
    dropped += result.dropped;
    row.fields[field.name] = result.field;
    if (result.conflict) (row.conflicts ??= []).push(result.conflict);
  }
  return { row, dropped };
}

function nullField(reason: string): EnrichFieldResult {
  return { value: null, citations: [], confidence: 0, reason };
}

function checkField(
  field: EnrichField,
  answer: ChildAnswer,
  checker: CitationChecker,
): { field: EnrichFieldResult; conflict?: EnrichConflict; dropped: number } {
  const reported = [answer, ...(answer.other_values ?? [])].filter((c) => c.value !== null);
  if (reported.length === 0) {
    const note = answer.note?.trim();
    return { field: nullField(`not found${note ? `: ${note}` : ' on the pages read'}`), dropped: 0 };
  }

  let dropped = 0;
  const refused: string[] = [];
  const groups = new Map<string, Candidate>();
  for (const candidate of reported) {
    const coerced = coerceValue(field.type, candidate.value);
    const { kept, dropped: lost } = checker.checkAll(candidate.citations);
    dropped += lost.length;
    if (!coerced.ok) {
      refused.push(`invalid ${field.type}: ${coerced.reason}`);
      continue;
    }
    if (kept.length === 0) {
      const why = lost.length === 0 ? 'no citation given' : lost.map((d) => `${d.reason}: ${d.detail}`).join('; ');
      refused.push(`${JSON.stringify(coerced.value)} has no checked citation (${why})`);
      continue;
    }
    const key = sameValueKey(field.type, coerced.value);
    const group = groups.get(key) ?? { value: coerced.value, citations: [], confidence: 0 };
    group.confidence = Math.max(group.confidence, candidate.confidence);
    for (const c of kept) {
      const citation: EnrichCitation = {
        url: c.url,
        excerpt: c.excerpt,
        retrieved_at: c.retrieved_at,
        content_sha256: c.content_sha256,
        span: c.span,
      };
      const same = (o: EnrichCitation) =>
        o.content_sha256 === citation.content_sha256 &&
        o.span.start === citation.span.start &&
        o.span.end === citation.span.end;
      if (!group.citations.some(same)) group.citations.push(citation);
    }
    groups.set(key, group);
  }

  const values = [...groups.values()];
  if (values.length === 0) return { field: nullField(refused.join('; ')), dropped };
  if (values.length === 1) {
    const [only] = values as [Candidate];
    return { field: { value: only.value, citations: only.citations, confidence: only.confidence }, dropped };
  }
  const listed = values.map((v) => JSON.stringify(v.value)).join(' vs ');
  return {
    field: nullField(`sources disagree: ${listed} (see conflicts)`),
    conflict: { field: field.name, values: values.map((v) => ({ value: v.value, citations: v.citations })) },
    dropped,
  };
}
